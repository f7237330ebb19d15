"""The JSON-RPC 2.0 side of the daemon: error codes, request checks, the methods.

Every method takes the request's `params` object and returns a JSON-friendly
result. Errors: the standard codes (-32700 parse error, -32600 invalid
request, -32601 unknown method, -32602 invalid params naming the field), and
for a GitmemError an application code with its message and, in `data`, the
error's type and location so a client can raise the same error locally.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gitmem.errors import (
    DatabaseError,
    FormatError,
    GitmemError,
    NotFoundError,
    PrivacyError,
    StoreError,
    ValidationError,
    json_kind,
)

if TYPE_CHECKING:
    from gitmem.memory import Memory

logger = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
APP_ERROR = -32000             # any other GitmemError
DATABASE_UNAVAILABLE = -32001  # the index cannot be reached; files were still written
PRIVACY_REFUSED = -32002       # the privacy policy refused the write; nothing was written
NOT_FOUND = -32003             # NotFoundError: not in the store (an artifact)
FORMAT_ERROR = -32004          # a file or record that does not parse
BUSY = -32005                  # too many connections, or a client that never reads
SHUTTING_DOWN = -32006
STORE_FAILED = -32007          # StoreError: the store could not be written (disk full, file
                               # too large, I/O error): nothing was written

_ERROR_CODES: tuple[tuple[type[GitmemError], int], ...] = (
    (ValidationError, INVALID_PARAMS), (FormatError, FORMAT_ERROR),
    (PrivacyError, PRIVACY_REFUSED), (DatabaseError, DATABASE_UNAVAILABLE),
    (NotFoundError, NOT_FOUND), (StoreError, STORE_FAILED), (GitmemError, APP_ERROR),
)


class Fault(Exception):
    """A JSON-RPC error to answer with."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def error_object(exc: BaseException,
                 redact: Callable[[str], str] | None = None) -> dict[str, Any]:
    """The JSON-RPC error object for an exception raised while serving a call, every
    text in it through `redact` (`Privacy.redact_message`: a value or a field's name
    it quotes may be a secret)."""
    error = _error_object(exc)
    return error if redact is None else _redacted(error, redact)


def _redacted(value: Any, redact: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _redacted(item, redact) for key, item in value.items()}
    if isinstance(value, list):
        return [_redacted(item, redact) for item in value]
    return value


def _error_object(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, Fault):
        error: dict[str, Any] = {"code": exc.code, "message": exc.message}
        if exc.data is not None:
            error["data"] = exc.data
        return error
    if isinstance(exc, GitmemError):
        code = next(c for cls, c in _ERROR_CODES if isinstance(exc, cls))
        data: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
        if isinstance(exc, FormatError):
            data.update(path=exc.path, line=exc.line, field=exc.field, detail=exc.detail)
            if exc.others:  # a record file's further problems
                data["others"] = [other.to_dict() for other in exc.others]
        return {"code": code, "message": str(exc), "data": data}
    logger.error("internal error while serving a call", exc_info=exc)
    return {"code": INTERNAL_ERROR,
            "message": f"internal error ({type(exc).__name__}: {exc}); see .gitmem/daemon.log"}


# --------------------------------------------------------------------------- params

_KINDS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "list of strings": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "list": lambda v: isinstance(v, list),  # each item checked where it is used
    "list of integers": lambda v: isinstance(v, list) and all(
        isinstance(x, int) and not isinstance(x, bool) for x in v),
}


def checked(method: str, params: Any, spec: dict[str, tuple[str, bool]]) -> dict[str, Any]:
    """`params` checked against `spec` (field -> (kind, required)); -32602 names the field."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise Fault(INVALID_PARAMS, f"{method} takes its params as an object "
                    f"({', '.join(spec) or 'no fields'}), got {json_kind(params)}")
    for key in params:
        if key not in spec:
            raise Fault(INVALID_PARAMS, f"field '{key}': unknown for {method}; expected "
                        f"{', '.join(spec) or 'no fields'}", {"field": key})
    out: dict[str, Any] = {}
    for key, (kind, required) in spec.items():
        value = params.get(key)
        if value is None:
            if required:
                raise Fault(INVALID_PARAMS, f"field '{key}': required by {method}",
                            {"field": key})
            continue
        if not _KINDS[kind](value):
            raise Fault(INVALID_PARAMS, f"field '{key}': expected {_a(kind)}, got "
                        f"{_described(value, kind)}", {"field": key})
        out[key] = value
    return out


def _described(value: Any, kind: str) -> str:
    """What a value that is not of `kind` is: for a list, its first wrong item."""
    if isinstance(value, list) and kind.startswith("list of "):
        for n, item in enumerate(value):
            if not _KINDS[kind.removeprefix("list of ").removesuffix("s")](item):
                return f"a list whose item {n + 1} is {_a(json_kind(item))}"
    return _a(json_kind(value))


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def as_object(method: str, params: Any) -> dict[str, Any]:
    """`params` as an object (absent: empty), or Fault -32602."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise Fault(INVALID_PARAMS, f"{method} takes its params as an object, got "
                    f"{json_kind(params)}")
    return params


