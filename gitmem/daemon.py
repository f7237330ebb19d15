"""The daemon's lifecycle: run (foreground), start, stop, status, and its autocommit.

One daemon per store. Its pid file `.gitmem/gitmem.pid` is held with an
exclusive `flock` for the daemon's lifetime: the kernel drops the lock when the
process dies, however it dies, so a stale pid file or socket left by a crash
is recognised (the lock is free) and replaced, and a second daemon is refused
while the first holds it. No TCP port is ever opened.

Start-up: watch the store, reconcile the index with the files (changes made
while no daemon ran), then listen. The database may be down: writes still go
to the files and the watcher retries with backoff until the index catches up.
"""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import fcntl
import functools
import importlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem import client, gctune, processes
from gitmem.config import Config
from gitmem.errors import DaemonError, DatabaseError, GitError, GitmemError
from gitmem.server import ServerOptions

if TYPE_CHECKING:
    from gitmem.memory import Memory
    from gitmem.records import Event
    from gitmem.watcher import Watcher

# What the daemon runs on (the index, the read and write paths, the watcher, git) is
# imported by `run` and `Autocommit`, not here: `gitmem daemon start`, `stop` and
# `status` need none of it, and a cold start waited 0.3-0.6 s for the starting
# command to import it on the slowest machine seen.

logger = logging.getLogger(__name__)

LOG_ROTATE_BYTES = 10 * 1024 * 1024
ABANDON_GRACE_S = 5.0  # how long a daemon `start` gave up on may take to stop on SIGTERM


@dataclass(frozen=True)
class DaemonOptions:
    """How the daemon behaves; the CLI fills it from flags."""

    autocommit: bool = True
    commit_interval: float = 300.0     # seconds from the first uncommitted change
    commit_max_events: int = 500       # ... or as soon as this many events wait
    reconcile_interval: float = 300.0  # full reconcile, in case file events were lost
    db_pool_size: int = 8
    db_timeout: float = 5.0            # fail fast while PostgreSQL is away; the watcher retries
    index_process: bool = True         # index in a forked child (gitmem/indexproc.py)
    server: ServerOptions = field(default_factory=ServerOptions)

    def to_args(self) -> list[str]:
        """The `gitmem daemon run` flags that reproduce these options."""
        return ["--autocommit" if self.autocommit else "--no-autocommit",
                "--commit-interval", str(self.commit_interval),
                "--commit-max-events", str(self.commit_max_events),
                "--reconcile-interval", str(self.reconcile_interval),
                "--max-request-bytes", str(self.server.max_request_bytes),
                "--index-process" if self.index_process else "--no-index-process"]


def pid_path(config: Config) -> Path:
    """The pid file (held locked while a daemon runs)."""
    return config.state_dir / f"{config.daemon_name}.pid"


def log_path(config: Config) -> Path:
    """Where a daemon started in the background logs (`daemon.log` for memory/)."""
    stem = config.daemon_name.replace("gitmem", "daemon", 1)
    return config.state_dir / f"{stem}.log"


def running_pid(config: Config) -> int | None:
    """The pid of the daemon serving this store, or None (a stale pid file counts as none)."""
    try:
        fd = os.open(pid_path(config), os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):  # no pid file, or `.gitmem` is a file
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        return None  # nobody holds the lock: whatever the file says is stale
    finally:
        os.close(fd)


def lock_holders(config: Config) -> list[int]:
    """The processes holding the pid file open, as `fuser` names them (Linux: by
    /proc/PID/fd; empty where that cannot tell): a killed daemon's indexer process."""
    try:
        target = os.stat(pid_path(config))
        entries = os.listdir("/proc")
    except OSError:
        return []
    found = []
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        fds = f"/proc/{entry}/fd"
        try:
            names = os.listdir(fds)
        except OSError:  # gone meanwhile, or another user's
            continue
        for name in names:
            try:
                held = os.stat(f"{fds}/{name}")
            except OSError:
                continue
            if (held.st_dev, held.st_ino) == (target.st_dev, target.st_ino):
                found.append(int(entry))
                break
    return sorted(found)


