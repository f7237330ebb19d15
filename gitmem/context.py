"""In-memory copies of what every ACB needs, so the fast path needs no database.

Views, each tenant's decisions (with the supersede chains resolved), open
tasks and pinned chunks, and each session's recent window and tool results.
Entries are filled from the index on first use and dropped by `invalidate`
when the files behind them change (the watcher calls it after each indexed
batch; the CLI starts empty each time). A fill that raced an invalidation of
its own table is not kept, so a stale copy can never outlive the change that
made it stale.

A tenant's decisions and open tasks are kept as the rows read: a changed
decision or task file re-reads that file's rows only, and the chains or the
task lists are made again only for a tenant whose rows did change (a tenant of
3,338 decisions and hundreds of open tasks cost 10-25 ms to read and make
whole, on the first ACB after any decision or task of any tenant was written).
A packed fast-path bundle remembers the tenant's open tasks and decisions it
was packed from, and is packed again only when those changed: another tenant's
task or decision leaves it as it is.

Bundles are the bulk of the cache: a tenant's open tasks and decisions fill
most of each bundle of its sessions. Once sent, a bundle keeps its sections as
JSON, one copy of each distinct section shared by every bundle that holds it
(`share`): after the fast path of 2,000 sessions at 1M events, the daemon held
140 MB instead of 212.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gitmem.db import Database, Row, TextArray
from gitmem.packing import Packed, Packer
from gitmem.records import Event
from gitmem.store import TENANT_FILE_KINDS, classify

SESSION_ENTRIES = 512  # sessions whose recent window stays cached (LRU)
PREFIX_ENTRIES = 128   # query builds' first sections kept packed (LRU): 43 KB each for
                       # 120 open tasks at 1M, as dicts (a bundle's are shared JSON)
FORGET_LOG = 256       # forget_sessions calls remembered for the fills in flight
PIECES_SLACK = 256     # shared section encodings kept beyond those cached bundles hold
T = TypeVar("T")
P = TypeVar("P", Packed, Packer)


@dataclass(frozen=True)
class OpenTasks:
    """A tenant's open tasks (open, doing, blocked), newest first, by session, and their
    ids by sensitivity: a bundle lists those it leaves out without walking them all
    (a tenant may hold thousands)."""

    rows: list[Row]
    by_session: dict[str, list[Row]]
    ids: dict[str, tuple[str, ...]]           # sensitivity -> task ids, sorted
    members: dict[str, frozenset[str]]        # the same, as sets

    @classmethod
    def of(cls, rows: list[Row]) -> OpenTasks:
        """Index the rows of `tenant_open_tasks`."""
        by_session: dict[str, list[Row]] = {}
        ids: dict[str, list[str]] = {}
        for row in rows:
            by_session.setdefault(row["session_id"], []).append(row)
            ids.setdefault(row["sensitivity"], []).append(row["task_id"])
        return cls(rows, by_session, {k: tuple(sorted(v)) for k, v in ids.items()},
                   {k: frozenset(v) for k, v in ids.items()})


@dataclass(frozen=True)
class ViewChunkRow:
    """One chunk of a view, with its view's options."""

    path: str
    anchor: str
    heading: str
    line: int
    text: str
    token_est: int


@dataclass(frozen=True)
class ViewRow:
    """A view and its chunks in file order."""

    path: str
    section: str
    pinned: bool
    sensitivity: str
    channels: tuple[str, ...]
    max_tokens: int | None
    title: str
    chunks: tuple[ViewChunkRow, ...]


@dataclass
class TenantDecisions:
    """All decisions of a tenant; which are active; what replaced the others."""

    by_id: dict[str, Row] = field(default_factory=dict)
    active: list[Row] = field(default_factory=list)           # newest first
    superseded_by: dict[str, str] = field(default_factory=dict)  # id -> latest active id
    superseded_at: dict[str, Any] = field(default_factory=dict)  # id -> ts of its successor

    def latest(self, decision_id: str) -> str | None:
        """The active end of the chain `decision_id` belongs to (itself if active)."""
        if decision_id in self.superseded_by:
            return self.superseded_by[decision_id]
        return decision_id if decision_id in self.by_id else None