# --------------------------------------------------------------------------- methods


Handler = Callable[[Any], Any]


class Methods:
    """The JSON-RPC methods, each a function of its params."""

    def __init__(self, memory: Memory, sync: Callable[[list[str] | None], dict[str, Any]],
                 daemon_status: Callable[[], dict[str, Any]],
                 before_write: Callable[[], None] | None = None) -> None:
        self.memory = memory
        self._sync = sync
        self._daemon_status = daemon_status
        self._before_write = before_write  # a policy edit applies to the very next write
        self.table: dict[str, Handler] = {
            "build_acb": self.build_acb, "query_decisions": self.query_decisions,
            "get_artifact": self.get_artifact, "create_handoff": self.create_handoff,
            "status": self.status, "record_events": self.record_events,
            "decide": self.decide, "task": self.task, "sync": self.sync,
            "daemon_status": self.daemon_status,
        }

    def _prepare_write(self) -> None:
        if self._before_write is not None:
            self._before_write()

    def build_acb(self, params: Any) -> Any:
        """The ACB (`acb.REQUEST_FIELDS`); the index catches up with the files first. A
        cached fast-path bundle's sections come encoded already (the answer is JSON)."""
        return self.memory.build_acb(as_object("build_acb", params), encoded=True)

    def query_decisions(self, params: Any) -> Any:
        """Decisions of a tenant (active only by default), optionally matching a query."""
        args = checked("query_decisions", params, {
            "tenant_id": ("string", False), "active_only": ("boolean", False),
            "query_text": ("string", False), "channel": ("string", False)})
        tenant = args.pop("tenant_id", None)
        return self.memory.query_decisions(tenant, **args)

    def get_artifact(self, params: Any) -> dict[str, Any]:
        """An artifact's bytes: UTF-8 text when it is, else base64. With `tenant_id` or
        `channel`, only one that an event the channel may load cites for that tenant."""
        args = checked("get_artifact", params, {
            "artifact_id": ("string", True), "tenant_id": ("string", False),
            "channel": ("string", False)})
        data = self.memory.get_artifact(args["artifact_id"], args.get("tenant_id"),
                                        args.get("channel"))
        try:
            return {"artifact_id": args["artifact_id"], "bytes": len(data), "encoding": "utf-8",
                    "data": data.decode("utf-8")}
        except UnicodeDecodeError:
            return {"artifact_id": args["artifact_id"], "bytes": len(data), "encoding": "base64",
                    "data": base64.b64encode(data).decode("ascii")}

    def create_handoff(self, params: Any) -> dict[str, Any]:
        """Write a handoff packet; returns it with its id and path."""
        args = checked("create_handoff", params, {
            "to_agent": ("string", True), "task": ("string", True),
            "from_agent": ("string", False), "constraints": ("list of strings", False),
            "decisions": ("list of strings", False),
            "required_files": ("list of strings", False),
            "open_questions": ("list of strings", False), "refs": ("list of strings", False),
            "tenant_id": ("string", False), "ts": ("string", False)})
        self._prepare_write()
        packet = self.memory.create_handoff(args.pop("to_agent"), args.pop("task"), **args)
        fields = dataclasses.asdict(packet)
        return {"handoff_id": packet.id, "path": f"handoffs/{packet.id}.yaml", **{
            k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}}

    def status(self, params: Any) -> dict[str, Any]:
        """What in the index is stale relative to the files (as `gitmem status`)."""
        checked("status", params, {})
        if self.memory.catch_up is not None:
            self.memory.catch_up()
        return self.memory.status()

    def record_events(self, params: Any) -> dict[str, Any]:
        """Append many events, all validated before any is written (`record --json`)."""
        args = checked("record_events", params, {
            # each event is checked by the write path, which names `source:line`
            "events": ("list", True), "source": ("string", False),
            "lines": ("list of integers", False)})
        lines = args.get("lines")
        if lines is not None and len(lines) != len(args["events"]):
            raise Fault(INVALID_PARAMS, "field 'lines': needs one line number per event",
                        {"field": "lines"})
        self._prepare_write()
        events = self.memory.record_many(args["events"], args.get("source", "<input>"), lines)
        return {"event_ids": [e.id for e in events]}

    def decide(self, params: Any) -> dict[str, Any]:
        """Record a decision (file and event), as `gitmem decide`."""
        args = checked("decide", params, {
            "text": ("string", True), "refs": ("list of strings", True),
            "supersedes": ("list of strings", False), "rationale": ("list of strings", False),
            "title": ("string", False), "scope": ("string", False),
            "constraints": ("list of strings", False),
            "alternatives": ("list of strings", False),
            "consequences": ("list of strings", False), "confidence": ("number", False),
            "sensitivity": ("string", False),
            "session_id": ("string", False), "agent_id": ("string", False),
            "tenant_id": ("string", False), "ts": ("string", False)})
        self._prepare_write()
        event = self.memory.decide(args.pop("text"), args.pop("refs"), **args)
        return {"event_id": event.id, "decision_id": event.content["decision_id"]}

    def task(self, params: Any) -> dict[str, Any]:
        """Create or update a task (file and event), as `gitmem task`."""
        args = checked("task", params, {
            "title": ("string", False), "status": ("string", False),
            "task_id": ("string", False), "details": ("string", False),
            "owner": ("string", False), "refs": ("list of strings", False),
            "tags": ("list of strings", False),
            "sensitivity": ("string", False), "session_id": ("string", False),
            "agent_id": ("string", False), "tenant_id": ("string", False)})
        self._prepare_write()
        event = self.memory.task(args.pop("title", None), **args)
        return {"event_id": event.id, "task_id": event.content["task_id"]}

    def sync(self, params: Any) -> dict[str, Any]:
        """Catch the index up now (all files, or `paths`); the hooks call this."""
        args = checked("sync", params, {"paths": ("list of strings", False)})
        for path in args.get("paths") or ():  # else a path it cannot find syncs nothing, silently
            if not path or path.startswith("/") or ".." in path.split("/"):
                raise Fault(INVALID_PARAMS, f"field 'paths': {path!r} is not a path relative "
                            "to the store (no '/' first, no '..', not empty); e.g. "
                            "\"decisions/dec_01J....md\"", {"field": "paths"})
        return self._sync(args.get("paths"))

    def daemon_status(self, params: Any) -> dict[str, Any]:
        """The daemon's own state (no database round trip)."""
        checked("daemon_status", params, {})
        return self._daemon_status()


