"""Keep the index in step with the files while the daemon runs.

File events come from a watchdog observer (gitmem/fsevents.py), filtered down to
the store paths gitmem indexes, and are queued here. One indexer thread takes the queue in
debounced batches and hands each to `Memory.sync(paths)`, which also drops the
cached copies of what changed. Directory moves and deletes, an inotify queue
overflow, a failed batch and a timer all ask for a full reconcile instead.

Catch-up on read: `flush()` makes every file change made before it was called
visible to the index. It creates and deletes a barrier file in the store;
inotify reports events in order, so once the handler has seen the barrier,
every earlier change is queued, and flush waits until the indexer has
processed the queue up to there. A read when nothing in the store changed since
the last barrier was seen needs none: an inotify instance of the daemon's own
(gitmem/changes.py) tells, without the three thread hand-offs inside watchdog.
Nor does a read after the daemon's own writes (each events file's stat still the
writer's right after its append, or the file as the append the writer announced
and is still making leaves it; each task or decision file it put in place still
holding its bytes): they were queued before the write was answered.

A read need not wait for what cannot change its answer: `flush(scope)`
returns as soon as everything still queued is lines the daemon's own writer
appended (their events in hand; every other byte of those files indexed, the
files' stat the writer's right after its last append) or files of a kind the
read does not load, and none of those events is in the read's `scope` (another
agent's session, say, for a fast-path ACB), or, for a fast-path ACB, task and
decision files the writer put in place for another tenant whose indexed rows are
not the reader's tenant's either (gitmem/handover.py). Anything else (a hand edit,
a reconcile, a file whose bytes are not all accounted for) is waited for as before.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gitmem import lost_lines, recovery
from gitmem.changes import ChangeCounter
from gitmem.context import ReadScope
from gitmem.db import Database
from gitmem.errors import DaemonError, DatabaseError
from gitmem.fsevents import BARRIER_PREFIX, FileEvents, watched
from gitmem.handover import Handover, Wait
from gitmem.indexer import SyncReport
from gitmem.memory import CatchUp, Memory
from gitmem.problems import PolicyReload, Problems
from gitmem.rows import Announced, Appended
from gitmem.store import (
    INDEXED_KINDS,
    Placed,
    StatKey,
    classify,
    file_stat,
    linked_files,
)

logger = logging.getLogger(__name__)

# While idle, the indexer checks this often that the index is still this store's (one
# small query): another store's `gitmem reindex` may take it over from a machine where
# this daemon's pid cannot be seen, and reads must not answer from that store's rows.
OWNER_CHECK_S = 2.0


class Watcher:
    """File events -> debounced batches -> `Memory.sync`; `flush` for catch-up on read."""

    def __init__(self, memory: Memory, *, quiet: float = 0.005, max_delay: float = 0.05,
                 reconcile_interval: float = 300.0, flush_timeout: float = 10.0,
                 on_indexed: Callable[[list[str]], None] | None = None,
                 max_appended_bytes: int = 32 * 1024 * 1024) -> None:
        self.memory = memory
        self.store = Path(memory.store).resolve()
        self.quiet = quiet
        self.max_delay = max_delay
        self.reconcile_interval = reconcile_interval
        self.flush_timeout = flush_timeout
        # how long a read waits to see its barrier before it asks for a reconcile (the
        # file events may be lost: inotify's queue overflowed)
        self.barrier_timeout = 1.0
        self.on_indexed = on_indexed
        self.mode = "stopped"
        self._events = FileEvents(self)
        self._thread = threading.Thread(target=self._run, name="gitmem-indexer", daemon=True)
        self._cond = threading.Condition()
        self._pending: set[str] = set()
        self._inflight: set[str] = set()
        self.handover = Handover(self.store, max_appended_bytes)  # under self._cond
        self._reconcile = False
        self._reconciling = False  # the batch in progress is a full reconcile
        self._batch_started: float | None = None  # monotonic; None when no batch runs
        self._enqueued = 0
        self._processed = 0
        self._failures = 0
        self._urgent = False
        self._stopping = False
        self._first_at = 0.0
        self._last_at = 0.0
        self._next_reconcile = time.monotonic() + reconcile_interval
        self._next_owner_check = time.monotonic() + OWNER_CHECK_S
        self._barrier_lock = threading.Lock()
        self._barrier_issued = 0
        self._barrier_seen = 0
        # the store's changes as the counter saw them, and how many of those a barrier
        # seen since covers (the first read always makes one: `_settled`)
        self._changes: ChangeCounter | None = None
        self._changes_lock = threading.Lock()
        self._changes_seen = 1
        self._changes_covered = 0
        self.problems = Problems()
        self.policies = PolicyReload(memory, self.store, self.problems)
        self._links: dict[str, StatKey | None] = {}  # symlinked files: their targets' stats
        self._folder: tuple[int, int] | None = None  # the store folder watched (device, inode)
        self._folder_lost = False  # its watch reported it removed (its inode may come back)
        self._rearm_lock = threading.Lock()
        # Starts the database again when its process has gone (the daemon's embedded one)
        self.revive: Callable[[], object] | None = None
        self.stats: dict[str, Any] = {
            "batches": 0, "files_synced": 0, "lines_from_writer": 0, "reconciles": 0,
            "last_batch_ms": None, "last_reconcile": None, "last_error": None, "db_ok": None,
            "db_error": None, "db_down_since": None, "problems": self.problems.listed,
            "barriers": 0,
            "reads_without_barrier": 0}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Watch the store and start the indexer thread (no reconcile: the caller's)."""
        self.policies.note()
        self._watch()
        self._thread.start()

    def _watch(self) -> None:
        self._folder, self._folder_lost = _folder_key(self.store), False
        self.mode = self._events.start()
        with self._changes_lock:
            self._changes = self._change_counter() if self.mode == "inotify" else None
            self._changes_seen += 1  # what the watch to come covers starts with a barrier
        self._note_links()

    def _watch_again_if_replaced(self) -> None:
        """Watch the store folder anew when it is not the one watched (a checkout of a
        commit without it removed it, and the next made it again: the watches died with
        the folder removed, and every read waited for a barrier never seen), then
        reconcile what changed meanwhile."""
        with self._rearm_lock:
            now = _folder_key(self.store)
            if now is None or (now == self._folder and not self._folder_lost) or self._stopping:
                return
            logger.warning("the store folder %s was removed and made again: watching the "
                           "new one", self.store)
            self._events.stop()
            with self._changes_lock:
                if self._changes is not None:
                    self._changes.close()
            self._watch()
        self.policies.refresh()  # their files' events were lost with the old folder's watch
        self.request_reconcile("the store folder was made again")

    def _change_counter(self) -> ChangeCounter | None:
        try:
            return ChangeCounter(self.store, f"{BARRIER_PREFIX}{os.getpid()}-")
        except OSError as exc:  # e.g. the watch limit: every read makes a barrier
            logger.info("reads make a barrier each (no change counter: %s)", exc)
            return None

    def stop(self) -> None:
        """Stop watching; the batch in progress completes."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._events.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        with self._changes_lock:
            if self._changes is not None:
                self._changes.close()
                self._changes = None
        self.mode = "stopped"

    # ------------------------------------------------------------------ queueing

    def _note_links(self) -> None:
        """Keep the stats of the store's symlinked files: their targets can change with
        no file event in the store, so each read compares them (`_check_links`)."""
        links = {rel: file_stat(self.store / rel) for rel in linked_files(self.store)}
        with self._cond:
            self._links = links

    def _check_links(self) -> None:
        """Queue each symlinked file whose target changed since it was last seen."""
        if not self._links:
            return
        changed = []
        for rel, seen in list(self._links.items()):
            now = file_stat(self.store / rel)
            if now != seen:
                self._links[rel] = now
                changed.append(rel)
        if changed:
            self.enqueue(changed)

    def folder_lost(self) -> None:
        """The store folder was removed (a checkout): watch it again once it is back."""
        self._folder_lost = True
        self.request_reconcile("the store folder was removed")

    def enqueue(self, paths: Iterable[str]) -> None:
        """Queue store-relative paths for indexing."""
        with self._cond:
            now = time.monotonic()
            if not self._pending:
                self._first_at = now
            self._pending.update(paths)
            self._last_at = now
            self._enqueued += 1
            self._cond.notify_all()

    def note_append(self, rel: str, appended: Appended) -> None:
        """The daemon's writer appended lines to `rel`: queue it, with their events.

        Called before the write is acknowledged, so a read that follows the
        acknowledgement waits for these lines; the indexer uses the events
        where the file's new bytes are exactly these (`rows.split_known`).
        """
        with self._cond:
            self.handover.append(rel, appended, keep=self.stats["db_ok"] is not False)
        self.enqueue([rel])

    def note_appending(self, rel: str, expected: Announced | None) -> None:
        """The daemon's writer is about to append to `rel`: the file's stat before and
        its size after (None: that append failed). Until `note_append`, the file as
        that append leaves it counts as the writer's (no barrier: the lines are not
        acknowledged yet, and are handed over before they are)."""
        with self._cond:
            self.handover.announce(rel, expected)

    def note_placed(self, placed: list[Placed]) -> None:
        """The daemon's writer put these files in place (a task or decision file, say):
        queue them, before the write is answered. Their own file events then queue
        nothing more (`Handover.placed_as_is`), and a read right after the write needs
        no barrier for them (`_own_appends`): the write and its task file are indexed
        in one batch, not two."""
        wanted = [item for item in placed if watched(item.rel)]
        if not wanted:
            return
        with self._cond:
            self.handover.place(wanted)
        self.enqueue([item.rel for item in wanted])

    def request_reconcile(self, reason: str) -> None:
        """Queue a full reconcile of the store with the index."""
        logger.info("reconcile requested: %s", reason)
        with self._cond:
            self._reconcile = True
            self._enqueued += 1
            self._cond.notify_all()

    def barrier_seen(self, number: int) -> None:
        """The handler saw barrier `number` (and so every event before it)."""
        with self._cond:
            self._barrier_seen = max(self._barrier_seen, number)
            self._cond.notify_all()

    # ------------------------------------------------------------------ catch-up on read

    def flush(self, timeout: float | None = None, *, scope: ReadScope | None = None) -> CatchUp:
        """Index every change made to the files before this call (with a `scope`, what
        can change that read's answer: see the module's docstring); what it waited
        for and what it did not.

        Raises DatabaseError when the index cannot catch up (the database is
        down): answering from a stale index would be wrong.
        """
        timeout = self.flush_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        self._watch_again_if_replaced()
        self._check_links()
        if self.stats["db_ok"] is False:
            raise DatabaseError(f"the index is unavailable ({self.stats['db_error']}); events "
                                "are still written to the files and indexed when it returns")
        if self.mode != "inotify" or not self._settled(min(self.barrier_timeout, timeout)):
            self.request_reconcile("catch-up on read without ordered file events")
        with self._cond:
            target = self._enqueued
            if self._processed >= target:
                return CatchUp()
            paths = sorted(self._pending | self._inflight)
            failures = self._failures
            while self._processed < target:
                # checked again at each change: the writer's next hand-over, say, of
                # lines already in the file when the stat was taken
                deferred = None if scope is None else self._unaffected(scope)
                if deferred is not None:
                    return CatchUp(deferred=deferred)
                if self._stopping:
                    raise DaemonError("the daemon is shutting down")
                if self._failures > failures:
                    raise DatabaseError("the index cannot catch up with the files: "
                                        f"{self.stats['db_error']}")
                left = deadline - time.monotonic()
                if left <= 0:
                    outstanding = self._outstanding()
                    logger.warning("a read gave up waiting for the index after %.1fs: %s",
                                   timeout, outstanding)
                    raise DatabaseError(f"the index did not catch up with the files within "
                                        f"{timeout:.1f}s (still {outstanding}); try again, "
                                        "or see `gitmem status`")
                self._urgent = True
                self._cond.notify_all()
                self._cond.wait(left)
        return CatchUp(paths)

    def _outstanding(self) -> str:
        """What the indexer has still to do, in words (under the lock)."""
        parts = []
        running = (f"{time.monotonic() - self._batch_started:.1f}s"
                   if self._batch_started is not None else "")
        if self._reconciling:
            parts.append(f"a full reconcile, running for {running}")
        elif self._inflight:
            parts.append(f"indexing {_files(self._inflight)}, running for {running}")
        if self._reconcile:
            parts.append("a full reconcile queued")
        if self._pending:
            parts.append(f"{_files(self._pending)} queued")
        return "; ".join(parts) or "nothing queued: the indexer is finishing a batch"

    def _unaffected(self, scope: ReadScope) -> list[str] | None:
        """The queued files, if none of them can change a read in `scope`: files of a
        kind it does not load, and the writer's own lines (every other byte of their
        file indexed) of events outside it; else None (under the lock)."""
        if self._reconcile or self._reconciling:
            return None
        deferred = []
        for rel in sorted(self._pending | self._inflight):
            wait = self.handover.wait(rel, scope)
            if wait is Wait.YES:
                return None
            if wait is Wait.NAMED:
                deferred.append(rel)
        return deferred

    def _settled(self, timeout: float) -> bool:
        """Every change made before now is queued: the change counter has seen none
        since changes a seen barrier covers (the daemon's own appends aside), or a new
        barrier is seen (False when it is not, within `timeout`)."""
        with self._changes_lock:
            counter = self._changes
            if counter is not None:
                changed = counter.changes()
                if changed is None or not self._own_appends(changed):
                    self._changes_seen += 1
            wanted = self._changes_seen
            if counter is not None and self._changes_covered >= wanted:
                self.stats["reads_without_barrier"] += 1
                return True
        # made after the counter was read: it covers every change the counter saw
        if not self._barrier(timeout):
            return False
        with self._changes_lock:
            self._changes_covered = max(self._changes_covered, wanted)
        return True

    def _own_appends(self, paths: set[str]) -> bool:
        """Whether every one of these files is the daemon's writer's and queued before
        its write was answered, so that no barrier is needed for them: an events file
        whose stat is still the one taken right after its last append, a file it put
        in place (`placed_as_is`), or a file the watcher ignores (a temporary one, an
        artifact); `_unaffected` decides what a read waits for, as always."""
        handover = self.handover
        with self._cond:
            known = {rel: handover.last_write.get(rel) for rel in paths}
        return all(not watched(rel) or handover.as_written(rel, last)
                   or handover.placed_as_is(rel) for rel, last in known.items())

    def _barrier(self, timeout: float) -> bool:
        with self._barrier_lock:  # barriers are made in number order, so "seen >= n" holds
            self._barrier_issued += 1
            self.stats["barriers"] += 1
            number = self._barrier_issued
            path = self.store / f"{BARRIER_PREFIX}{os.getpid()}-{number}"
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                os.unlink(path)
            except OSError as exc:
                logger.warning("cannot create the barrier file %s: %s", path, exc)
                return False
        with self._cond:
            return self._cond.wait_for(
                lambda: self._barrier_seen >= number or self._stopping, timeout)

    # ------------------------------------------------------------------ the indexer thread

    def _run(self) -> None:
        while True:
            with self._cond:
                taken = self._take()
            if taken is None:
                return
            batch, full, sequence, appended = taken
            if not batch and not full:  # idle: is the index still this store's (and there)?
                self._watch_again_if_replaced()
                try:
                    self.memory.db.check_store(self.store)
                except DatabaseError as exc:  # a reconcile once it is back sets db_ok
                    self._database_down(batch, exc)
                    self._wait_for_database()
                except Exception:  # never let a check stop the indexer
                    logger.exception("checking the index's store failed")
                continue
            offsets: dict[str, int] = {}
            try:
                changed, offsets = self._index(batch, full, appended)
            except DatabaseError as exc:
                self._database_down(batch, exc)
                self._wait_for_database()
                continue
            except Exception as exc:  # never let one bad batch stop the indexer
                logger.exception("indexing %d path(s) failed; a reconcile will retry",
                                 len(batch))
                self.stats["last_error"] = f"{type(exc).__name__}: {exc}"
                changed = []
            with self._cond:
                for rel in batch:
                    self.handover.settle(rel, offsets.get(rel))
                self.handover.batch_done()
                self._processed = sequence
                self._inflight, self._reconciling = set(), False
                self._batch_started = None
                self._cond.notify_all()
            if changed and self.on_indexed is not None:
                self.on_indexed(changed)

    def _take(self) -> tuple[set[str], bool, int, dict[str, list[Appended]]] | None:
        """Wait for work and debounce it (under the lock); an empty batch that is not a
        reconcile when the index's owner is due for a check (OWNER_CHECK_S); None when
        stopping."""
        while not self._stopping:
            now = time.monotonic()
            if now >= self._next_reconcile:
                self._reconcile = True
                self._enqueued += 1
                self._next_reconcile = now + self.reconcile_interval
            if self._reconcile or self._pending:
                wait = min(self._last_at + self.quiet, self._first_at + self.max_delay) - now
                if self._urgent or self._reconcile or wait <= 0:
                    batch, full = self._pending, self._reconcile
                    self._pending, self._reconcile, self._urgent = set(), False, False
                    self._inflight = set(batch)
                    appended = self.handover.take(batch)
                    self._reconciling = full
                    self._batch_started = now
                    return batch, full, self._enqueued, appended
                self._cond.wait(wait)
            elif now >= self._next_owner_check:
                self._next_owner_check = now + OWNER_CHECK_S
                return set(), False, self._enqueued, {}
            else:
                self._cond.wait(max(0.0, min(self._next_reconcile,
                                             self._next_owner_check) - now))
        return None

    def _index(self, batch: set[str], full: bool,
               appended: dict[str, list[Appended]]) -> tuple[list[str], dict[str, int]]:
        started = time.perf_counter()
        policies = sorted(p for p in batch if classify(p) == "policy")
        if policies:
            self.policies.apply(policies)
        report: SyncReport | None
        if full or policies:  # a policy may change how rows are made: every file checked
            self._note_links()
            if full:  # a writer that crashed meanwhile (another process) left files staged
                recovery.finish(self.memory.store)
            report = self.memory.sync(None, appended)
            self.stats["reconciles"] += 1
            self.stats["last_reconcile"] = time.time()
        else:
            files = sorted(p for p in batch if classify(p) in INDEXED_KINDS)
            for rel in files:  # a symlink made since the last reconcile: compared from now on
                if rel not in self._links and (self.store / rel).is_symlink():
                    self._links[rel] = file_stat(self.store / rel)
            report = self.memory.sync(files, appended) if files else None
        changed = [item["path"] for item in report.changed] if report is not None else []
        if report is not None:
            with self._cond:
                self.handover.synced(report.changed)
            lost_lines.add_handed_over(self.memory.db, self.store, report, appended)
            self.problems.lines_left(report.left, self.memory.db)
        self.note_problems(changed)
        self.stats["batches"] += 1
        self.stats["files_synced"] += len(changed)
        self.stats["lines_from_writer"] += report.known_lines if report is not None else 0
        self.stats["last_batch_ms"] = round((time.perf_counter() - started) * 1000, 3)
        if self.stats["db_ok"] is False:
            logger.warning("the index is reachable again; caught up")
        self.stats.update(db_ok=True, db_error=None, db_down_since=None)
        return changed + policies, report.offsets if report is not None else {}

    def _database_down(self, batch: set[str], exc: DatabaseError) -> None:
        """Keep the batch for when the index is back, with a full reconcile: the index
        may have lost anything meanwhile (a schema dropped and made anew is empty)."""
        if self.stats["db_ok"] is not False:
            logger.warning("the index is unavailable (%s); files keep being written and the "
                           "index catches up when it returns", exc)
            self.stats["db_down_since"] = time.time()
        self.stats.update(db_ok=False, db_error=str(exc))
        with self._cond:
            self._pending |= batch
            self._reconcile = True
            self._inflight, self._reconciling = set(), False
            self._batch_started = None
            self.handover.batch_failed(batch)
            self._failures += 1
            self._cond.notify_all()

    def database_failed(self, exc: DatabaseError) -> None:
        """A read found the index unreachable: say so in the state, and let the indexer
        thread wait for the database (and start the embedded one again) at once."""
        if self.stats["db_ok"] is not False:
            self.request_reconcile(f"a read found the index unavailable: {exc}")

    def _wait_for_database(self) -> None:
        """Probe with fresh connections until PostgreSQL answers, then drop the old pool.

        A pool whose connections broke retries with a backoff that grows to
        minutes; a fresh one connects at once. `revive` (the daemon's embedded
        server) is asked first to start a server whose process has gone.
        """
        delay = 0.1
        while True:
            with self._cond:
                if self._cond.wait_for(lambda: self._stopping, delay):
                    return
            try:
                if self.revive is not None:
                    self.revive()
                Database.open(self.memory.config, max_size=1, timeout=2.0).close()
            except DatabaseError as exc:
                self.stats["db_error"] = str(exc)
                delay = min(delay * 2, 2.0)
                continue
            self.memory.close()
            return

    def note_problems(self, changed: list[str]) -> None:
        """Log each new parse problem of the files just indexed (they stay in status), and
        forget those of the files mended since."""
        db = self.memory.db
        self.problems.files_indexed((rel, db.fetchone("file_state", {"path": rel}))
                                    for rel in changed)

    def note_problems_at_start(self) -> None:
        """List the files that failed to parse before this daemon started (unchanged,
        they are never indexed again to be logged)."""
        self.note_problems([row["path"] for row in self.memory.db.fetchall(
            "files_with_errors")])

    def state(self) -> dict[str, Any]:
        """What the watcher is doing, for `daemon_status`."""
        with self._cond:
            pending = len(self._pending) + len(self._inflight)
            reconcile = self._reconcile
            handed = self.handover.appended_bytes
            started = self._batch_started
        running = None if started is None else round(time.monotonic() - started, 3)
        return {"mode": self.mode, "pending_paths": pending, "reconcile_pending": reconcile,
                "pending_writer_bytes": handed, "batch_running_s": running,
                **{k: (list(v) if isinstance(v, list) else v) for k, v in self.stats.items()}}


def _folder_key(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None  # gone (for now)
    return st.st_dev, st.st_ino


def _files(paths: set[str], shown: int = 3) -> str:
    """'2 files (a, b)': how many, and the first few by name."""
    names = sorted(paths)
    more = ", …" if len(names) > shown else ""
    return (f"{len(names)} file{'s' if len(names) != 1 else ''} "
            f"({', '.join(names[:shown])}{more})")
