"""The daemon's socket server: newline-delimited JSON-RPC 2.0 on `.gitmem/gitmem.sock`.

Each connection has a reader thread (parses requests, runs them) and a sender
thread (writes responses), so a slow or broken client never holds up another.
`record_event` calls from every connection meet in one writer thread
(`GroupWriter`) that appends each batch with a single `record_many` — one
write and one fsync per day file — and answers a call only once its line is
durable. Any other method on a connection first waits for that connection's
own writes (read-your-writes), then runs in its reader thread.
"""

from __future__ import annotations

import contextlib
import json
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

import orjson

from gitmem.client import socket_address
from gitmem.errors import (
    DaemonError,
    FormatError,
    GitmemError,
    PrivacyError,
    json_kind,
    json_problem,
)
from gitmem.rpc import (
    BUSY,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SHUTTING_DOWN,
    Fault,
    Methods,
    error_object,
    parse_request,
    response,
)

if TYPE_CHECKING:
    from gitmem.memory import Memory
    from gitmem.records import Event

logger = logging.getLogger(__name__)


_MAX_OUTBOX = 10000             # answers queued for a client that does not read them,
_MAX_OUTBOX_BYTES = 64 << 20    # or their bytes: past either the connection is closed


@dataclass(frozen=True)
class ServerOptions:
    """Limits of the socket server."""

    max_request_bytes: int = 16 * 1024 * 1024
    max_connections: int = 256
    max_batch: int = 2048


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


# --------------------------------------------------------------------------- connections