def _echoable(request_id: str | int) -> bool:
    """Whether an id can be sent back as it came: an integer within 64 bits, a string
    without unpaired surrogates (what every JSON encoder takes)."""
    if isinstance(request_id, int):
        return -(2**63) <= request_id < 2**64
    try:
        request_id.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_request(message: Any) -> tuple[Any, str, Any]:
    """(id, method, params) of a request object, or Fault -32600."""
    if not isinstance(message, dict):
        raise Fault(INVALID_REQUEST, "invalid request: expected a JSON object "
                    f"{{jsonrpc, method, params, id}}, got {json_kind(message)}")
    request_id = message.get("id")
    if request_id is not None and (isinstance(request_id, bool)
                                   or not isinstance(request_id, str | int)
                                   or not _echoable(request_id)):
        raise Fault(INVALID_REQUEST, "invalid request: 'id' must be a string, an integer "
                    "of at most 64 bits or null")
    if message.get("jsonrpc") != "2.0":
        raise Fault(INVALID_REQUEST, "invalid request: 'jsonrpc' must be \"2.0\"")
    method = message.get("method")
    if not isinstance(method, str):
        raise Fault(INVALID_REQUEST, "invalid request: 'method' must be a string")
    return request_id, method, message.get("params")


def response(request_id: Any, *, result: Any = None,
              error: dict[str, Any] | None = None) -> dict[str, Any]:
    """A response object carrying `result` or `error`."""
    if error is not None:
        return {"jsonrpc": "2.0", "id": request_id, "error": error}
    return {"jsonrpc": "2.0", "id": request_id, "result": result}

