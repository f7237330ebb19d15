"""The embedded PostgreSQL: the index's server when no DSN is given.

A server from the `pgserver` wheel under `.gitmem/pg` (the store's own state
directory), started by the first process that needs it and stopped by the last
(pgserver counts them by pid; those that died without leaving are forgotten first:
`_forget_the_dead`), with settings for a disposable index (`embedded_settings`).
Processes join it one at a time under `.gitmem/pg.lock`.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shutil
import threading
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from gitmem.db import alter_system
from gitmem.errors import DatabaseError
from gitmem.store import exclusive

logger = logging.getLogger(__name__)

_embedded_lock = threading.Lock()
_CREATE = os.O_RDWR | os.O_CREAT  # the embedded server's lock file, made on first use
_embedded: dict[Path, Any] = {}


def embedded_dsn(state_dir: Path) -> str:
    """Start (or join) the embedded PostgreSQL under `state_dir/pg`; its DSN.

    Processes join one at a time (`state_dir/pg.lock`): the first to start the server
    gives it its settings, restarting it, before any other may connect to it."""
    pgdata = (state_dir / "pg").resolve()
    with _embedded_lock:
        server = _embedded.get(pgdata)
        if server is None:
            with _joining(state_dir), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import pgserver  # deferred: only the embedded path needs it
                try:
                    _clear_stale_pid(pgdata)
                    _socket_dirs_without_spaces()
                    _clear_unfinished(pgdata)
                    server = pgserver.get_server(  # type: ignore[attr-defined]
                        pgdata, cleanup_mode="stop")
                    # after pgserver's own exit hook, so run before it (last in, first out)
                    atexit.register(_forget_the_dead, server)
                    _tune_embedded(server)
                except Exception as exc:  # pgserver raises bare subprocess/OS errors
                    log = pgdata / "log"
                    raise DatabaseError(
                        f"could not start the embedded PostgreSQL in {pgdata}: {exc}; "
                        f"see {log}, or pass --dsn / GITMEM_DSN for an existing server; "
                        f"it holds only the index, so removing {pgdata} loses nothing: "
                        "the next command builds the index again from the files"
                    ) from exc
            _embedded[pgdata] = server
        return str(server.get_uri())


@contextmanager
def _joining(state_dir: Path) -> Iterator[None]:
    """`state_dir/pg.lock` held: one process at a time starts, joins or revives the
    server. A state directory that cannot be written (a read-only checkout or mount)
    is a DatabaseError naming it and the ways out, not an OSError: the embedded
    server cannot run there, but a server named by a DSN can."""
    with ExitStack() as held:
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
            held.enter_context(exclusive(state_dir / "pg.lock", _CREATE))
        except OSError as exc:
            where = exc.filename if isinstance(exc.filename, str) else state_dir
            raise DatabaseError(
                f"cannot write {where}: {exc.strerror or exc}; the embedded PostgreSQL keeps "
                f"the index in {state_dir}: make that directory writable, or pass --dsn / "
                "GITMEM_DSN to index in a PostgreSQL server instead") from exc
        yield


def revive_embedded(state_dir: Path) -> bool:
    """Start again the embedded PostgreSQL this process started, if its postmaster has
    gone (killed, crashed); whether it did. A daemon calls it while the index is down."""
    pgdata = (state_dir / "pg").resolve()
    with _embedded_lock:
        server = _embedded.get(pgdata)
        if server is None:
            return False
        from pgserver import utils  # deferred: only the embedded path needs it

        with _joining(state_dir):  # not while a command starts it
            _clear_stale_pid(pgdata)
            info = utils.PostmasterInfo.read_from_pgdata(pgdata)
            if info is not None and info.is_running():
                return False
            logger.warning("the embedded PostgreSQL in %s has stopped; starting it again",
                           pgdata)
            try:
                server.ensure_postgres_running()
            except Exception as exc:  # pgserver raises bare subprocess/OS errors
                raise DatabaseError(f"could not start the embedded PostgreSQL in {pgdata} "
                                    f"again: {exc}; see {pgdata / 'log'}") from exc
            return True


def _clear_stale_pid(pgdata: Path) -> None:
    """Remove `postmaster.pid` when the process it names is not a server of this data
    directory (its pid was given to another process since a crash or a reboot).
    pgserver takes any running process of that pid for the server: it did not start
    one, and stopped the other process at exit, killing it."""
    import psutil  # type: ignore[import-untyped]  # pgserver depends on it

    pid_file = pgdata / "postmaster.pid"
    try:
        pid = abs(int(pid_file.read_text(encoding="utf-8").split("\n", 1)[0]))
    except (OSError, ValueError):
        return  # none, or not written yet: pgserver's own checks apply
    try:
        ours = Path(psutil.Process(pid).cwd()).resolve() == pgdata  # a server runs in it
    except psutil.Error:  # gone (a crash, an initdb killed), or another user's process
        ours = False
    if not ours:
        logger.warning("%s names pid %d, which is no server of that directory now (a stale "
                       "file); removing it", pid_file, pid)
        pid_file.unlink(missing_ok=True)


# What initdb leaves in a data directory it finished: the cluster's control and map
# files, template1, template0 and the postgres database (the one pgserver connects to)
_FINISHED = ("PG_VERSION", "global/pg_control", "global/pg_filenode.map", "base/1/PG_VERSION",
             "base/4/PG_VERSION", "base/5/PG_VERSION")


def _clear_unfinished(pgdata: Path) -> None:
    """Remove a data directory an initdb left unfinished (killed: Ctrl-C, kill -9 of
    the first command): every later start failed on it until it was removed by hand.
    It holds only the index, which the next command builds again from the files."""
    if not pgdata.is_dir() or all((pgdata / rel).exists() for rel in _FINISHED):
        return
    import psutil  # pgserver depends on it

    for proc in psutil.process_iter(["cmdline"]):  # an initdb still running: let it be
        if str(pgdata) in " ".join(proc.info["cmdline"] or ()):
            return
    logger.warning("%s was left unfinished by an initdb that did not complete; removing it "
                   "(it would hold only the index)", pgdata)
    shutil.rmtree(pgdata, ignore_errors=True)


def _socket_dirs_without_spaces() -> None:
    """pgserver hands its socket directory to pg_ctl unquoted (`-o '-k DIR'`): in a
    store whose path holds a space, the server could never start. Such a directory is
    swapped for one under pgserver's runtime directory, as pgserver does for a path
    too long for a socket."""
    from pgserver import postgres_server

    found = postgres_server.find_suitable_socket_dir  # type: ignore[attr-defined]
    if getattr(found, "gitmem", False):
        return

    def socket_dir(pgdata: Path, runtime_path: Path) -> Path:
        chosen: Path = found(pgdata, runtime_path)
        if not any(c.isspace() for c in str(chosen)):
            return chosen
        ident = f"{pgdata}-{pgdata.stat().st_ino}".encode()
        other = Path(runtime_path) / ("gm-" + hashlib.sha256(ident).hexdigest()[:10])
        other.mkdir(parents=True, exist_ok=True)
        return other

    socket_dir.gitmem = True  # type: ignore[attr-defined]
    postgres_server.find_suitable_socket_dir = socket_dir  # type: ignore[attr-defined]


def _forget_the_dead(server: Any) -> None:
    """Take the processes that died without leaving the server (kill -9, a crash) out of
    pgserver's count, before pgserver decides at this process's exit whether it is the
    last one.

    pgserver keeps the pid of each process that joined the server in
    `pg/.handle_pids.json`, and the process that takes the last pid out stops the
    server. A killed process never takes its pid out, so the count never came down to
    one and the server ran for good. Done under pgserver's own lock, which guards that
    file. A pid the system gave to a new process since is counted as alive: the
    server then stops at the next exit after that process ends."""
    import psutil  # pgserver depends on it

    try:
        with type(server)._lock:
            handles = server.global_process_id_list
            pids = handles.get()
            alive = [pid for pid in pids if _alive(pid, psutil)]
            if alive != pids:
                logger.info("the embedded PostgreSQL in %s: forgetting processes that ended "
                            "without leaving it: %s", server.pgdata,
                            sorted(set(pids) - set(alive)))
                handles.put(alive)
    except Exception as exc:  # at exit: pgserver's own hook still runs after this one
        logger.warning("cannot check which processes use the embedded PostgreSQL in %s: %s",
                       server.pgdata, exc)


def _alive(pid: int, psutil: Any) -> bool:
    """Whether process `pid` runs (a zombie has ended: only its exit status is left)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # not ours to look at: it runs
        return True


