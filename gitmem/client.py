"""The daemon's client: JSON-RPC 2.0 calls over the store's Unix socket.

One request per line, one response per line. `Client.call` raises
`DaemonError` when no daemon answers and `RpcError` when the daemon answers
with an error; `local_error` turns such an answer back into the exception the
same work would have raised locally, so the CLI prints the same message either
way.
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import math
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from gitmem import errors
from gitmem.config import Config, redact_dsn
from gitmem.errors import DaemonError, FormatError, GitmemError, RequestNotSent, RpcError
from gitmem.rpc import BUSY, INVALID_REQUEST

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT = 0.5
CALL_TIMEOUT = 120.0
# A command asks the daemon which store it serves before anything else (no database
# round trip: a fraction of a millisecond); a daemon that does not answer that in time
# is stopped (SIGSTOP) or stuck, and the command works without it: nothing was asked of
# it, so nothing it does once it resumes is done twice.
STATUS_TIMEOUT = 5.0
# The methods that write: one the daemon was sent but did not answer may still be done.
WRITES = frozenset({"record_event", "record_events", "decide", "task", "create_handoff"})
MAX_SOCKET_PATH = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux
_NOT_LISTENING = (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK, errno.ENOTDIR)
_CLOSED_BY_PEER = (errno.EPIPE, errno.ECONNRESET)  # a send on a connection the daemon closed


@contextmanager
def socket_address(path: Path) -> Iterator[str]:
    """An address for `path` that fits AF_UNIX's 107-byte limit.

    A longer path is reached through `/proc/self/fd/N/<name>`, N being an open
    descriptor of its directory (Linux); elsewhere it is a clear DaemonError.
    """
    text = str(path)
    if len(os.fsencode(text)) <= MAX_SOCKET_PATH:
        yield text
        return
    if not os.path.isdir("/proc/self/fd"):
        raise DaemonError(f"socket path {text} is {len(os.fsencode(text))} bytes, longer than "
                          f"the {MAX_SOCKET_PATH} a Unix socket allows; move the store to a "
                          "shorter path")
    try:
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        raise DaemonError(f"no daemon state directory {path.parent}") from None
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


class Client:
    """A connection to one daemon; reusable for many calls, not thread-safe."""

    def __init__(self, socket_path: Path, *, connect_timeout: float = CONNECT_TIMEOUT,
                 timeout: float | None = CALL_TIMEOUT) -> None:
        self.socket_path = socket_path
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._reader: Any = None
        self._ids = itertools.count(1)

    def connect(self) -> Client:
        """Open the connection; DaemonError when nothing listens on the socket. Where
        the daemon's queue of connections it has not accepted yet is full (a burst of
        clients), the connection is tried again until `connect_timeout`."""
        if self._sock is not None:
            return self
        deadline = time.monotonic() + self.connect_timeout
        sock = self._attempt()
        while sock is None:
            if time.monotonic() >= deadline:
                raise DaemonError(f"the daemon at {self.socket_path} did not accept a "
                                  f"connection within {self.connect_timeout}s (its queue of "
                                  "connections is full); see .gitmem/daemon.log")
            time.sleep(0.01)
            sock = self._attempt()
        sock.settimeout(self.timeout)
        self._sock = sock
        self._reader = sock.makefile("rb")
        return self

    def _attempt(self) -> socket.socket | None:
        """A socket connected to the daemon; None where its queue is full (EAGAIN)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.connect_timeout)
        try:
            with socket_address(self.socket_path) as address:
                sock.connect(address)
        except BlockingIOError:
            sock.close()
            return None
        except TimeoutError:
            sock.close()
            raise DaemonError(f"the daemon at {self.socket_path} did not accept a connection "
                              f"within {self.connect_timeout}s; see .gitmem/daemon.log") from None
        except OSError as exc:
            sock.close()
            state = self.socket_path.parent
            if state.exists() and not state.is_dir():  # `daemon start` would be refused
                raise DaemonError(f"no daemon can answer on {self.socket_path}: {state} is a "
                                  "file, not a directory; move it away to run one") from None
            if exc.errno in _NOT_LISTENING:
                raise DaemonError(f"no daemon answers on {self.socket_path}; start one with "
                                  "`gitmem daemon start`") from None
            raise DaemonError(f"cannot connect to {self.socket_path}: {exc.strerror}") from None
        except BaseException:
            sock.close()
            raise
        return sock

    def set_timeout(self, timeout: float | None) -> None:
        """How long the next answers may take (None: no limit)."""
        self.timeout = timeout
        if self._sock is not None:
            self._sock.settimeout(timeout)

    def close(self) -> None:
        """Close the connection (a no-op when closed)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Client:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_line(self, data: bytes, *, again: bool = False) -> None:
        """Send raw bytes (a request line, or anything, for tests of bad input).
        `again`: where the daemon had closed the connection before the socket took
        any of them (it closes one idle for 10 s when it has too many), connect again
        once and send them on the new connection: the daemon cannot have seen any of
        the request, and (`call` waits for each answer) owes nothing on the old one."""
        self.connect()
        assert self._sock is not None
        sent = 0
        try:
            sent = self._sock.send(data)
            if sent < len(data):
                self._sock.sendall(memoryview(data)[sent:])
        except OSError as exc:
            said = self._parting_answer()
            self.close()
            if said is not None:  # turned away (too many connections): it says so
                result_of(said)
            lost = f"lost the connection to {self.socket_path}: {exc}"
            if not (again and sent == 0 and exc.errno in _CLOSED_BY_PEER):
                raise RequestNotSent(lost) from None
            logger.info("%s before sending anything (the daemon closes a connection idle "
                        "for 10 s when it has too many): connecting again", lost)
            try:
                self.connect()
            except DaemonError as again_exc:
                raise RequestNotSent(f"{lost}, before sending anything; connecting again: "
                                     f"{again_exc}") from None
            self.send_line(data)

    def _parting_answer(self) -> dict[str, Any] | None:
        """The error the daemon sent before it closed a connection it would not serve
        (-32005, too many connections), where the send failed because it closed: that
        answer, not the broken pipe, says why."""
        try:
            assert self._sock is not None and self._reader is not None
            self._sock.settimeout(0.5)
            found = orjson.loads(self._reader.readline())
        except (OSError, ValueError, AssertionError):
            return None
        if isinstance(found, dict) and found.get("id") is None and "error" in found:
            return found
        return None

    def read_response(self) -> Any:
        """The next response object (or batch list) from the daemon."""
        if self._reader is None:
            raise DaemonError("not connected")
        try:
            line = self._reader.readline()
        except TimeoutError:
            self.close()
            raise DaemonError(f"the daemon at {self.socket_path} did not answer within "
                              f"{self.timeout}s") from None
        except OSError as exc:
            self.close()
            raise DaemonError(f"lost the connection to {self.socket_path}: {exc}") from None
        if not line:
            self.close()
            raise DaemonError(f"the daemon at {self.socket_path} closed the connection "
                              "before answering; see .gitmem/daemon.log")
        try:
            # orjson: a 135 KB ACB parses in about half the stdlib's time
            return orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            self.close()
            raise DaemonError(f"the daemon sent a malformed response: {exc}") from None

    def call(self, method: str, params: Any = None) -> Any:
        """Call `method` with `params`; its result, or RpcError."""
        request_id = next(self._ids)
        request: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            request["params"] = params
        try:
            line = json.dumps(request, ensure_ascii=False, allow_nan=False).encode() + b"\n"
        except UnicodeEncodeError as exc:  # the local work names the field that holds it
            raise RequestNotSent(
                f"the {method} request holds {exc.object[exc.start:exc.end]!r}, a lone "
                "surrogate, which JSON over UTF-8 cannot carry; nothing was sent") from None
        except ValueError:  # NaN or Infinity: refused here naming the field, as locally
            field, value = _non_finite(params)
            raise errors.ValidationError(f"{value} is not a JSON number (NaN and Infinity "
                                         "are not); nothing was sent", field=field) from None
        self.send_line(line, again=True)
        while True:
            response = self.read_response()
            if isinstance(response, dict) and response.get("id") == request_id:
                return result_of(response)
            if isinstance(response, dict) and response.get("id") is None and "error" in response:
                return result_of(response)  # the daemon could not read our request at all


def _non_finite(value: Any, path: str = "") -> tuple[str, float]:
    """Where in `value` the first NaN or infinity is (`content.confidence`), and it."""
    if isinstance(value, float) and not math.isfinite(value):
        return path or "params", value
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, list | tuple) else ())
    for key, item in items:
        found = _non_finite(item, f"{path}.{key}" if path else str(key))
        if found[0]:
            return found
    return "", 0.0


def result_of(response: dict[str, Any]) -> Any:
    """The `result` of a response object, or its `error` as RpcError."""
    if "error" in response:
        error = response["error"] if isinstance(response["error"], dict) else {}
        raise RpcError(int(error.get("code", -32603)), str(error.get("message", "")),
                       error.get("data"))
    return response.get("result")


def call(socket_path: Path, method: str, params: Any = None, *,
         timeout: float | None = CALL_TIMEOUT) -> Any:
    """One call on a fresh connection."""
    with Client(socket_path, timeout=timeout) as client:
        return client.call(method, params)


def call_if_running(socket_path: Path, method: str, params: Any = None, *,
                    timeout: float | None = CALL_TIMEOUT, serving: Config | None = None,
                    same_index: bool = False) -> Any | None:
    """The daemon's answer, or None when the caller is to work without it: no daemon
    listens on `socket_path`, it does not answer a status probe within STATUS_TIMEOUT,
    it serves another store than `serving`'s or (`same_index`) another index (schema
    or database), or it turned the request away unread. In each case it was asked
    nothing, so nothing is done twice."""
    if not socket_path.exists():
        return None
    client = Client(socket_path, timeout=_probe_timeout(timeout))
    try:
        client.connect()
    except DaemonError:
        return None
    with client:
        try:
            reason = _not_to_ask(client, serving, same_index)
            if reason is not None:
                logger.warning("%s: working without it", reason)
                return None
            client.set_timeout(timeout)
            return _asked(client, method, params)
        except RequestNotSent:
            return None  # it never had the request: done here instead
        except RpcError as exc:
            if exc.code == BUSY or too_large(exc):
                return None  # refused unread (too many connections, too long)
            raise


def ask(socket_path: Path, method: str, params: Any = None, *,
        timeout: float | None = CALL_TIMEOUT, serving: Config | None = None,
        same_index: bool = False) -> Any:
    """`method`'s answer (`gitmem call`), asked only once the daemon has answered a
    status probe in time: a daemon stopped with SIGSTOP is never sent a write it would
    do on SIGCONT, after the caller gave up; nor is one serving another store than
    `serving`'s, or (`same_index`) another index. DaemonError when it is not asked."""
    with Client(socket_path, timeout=_probe_timeout(timeout)) as client:
        reason = _not_to_ask(client, serving, same_index)
        if reason is not None:
            raise DaemonError(f"{reason}; nothing was sent to it (`gitmem daemon status` "
                              "says whether it runs)")
        client.set_timeout(timeout)
        return _asked(client, method, params)