def _gone(pid: int) -> bool:
    """Whether the daemon `pid` has died: no such process, or one killed and not yet
    reaped (a zombie, which signal 0 still finds)."""
    if not processes.alive(pid):
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def finishing(config: Config, pid: int, holders: list[int]) -> str:
    """What a killed daemon whose indexer process (`holders`) still holds the pid
    file's lock leaves, and what to do: the wording of `start` and `status`."""
    named = ", ".join(map(str, holders))
    which = f" (pid {named})" if holders else ""
    end = (f"`kill -9 {' '.join(map(str, holders))}`" if holders
           else f"ending the process `fuser {pid_path(config)}` names")
    return (f"pid {pid} is gone, and a process it started{which} still holds the store "
            f"(it ends with its batch; `gitmem daemon stop` waits for it, or {end} ends "
            "it now: the next daemon's index catches up from the files)")


def _unwritable(config: Config, exc: OSError) -> DaemonError:
    """The state directory (or a file in it) cannot be written: a read-only checkout or
    mount. The daemon cannot run there; every command works without it."""
    where = exc.filename if isinstance(exc.filename, str) else config.state_dir
    reason, remedy = exc.strerror or str(exc), "make that directory writable"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):  # a full disk, a quota
        remedy = "free space there (or raise the quota or the `ulimit -f` limit)"
    if config.state_dir.exists() and not config.state_dir.is_dir():
        where, reason = config.state_dir, "it is a file, not a directory"
        remedy = "move that file away (the daemon makes the directory)"
    return DaemonError(f"cannot write {where}: {reason}; the daemon keeps its socket, pid "
                       f"file and log in {config.state_dir}: {remedy}, or work without a "
                       "daemon (every command does)")


