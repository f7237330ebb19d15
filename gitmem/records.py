"""Event lines, the field checks every record shares, and the canonical forms.

Parsers raise a `FormatError`/`ValidationError` naming `path:line`, the field
and what was expected. The Markdown and YAML records are in `documents`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from gitmem.errors import (
    TOO_MANY_DIGITS,
    FormatError,
    ValidationError,
    json_kind,
    json_problem,
    malformed_json,
    shown,
)
from gitmem.ids import ARTIFACT_ID, ULID_ID

KINDS = ("message", "tool_call", "tool_result", "decision", "summary", "task_update",
         "artifact")
CHANNELS = ("private", "public", "team", "agent")
SENSITIVITIES = ("none", "low", "high", "secret")
ACTOR_TYPES = ("human", "agent", "tool")
DECISION_STATUSES = ("active", "superseded")
DECISION_SCOPES = ("project", "user", "global", "team", "session")
TASK_STATUSES = ("open", "doing", "blocked", "done", "cancelled")
SUMMARY_SCOPES = ("session", "episode")

EVENT_FIELDS = ("id", "ts", "tenant_id", "session_id", "agent_id", "channel", "actor",
                "kind", "content", "refs", "tags", "sensitivity", "hash")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,199}$")
MAX_DEPTH = 64  # objects and arrays in a value (content) nest at most this deep

# Timestamps: the RFC 3339 date-times PostgreSQL reads, as Python reads them too
# (no week dates, hour-only or basic forms, comma fractions or second offsets), of
# an instant from the start of ULID time (1970, an id's time part) to the end of
# Python's: up to 9998 in UTC, so that every local time of it, ±15:59 away, is a
# datetime too. docs/FORMATS.md says the same.
TS_FORM = "YYYY-MM-DDTHH:MM:SS[.ffffff](Z|+HH:MM|-HH:MM)"
TS_RANGE = "1970-01-01T00:00:00Z .. 9998-12-31T23:59:59.999999Z"
TS_MIN = datetime(1970, 1, 1, tzinfo=UTC)
TS_END = datetime(9999, 1, 1, tzinfo=UTC)
MAX_OFFSET = timedelta(hours=15, minutes=59)
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?(?:Z|[+-]\d\d:\d\d)",
                      re.ASCII)


# --------------------------------------------------------------------------- helpers

def parse_ts(value: Any, field_name: str = "ts") -> datetime:
    """An RFC 3339 date-time the index can hold (see `TS_FORM` and `TS_RANGE`)."""
    if not isinstance(value, str):
        raise ValidationError(f"expected an RFC 3339 timestamp string, got "
                              f"{json_kind(value)}", field=field_name)
    if not _RFC3339.fullmatch(value):
        raise ValidationError(_ts_form_problem(value), field=field_name)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:  # the form is right, a number is out of range (month 13)
        raise ValidationError(f"{value!r} is not a date and time ({exc}); expected RFC 3339 "
                              "like 2026-02-09T05:12:33+09:00", field=field_name) from None
    offset = parsed.utcoffset()
    if offset is not None and abs(offset) > MAX_OFFSET:
        raise ValidationError(f"UTC offset of {value!r} is beyond ±15:59, the most "
                              "PostgreSQL reads", field=field_name)
    if not TS_MIN <= parsed < TS_END:
        raise ValidationError(f"{value!r} is outside {TS_RANGE}, the range ids and the "
                              "index can hold", field=field_name)
    return parsed


def _ts_form_problem(value: str) -> str:
    """Why `value` is not in `TS_FORM`: a missing offset is the usual mistake."""
    try:
        naive = datetime.fromisoformat(value).tzinfo is None
    except ValueError:
        naive = False
    if naive and _RFC3339.fullmatch(value + "Z"):
        return f"timestamp {value!r} has no UTC offset (add +00:00 or Z)"
    return (f"expected an RFC 3339 timestamp like 2026-02-09T05:12:33+09:00 ({TS_FORM}), "
            f"got {shown(value)}")


def format_ts(value: datetime) -> str:
    """The canonical text of a timestamp: seconds precision unless it has microseconds."""
    return value.isoformat(timespec="microseconds" if value.microsecond else "seconds")


def compact_json(value: Any, *, sort_keys: bool = False) -> str:
    """Compact JSON, UTF-8 kept (an event line, a content column; with `sort_keys`,
    what an ACB's id is hashed over): orjson's text, in a tenth of the stdlib's time,
    where orjson can write the value; the stdlib's for what it cannot (an integer
    past 64 bits, a lone surrogate). Either parses back to the same value; only a
    float's spelling may differ (1e-7 for 1e-07)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else None
                            ).decode()
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                          sort_keys=sort_keys)


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept: the form hashes are computed over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_hash(kind: str, content: Mapping[str, Any]) -> str:
    """The dedupe key of an event: sha256 of its canonical kind + content."""
    try:
        canonical = json.dumps({"kind": kind, "content": content}, sort_keys=True,
                               separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise ValidationError("NaN and Infinity are not JSON numbers; use null or a string",
                              field="content") from None
    except TypeError as exc:
        raise ValidationError(f"expected JSON values only: {exc}", field="content") from None
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def content_key(kind: str, content: Mapping[str, Any]) -> str:
    """What makes two events' chunks duplicates: the same kind and content, keys in any
    order. Computed from the content, never taken from a line's `hash` (one stating
    another event's would hide that event as its copy), and fast: orjson's sorted
    text, hashed (the stdlib's text where orjson cannot write the value)."""
    try:
        data = orjson.dumps(content, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        data = compact_json(content, sort_keys=True).encode()
    return "sha256:" + hashlib.sha256(kind.encode() + b"\0" + data).hexdigest()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e999: jsonb keeps it, Python reads infinity
        raise ValueError(f"{text} is beyond a float's range; write it as a string")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose every key is given once: of `"channel": "private", "channel":
    "public"`, a reader of the file sees the first and a JSON parser keeps the last."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        twice = next(key for n, (key, _) in enumerate(pairs)
                     if any(key == other for other, _ in pairs[:n]))
        raise RepeatedKey(twice)
    return obj


class RepeatedKey(ValueError):
    """An object of a JSON text gives a key twice."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key {key!r} is given twice in one object; keep one")
        self.key = key


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite,
                            object_pairs_hook=_object)  # one, not one per line


def decode_json(text: str) -> Any:
    """JSON as a record's file must hold it: numbers finite, each key once in its object.
    Raises `json.JSONDecodeError` where the text is not JSON, `ValueError` with a
    message for the user where its values are not storable."""
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        if TOO_MANY_DIGITS in str(exc):
            raise ValueError(json_problem(exc)) from None
        raise




def check_storable(value: Any, field_name: str = "") -> None:
    """Refuse what the index cannot store or a line cannot hold: NUL characters and
    lone surrogates (text that is not UTF-8), in keys too, and objects and arrays
    nested more than `MAX_DEPTH` deep. Without `field_name`, an object is a record:
    each of its fields is checked on its own, named by its key."""
    if field_name or not isinstance(value, dict):
        _check_storable(value, field_name, field_name, 0)
        return
    for key, item in value.items():
        _check_storable(key, "", "", 0)
        _check_storable(item, str(key), str(key), 0)


def _check_storable(value: Any, field_name: str, top: str, depth: int) -> None:
    if isinstance(value, str):
        if "\x00" in value:
            raise ValidationError("contains a NUL character (\\u0000), which the index "
                                  "cannot store; remove it", field=field_name or None)
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValidationError(
                    f"contains a lone surrogate (\\u{ord(value[exc.start]):04x}), which "
                    "is not UTF-8 text; send the whole character or remove it",
                    field=field_name or None) from None
    elif isinstance(value, dict | list):
        if depth == MAX_DEPTH:  # checked before recursing, so no RecursionError
            raise ValidationError(f"nests objects and arrays more than {MAX_DEPTH} deep; "
                                  "flatten it", field=top or None)
        if isinstance(value, list):
            for item in value:
                _check_storable(item, field_name, top, depth + 1)
            return
        for key, item in value.items():
            _check_storable(key, field_name, top, depth + 1)
            name = f"{field_name}.{key}" if field_name else str(key)
            _check_storable(item, name, top or name, depth + 1)


def check_choice(value: Any, choices: tuple[str, ...], field_name: str) -> str:
    if value not in choices:
        raise ValidationError(f"expected one of {'|'.join(choices)}, got {shown(value)}",
                              field=field_name)
    return str(value)


def check_text(value: Any, field_name: str, *, allow_empty: bool = False) -> str:
    if value is None:
        raise ValidationError("missing; expected a string", field=field_name)
    if not isinstance(value, str):
        raise ValidationError(f"expected a string, got {json_kind(value)}",
                              field=field_name)
    if not allow_empty and not value.strip():
        raise ValidationError("expected a non-empty string", field=field_name)
    return value


def valid_name(text: str) -> bool:
    """Whether `text` is usable as a tenant, session, agent or actor id."""
    return bool(_NAME.match(text))


def name_or(value: Any, default: str, field_name: str) -> str:
    """A name a request may leave out (None: `default`); given, it must be a valid name:
    an empty one (an unset variable, say) is refused, never read as the default."""
    return default if value is None else check_name(value, field_name)


def check_name(value: Any, field_name: str) -> str:
    text = check_text(value, field_name)
    if not _NAME.match(text):
        raise ValidationError(
            f"expected a name of letters, digits and ._:@/+- (max 200), got {shown(text)}",
            field=field_name)
    return text


def check_str_list(value: Any, field_name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError(f"expected a list of strings, got {shown(value)}", field=field_name)
    return tuple(value)


def given_list(value: Any, name: str) -> Any:
    """A list for list-like values (None: empty); anything else is left for validation to
    name, but a string: refused, as decide, task and create_handoff refuse it, rather
    than read as one item (`"a,b"` meant as two tags would be one)."""
    if value is None:
        return []
    if isinstance(value, str):
        raise ValidationError("expected a list of strings, got a string", field=name)
    if isinstance(value, list | tuple):
        return list(value)
    return value


def check_texts(value: Any, name: str) -> list[str]:
    """A list of texts given to the API: a string is one item, never its characters."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, bytes | Mapping) or not isinstance(value, Iterable):
        raise ValidationError(f"expected a list of strings, got {json_kind(value)}", field=name)
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise ValidationError(f"expected a list of strings, got an item that is "
                                  f"{json_kind(item)}", field=name)
    check_filled(items, name)
    return items


def check_filled(items: Any, name: str) -> None:
    """Refuse a blank item of a list a write is given (`--tag ""`, an unset variable):
    stored, it would be an empty tag or a `- ''` line; dropped, the caller is not told."""
    if not isinstance(items, list):
        return  # not a list: validation names it
    for n, item in enumerate(items, start=1):
        if isinstance(item, str) and not item.strip():
            raise ValidationError(f"expected a non-empty string, got {shown(item)} as item "
                                  f"{n}", field=name)


def check_refs(value: Any, field_name: str = "refs") -> tuple[str, ...]:
    refs = check_str_list(value, field_name)
    for ref in refs:
        if not (ULID_ID.match(ref) or ARTIFACT_ID.match(ref)):
            raise ValidationError(
                f"expected ids like evt_/dec_/tsk_/sum_/hof_ + ULID or art_ + sha256, "
                f"got {shown(ref)}", field=field_name)
    return refs


def check_id(value: Any, prefix: str, field_name: str = "id") -> str:
    text = check_text(value, field_name)
    if not ULID_ID.match(text) or not text.startswith(prefix + "_"):
        raise ValidationError(f"expected {prefix}_ + a 26-character ULID, got {shown(text)}",
                              field=field_name)
    return text


def check_bool(value: Any, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(f"expected true or false, got {shown(value)}", field=field_name)
    return value


def check_number(value: Any, field_name: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise ValidationError(f"expected a number in [{lo}, {hi}], got {shown(value)}",
                              field=field_name)
    return float(value)


# --------------------------------------------------------------------------- events

@dataclass(frozen=True)
class Actor:
    """Who produced an event."""

    type: str
    id: str


@dataclass(frozen=True)
class Event:
    """One line of the append-only event log."""

    id: str
    ts: str
    tenant_id: str
    session_id: str
    agent_id: str
    channel: str
    actor: Actor
    kind: str
    content: dict[str, Any]
    refs: tuple[str, ...]
    tags: tuple[str, ...]
    sensitivity: str
    hash: str

    @property
    def when(self) -> datetime:
        """The timestamp as an aware datetime."""
        return datetime.fromisoformat(self.ts)

    def to_dict(self) -> dict[str, Any]:
        """The line's object, fields in their documented order."""
        return {
            "id": self.id, "ts": self.ts, "tenant_id": self.tenant_id,
            "session_id": self.session_id, "agent_id": self.agent_id,
            "channel": self.channel, "actor": {"type": self.actor.type, "id": self.actor.id},
            "kind": self.kind, "content": self.content, "refs": list(self.refs),
            "tags": list(self.tags), "sensitivity": self.sensitivity, "hash": self.hash,
        }

    def to_line(self) -> str:
        """The JSONL line (with its newline) exactly as the store keeps it."""
        return compact_json(self.to_dict()) + "\n"


def validate_content(kind: str, content: Any) -> dict[str, Any]:
    """Check the content object of an event of `kind`."""
    if not isinstance(content, dict):
        raise ValidationError(f"expected an object, got {json_kind(content)}",
                              field="content")
    text_required = {"message": "text", "decision": "text", "summary": "text"}
    if kind in text_required:
        check_text(content.get(text_required[kind]), f"content.{text_required[kind]}")
    if kind == "tool_call":
        check_text(content.get("tool"), "content.tool")
    if kind == "tool_result":
        check_text(content.get("tool"), "content.tool")
        check_text(content.get("excerpt_text"), "content.excerpt_text", allow_empty=True)
        check_bool(content.get("truncated", False), "content.truncated")
        line_range = content.get("line_range")
        if line_range is not None and not (
                isinstance(line_range, list) and len(line_range) == 2
                and all(isinstance(n, int) and not isinstance(n, bool) for n in line_range)):
            raise ValidationError("expected [first_line, last_line]", field="content.line_range")
    if kind == "task_update":
        check_id(content.get("task_id"), "tsk", "content.task_id")
        if "status" in content:
            check_choice(content["status"], TASK_STATUSES, "content.status")
    if kind == "artifact" and not ARTIFACT_ID.match(str(content.get("artifact_id", ""))):
        raise ValidationError("expected art_ + sha256 hex", field="content.artifact_id")
    # artifact references are indexed into typed columns: check them for every kind
    if "artifact_id" in content and not ARTIFACT_ID.match(str(content["artifact_id"])):
        raise ValidationError(f"expected art_ + sha256 hex, got {shown(content['artifact_id'])}",
                              field="content.artifact_id")
    size = content.get("bytes", 0)
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < 2**63:
        raise ValidationError(f"expected a byte count (an integer >= 0), got {shown(size)}",
                              field="content.bytes")
    for key in ("text", "title"):
        if key in content and not isinstance(content[key], str):
            raise ValidationError(f"expected a string, got {json_kind(content[key])}",
                                  field=f"content.{key}")
    return content


def parse_event(obj: Any) -> Event:
    """Validate one complete event object (every field present) into an Event."""
    if not isinstance(obj, dict):
        raise ValidationError(f"expected a JSON object, got {json_kind(obj)}")
    unknown = sorted(set(obj) - set(EVENT_FIELDS))
    if unknown:
        raise ValidationError(f"unknown field(s) {', '.join(unknown)}; expected only "
                              f"{', '.join(EVENT_FIELDS)}", field=unknown[0])
    missing = [f for f in EVENT_FIELDS if f not in obj]
    if missing:  # every one at once: a line written by hand is mended in one round
        also = f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise ValidationError(f"missing required field{also}", field=missing[0])
    actor = obj["actor"]
    if not isinstance(actor, dict) or set(actor) != {"type", "id"}:
        raise ValidationError('expected {"type": human|agent|tool, "id": NAME}', field="actor")
    kind = check_choice(obj["kind"], KINDS, "kind")
    ts = check_text(obj["ts"], "ts")
    parse_ts(ts)
    digest = check_text(obj["hash"], "hash")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ValidationError(f"expected sha256:<64 hex>, got {shown(digest)}", field="hash")
    return Event(
        id=check_id(obj["id"], "evt"),
        ts=ts,
        tenant_id=check_name(obj["tenant_id"], "tenant_id"),
        session_id=check_name(obj["session_id"], "session_id"),
        agent_id=check_name(obj["agent_id"], "agent_id"),
        channel=check_choice(obj["channel"], CHANNELS, "channel"),
        actor=Actor(check_choice(actor["type"], ACTOR_TYPES, "actor.type"),
                    check_name(actor["id"], "actor.id")),
        kind=kind,
        content=validate_content(kind, obj["content"]),
        refs=check_refs(obj["refs"]),
        tags=check_str_list(obj["tags"], "tags"),
        sensitivity=check_choice(obj["sensitivity"], SENSITIVITIES, "sensitivity"),
        hash=digest,
    )


def parse_event_line(raw: bytes, *, path: str, line: int) -> Event:
    """Decode, parse and validate one JSONL line (without its newline)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column "
                          f"{exc.start + 1})", path=path, line=line) from None
    try:
        obj = decode_json(text)
    except ValueError as exc:  # not JSON; NaN, a key given twice, a number too long
        if text.startswith("\ufeff"):
            raise FormatError("begins with a byte order mark (U+FEFF, written by some "
                              "editors); save the file as UTF-8 without one", path=path,
                              line=line) from None
        raise malformed_json(exc, path=path, line=line) from None
    except RecursionError:
        raise FormatError(f"nests objects and arrays more than {MAX_DEPTH} deep",
                          path=path, line=line) from None
    try:
        if _maybe_unstorable(text):
            check_storable(obj)
        return parse_event(obj)
    except FormatError as exc:
        raise exc.at(path, line) from None


def _maybe_unstorable(text: str) -> bool:
    """Whether a line's JSON may hold what `check_storable` refuses: a NUL or lone
    surrogate is written as an escape (\\u0000, \\ud800), and deep nesting needs
    many brackets. Most lines have neither, and are not walked."""
    return ("\\u0000" in text or "\\ud" in text or "\\uD" in text
            or text.count("{") + text.count("[") > MAX_DEPTH)


def event_text(event: Event) -> str:
    """The searchable, promptable text of an event (without speaker)."""
    content = event.content
    if event.kind == "tool_call":
        args = content.get("args")
        rendered = canonical_json(args) if args is not None else ""
        return f"{content['tool']}({rendered})" if rendered else str(content["tool"])
    if event.kind == "tool_result":
        head = str(content["tool"])
        if content.get("path"):
            head += f" {content['path']}"
        return f"{head}\n{content.get('excerpt_text', '')}".rstrip()
    if event.kind == "task_update":
        parts = [str(content.get("title", "")), str(content.get("text", ""))]
        status = f"[{content['status']}] " if "status" in content else ""
        return status + "\n".join(p for p in parts if p).strip()
    if event.kind == "artifact":
        return str(content.get("name") or content.get("text") or content["artifact_id"])
    return str(content.get("text", ""))


def iter_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, bytes without newline) for each complete line."""
    start = 0
    number = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return
        number += 1
        yield number, data[start:end]
        start = end + 1


def find_event(data: bytes, event_id: str, path: str) -> tuple[int, Event] | None:
    """The first event of `data` (complete lines of an events file) whose id is
    `event_id`, with its line number; only the lines holding the id's text are parsed."""
    needle = event_id.encode()
    pos = data.find(needle)
    while pos >= 0:
        begin = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", pos) + 1 or len(data)
        number = data.count(b"\n", 0, begin) + 1
        for _, event in iter_events(data[begin:end], path, number):
            if not isinstance(event, FormatError) and event.id == event_id:
                return number, event
        pos = data.find(needle, end)
    return None


def iter_events(data: bytes, path: str, start_line: int = 1,
                ) -> Iterator[tuple[int, Event | FormatError]]:
    """(line number, the event or why it is not one) for each non-blank complete line."""
    for offset, raw in iter_lines(data):
        if not raw.strip():
            continue
        number = start_line + offset - 1
        try:
            yield number, parse_event_line(raw, path=path, line=number)
        except FormatError as exc:
            yield number, exc