def _probe_timeout(timeout: float | None) -> float:
    return STATUS_TIMEOUT if timeout is None else min(timeout, STATUS_TIMEOUT)


def _not_to_ask(client: Client, serving: Config | None, same_index: bool) -> str | None:
    """Why not to send this daemon a request (None: send it): `daemon_status`, its
    cheapest call, unanswered in the client's timeout (stopped, stuck), refused, or
    naming another store than `serving`'s or (`same_index`) another index."""
    try:
        served = client.call("daemon_status")
    except RpcError as exc:  # too many connections, say: it did nothing
        return f"the daemon at {client.socket_path} refused a status probe ({exc})"
    except DaemonError as exc:  # stopped (SIGSTOP), or stuck: nothing was asked
        return str(exc)
    if serving is None:
        return None
    if served.get("store") != str(serving.store):
        return (f"the daemon on {client.socket_path} serves the store {served.get('store')}, "
                f"not {serving.store}")
    schema, database = index_of(serving)
    if same_index and (served.get("schema"), served.get("database")) != (schema, database):
        return (f"the daemon serves schema {served.get('schema')} on "
                f"{served.get('database')}, not {schema} on {database}")
    return None


def _asked(client: Client, method: str, params: Any) -> Any:
    """`client.call`; a write sent but not answered (a timeout, a connection lost) says
    that the daemon may still do it, and how to check before writing again."""
    try:
        return client.call(method, params)
    except (RequestNotSent, RpcError):
        raise
    except DaemonError as exc:
        if method not in WRITES:
            raise
        raise DaemonError(f"{exc}; it was sent the {method} request and may still carry it "
                          "out (a daemon stopped with SIGSTOP does once it resumes): do not "
                          "simply run it again, or it may be done twice; see first whether "
                          f"it was done ({_how_to_check(params)})") from None