def _lock_pid_file(config: Config) -> int:
    try:
        config.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(pid_path(config), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise _unwritable(config, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise DaemonError(f"a gitmem daemon (pid {text or '?'}) already serves {config.store}; "
                          "use it (`gitmem call status`) or stop it first "
                          "(`gitmem daemon stop`)") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:  # a full disk: no empty pid file left behind
        with contextlib.suppress(OSError):
            pid_path(config).unlink()
        os.close(fd)
        exc.filename = exc.filename or str(pid_path(config))
        raise _unwritable(config, exc) from exc
    return fd


# --------------------------------------------------------------------------- autocommit

class Autocommit:
    """Commits the store in batches: after `interval` seconds or `max_events` events."""

    def __init__(self, store: Path, interval: float, max_events: int) -> None:
        self.store = store
        self.interval = interval
        self.max_events = max_events
        self._cond = threading.Condition()
        self._dirty_since: float | None = None
        self._events = 0
        self._stopping = False
        self._last_skip: str | None = None
        self._held_back: dict[str, list[str]] = {}
        self.commits = 0
        self.last_commit: str | None = None
        self._thread = threading.Thread(target=self._run, name="gitmem-autocommit",
                                        daemon=True)

    def start(self) -> None:
        """Start the commit thread."""
        self._thread.start()

    def stop(self) -> None:
        """Commit what waits (if git allows it now), then stop."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():  # a start that failed before it never ran
            self._thread.join(timeout=60)

    def note_events(self, events: list[Event]) -> None:
        """The writer appended `events`."""
        self._note(len(events))

    def note_paths(self, paths: Iterable[str]) -> None:
        """The watcher indexed changed files (edits, hand appends, deletes)."""
        from gitmem import autocommit

        if any(p.split("/", 1)[0] in autocommit.AUTOCOMMIT_DIRS for p in paths):
            self._note(0)

    def _note(self, events: int) -> None:
        with self._cond:
            if self._dirty_since is None:
                # the idle thread waits without a deadline: wake it to start the interval
                self._dirty_since = time.monotonic()
                self._cond.notify_all()
            self._events += events
            if self._events >= self.max_events:
                self._cond.notify_all()

    def _run(self) -> None:
        self._recover()
        while True:
            with self._cond:
                while not self._stopping and not self._due():
                    wait = None if self._dirty_since is None else max(
                        0.05, self._dirty_since + self.interval - time.monotonic())
                    self._cond.wait(wait)
                stopping = self._stopping
                if self._dirty_since is None and stopping:
                    return
                self._dirty_since, self._events = None, 0
            self._commit()
            if stopping:
                return

    def _recover(self) -> None:
        """Put right what an autocommit that died left (gitmem/leftovers.py), and commit,
        as for the daemon's own writes, the changes made before it started: writes made
        with no daemon, events answered just before a crash."""
        from gitmem import autocommit

        try:
            waiting = autocommit.recover(self.store)
        except GitError as exc:
            logger.warning("cannot look for store changes to commit at start: %s", exc)
            return
        if waiting:
            logger.info("%d store file(s) changed since the last commit, as `git status` "
                        "shows them: committing them", len(waiting))
            self._note(0)

    def _due(self) -> bool:
        if self._dirty_since is None:
            return False
        return (self._events >= self.max_events
                or time.monotonic() - self._dirty_since >= self.interval)

    def _commit(self) -> None:
        from gitmem import autocommit

        try:
            result = autocommit.commit(self.store)
        except GitError as exc:
            if str(exc) != self._last_skip:
                logger.info("%s", exc)
                self._last_skip = str(exc)
            with self._cond:  # try again after another interval
                if self._dirty_since is None:
                    self._dirty_since = time.monotonic()
            return
        self._last_skip = None
        held = result.held_back if result is not None else {}
        logged = {(path, problem) for path, problems in self._held_back.items()
                  for problem in problems}
        for path, problems in held.items():
            for problem in problems:
                if (path, problem) not in logged:  # once per distinct problem
                    logger.warning("autocommit holds back %s", problem)
        self._held_back = held
        if held:
            with self._cond:  # look again after another interval (a person may fix it)
                if self._dirty_since is None:
                    self._dirty_since = time.monotonic()
        if result is not None and result.sha is not None:
            self.commits += 1
            self.last_commit = result.sha
            logger.info("committed %s: %s", result.sha[:12], result.message.splitlines()[0])

    def state(self) -> dict[str, Any]:
        """For `daemon_status`."""
        with self._cond:
            waiting = self._dirty_since is not None
            events = self._events
        return {"enabled": True, "interval": self.interval, "max_events": self.max_events,
                "commits": self.commits, "last_commit": self.last_commit,
                "uncommitted_changes": waiting, "uncommitted_events": events,
                "last_skipped": self._last_skip, "held_back": dict(self._held_back)}


# --------------------------------------------------------------------------- run

def run(config: Config, options: DaemonOptions) -> None:
    """Serve the store in the foreground until SIGTERM or SIGINT."""
    from gitmem import gitops
    from gitmem.embedded import embedded_dsn, revive_embedded
    from gitmem.indexproc import IndexerProcess
    from gitmem.memory import Memory
    from gitmem.server import Server
    from gitmem.watcher import Watcher

    # The read path (Memory imports it where a read first uses it, so that a write with
    # no daemon does without): imported now, or the first answer would pay for it
    importlib.import_module("gitmem.acb")
    lock_fd = _lock_pid_file(config)
    # Socket threads mostly wait; a short GIL switch interval keeps a busy indexer
    # batch from delaying their answers by the default 5 ms slices.
    sys.setswitchinterval(0.0005)
    # The watcher reports an outage once; the pool would log every reconnect attempt.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    # `kill -USR1 PID` writes every thread's stack to stderr (the log): what a daemon
    # that does not stop, or does not answer, is doing.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    indexing = None
    embedded = config.dsn is None
    schema, database = client.index_of(config)  # what daemon_status says it serves
    if options.index_process:
        if embedded:  # the child joins this server; it never starts one
            config = replace(config, dsn=embedded_dsn(config.state_dir))
        indexing = IndexerProcess.fork(config)  # before any thread of this process
    memory = Memory(config, db_pool_size=options.db_pool_size, db_timeout=options.db_timeout)
    memory.indexing = indexing
    committer: Autocommit | None = None
    if options.autocommit:
        try:
            gitops.open_repo(config.store).close()
            committer = Autocommit(config.store, options.commit_interval,
                                   options.commit_max_events)
        except GitError as exc:
            logger.warning("autocommit off: %s", exc)
    watcher = Watcher(memory, reconcile_interval=options.reconcile_interval,
                      on_indexed=committer.note_paths if committer else None)
    started = time.time()

    def daemon_status() -> dict[str, Any]:
        return {"pid": os.getpid(), "store": str(config.store), "schema": schema,
                "database": database,
                "socket": str(config.socket_path), "log": str(log_path(config)),
                "started": started, "uptime_s": round(time.time() - started, 3),
                "connections": server.connections, "accepted": server.accepted,
                "writer": {"batches": server.writer.batches, "events": server.writer.events},
                "watcher": watcher.state(), "gc": gctune.stats(),
                "indexer": {"pid": indexing.pid if indexing else None,
                            "alive": bool(indexing and indexing.alive)},
                "autocommit": committer.state() if committer else {"enabled": False}}

    def sync(paths: list[str] | None) -> dict[str, Any]:
        report = memory.reconcile() if paths is None else memory.sync(paths)
        watcher.note_problems([item["path"] for item in report.changed])
        return report.to_dict()

    server = Server(memory, config.socket_path, sync=sync, daemon_status=daemon_status,
                    options=options.server,
                    on_written=committer.note_events if committer else None,
                    before_write=watcher.policies.refresh)
    memory.catch_up = watcher.flush
    memory.on_database_error = watcher.database_failed
    if embedded:
        watcher.revive = functools.partial(revive_embedded, config.state_dir)
    memory.on_append = watcher.note_append
    memory.on_appending = watcher.note_appending
    memory.on_place = watcher.note_placed
    previous = {sig: signal.signal(sig, lambda *_: server.shutdown())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        watcher.start()
        _reconcile_at_start(memory, watcher)
        gctune.install()  # what start-up built lives as long as the daemon
        server.bind()
        if committer:
            committer.start()
        logger.info("gitmem daemon %d serves %s on %s (file events: %s)", os.getpid(),
                    config.store, config.socket_path, watcher.mode)
        server.serve_forever()
        logger.info("stopping")
    finally:
        gctune.uninstall()
        server.close()
        watcher.stop()
        if committer:
            committer.stop()
        if indexing is not None:
            indexing.close()
        memory.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        with contextlib.suppress(FileNotFoundError):
            pid_path(config).unlink()  # before the lock goes, so no successor's file is hit
        os.close(lock_fd)
        logger.info("stopped")


def _reconcile_at_start(memory: Memory, watcher: Watcher) -> None:
    started = time.perf_counter()
    try:
        report = memory.reconcile()
    except DatabaseError as exc:
        logger.warning("cannot reach the index at start (%s); serving anyway: writes go to "
                       "the files and the index catches up when the database returns", exc)
        watcher.request_reconcile("the database was unavailable at start")
        return
    except GitmemError as exc:
        logger.error("reconcile at start failed: %s", exc)
        watcher.request_reconcile("the reconcile at start failed")
        return
    logger.info("reconciled %d changed file(s) of %d in %.0f ms%s", len(report.changed),
                report.files, (time.perf_counter() - started) * 1000,
                " (an empty index: rebuilt in bulk)" if report.rebuilt else "")
    try:
        watcher.note_problems_at_start()
    except DatabaseError as exc:
        logger.warning("cannot list the files that failed to parse: %s", exc)


# --------------------------------------------------------------------------- start / stop

def start(config: Config, options: DaemonOptions, *, timeout: float = 60.0) -> int:
    """Start a daemon in the background; returns its pid once it answers on the socket."""
    pid = running_pid(config)
    if pid is not None and pid > 0 and _gone(pid):  # killed (-9)
        raise DaemonError(f"cannot start a daemon for {config.store} yet: "
                          f"{finishing(config, pid, lock_holders(config))}")
    if pid is not None:
        raise DaemonError(f"a gitmem daemon (pid {pid}) already serves {config.store}; "
                          "stop it first with `gitmem daemon stop`")
    log = log_path(config)
    try:
        config.state_dir.mkdir(parents=True, exist_ok=True)
        if log.exists() and log.stat().st_size > LOG_ROTATE_BYTES:
            os.replace(log, log.with_name(log.name + ".1"))
        out = open(log, "ab")  # noqa: SIM115 (closed once the daemon has it)
    except OSError as exc:
        raise _unwritable(config, exc) from exc
    env = {**os.environ, "GITMEM_SCHEMA": config.schema}
    env.pop("GITMEM_STORE", None)
    if config.dsn:
        env["GITMEM_DSN"] = config.dsn  # in the environment, never on a command line
    else:
        env.pop("GITMEM_DSN", None)
    command = [sys.executable, "-m", "gitmem", "--store", str(config.store), "daemon", "run",
               *options.to_args()]
    offset = log.stat().st_size if log.exists() else 0
    with out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                env=env, cwd=config.root, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise DaemonError(f"the daemon exited with status {code} while starting:\n"
                              f"{_log_tail(log, offset)}")
        try:
            answer = client.call(config.socket_path, "daemon_status", timeout=2.0)
            if isinstance(answer, dict) and answer.get("pid") == proc.pid:
                return proc.pid
        except DaemonError:
            pass
        time.sleep(0.02)
    how = _abandon(proc, config)
    raise DaemonError(f"the daemon (pid {proc.pid}) did not answer within {timeout:g}s, so "
                      f"it was {how}; {log} shows how far it got (a larger --timeout "
                      "gives it longer)")


def _abandon(proc: subprocess.Popen[bytes], config: Config) -> str:
    """End a daemon `start` gave up on, so that a failed start leaves none running:
    SIGTERM (it stops cleanly), SIGKILL if that takes too long; how it ended."""
    how = "stopped"
    proc.terminate()
    try:
        proc.wait(timeout=ABANDON_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        how = "killed"
    # its indexer process shares the pid file's lock until its batch ends
    deadline = time.monotonic() + ABANDON_GRACE_S
    while running_pid(config) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    return how


def _log_tail(log: Path, offset: int) -> str:
    """The end of what the daemon logged since `offset`; where it logged nothing, whether
    the log can be written at all (on a full disk its reason is lost)."""
    with open(log, "rb") as handle:
        handle.seek(offset)
        lines = handle.read().decode(errors="replace").strip().splitlines()
    if lines:
        return "\n".join(lines[-15:])
    try:
        with open(log, "ab") as handle:  # whether the log takes a write at all
            handle.write(b"(gitmem daemon start: the daemon ended, logging nothing)\n")
    except OSError as exc:
        return (f"(the log {log} cannot be written: {exc.strerror or exc}, so the daemon "
                "could not say why it ended; free space there (or raise the quota or the "
                "`ulimit -f` limit), then start again)")
    return "(nothing logged)"


def stop(config: Config, *, timeout: float = 30.0) -> int | None:
    """SIGTERM the daemon and wait until it is gone; its pid, or None if none ran."""
    pid = running_pid(config)
    if pid is None:
        return None
    if pid <= 0:
        raise DaemonError(f"{pid_path(config)} is locked but holds no pid; find the process "
                          f"with `fuser {pid_path(config)}`")
    # killed (-9), it is gone: its indexer process holds the pid file until its batch ends
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running_pid(config) is None:
            return pid
        time.sleep(0.02)
    if _gone(pid):
        holders = lock_holders(config)
        which = f" (pid {', '.join(map(str, holders))})" if holders else ""
        how = (f"`kill -9 {' '.join(map(str, holders))}` ends it" if holders
               else f"`fuser {pid_path(config)}` names it")
        raise DaemonError(f"the daemon (pid {pid}) is gone, but a process it started{which} "
                          f"still holds {pid_path(config)} after {timeout:g}s (it ends with "
                          f"its batch); {how}: the next daemon's index catches up from "
                          "the files")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGUSR1)  # its threads' stacks, into the log
    raise DaemonError(f"the daemon (pid {pid}) did not stop within {timeout:g}s (the stacks "
                      f"of its threads are at the end of {log_path(config)}); "
                      f"`kill -9 {pid}` forces it (events already answered are on disk)")


def status(config: Config) -> dict[str, Any]:
    """Whether a daemon serves the store, and what it reports about itself."""
    pid = running_pid(config)
    report: dict[str, Any] = {"running": pid is not None, "pid": pid,
                              "socket": str(config.socket_path),
                              "log": str(log_path(config))}
    if pid is not None and pid > 0 and _gone(pid):
        # killed (-9): its indexer process keeps the store served until its batch ends
        holders = lock_holders(config)
        report.update(running=False, finishing=True, holders=holders,
                      message=f"not running: {finishing(config, pid, holders)}")
    elif pid is not None:
        try:
            report["daemon"] = client.call(config.socket_path, "daemon_status", timeout=5.0)
        except GitmemError as exc:
            report["error"] = str(exc)
            if not config.socket_path.exists():
                report["error"] = (f"its socket {config.socket_path} is gone (deleted?), so "
                                   "every command works without it: `gitmem daemon stop`, "
                                   "then `gitmem daemon start`")
    return report
