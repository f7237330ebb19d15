"""The daemon's socket server: newline-delimited JSON-RPC 2.0 on `.gitmem/gitmem.sock`.

Each connection (gitmem/connections.py) has a reader thread (parses requests, runs
them) and a sender thread (writes responses), so a slow or broken client never holds
up another.
`record_event` calls from every connection meet in one writer thread
(`GroupWriter`) that appends each batch with a single `record_many` — one
write and one fsync per day file — and answers a call only once its line is
durable. Any other method on a connection first waits for that connection's
own writes (read-your-writes), then runs in its reader thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem.client import socket_address
from gitmem.connections import IDLE_EVICT_S, Connection, encode
from gitmem.errors import (
    DaemonError,
    FormatError,
    GitmemError,
    PrivacyError,
)
from gitmem.rpc import (
    BUSY,
    INTERNAL_ERROR,
    SHUTTING_DOWN,
    Fault,
    Methods,
    error_object,
    response,
)

if TYPE_CHECKING:
    from gitmem.memory import Memory
    from gitmem.records import Event

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerOptions:
    """Limits of the socket server."""

    max_request_bytes: int = 16 * 1024 * 1024
    max_connections: int = 256
    max_batch: int = 2048
    idle_evict_s: float = IDLE_EVICT_S  # idle this long, a connection makes room at the limit


# --------------------------------------------------------------------------- group commit


def _in_turn(waiting: dict[Any, deque[tuple[Any, Future[Event]]]],
             limit: int) -> list[tuple[Any, Future[Event]]]:
    """Up to `limit` events, an equal share from each source in turn (each source's in
    its order); sources left with none are dropped from `waiting`."""
    batch: list[tuple[Any, Future[Event]]] = []
    while waiting and len(batch) < limit:
        share = max(1, (limit - len(batch)) // len(waiting))
        for source in list(waiting):
            events = waiting[source]
            batch.extend(events.popleft()
                         for _ in range(min(share, len(events), limit - len(batch))))
            if not events:
                del waiting[source]
            if len(batch) == limit:
                break
    return batch


class GroupWriter:
    """One thread that appends concurrent `record_event` calls in batches.

    Each batch is one `Memory.record_many` (validated whole, one write and one
    fsync per day file, all or nothing). If it fails, whatever the reason, the
    batch is split until the event that fails is alone: only its caller gets
    an error, and every other event is written and answered.

    A batch takes the events waiting from each connection in turn (each one's in
    the order it sent them): a client's JSON-RPC batch of 20,000 events no longer
    goes whole before another client's single event, which waited 8 s behind it.
    """

    def __init__(self, memory: Memory, *, max_batch: int = 2048,
                 on_written: Callable[[list[Event]], None] | None = None,
                 before_write: Callable[[], None] | None = None) -> None:
        self.memory = memory
        self.max_batch = max_batch
        self.on_written = on_written
        self.before_write = before_write
        self._queue: queue.SimpleQueue[tuple[Any, Future[Event], Any] | None] = (
            queue.SimpleQueue())
        self._thread = threading.Thread(target=self._run, name="gitmem-writer", daemon=True)
        self._submit_lock = threading.Lock()
        self._stopped = False
        self.batches = 0
        self.events = 0

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    def stop(self) -> None:
        """Write what is queued, then stop."""
        with self._submit_lock:
            if self._stopped:
                return
            self._stopped = True
            self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join()

    def submit(self, obj: Any, source: Any = None) -> Future[Event]:
        """Queue one event of `source` (its connection); the future resolves once its
        line is durable."""
        future: Future[Event] = Future()
        with self._submit_lock:
            if self._stopped:
                future.set_exception(Fault(SHUTTING_DOWN, "the daemon is shutting down; "
                                           "nothing was written"))
            else:
                self._queue.put((obj, future, source))
        return future

    def _run(self) -> None:
        waiting: dict[Any, deque[tuple[Any, Future[Event]]]] = {}  # by source, in order
        stopping = False
        while not (stopping and not waiting):
            block = not waiting  # idle: wait for one; then everything queued by now, so
            while not stopping:  # that each source has a turn
                try:
                    item = self._queue.get(block=block)
                except queue.Empty:
                    break
                block = False
                if item is None:
                    stopping = True
                else:
                    waiting.setdefault(item[2], deque()).append(item[:2])
            if waiting:
                self._write(_in_turn(waiting, self.max_batch))

    def _write(self, batch: list[tuple[Any, Future[Event]]]) -> None:
        written: list[Event] = []
        try:
            if self.before_write is not None:
                self.before_write()
        except Exception as exc:  # the policies could not be brought up to date: no write
            logger.error("preparing a batch of %d event(s) failed", len(batch), exc_info=exc)
            for _, future in batch:
                future.set_exception(exc)
        else:
            written = self._record(batch)
        self.batches += 1
        self.events += len(written)
        if written and self.on_written is not None:
            try:
                self.on_written(written)
            except Exception:
                logger.exception("the after-write callback failed")

    def _record(self, batch: list[tuple[Any, Future[Event]]]) -> list[Event]:
        """Record `batch` with one `record_many`, which writes all or nothing. When it
        fails, each half is recorded on its own, down to single events: whatever one
        caller's event raises (bad input, a clash, a bug) fails that call alone, and
        the others are still written in as few groups as it allows."""
        if len(batch) == 1:
            obj, future = batch[0]
            try:
                event = self.memory.record(obj)
            except Exception as exc:
                future.set_exception(_own_error(exc))
                return []
            future.set_result(event)
            return [event]
        try:
            events = self.memory.record_many([obj for obj, _ in batch])
        except Exception:
            middle = len(batch) // 2
            return self._record(batch[:middle]) + self._record(batch[middle:])
        for (_, future), event in zip(batch, events, strict=True):
            future.set_result(event)
        return events


def _own_error(exc: Exception) -> Exception:
    """What a caller whose event failed is answered with; what is not its input is logged."""
    if isinstance(exc, FormatError | PrivacyError | Fault):
        return exc
    if isinstance(exc, GitmemError):  # the disk, the store: the daemon's state, not the input
        logger.warning("an event was not written: %s", exc)
        return exc
    logger.error("recording an event failed", exc_info=exc)
    return Fault(INTERNAL_ERROR, f"internal error ({type(exc).__name__}: {exc}); "
                 "see .gitmem/daemon.log")


# --------------------------------------------------------------------------- server


class Server:
    """The listening socket and its connections."""

    def __init__(self, memory: Memory, socket_path: Path, *,
                 sync: Callable[[list[str] | None], dict[str, Any]],
                 daemon_status: Callable[[], dict[str, Any]],
                 options: ServerOptions | None = None,
                 on_written: Callable[[list[Event]], None] | None = None,
                 before_write: Callable[[], None] | None = None) -> None:
        from gitmem.records import decode_json  # the write path's (the CLI's imports spare it)

        self.memory = memory
        self.socket_path = socket_path
        self.options = options or ServerOptions()
        self.decode = decode_json
        self.writer = GroupWriter(memory, max_batch=self.options.max_batch,
                                  on_written=on_written, before_write=before_write)
        self.methods = Methods(memory, sync, daemon_status, before_write)
        self._listener: socket.socket | None = None
        self._wake_r, self._wake_w = os.pipe()
        self._connections: set[Connection] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.accepted = 0
        self.started = time.time()

    def error_object(self, exc: BaseException) -> dict[str, Any]:
        """`rpc.error_object`, redacted by the policies in force."""
        return error_object(exc, self.memory.applied_policies.privacy.redact_message)

    def method_names(self) -> list[str]:
        """Every method this server answers."""
        return ["record_event", *self.methods.table]

    def bind(self) -> None:
        """Create the socket (mode 0600 from the start); replaces a stale socket file."""
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            with socket_address(self.socket_path) as address:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(address)  # the caller holds the pid lock: this one is stale
                listener.bind(address)
        except OSError as exc:
            listener.close()
            raise DaemonError(f"cannot listen on {self.socket_path}: {exc.strerror}") from None
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, 0o600)
        listener.listen(128)
        self._listener = listener
        self.writer.start()

    def serve_forever(self) -> None:
        """Accept connections until `shutdown`."""
        assert self._listener is not None, "bind() first"
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopping.is_set():
                for key, _ in selector.select():
                    if key.fileobj is self._listener:
                        self._accept()

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        sock.setblocking(True)
        self.accepted += 1
        conn = Connection(self, sock, self.accepted)
        idle: Connection | None = None
        limit = self.options.idle_evict_s
        with self._lock:
            crowded = len(self._connections) >= self.options.max_connections
            if crowded:  # the connection idle longest makes room, if idle long enough
                now = time.monotonic()
                idle = max(self._connections, key=lambda c: c.idle_for(now))
                # decided again under its lock: its reader may have a request in hand
                if idle.idle_for(now) > limit and idle.close_if_idle(limit):
                    self._connections.discard(idle)
                    crowded = False
                else:
                    idle = None
            if not crowded:
                self._connections.add(conn)
        if idle is not None:
            logger.info("at %d connections: closing connection %d, idle for over %g s",
                        self.options.max_connections, idle.number, limit)
        if crowded:
            with contextlib.suppress(OSError):
                sock.sendall(encode(response(None, error={
                    "code": BUSY, "message": f"too many connections "
                    f"({self.options.max_connections}); retry later"})))
            sock.close()
            return
        conn.start()

    def forget(self, conn: Connection) -> None:
        """A connection has ended."""
        with self._lock:
            self._connections.discard(conn)

    @property
    def stopping(self) -> bool:
        """Whether `shutdown` was called."""
        return self._stopping.is_set()

    @property
    def connections(self) -> int:
        """Open connections now."""
        with self._lock:
            return len(self._connections)

    def shutdown(self) -> None:
        """Stop accepting, finish queued writes, close connections, remove the socket."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        os.write(self._wake_w, b"x")

    def close(self) -> None:
        """After `serve_forever` returned: release everything."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            conn.stop_reading()
        self.writer.stop()  # answers every write already queued
        deadline = time.monotonic() + 2.0
        while self.connections and time.monotonic() < deadline:
            time.sleep(0.01)
        for conn in conns:
            conn.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