def resolve_decisions(rows: list[Row]) -> TenantDecisions:
    """Mark superseded decisions and map each to the latest decision of its chain.

    A decision replaced by several is followed to its newest successor; a chain
    that loops, or ends in a decision retired by hand, has no active end. Each
    chain is walked once (a tenant of 3,338 decisions in chains of up to dozens:
    2 ms instead of 6 ms when every decision walked its own chain)."""
    by_id = {row["decision_id"]: row for row in rows}
    replaced_by: dict[str, list[str]] = {}
    for row in rows:
        for old in row["supersedes"]:
            replaced_by.setdefault(old, []).append(row["decision_id"])
    for successors in replaced_by.values():
        if len(successors) > 1:
            successors.sort(key=lambda d: (by_id[d]["ts"], d))
    ends: dict[str, str | None] = {}  # a replaced decision's active end, once known

    def follow(decision_id: str) -> str | None:
        path: list[str] = []
        on_path: set[str] = set()
        current = decision_id
        while current in replaced_by:
            if current in ends:
                end = ends[current]
                break
            if current in on_path:  # a loop: no end is active
                end = None
                break
            on_path.add(current)
            path.append(current)
            current = replaced_by[current][-1]
        else:
            row = by_id.get(current)
            end = current if row is not None and row["status"] == "active" else None
        for node in path:
            ends[node] = end
        return end

    result = TenantDecisions(by_id=by_id)
    for row in rows:
        decision_id = row["decision_id"]
        direct = replaced_by.get(decision_id)
        if row["status"] == "active" and direct is None:
            result.active.append(row)
            continue
        result.superseded_by[decision_id] = follow(decision_id) or ""
        if direct:  # else a person set `status: superseded`: no date known
            result.superseded_at[decision_id] = by_id[direct[0]]["ts"]
    result.active.sort(key=lambda r: (r["ts"], r["decision_id"]), reverse=True)
    return result


@dataclass(frozen=True)
class ReadScope:
    """What new data can change one ACB (catch-up on read waits for that only).

    Retrieval (a query, a handoff's evidence) may rank anything of the tenant.
    Without it, events reach an ACB only as the session's own (recent window,
    tool state) or as the tenant's pinned items, the rule `forget_sessions`
    drops bundles by; summaries only through retrieval; views, decisions, tasks
    and policies always.
    """

    tenant: str
    session: str
    retrieval: bool

    def event(self, event: Event) -> bool:
        """Whether a new event may change the answer."""
        return event.tenant_id == self.tenant and (
            self.retrieval or event.session_id == self.session or "pinned" in event.tags)

    def file(self, kind: str) -> bool:
        """Whether a changed file of `kind` (other than an events file) may."""
        return self.retrieval or kind != "summary"


@dataclass
class TenantTable(Generic[T]):
    """A tenant's rows of one kind of file (decisions, tasks) as read, and what is made
    of them; the files of that kind changed since, per tenant read."""

    kind: str                                   # store.classify's kind of its files
    query: str                                  # named query: %(tenant)s, %(paths)s or NULL
    make: Callable[[list[Row]], T]
    arrange: Callable[[list[Row]], None]        # sorts rows as the query orders them
    rows: dict[str, list[Row]] = field(default_factory=dict)
    paths: dict[str, frozenset[str]] = field(default_factory=dict)  # the files of those rows
    made: dict[str, T] = field(default_factory=dict)
    changed: dict[str, set[str]] = field(default_factory=dict)

    def clear(self) -> None:
        """Forget every tenant."""
        self.rows.clear()
        self.paths.clear()
        self.made.clear()
        self.changed.clear()

    def keep(self, tenant: str, rows: list[Row], made: T) -> None:
        """A tenant's rows as read, and what was made of them."""
        if self.rows.get(tenant) is not rows:
            self.paths[tenant] = frozenset(row["path"] for row in rows)
        self.rows[tenant] = rows
        self.made[tenant] = made
        self.changed.pop(tenant, None)

    def files_changed(self, paths: set[str],
                      tenants: Mapping[str, frozenset[str]] | None = None) -> None:
        """Files of this kind changed: each tenant read re-reads them on its next read,
        unless `tenants` names a file's new rows' tenants, and neither those nor the
        rows kept of it are the tenant's."""
        tenants = tenants or {}
        for tenant in self.rows:
            kept = self.paths.get(tenant, frozenset())
            mine = {path for path in paths
                    if path in kept or tenant in tenants.get(path, (tenant,))}
            if mine:
                self.changed.setdefault(tenant, set()).update(mine)


