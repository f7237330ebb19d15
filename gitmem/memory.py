"""`Memory`: one store opened for work — the core API the CLI and daemon share."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem import recovery
from gitmem.config import Config
from gitmem.documents import Handoff
from gitmem.errors import (
    DatabaseError,
    FormatError,
    NotFoundError,
    UnreadableFileError,
    ValidationError,
    json_kind,
)
from gitmem.policies import Policies, file_hash, load_policies
from gitmem.recorder import Recorder
from gitmem.records import CHANNELS, Event, check_choice, check_storable, format_ts, name_or
from gitmem.regular_files import read_regular
from gitmem.retries import Recorded
from gitmem.rows import Announced, Appended
from gitmem.store import RECORD_KINDS, Placed, check_artifact_id, classify, read_artifact

if TYPE_CHECKING:  # the read path and the index are imported where they are first used:
    # a write needs neither, and importing them (psycopg among them) cost a `gitmem
    # record` with no daemon more than the write itself
    from gitmem import acb, indexer
    from gitmem.context import ContextCache
    from gitmem.db import Database
    from gitmem.indexproc import IndexerProcess

logger = logging.getLogger(__name__)
# Events this process wrote, kept for the next writes to see before the index does
# (4 s of writes at 4,000 events/s; the daemon's index catches up within a second).
WRITTEN_KEPT = 16_384


@dataclass(frozen=True)
class CatchUp:
    """What a read's catch-up waited for, and the queued files it did not wait for
    (nothing in them could change the answer)."""

    paths: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)


class Memory:
    """A store with its policies, its write path and (lazily) its index.

    Policies are re-read when their files change (checked by content hash), so
    an edit in a PR applies to the next call.
    """

    def __init__(self, config: Config, *, db: Database | None = None,
                 db_pool_size: int = 4, db_timeout: float = 30.0) -> None:
        self.config = config
        self.store: Path = config.store
        self._db = db
        self._owns_db = db is None
        self._db_pool_size = db_pool_size
        self._db_timeout = db_timeout  # the daemon keeps it short: fail fast, retry
        self._claim = False  # open the index as this store's even if it names another (reindex)
        self._lock = threading.RLock()
        self._policies = load_policies(self.store)
        self._recorder = self._new_recorder()
        self._cache: ContextCache | None = None
        # How build_acb makes sure the index reflects the files before answering.
        # None: a (stat-based, cheap when nothing changed) sync of the store.
        # The daemon installs its watcher's flush here instead: it returns the files it
        # waited for and those it did not (nothing in them could change the read).
        self.catch_up: Callable[..., CatchUp] | None = None
        # Told of each durable append (the daemon's watcher: it indexes those lines
        # from their events instead of decoding them again).
        self.on_append: Callable[[str, Appended], None] | None = None
        # Told before each append (the watcher: that file's change is the writer's).
        self.on_appending: Callable[[str, Announced | None], None] | None = None
        # Told of the files the writer put in place (the watcher queues them at once).
        self.on_place: Callable[[list[Placed]], None] | None = None
        # The daemon's indexer process: syncs run there (gitmem/indexproc.py).
        self.indexing: IndexerProcess | None = None
        # Told when a read finds the index unreachable (the daemon's watcher).
        self.on_database_error: Callable[[DatabaseError], None] | None = None
        # The events this process wrote last (id -> tenant, time, hash): a write that
        # names or cites an id asks the index, which may not hold them yet.
        self._written: OrderedDict[str, Recorded] = OrderedDict()
        self._written_lock = threading.Lock()

    # ------------------------------------------------------------------ plumbing

    @property
    def db(self) -> Database:
        """The index connection, opened (and the schema created) on first use."""
        with self._lock:
            if self._db is None:
                from gitmem.db import Database

                self._db = Database.open(self.config, max_size=self._db_pool_size,
                                         timeout=self._db_timeout, claim=self._claim)
            return self._db

    @property
    def cache(self) -> ContextCache:
        """The read path's copies of what the index holds, made on first use."""
        with self._lock:
            if self._cache is None:
                from gitmem.context import ContextCache

                self._cache = ContextCache(lambda: self.db)
            return self._cache

    @property
    def policies(self) -> Policies:
        """The current policies (re-read if a policy file changed on disk)."""
        with self._lock:
            # Under the daemon the watcher reloads policies when their files change;
            # otherwise compare content hashes (a few small reads).
            if self.catch_up is None and self._policies_changed():
                self.reload_policies()
            return self._policies

    @property
    def applied_policies(self) -> Policies:
        """The policies last loaded, without looking at their files again (under the
        daemon, the last good ones while an edit does not load)."""
        return self._policies

    def policies_not_applied(self) -> FormatError | None:
        """The error of a policy edit that does not load (its file and line), while the
        daemon goes on with the last good policies; None when the files are as applied."""
        with self._lock:
            if not self._policies_changed():
                return None
        try:
            load_policies(self.store)
        except FormatError as exc:
            return exc
        return None

    def _policies_changed(self) -> bool:
        for rel, digest in self._policies.hashes.items():
            try:
                if file_hash(read_regular(self.store / rel)) != digest:
                    return True
            except (OSError, UnreadableFileError):  # gone, a FIFO: load_policies names it
                return True
        return False

    def reload_policies(self) -> Policies:
        """Force a re-read of manifest and policies (the watcher calls this)."""
        with self._lock:
            self._policies = load_policies(self.store)
            self._recorder = self._new_recorder()
            if self._cache is not None:  # packed bundles used the old
                self._cache.invalidate(["policies/budgets.yaml"])
            return self._policies

    def _new_recorder(self) -> Recorder:
        recorder = Recorder(self.store, self._policies)
        recorder.on_append = self._appended
        recorder.on_appending = self._appending
        recorder.on_place = self._placed
        recorder.recorded = self._recorded
        return recorder

    def _recorded(self, event_ids: list[str], fresh: bool) -> dict[str, Recorded]:
        """Which of these event ids the index holds (for a write naming or citing them),
        or this process wrote last; `fresh`: with no daemon, sync the index first. Raises
        DatabaseError with the index out of reach (the write goes ahead: recorder.py)."""
        with self._written_lock:
            found = {i: self._written[i] for i in event_ids if i in self._written}
        if not fresh and len(found) == len(event_ids):
            return found  # events this process just wrote: no round trip
        try:
            if fresh and self.catch_up is None:  # no daemon: the index up to the files first
                self.sync()
            rows = self.db.fetchall("events_recorded", {"ids": event_ids})
        except DatabaseError as exc:
            logger.warning("cannot check whether event ids are recorded: %s", exc)
            raise
        return found | {r["event_id"]: (r["tenant_id"], r["ts"], r["hash"]) for r in rows}

    def _appended(self, rel: str, appended: Appended) -> None:
        with self._written_lock:
            for event in appended.events:
                self._written[event.id] = (event.tenant_id, event.when, event.hash)
            while len(self._written) > WRITTEN_KEPT:
                self._written.popitem(last=False)
        if self.on_append is not None:
            self.on_append(rel, appended)

    def _appending(self, rel: str, expected: Announced | None) -> None:
        if self.on_appending is not None:
            self.on_appending(rel, expected)

    def _placed(self, placed: list[Placed]) -> None:
        if self.on_place is not None:
            self.on_place(placed)

    @property
    def recorder(self) -> Recorder:
        """The write path with the current policies."""
        self.policies  # noqa: B018 - refreshes the recorder when policies changed
        return self._recorder

    def close(self) -> None:
        """Release the database connections this object opened."""
        if self._db is not None and self._owns_db:
            self._db.close()
            self._db = None

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writes

    def record(self, obj: Mapping[str, Any]) -> Event:
        """Append one event (see `Recorder.record`)."""
        event = self.recorder.record(obj)
        logger.debug("recorded %s (%s, session %s)", event.id, event.kind, event.session_id)
        return event

    def record_many(self, objs: Iterable[Mapping[str, Any]], source: str = "<input>",
                    lines: Sequence[int] | None = None) -> list[Event]:
        """Append many events; all validated before any is written."""
        return self.recorder.record_many(objs, source, lines)

    def decide(self, text: str, refs: list[str], **options: Any) -> Event:
        """Record a decision event and its decision file."""
        return self.recorder.decide(text, refs, **options)

    def task(self, title: str | None = None, **options: Any) -> Event:
        """Create or update a task (an update may leave the title out: it stays)."""
        return self.recorder.task(title, **options)

    def create_handoff(self, to_agent: str, task: str, **options: Any) -> Handoff:
        """Write a handoff packet (`Recorder.handoff`'s options)."""
        import inspect

        known = [k for k in inspect.signature(self.recorder.handoff).parameters
                 if k not in ("to_agent", "task")]
        for name in options:
            if name not in known:
                raise ValidationError(f"unknown field; expected only {', '.join(known)}",
                                      field=name)
        return self.recorder.handoff(to_agent, task, **options)

    def get_artifact(self, artifact_id: str, tenant_id: str | None = None,
                     channel: str | None = None) -> bytes:
        """The full bytes of a stored tool output.

        With a tenant or a channel (agents should pass theirs; the tenant defaults to
        the manifest's, the channel to `private`), only when an event of that tenant
        cites the artifact and the channel may load that event (its sensitivity and
        channel, as build_acb judges them); otherwise not found, the same whether
        another tenant holds it or nobody does. A text is served through the current
        redaction patterns, as every text an ACB serves (one added since the output was
        stored applies). Without either: unscoped, the bytes as stored."""
        if tenant_id is None and channel is None:
            return read_artifact(self.store, artifact_id)
        tenant = name_or(tenant_id, self.policies.manifest.default_tenant, "tenant_id")
        channel = check_choice("private" if channel is None else channel, CHANNELS, "channel")
        check_artifact_id(artifact_id)
        self._caught_up()
        rule = self.policies.privacy.rule(channel)
        rows = self.db.fetchall("artifact_events", {"artifact": artifact_id, "tenant": tenant})
        if not any(rule.loads_event(r["sensitivity"], r["channel"]) for r in rows):
            raise NotFoundError(f"artifact {artifact_id} not found for tenant {tenant!r} on "
                             f"channel {channel!r}; pass the tenant and channel of the "
                             "session whose tool output it holds")
        data = read_artifact(self.store, artifact_id)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return data  # binary: no pattern reads it
        return self.policies.privacy.redact(text).encode("utf-8")

    # ------------------------------------------------------------------ index

    def sync(self, paths: Iterable[str] | None = None,
             appended: Mapping[str, Sequence[Appended]] | None = None) -> indexer.SyncReport:
        """Catch the index up with the files (and drop cached copies of what changed);
        `appended`: lines this process just wrote, by file (`indexer.sync`). Under the
        daemon the indexer process does it, from the files and those appends' stats."""
        from gitmem import indexer
        from gitmem.db import retry_deadlocks
        from gitmem.indexproc import IndexerGone

        report = None
        paths = None if paths is None else list(paths)
        if self.indexing is not None and self.indexing.alive:
            try:
                report = self.indexing.sync(paths, appended)
            except IndexerGone as exc:
                logger.warning("%s; indexing in the daemon from now on", exc)
        if report is None:
            report = retry_deadlocks(lambda: indexer.sync(
                self.db, self.store, self.policies, paths, appended), "the sync")
        if report.changed:
            self.forget(report.changed)
        logger.debug("sync: %d file(s) changed of %d looked at%s", len(report.changed),
                     report.files, " (the index was made again)" if report.rebuilt else "")
        return report

    def forget(self, changed: Sequence[Mapping[str, Any]]) -> None:
        """Drop cached copies of what a sync changed: for new lines of some sessions,
        only those sessions' copies (other sessions stay warm, even when a task or
        decision file came in the same batch); for any other change, what its
        path affects."""
        lines = [item for item in changed if "sessions" in item]
        if lines and self._cache is not None:
            self._cache.forget_sessions({tuple(pair) for item in lines
                                        for pair in item["sessions"]},
                                       pinned=any(item["pinned"] for item in lines))
        others = [item["path"] for item in changed if "sessions" not in item]
        if others:
            self.invalidate(others, {item["path"]: frozenset(item["tenants"])
                                     for item in changed if "tenants" in item})

    def reconcile(self) -> indexer.SyncReport:
        """Finish or undo the writes a crash interrupted (gitmem/recovery.py), then
        catch the index up with every file (`gitmem sync`, a daemon's start)."""
        finished = recovery.finish(self.store)
        report = self.sync()
        report.finished = [f.to_dict() for f in finished]
        return report

    def reindex(self, progress: indexer.Progress | None = None) -> indexer.SyncReport:
        """Finish or undo the writes a crash interrupted, then drop and rebuild the
        index from the files."""
        from gitmem import indexer
        from gitmem.db import retry_deadlocks

        with self._lock:
            self._claim = True  # a reindex makes an index that held another store's this one's
        self._check_takeover()
        finished = recovery.finish(self.store)
        report = retry_deadlocks(lambda: indexer.reindex(
            self.db, self.store, self.policies, progress), "the reindex")
        report.finished = [f.to_dict() for f in finished]
        self.invalidate(None)
        return report

    def _check_takeover(self) -> None:
        """Refuse to take over another store's index while that store's daemon serves it:
        its reads trust its own watcher and would go on answering from this store's rows."""
        from gitmem import daemon

        held = self.db.indexed_store()
        if held is None or held == str(self.store.resolve()):
            return
        pid = daemon.running_pid(Config(store=Path(held)))
        if pid is not None:
            raise DatabaseError(
                f"the index in schema {self.config.schema!r} is {held}'s, and its daemon "
                f"(pid {pid}) serves it; stop that daemon (`gitmem --store {held} daemon "
                "stop`) before `gitmem reindex` makes the index this store's")

    def invalidate(self, paths: Iterable[str] | None,
                   tenants: Mapping[str, frozenset[str]] | None = None) -> None:
        """Forget cached read-path data derived from `paths` (None: all of it);
        `tenants`: the tenants of some task and decision files' rows now."""
        paths = None if paths is None else list(paths)
        if paths is None or any(p.startswith(("policies/", "manifest.json")) for p in paths):
            self.reload_policies()
        if self._cache is not None:  # nothing read yet: nothing to forget
            self._cache.invalidate(paths, tenants)

    # ------------------------------------------------------------------ reads

    def build_acb(self, request: Mapping[str, Any] | acb.AcbRequest, *,
                  encoded: bool = False) -> dict[str, Any]:
        """The Active Context Bundle for `request` (`acb.REQUEST_FIELDS`), caught up first.

        `encoded`: on the fast path, `sections` and `omissions` come as JSON already
        encoded (`orjson.Fragment`), for the daemon's answer."""
        from gitmem import acb
        from gitmem.db import retry_deadlocks

        started = time.perf_counter()
        if not isinstance(request, acb.AcbRequest):
            request = acb.AcbRequest.from_mapping(request, self.policies.manifest.default_tenant)
        deferred: list[str] = []
        if self.catch_up is not None:
            done = self.catch_up(scope=acb.read_scope(request))
            caught, deferred, mode = done.paths, done.deferred, "watcher"
        else:
            caught = [item["path"] for item in self.sync().changed]
            mode = "sync-on-read"
        state = {"schema": self.config.schema, "freshness": mode,
                 "caught_up_files": _shared(caught),
                 "catch_up_ms": round((time.perf_counter() - started) * 1000, 3)}
        not_awaited = _shared(deferred)
        if not_awaited:  # being indexed, but nothing in them could change this answer
            state["not_awaited_files"] = not_awaited
        try:
            built = retry_deadlocks(lambda: acb.build_acb(
                request, self.policies, self.cache, lambda: self.db, state, encoded=encoded),
                "build_acb")
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("build_acb: %s, %s tokens, %s in %.1f ms", built.get("acb_id"),
                             built.get("token_used_est"), mode,
                             (time.perf_counter() - started) * 1000)
            return built
        except DatabaseError as exc:
            if self.on_database_error is not None:
                self.on_database_error(exc)
            raise

    def _caught_up(self) -> None:
        """The index caught up with the files: through the daemon's watcher, else a sync."""
        if self.catch_up is not None:
            self.catch_up()
        else:
            self.sync()

    def query_decisions(self, tenant_id: str | None = None, *, active_only: bool = True,
                        query_text: str = "", channel: str | None = None
                        ) -> list[dict[str, Any]]:
        """A tenant's decisions (active ones by default), newest first or by relevance;
        with `channel`, only those its rules may load (their sensitivity decides)."""
        tenant = name_or(tenant_id, self.policies.manifest.default_tenant, "tenant_id")
        if not isinstance(query_text, str):
            raise ValidationError(f"expected a string, got {json_kind(query_text)}",
                                  field="query_text")
        check_storable(query_text, "query_text")
        if channel is not None:
            check_choice(channel, CHANNELS, "channel")
        self._caught_up()
        chain = self.cache.decisions(tenant)
        rows = chain.active if active_only else sorted(
            chain.by_id.values(), key=lambda r: (r["ts"], r["decision_id"]), reverse=True)
        if query_text.strip():
            from gitmem import lexicon

            terms = lexicon.qualify(lexicon.analyze(self.db, query_text), tenant)
            wanted = {r["chunk_id"] for t in terms for r in self.db.fetchall(
                "decision_search", {"tenant": tenant, "query": t.query})}
            rows = [r for r in rows if r["decision_id"] in wanted]
        if channel is not None:
            rule = self.policies.privacy.rule(channel)
            rows = [r for r in rows if rule.loads_record(r["sensitivity"])]
        return [{
            "decision_id": r["decision_id"], "ts": format_ts(r["ts"]),
            "status": "active" if r["decision_id"] not in chain.superseded_by else "superseded",
            "superseded_by": chain.superseded_by.get(r["decision_id"]) or None,
            "title": r["title"], "text": r["text"], "rationale": list(r["rationale"]),
            "refs": list(r["refs"]), "supersedes": list(r["supersedes"]), "path": r["path"],
        } for r in rows]

    def status(self) -> dict[str, Any]:
        """What in the index is stale relative to the files, and why."""
        from gitmem import indexer

        report = indexer.status(self.db, self.store, self.policies)
        # under the daemon the last good policies serve an edit that does not load
        # (without one, `self.policies` has read the files and raised already)
        broken = self.policies_not_applied() if self.catch_up is not None else None
        if broken is not None:
            report["errors"].insert(0, broken.to_dict() | {
                "message": f"{broken.detail} (not applied: the daemon goes on with the last "
                           "good policies)"})
        return report


def _shared(paths: Sequence[str]) -> list[str]:
    """The files a bundle's provenance may name: the day files, views and policies every
    tenant shares. A record's file is named for its id (`decisions/dec_….md`): another
    tenant's would tell its ids, and when it writes."""
    return [p for p in paths if classify(p) not in RECORD_KINDS]
