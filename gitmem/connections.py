"""One client of the socket server: a reader thread that parses and runs its requests
and a sender thread that writes the answers the socket did not take at once.

Limits that keep one client from holding the daemon's memory or its connections:
- unread answers: at most `MAX_OUTBOX` answers or `MAX_OUTBOX_BYTES` of them queued;
  past either the connection is closed;
- a client that takes none of an answer's bytes for `SEND_TIMEOUT` seconds is closed
  (the kernel's send timeout, SO_SNDTIMEO), half-closed or not: a connection counts
  towards the daemon's limit until both of its threads have ended;
- a batch: at most `MAX_BATCH_ITEMS` requests, and once its answers pass
  `MAX_BATCH_ANSWER_BYTES` the rest of its requests are not run but answered BUSY;
- at the connection limit, the connection idle longest (no request in hand, nothing
  to send, no byte received) for more than `ServerOptions.idle_evict_s` seconds (10)
  makes room for a new one; whether it is idle is decided under its `_state` lock,
  which its reader takes to start a request, so a request it has just read is either
  run and answered, or (the connection closed first) not run at all.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import orjson

from gitmem.errors import json_kind, json_problem
from gitmem.rpc import (
    BUSY,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SHUTTING_DOWN,
    Fault,
    parse_request,
    response,
)

if TYPE_CHECKING:
    from gitmem.records import Event
    from gitmem.server import Server

logger = logging.getLogger(__name__)

MAX_OUTBOX = 10000              # answers queued for a client that does not read them,
MAX_OUTBOX_BYTES = 64 << 20     # or their bytes: past either the connection is closed
SEND_TIMEOUT = 30               # seconds a client may take none of an answer's bytes
MAX_BATCH_ITEMS = 10000         # requests in one batch
MAX_BATCH_ANSWER_BYTES = 64 << 20  # a batch's answers; the requests after are not run
IDLE_EVICT_S = 10.0             # idle this long, a connection makes room at the limit
                                # (ServerOptions.idle_evict_s: this by default)
_SHOWN_NAME = 100               # characters of an unknown method's name quoted back


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


class _Received(io.RawIOBase):
    """The socket's bytes for the reader's buffer, marking the connection active at
    each read that brings some: a client still sending a long request is not idle
    (only whole lines were counted, so one uploading a 200 KB request slowly was
    closed as idle, halfway through)."""

    def __init__(self, sock: socket.socket, conn: Connection) -> None:
        super().__init__()
        self._recv_into = sock.recv_into
        self._conn = conn

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        received = self._recv_into(buffer)
        if received:
            self._conn.last_active = time.monotonic()
        return received


class Connection:
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
        self._state = threading.Lock()  # `_closed` set, a line's run started: one at a time
        self._threads_left = 2
        self._threads_lock = threading.Lock()
        self._handling = 0  # lines being run (a batch's record_event calls: `_pending`)
        self.last_active = time.monotonic()  # bytes received, a line run or an answer sent

    def start(self) -> None:
        """Start the reader and sender threads; a send that moves no byte for
        `SEND_TIMEOUT` seconds fails (the sender then closes the connection)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                             struct.pack("ll", SEND_TIMEOUT, 0))
        threading.Thread(target=self._read_loop, name=f"gitmem-conn-{self.number}",
                         daemon=True).start()
        threading.Thread(target=self._send_loop, name=f"gitmem-send-{self.number}",
                         daemon=True).start()

    # ---- sending

    def send(self, message: Any) -> None:
        """Answer: straight onto the socket when it takes it all now, else via the sender."""
        self.send_encoded(encode(message))

    def send_encoded(self, data: bytes) -> None:
        """`send` of an answer encoded already (one line)."""
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
                    self.last_active = time.monotonic()
                    return
                data = data[sent:]
            if self._queued > MAX_OUTBOX or self._queued_bytes > MAX_OUTBOX_BYTES:
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
                self.last_active = time.monotonic()
                with self._send_lock:
                    self._queued -= 1
                    self._queued_bytes -= len(data)
        except BlockingIOError:  # SO_SNDTIMEO: it reads nothing (half-closed, stopped)
            logger.warning("connection %d read none of its answers for %d s; closing it",
                           self.number, SEND_TIMEOUT)
        except OSError:
            pass  # the client went away; the reader notices too
        finally:
            self.close()
            self._thread_done()

    def _thread_done(self) -> None:
        with self._threads_lock:
            self._threads_left -= 1
            last = self._threads_left == 0
        if last:  # counted until now: a sender stuck on a client that never reads too
            self.sock.close()
            self.server.forget(self)

    def idle_for(self, now: float) -> float:
        """Seconds since this connection last did anything (received a byte, ran a
        line, sent an answer); 0 while it has a request in hand or answers to send."""
        if self._handling or self._pending or self._queued:
            return 0.0
        return now - self.last_active

    def close_if_idle(self, limit: float) -> bool:
        """Close the connection if it is idle for more than `limit` seconds, decided
        under the lock its reader takes to start running a line: a line read by then
        is not run (its client reads end-of-file, nothing done), one whose run started
        keeps the connection."""
        with self._state:
            if self._closed or self.idle_for(time.monotonic()) <= limit:
                return False
            self._closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        return True

    def close(self) -> None:
        """Shut the socket down both ways (the threads then end)."""
        with self._state:
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
        reader = io.BufferedReader(_Received(self.sock, self))
        try:
            while not self._closed:
                line = reader.readline(limit + 1)
                if not line:
                    break
                if not line.endswith(b"\n") and self.server.stopping:  # cut by the stop
                    self.send(response(None, error={
                        "code": SHUTTING_DOWN, "message": "the daemon is shutting down; "
                        "nothing was written (the request was not received whole)"}))
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
                    with self._state:  # not while an evictor decides it is idle
                        if self._closed:  # closed meanwhile (idle): not run, not answered
                            break
                        self._handling += 1
                    try:
                        self._handle_line(line)
                    finally:
                        self._handling -= 1
                        self.last_active = time.monotonic()
        except OSError:
            pass
        finally:
            self._wait_writes()
            self.outbox.put(None)
            reader.close()
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
        if len(messages) > MAX_BATCH_ITEMS:
            self.send(response(None, error={
                "code": INVALID_REQUEST, "message": f"invalid request: a batch of "
                f"{len(messages)} requests; at most {MAX_BATCH_ITEMS} in one (none was run)",
                "data": {"max_batch_items": MAX_BATCH_ITEMS}}))
            return
        total = [0]  # bytes of the answers so far (a record_event's come from the writer)
        lock = threading.Lock()
        results: list[Future[bytes | None]] = []
        for message in messages:
            done: Future[bytes | None] = Future()
            results.append(done)
            with lock:  # past the limit: answered, not run (the answers so far are enough)
                run = total[0] <= MAX_BATCH_ANSWER_BYTES

            def answered(answer: Any, done: Future[bytes | None] = done) -> None:
                data = None if answer is None else encode(answer)[:-1]
                with lock:
                    total[0] += len(data or b"")
                done.set_result(data)
            self._handle_request(message, answered, in_batch=True, run=run)
        parts = [data for data in (f.result() for f in results) if data is not None]
        if parts:
            self.send_encoded(b"[" + b",".join(parts) + b"]\n")

    def _handle_request(self, message: Any, answer: Callable[[Any], None],
                        *, in_batch: bool, run: bool = True) -> None:
        """Run one request; `answer` gets its response (None for a notification).
        Not `run`: answered BUSY (a batch whose answers are too large already)."""
        reply = answer if in_batch else self._send_some
        try:
            request_id, method, params = parse_request(message)
        except Fault as exc:
            reply(response(None, error=self.server.error_object(exc)))
            return
        notification = "id" not in message  # JSON-RPC: never answered, not even errors
        try:
            if not run:
                raise Fault(BUSY, f"not run: the batch's answers before it passed "
                            f"{MAX_BATCH_ANSWER_BYTES >> 20} MiB; send it again alone or in "
                            "a smaller batch", {"max_batch_answer_bytes": MAX_BATCH_ANSWER_BYTES})
            if method == "record_event":
                self._record(request_id, params, notification, reply)
                return
            handler = self.server.methods.table.get(method)
            if handler is None:
                shown = method if len(method) <= _SHOWN_NAME else method[:_SHOWN_NAME] + "…"
                raise Fault(METHOD_NOT_FOUND, f"method not found: {shown!r}; methods: "
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