def _how_to_check(params: Any) -> str:
    """Where a person sees whether a write the daemon did not answer was done."""
    ids: list[str] = []
    days: list[str] = []
    if isinstance(params, dict):
        events = params.get("events")
        listed = events if isinstance(events, list) else [params]
        ids = [e["id"] for e in listed if isinstance(e, dict) and isinstance(e.get("id"), str)]
        days = sorted({e["ts"][:10] for e in listed
                       if isinstance(e, dict) and isinstance(e.get("ts"), str)})
    if ids:
        more = f" (and {len(ids) - 1} more)" if len(ids) > 1 else ""
        return f"look for {ids[0]}{more} in the store's events/ files"
    files = (f"the day files of {', '.join(days[:3])}{' ...' if len(days) > 3 else ''}"
             if days else "today's file")
    return (f"the last lines of {files} in the store's events/, or `gitmem status` once "
            "the daemon answers")


def index_of(config: Config) -> tuple[str, str]:
    """The schema and database (DSN without its password, or "embedded") a config
    names: what a daemon's `daemon_status` reports it serves."""
    return config.schema, "embedded" if config.dsn is None else redact_dsn(config.dsn)


def too_large(exc: RpcError) -> bool:
    """Whether the daemon refused a request for its length alone (longer than its
    `--max-request-bytes`): it read none of it, so nothing was done."""
    return (exc.code == INVALID_REQUEST and isinstance(exc.data, dict)
            and "max_request_bytes" in exc.data)


def local_error(exc: RpcError) -> GitmemError:
    """The exception the daemon caught, rebuilt from the error's `data.type`."""
    data = exc.data if isinstance(exc.data, dict) else {}
    cls = getattr(errors, str(data.get("type", "")), None)
    if not (isinstance(cls, type) and issubclass(cls, GitmemError)):
        return exc
    if issubclass(cls, FormatError):
        others = [cls.from_dict(other) for other in data.get("others") or ()]
        return cls(str(data.get("detail", "")), path=str(data.get("path") or ""),
                   line=data.get("line"), field=data.get("field"), others=others)
    if cls in (RpcError, errors.VerifyError):
        return exc
    return cls(str(data.get("message", "")))
