"""The daemon's indexer in a process of its own.

The daemon is one Python process: its socket threads, the group-commit writer
and the indexer share one GIL, and under 8 writing clients the indexer thread
held a fifth of it (docs/performance-log.md, section 4). `IndexerProcess.fork`
starts a child when the daemon starts, before any other thread exists (a fork
copies the calling thread only; nothing is imported again, so the cold start
stays as it was). The watcher's batches go to it through a pipe: the child
syncs those paths from the files (`indexer.sync`, on connections and policies
of its own) and sends the report back, while the daemon waits with the GIL
released, then drops its cached copies of what changed as after a sync of its
own. Everything the catch-up logic decides stays in the daemon.

The child ignores SIGINT and SIGTERM (the daemon decides when it ends) and ends
when the daemon closes the pipe, or dies: the pipe closes with it. Should the
child die, `sync` raises `IndexerGone` and the daemon indexes in-process from
then on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from multiprocessing.connection import Connection, Pipe
from typing import Any

from gitmem import indexer
from gitmem.config import Config
from gitmem.errors import DatabaseError, FormatError, GitmemError
from gitmem.rows import Appended

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 30.0  # how long `close` waits for the batch in progress


class IndexerGone(GitmemError):
    """The indexer process is no longer there (it was killed, or crashed)."""


class IndexerProcess:
    """The daemon's end of its indexer child."""

    def __init__(self, pid: int, conn: Connection) -> None:
        self.pid = pid
        self._conn = conn
        self._lock = threading.Lock()  # one batch at a time, answers in order
        self.alive = True

    @classmethod
    def fork(cls, config: Config) -> IndexerProcess | None:
        """Fork the child (`config.dsn` must be resolved: the child starts no server).
        None where forking is unsafe (other threads exist) or impossible."""
        if threading.active_count() > 1 or not hasattr(os, "fork"):
            logger.warning("indexing in the daemon: %s", "other threads run already"
                           if hasattr(os, "fork") else "this system cannot fork")
            return None
        ours, theirs = Pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            ours.close()
            status = 0
            try:
                _serve(config, theirs)
            except GitmemError as exc:  # a policy file that does not load, say: one line
                logger.error("the indexer process stopped: %s", exc)
                status = 1
            except BaseException:  # logged; the daemon finds the pipe closed
                logger.exception("the indexer process failed")
                status = 1
            finally:
                os._exit(status)
        theirs.close()
        logger.info("indexing in process %d", pid)
        return cls(pid, ours)

    def sync(self, paths: Iterable[str] | None,
             appended: Mapping[str, Sequence[Appended]] | None = None) -> indexer.SyncReport:
        """`indexer.sync` of `paths` (None: every file) in the child; its report.
        `appended`: the daemon's appends, of which the child gets the stats around each
        (it reads their lines from the files, and needs not read again what it read
        before them: gitmem/freshness.py)."""
        stats = {rel: [(a.before, a.stat) for a in runs if a.before and a.stat]
                 for rel, runs in (appended or {}).items()}
        with self._lock:
            if not self.alive:
                raise IndexerGone("the indexer process has ended")
            try:
                self._conn.send((None if paths is None else list(paths), stats))
                kind, value = self._conn.recv()
            except (EOFError, OSError) as exc:
                self.alive = False
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(self.pid, os.WNOHANG)  # reaped, if it has ended
                raise IndexerGone(f"the indexer process {self.pid} has ended "
                                  f"({type(exc).__name__})") from None
        if kind == "report":
            assert isinstance(value, indexer.SyncReport)
            return value
        if kind == "database":
            raise DatabaseError(str(value))
        raise GitmemError(f"the indexer process failed: {value}")

    def close(self) -> None:
        """Let the child finish its batch and end; killed if it does not in time."""
        with self._lock:
            self.alive = False
            self._conn.close()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped already
                return
            if done:
                return
            time.sleep(0.01)
        logger.warning("the indexer process %d did not end within %.0fs; killing it",
                       self.pid, STOP_TIMEOUT_S)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def _serve(config: Config, conn: Connection) -> None:
    """The child: sync each batch the daemon sends until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from gitmem.memory import Memory  # the daemon's module, already imported

    with Memory(config, db_pool_size=2, db_timeout=5.0) as memory:
        while True:
            try:
                paths, stats = conn.recv()
            except (EOFError, OSError):
                return
            # the daemon's appends by their stats alone (`freshness.ReadFiles.grown_by`)
            appended = {rel: [Appended(0, b"", (), after, before) for before, after in runs]
                        for rel, runs in stats.items()}
            answer: tuple[str, Any]
            try:
                try:
                    policies = memory.policies
                except FormatError:  # an edit that does not load: the daemon reports it
                    policies = memory.applied_policies  # and goes on with these, as here
                answer = ("report", indexer.sync(memory.db, memory.store, policies, paths,
                                                 appended))
            except DatabaseError as exc:
                answer = ("database", str(exc))
                memory.close()  # its connections may be to a server that is gone: new ones
            except Exception as exc:  # the daemon logs it and retries with a reconcile
                answer = ("error", f"{type(exc).__name__}: {exc}")
            try:
                conn.send(answer)
            except (BrokenPipeError, OSError):
                return