def embedded_settings(memory_bytes: int) -> dict[str, str]:
    """Server settings for the embedded PostgreSQL, which holds only a disposable index.

    Sized by the machine's memory: a quarter for shared buffers (at most 2 GB) so a
    million-event index is read from the server's own cache. Commits need not wait
    for the WAL flush: a lost commit loses a file's rows together with its sync
    state, and the next sync redoes both from the files. Minimal WAL lets a
    reindex COPY into the tables it has just created without logging them.
    """
    mb = memory_bytes // (1024 * 1024)

    def size(megabytes: int) -> str:  # as PostgreSQL shows it, so a rerun sees no change
        return f"{megabytes // 1024}GB" if megabytes % 1024 == 0 else f"{megabytes}MB"

    return {
        "shared_buffers": size(max(128, min(mb // 4 // 128 * 128, 2048))),
        "effective_cache_size": size(max(256, mb // 2 // 1024 * 1024)),
        "work_mem": "32MB",
        "maintenance_work_mem": size(max(64, min(mb // 16 // 64 * 64, 1024))),
        "max_wal_size": "4GB",
        "checkpoint_timeout": "15min",
        "synchronous_commit": "off",
        "wal_level": "minimal",
        "max_wal_senders": "0",
        "random_page_cost": "1.1",
        "jit": "off",
    }


def _tune_embedded(server: Any) -> None:
    """Apply `embedded_settings` once (ALTER SYSTEM), restarting the server if needed."""
    wanted = embedded_settings(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    changed = alter_system(str(server.get_uri()), wanted)
    if not changed:
        return
    from pgserver import _commands, utils  # deferred, as above

    logger.info("restarting the embedded PostgreSQL for its settings: %s", changed)
    _commands.pg_ctl(  # type: ignore[attr-defined]
        ["-w", "-m", "fast", "-l", str(server.log), "restart"],
        pgdata=server.pgdata, user=server.system_user, timeout=60)
    server._postmaster_info = utils.PostmasterInfo.read_from_pgdata(server.pgdata)