def _by_time(rows: list[Row], key: str) -> None:
    rows.sort(key=lambda r: (r["ts"], r[key]), reverse=True)


def _arrange_decisions(rows: list[Row]) -> None:
    _by_time(rows, "decision_id")  # tenant_decisions: ts DESC, decision_id DESC


_TASK_ORDER = {"doing": 0, "blocked": 1, "open": 2}


def _arrange_tasks(rows: list[Row]) -> None:
    _by_time(rows, "task_id")  # tenant_open_tasks: doing, blocked, open; then ts DESC, id DESC
    rows.sort(key=lambda r: _TASK_ORDER.get(r["status"], len(_TASK_ORDER)))


class ContextCache:
    """Cached read-path data of one store, invalidated by path."""

    def __init__(self, db_provider: Callable[[], Database]) -> None:
        self._db = db_provider
        self._lock = threading.Lock()
        # one generation per table: a fill is kept unless its own table changed meanwhile
        # (new events of any session must not discard a tenant's tasks being read)
        self._generations: dict[str, int] = dict.fromkeys(
            ("views", "decision", "task", "pinned", "sessions", "bundles"), 0)
        self._views: tuple[ViewRow, ...] | None = None
        self._decisions = TenantTable[TenantDecisions](
            "decision", "tenant_decisions", resolve_decisions, _arrange_decisions)
        self._tasks = TenantTable[OpenTasks](
            "task", "tenant_open_tasks", OpenTasks.of, _arrange_tasks)
        self._pinned: dict[str, list[Row]] = {}
        self._sessions: OrderedDict[tuple[str, str, str, int], list[Row]] = OrderedDict()
        # fast-path bundles, with the open tasks and decisions they were packed from
        self._bundles: OrderedDict[tuple[Any, ...],
                                   tuple[Packed, tuple[OpenTasks, TenantDecisions]]] = (
            OrderedDict())
        # the sections a retrieval build packs before its query's (`prefix`), packed
        self._prefixes: OrderedDict[tuple[Any, ...],
                                    tuple[Packer, tuple[OpenTasks, TenantDecisions]]] = (
            OrderedDict())
        # one copy of each section encoding the bundles hold (`share`), rebuilt from the
        # bundles (a few thousand pieces: well under a millisecond) once bundles dropped
        # since may have left PIECES_SLACK that nobody holds
        self._pieces: dict[bytes, bytes] = {}
        self._pieces_limit = PIECES_SLACK
        # the latest forget_sessions calls: number, (tenant, session) pairs, pinned tenants
        self._forgets = 0
        self._forgotten: deque[tuple[int, frozenset[tuple[str, ...]], frozenset[str]]] = (
            deque(maxlen=FORGET_LOG))

    # ------------------------------------------------------------------ invalidation

    def _bump(self, *tables: str) -> None:
        for table in tables:
            self._generations[table] += 1

    def invalidate(self, paths: Iterable[str] | None = None,
                   tenants: Mapping[str, frozenset[str]] | None = None) -> None:
        """Drop what the changed store-relative `paths` affect (None: everything);
        `tenants`: of the task and decision files among them, the tenants of their rows
        now (a sync's report), so that other tenants' kept rows stay as they are."""
        everything = paths is None
        changed = {} if paths is None else {p: classify(p) for p in paths}
        kinds = set(changed.values())
        with self._lock:
            self._bump("bundles")  # a bundle being packed is not kept
            if everything or not kinds <= TENANT_FILE_KINDS:
                self._bundles.clear()  # any other change may touch a packed bundle
                self._prefixes.clear()
                self._pieces = {}
            else:  # each bundle checks its tenant's tasks and decisions when next used
                for key in [k for k, b in self._bundles.items() if b[0].summaries]:
                    del self._bundles[key]  # their conflicts cite records of any kind
            if everything or "view" in kinds or "policy" in kinds:
                self._bump("views")
                self._views = None
            for table in (self._decisions, self._tasks):
                files = {p for p, kind in changed.items() if kind == table.kind}
                if everything or files:
                    self._bump(table.kind)
                if everything:
                    table.clear()
                elif files:
                    table.files_changed(files, tenants)
            if everything or "events" in kinds:
                self._bump("pinned", "sessions")
                self._pinned.clear()
                self._sessions.clear()

    def forget_sessions(self, sessions: set[tuple[str, ...]], *, pinned: bool) -> None:
        """New events arrived in these (tenant, session) pairs: drop their recent
        windows and bundles (and, with a pinned one, every bundle of the tenant).

        A window or bundle being filled meanwhile is not kept if it is one of those
        (`_forgot`); the others' are: under a steady write load, a session that
        nobody writes to keeps its bundle."""
        tenants = frozenset(tenant for tenant, _ in sessions)
        with self._lock:
            self._forgets += 1
            self._forgotten.append((self._forgets, frozenset(sessions),
                                    tenants if pinned else frozenset()))
            for key in [k for k in self._sessions if (k[1], k[2]) in sessions]:
                del self._sessions[key]
            for table in (self._bundles, self._prefixes):
                for key in [k for k in table
                            if (k[0], k[1]) in sessions or (pinned and k[0] in tenants)]:
                    del table[key]
            if pinned:
                self._bump("pinned")
                for tenant in tenants:
                    self._pinned.pop(tenant, None)

    def _forgot(self, since: int, session: tuple[str, str], *, pinned: bool) -> bool:
        """Whether `forget_sessions` dropped `session` (or, with `pinned`, its tenant's
        bundles) after its call number `since` (under the lock). Calls the log no
        longer holds count as if they had."""
        if self._forgets == since:
            return False
        if not self._forgotten or self._forgotten[0][0] > since + 1:
            return True
        return any(number > since and (session in pairs or (pinned and session[0] in tenants))
                   for number, pairs, tenants in self._forgotten)

    def _fill(self, table: str, load: Callable[[], T], store: Callable[[T], None],
              session: tuple[str, str] | None = None) -> T:
        """`load()`, kept by `store` unless its table changed meanwhile (or, for a
        session's window or bundle, new events of that session arrived)."""
        with self._lock:
            generation = self._generations[table]
            forgets = self._forgets
        value = load()
        with self._lock:
            if generation == self._generations[table] and not (
                    session is not None
                    and self._forgot(forgets, session, pinned=table == "bundles")):
                store(value)
        return value

    # ------------------------------------------------------------------ reads

    def views(self) -> tuple[ViewRow, ...]:
        """Every view with its chunks."""
        with self._lock:
            if self._views is not None:
                return self._views

        def keep(value: tuple[ViewRow, ...]) -> None:
            self._views = value
        return self._fill("views", self._load_views, keep)

    def _load_views(self) -> tuple[ViewRow, ...]:
        grouped: dict[str, list[Row]] = {}
        for row in self._db().fetchall("all_views"):
            grouped.setdefault(row["path"], []).append(row)
        views = []
        for path, rows in grouped.items():
            first = rows[0]
            views.append(ViewRow(
                path=path, section=first["section"], pinned=first["pinned"],
                sensitivity=first["sensitivity"], channels=tuple(first["channels"]),
                max_tokens=first["max_tokens"], title=first["title"],
                chunks=tuple(ViewChunkRow(path, r["anchor"], r["heading"], r["line"], r["text"],
                                          r["token_est"]) for r in rows)))
        return tuple(views)

    def decisions(self, tenant: str) -> TenantDecisions:
        """The tenant's decisions, chains resolved."""
        return self._tenant(self._decisions, tenant)

    def open_tasks(self, tenant: str) -> OpenTasks:
        """The tenant's tasks that are open, doing or blocked."""
        return self._tenant(self._tasks, tenant)

    def _tenant(self, table: TenantTable[T], tenant: str) -> T:
        """What `table` makes of the tenant's rows: read whole once; after that, the
        rows of the files changed since are read again, and it is made again only
        when they changed the tenant's rows."""
        with self._lock:
            made = table.made.get(tenant)
            pending = table.changed.get(tenant)
            if made is not None and not pending:
                return made
            generation = self._generations[table.kind]
            kept = table.rows.get(tenant)
            changed = sorted(pending or ())
        fresh = self._db().fetchall(table.query, {
            "tenant": tenant, "paths": None if kept is None else TextArray(changed)})
        if kept is None:
            rows = fresh
        else:
            gone = set(changed)
            rows = [row for row in kept if row["path"] not in gone]
            if fresh or len(rows) < len(kept) or made is None:
                rows += fresh
                table.arrange(rows)
                made = None
            else:
                rows = kept  # none of those files is (or was) this tenant's
        if made is None:
            made = table.make(rows)
        with self._lock:
            if generation == self._generations[table.kind]:  # else patched again later
                table.keep(tenant, rows, made)
        return made

    def pinned(self, tenant: str, limit: int = 200) -> list[Row]:
        """Chunks tagged `pinned`, newest first."""
        with self._lock:
            if tenant in self._pinned:
                return self._pinned[tenant]
        return self._fill("pinned", lambda: self._db().fetchall(
            "pinned_chunks", {"tenant": tenant, "limit": limit}),
            lambda value: self._pinned.__setitem__(tenant, value))

    def session(self, kind: str, tenant: str, session: str, limit: int) -> list[Row]:
        """The session's latest events (`recent`) or tool results (`tools`), newest first."""
        key = (kind, tenant, session, limit)
        with self._lock:
            rows = self._sessions.get(key)
            if rows is not None:
                self._sessions.move_to_end(key)
                return rows
        query = "session_recent" if kind == "recent" else "session_tools"

        def keep(value: list[Row]) -> None:
            self._sessions[key] = value
            while len(self._sessions) > SESSION_ENTRIES:
                self._sessions.popitem(last=False)
        return self._fill("sessions", lambda: self._db().fetchall(
            query, {"tenant": tenant, "session": session, "limit": limit}), keep,
            (tenant, session))

    def bundle(self, key: tuple[Any, ...], build: Callable[[], Packed]) -> Packed:
        """A packed fast-path bundle for `key` (tenant, session, ...), built on first
        use (LRU), and again when the tenant's open tasks or decisions changed since:
        another tenant's task or decision file leaves it as it is."""
        def dropped() -> None:
            if len(self._pieces) > self._pieces_limit:
                kept = self._pieces
                self._pieces = {p: p for b, _ in self._bundles.values() for p in b.pieces()
                                if p in kept}
                self._pieces_limit = len(self._pieces) + PIECES_SLACK
        return self._packed(self._bundles, SESSION_ENTRIES, key, build, dropped)

    def prefix(self, key: tuple[Any, ...], pack: Callable[[], Packer]) -> Packer:
        """The packer of a retrieval build for `key` (as `bundle`'s) once the sections
        before its query's are packed (identity, rules, task_state: the same for every
        question), packed on first use (LRU) and again on the changes that pack the
        bundle of `key` again. Not to be changed: `Packer.copy` it."""
        return self._packed(self._prefixes, PREFIX_ENTRIES, key, pack)

    def _packed(self, table: OrderedDict[tuple[Any, ...],
                                         tuple[P, tuple[OpenTasks, TenantDecisions]]],
                limit: int, key: tuple[Any, ...], pack: Callable[[], P],
                dropped: Callable[[], None] | None = None) -> P:
        """What `table` keeps for `key` while the tenant's open tasks and decisions are
        those it was packed from, else `pack()`, kept (the least recently used beyond
        `limit` dropped, then `dropped()`)."""
        with self._lock:
            found = table.get(key)
            if found is not None:
                table.move_to_end(key)
        made = self._made(str(key[0]))  # what a build reads is this, or newer
        if found is not None and all(a is b for a, b in zip(found[1], made, strict=True)):
            return found[0]

        def keep(value: P) -> None:
            table[key] = (value, made)
            while len(table) > limit:
                table.popitem(last=False)
            if dropped is not None:
                dropped()
        return self._fill("bundles", pack, keep, (str(key[0]), str(key[1])))

    def _made(self, tenant: str) -> tuple[OpenTasks, TenantDecisions]:
        """The tenant's open tasks and decisions as made now (a bundle packed from them
        stays good while they are the same objects)."""
        return self.open_tasks(tenant), self.decisions(tenant)

    def share(self, piece: bytes) -> bytes:
        """The one copy of an encoded section that cached bundles share
        (`Packed.fragments`): a tenant's open tasks and decisions are the same in the
        bundles of most of its sessions."""
        return self._pieces.setdefault(piece, piece)