def encode(message: Any) -> bytes:
    """An answer as one line of JSON. orjson encodes a 200 KB ACB in a twentieth of the
    standard library's time, but refuses what a request may carry back into its answer
    (an id or a `max_tokens` beyond 64 bits, an unpaired surrogate in a name it echoes):
    those are made well-formed first, and such an integer goes in as a placeholder
    string that its digits then replace (the bundle's pieces are encoded already, as
    orjson Fragments, which only orjson writes)."""
    try:
        return orjson.dumps(message, default=str, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # orjson.JSONEncodeError is one
        pass
    wide: dict[str, int] = {}
    encoded = orjson.dumps(_well_formed(message, wide), default=str,
                           option=orjson.OPT_APPEND_NEWLINE)
    for placeholder, number in wide.items():
        encoded = encoded.replace(b'"' + placeholder.encode() + b'"', str(number).encode(), 1)
    return encoded


_INT64 = range(-(1 << 63), 1 << 64)  # what orjson writes: int64 and uint64


def _well_formed(value: Any, wide: dict[str, int]) -> Any:
    """`value` with every unpaired surrogate in its strings replaced (by `?`), so that
    its JSON is UTF-8 any decoder takes, and every integer orjson cannot write put in
    `wide` under a placeholder that stands in for it."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {_well_formed(k, wide): _well_formed(v, wide) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_well_formed(v, wide) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and value not in _INT64:
        placeholder = f"gitmem-wide-int-{os.urandom(8).hex()}"
        wide[placeholder] = value
        return placeholder
    return value


class _Connection:
    """One client: a reader thread that runs requests and a sender thread."""

    def __init__(self, server: Server, sock: socket.socket, number: int) -> None:
        self.server = server
        self.sock = sock
        self.number = number
        self.outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._send_lock = threading.Lock()
        self._queued = 0  # answers waiting in the outbox (they go out in order)
        self._queued_bytes = 0
        self._pending = 0
        self._pending_cond = threading.Condition()
        self._closed = False
        self._threads_left = 2
        self._threads_lock = threading.Lock()

    def start(self) -> None:
        """Start the reader and sender threads."""
        threading.Thread(target=self._read_loop, name=f"gitmem-conn-{self.number}",
                         daemon=True).start()
        threading.Thread(target=self._send_loop, name=f"gitmem-send-{self.number}",
                         daemon=True).start()

    # ---- sending

    def send(self, message: Any) -> None:
        """Answer: straight onto the socket when it takes it all now, else via the sender."""
        data = encode(message)
        with self._send_lock:
            if self._queued == 0:  # nothing ahead of it: no thread hand-off needed
                try:
                    sent = self.sock.send(data, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    sent = 0
                except OSError:
                    self.close()
                    return
                if sent == len(data):
                    return
                data = data[sent:]
            if self._queued > _MAX_OUTBOX or self._queued_bytes > _MAX_OUTBOX_BYTES:
                logger.warning("connection %d does not read its answers; closing it",
                               self.number)
                self.close()
                return
            self._queued += 1
            self._queued_bytes += len(data)
            self.outbox.put(data)

    def _send_loop(self) -> None:
        try:
            while True:
                data = self.outbox.get()
                if data is None:
                    break
                self.sock.sendall(data)
                with self._send_lock:
                    self._queued -= 1
                    self._queued_bytes -= len(data)
        except OSError:
            pass  # the client went away; the reader notices too
        finally:
            self.close()
            self._thread_done()

    def _thread_done(self) -> None:
        with self._threads_lock:
            self._threads_left -= 1
            last = self._threads_left == 0
        if last:
            self.sock.close()

    def close(self) -> None:
        """Shut the socket down both ways (the threads then end)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def stop_reading(self) -> None:
        """Take no new requests; answers to those in flight still go out."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RD)

    # ---- reading

    def _read_loop(self) -> None:
        limit = self.server.options.max_request_bytes
        reader = self.sock.makefile("rb")
        try:
            while not self._closed:
                line = reader.readline(limit + 1)
                if not line:
                    break
                if len(line) > limit and not line.endswith(b"\n"):  # the newline is free
                    self.send(response(None, error={
                        "code": INVALID_REQUEST,
                        "message": f"request larger than {limit} bytes; send large tool "
                                   "output as an excerpt or split the batch",
                        "data": {"max_request_bytes": limit}}))  # the CLI then works locally
                    while line and not line.endswith(b"\n"):  # skip the rest of it
                        line = reader.readline(limit + 1)
                    continue
                if line.strip():
                    self._handle_line(line)
        except OSError:
            pass
        finally:
            self._wait_writes()
            self.outbox.put(None)
            reader.close()
            self.server.forget(self)
            self._thread_done()

    def _handle_line(self, line: bytes) -> None:
        try:
            # as a record's line is read: a key given twice (`"sensitivity": "high",
            # "sensitivity": "none"`) is refused, not read as its last value; NaN too
            message = self.server.decode(line.decode("utf-8"))  # bytes: UTF-16 guessed too
        except ValueError as exc:  # not JSON, not UTF-8, or an integer json.loads refuses
            said = Fault(PARSE_ERROR, f"parse error: {json_problem(exc)}")  # it may quote a key
            self.send(response(None, error=self.server.error_object(said)))
            return
        except RecursionError:  # else it ends this connection's reader, unanswered
            self.send(response(None, error={"code": PARSE_ERROR, "message": "parse error: "
                                             "nested too deeply"}))
            return
        if isinstance(message, list):
            self._handle_batch(message)
            return
        self._handle_request(message, self._send_some, in_batch=False)

    def _handle_batch(self, messages: list[Any]) -> None:
        if not messages:
            self.send(response(None, error={"code": INVALID_REQUEST,
                                             "message": "invalid request: empty batch"}))
            return
        results: list[Future[Any]] = []
        for message in messages:
            done: Future[Any] = Future()
            results.append(done)
            self._handle_request(message, done.set_result, in_batch=True)
        responses = [f.result() for f in results]
        answered = [r for r in responses if r is not None]
        if answered:
            self.send(answered)

    def _handle_request(self, message: Any, answer: Callable[[Any], None],
                        *, in_batch: bool) -> None:
        """Run one request; `answer` gets its response (None for a notification)."""
        reply = answer if in_batch else self._send_some
        try:
            request_id, method, params = parse_request(message)
        except Fault as exc:
            reply(response(None, error=self.server.error_object(exc)))
            return
        notification = "id" not in message  # JSON-RPC: never answered, not even errors
        try:
            if method == "record_event":
                self._record(request_id, params, notification, reply)
                return
            handler = self.server.methods.table.get(method)
            if handler is None:
                raise Fault(METHOD_NOT_FOUND, f"method not found: {method!r}; methods: "
                            f"{', '.join(sorted(self.server.method_names()))}")
            self._wait_writes()
            result = handler(params)
        except Exception as exc:  # every failure becomes an error response
            error = self.server.error_object(exc)
            reply(None if notification else response(request_id, error=error))
            return
        reply(None if notification else response(request_id, result=result))

    def _send_some(self, answer: Any) -> None:
        if answer is not None:
            self.send(answer)

    def _record(self, request_id: Any, params: Any, notification: bool,
                reply: Callable[[Any], None]) -> None:
        if not isinstance(params, dict):
            raise Fault(INVALID_PARAMS, "record_event takes the event's fields as an object "
                        f"(kind, content, session_id, ...), got {json_kind(params)}")
        with self._pending_cond:
            self._pending += 1

        def done(future: Future[Event]) -> None:
            try:
                answer_with(future)
            finally:  # whatever answering did, the write is not pending any more
                with self._pending_cond:
                    self._pending -= 1
                    self._pending_cond.notify_all()

        def answer_with(future: Future[Event]) -> None:
            exc = future.exception()
            answer: dict[str, Any] | None = None
            if notification:
                pass
            elif exc is not None:
                answer = response(request_id, error=self.server.error_object(exc))
            else:
                answer = response(request_id, result={"event_id": future.result().id})
            reply(answer)

        self.server.writer.submit(params, self.number).add_done_callback(done)

    def _wait_writes(self) -> None:
        with self._pending_cond:
            while self._pending:
                self._pending_cond.wait()


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
        self._connections: set[_Connection] = set()
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
        conn = _Connection(self, sock, self.accepted)
        with self._lock:
            crowded = len(self._connections) >= self.options.max_connections
            if not crowded:
                self._connections.add(conn)
        if crowded:
            with contextlib.suppress(OSError):
                sock.sendall(json.dumps(response(None, error={
                    "code": BUSY, "message": f"too many connections "
                    f"({self.options.max_connections}); retry later"})).encode() + b"\n")
            sock.close()
            return
        conn.start()

    def forget(self, conn: _Connection) -> None:
        """A connection has ended."""
        with self._lock:
            self._connections.discard(conn)

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
