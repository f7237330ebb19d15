"""In-memory copies of what every ACB needs, so the fast path needs no database.

Views, each tenant's decisions (with the supersede chains resolved), open
tasks and pinned chunks, and each session's recent window and tool results.
Entries are filled from the index on first use and dropped by `invalidate`
when the files behind them change (the watcher calls it after each indexed
batch; the CLI starts empty each time). A fill that raced an invalidation is
not kept, so a stale copy can never outlive the change that made it stale.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from gitmem.db import Database, Row, TextArray
from gitmem.records import Event
from gitmem.store import classify

SESSION_ENTRIES = 512  # sessions whose recent window stays cached (LRU)
T = TypeVar("T")


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
    """Mark superseded decisions and map each to the latest decision of its chain."""
    by_id = {row["decision_id"]: row for row in rows}
    replaced_by: dict[str, list[str]] = {}
    for row in rows:
        for old in row["supersedes"]:
            replaced_by.setdefault(old, []).append(row["decision_id"])
    for successors in replaced_by.values():
        successors.sort(key=lambda d: (by_id[d]["ts"], d))

    def is_active(row: Row) -> bool:
        return row["status"] == "active" and row["decision_id"] not in replaced_by

    def follow(decision_id: str) -> str | None:
        seen: set[str] = set()
        current = decision_id
        while current in replaced_by and current not in seen:
            seen.add(current)
            current = replaced_by[current][-1]
        row = by_id.get(current)
        return current if row is not None and is_active(row) else None

    result = TenantDecisions(by_id=by_id)
    for row in rows:
        if is_active(row):
            result.active.append(row)
        else:
            latest = follow(row["decision_id"])
            result.superseded_by[row["decision_id"]] = latest or ""
            direct = replaced_by.get(row["decision_id"], [])
            if direct:  # else a person set `status: superseded`: no date known
                result.superseded_at[row["decision_id"]] = by_id[direct[0]]["ts"]
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


class ContextCache:
    """Cached read-path data of one store, invalidated by path."""

    def __init__(self, db_provider: Callable[[], Database]) -> None:
        self._db = db_provider
        self._lock = threading.Lock()
        self._generation = 0
        self._views: tuple[ViewRow, ...] | None = None
        self._decisions: dict[str, TenantDecisions] = {}
        # each cached tenant's decision rows as read, and the decision files changed
        # since: a change re-reads those files only (`decisions`)
        self._decision_rows: dict[str, list[Row]] = {}
        self._decisions_changed: dict[str, set[str]] = {}
        self._tasks: dict[str, OpenTasks] = {}
        self._pinned: dict[str, list[Row]] = {}
        self._sessions: OrderedDict[tuple[str, str, str, int], list[Row]] = OrderedDict()
        self._bundles: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    # ------------------------------------------------------------------ invalidation

    def invalidate(self, paths: Iterable[str] | None = None) -> None:
        """Drop what the changed store-relative `paths` affect (None: everything)."""
        everything = paths is None
        changed = {} if paths is None else {p: classify(p) for p in paths}
        kinds = set(changed.values())
        decision_files = {p for p, kind in changed.items() if kind == "decision"}
        with self._lock:
            self._generation += 1
            self._bundles.clear()  # any change may touch a packed bundle
            if everything or "view" in kinds or "policy" in kinds:
                self._views = None
            if everything:
                self._decision_rows.clear()
                self._decisions_changed.clear()
            if everything or decision_files:
                self._decisions.clear()
                for tenant in self._decision_rows:
                    self._decisions_changed.setdefault(tenant, set()).update(decision_files)
            if everything or "task" in kinds:
                self._tasks.clear()
            if everything or "events" in kinds:
                self._pinned.clear()
                self._sessions.clear()

    def forget_sessions(self, sessions: set[tuple[str, ...]], *, pinned: bool) -> None:
        """New events arrived in these (tenant, session) pairs: drop their recent
        windows and bundles (and, with a pinned one, every bundle of the tenant)."""
        tenants = {tenant for tenant, _ in sessions}
        with self._lock:
            self._generation += 1
            for key in [k for k in self._sessions if (k[1], k[2]) in sessions]:
                del self._sessions[key]
            for key in [k for k in self._bundles
                        if (k[0], k[1]) in sessions or (pinned and k[0] in tenants)]:
                del self._bundles[key]
            if pinned:
                for tenant in tenants:
                    self._pinned.pop(tenant, None)

    def _fill(self, load: Callable[[], T], store: Callable[[T], None]) -> T:
        with self._lock:
            generation = self._generation
        value = load()
        with self._lock:
            if generation == self._generation:
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
        return self._fill(self._load_views, keep)

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
        """The tenant's decisions, chains resolved.

        Read whole once; after that a changed decision file re-reads only the changed
        files' rows into the kept ones, and the chains are resolved again: a tenant
        of 3,338 decisions cost 57-117 ms to read whole, on every decision written."""
        with self._lock:
            found = self._decisions.get(tenant)
            if found is not None:
                return found
            generation = self._generation
            kept = self._decision_rows.get(tenant)
            changed = sorted(self._decisions_changed.get(tenant, ()))
        fresh = self._db().fetchall("tenant_decisions", {
            "tenant": tenant, "paths": None if kept is None else TextArray(changed)})
        if kept is None:
            rows = fresh
        else:
            gone = set(changed)
            rows = [row for row in kept if row["path"] not in gone] + fresh
            rows.sort(key=lambda r: (r["ts"], r["decision_id"]), reverse=True)  # as read
        resolved = resolve_decisions(rows)
        with self._lock:
            if generation == self._generation:  # else a newer change: patch again later
                self._decision_rows[tenant] = rows
                self._decisions[tenant] = resolved
                self._decisions_changed.pop(tenant, None)
        return resolved

    def open_tasks(self, tenant: str) -> OpenTasks:
        """The tenant's tasks that are open, doing or blocked."""
        return self._cached(self._tasks, tenant, lambda: OpenTasks.of(
            self._db().fetchall("tenant_open_tasks", {"tenant": tenant})))

    def pinned(self, tenant: str, limit: int = 200) -> list[Row]:
        """Chunks tagged `pinned`, newest first."""
        return self._cached(self._pinned, tenant, lambda: self._db().fetchall(
            "pinned_chunks", {"tenant": tenant, "limit": limit}))

    def _cached(self, table: dict[str, T], key: str, load: Callable[[], T]) -> T:
        """`table[key]`, loaded first when missing (see `_fill`)."""
        with self._lock:
            if key in table:
                return table[key]
        return self._fill(load, lambda value: table.__setitem__(key, value))

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
        return self._fill(lambda: self._db().fetchall(
            query, {"tenant": tenant, "session": session, "limit": limit}), keep)

    def bundle(self, key: tuple[Any, ...], build: Callable[[], T]) -> T:
        """A packed fast-path bundle for `key`, built on first use (LRU)."""
        with self._lock:
            found = self._bundles.get(key)
            if found is not None:
                self._bundles.move_to_end(key)
                return cast(T, found)

        def keep(value: T) -> None:
            self._bundles[key] = value
            while len(self._bundles) > SESSION_ENTRIES:
                self._bundles.popitem(last=False)
        return self._fill(build, keep)
