"""The record formats of the memory tree: event lines and Markdown/YAML records.

Every parser takes the file's text and its store-relative path and raises a
`FormatError`/`ValidationError` naming `path:line`, the field and what was
expected. Parsed records are frozen dataclasses; `to_*` functions write them
back in the canonical form the store keeps.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml

from gitmem.errors import FormatError, ValidationError
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


# --------------------------------------------------------------------------- helpers

def parse_ts(value: Any, field_name: str = "ts") -> datetime:
    """An ISO-8601 timestamp with an explicit offset."""
    if not isinstance(value, str):
        raise ValidationError(f"expected an ISO-8601 string, got {type(value).__name__}",
                              field=field_name)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(f"expected ISO-8601 like 2026-02-09T05:12:33+09:00, got {value!r}",
                              field=field_name) from None
    if parsed.tzinfo is None:
        raise ValidationError(f"timestamp {value!r} has no UTC offset (add +00:00 or Z)",
                              field=field_name)
    return parsed


def format_ts(value: datetime) -> str:
    """The canonical text of a timestamp: seconds precision unless it has microseconds."""
    return value.isoformat(timespec="microseconds" if value.microsecond else "seconds")


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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def reject_nul(value: Any, field_name: str = "") -> None:
    """Refuse NUL characters anywhere in a value: PostgreSQL text cannot hold them."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValidationError("contains a NUL character (\\u0000), which the index "
                                  "cannot store; remove it", field=field_name or None)
    elif isinstance(value, dict):
        for key, item in value.items():
            reject_nul(key, field_name)
            reject_nul(item, f"{field_name}.{key}" if field_name else str(key))
    elif isinstance(value, list):
        for item in value:
            reject_nul(item, field_name)


def _choice(value: Any, choices: tuple[str, ...], field_name: str) -> str:
    if value not in choices:
        raise ValidationError(f"expected one of {'|'.join(choices)}, got {value!r}",
                              field=field_name)
    return str(value)


def _text(value: Any, field_name: str, *, allow_empty: bool = False) -> str:
    if value is None:
        raise ValidationError("missing; expected a string", field=field_name)
    if not isinstance(value, str):
        raise ValidationError(f"expected a string, got {type(value).__name__}",
                              field=field_name)
    if not allow_empty and not value.strip():
        raise ValidationError("expected a non-empty string", field=field_name)
    return value


def valid_name(text: str) -> bool:
    """Whether `text` is usable as a tenant, session, agent or actor id."""
    return bool(_NAME.match(text))


def _name(value: Any, field_name: str) -> str:
    text = _text(value, field_name)
    if not _NAME.match(text):
        raise ValidationError(
            f"expected a name of letters, digits and ._:@/+- (max 200), got {text!r}",
            field=field_name)
    return text


def _str_list(value: Any, field_name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError(f"expected a list of strings, got {value!r}", field=field_name)
    return tuple(value)


def _refs(value: Any, field_name: str = "refs") -> tuple[str, ...]:
    refs = _str_list(value, field_name)
    for ref in refs:
        if not (ULID_ID.match(ref) or ARTIFACT_ID.match(ref)):
            raise ValidationError(
                f"expected ids like evt_/dec_/tsk_/sum_/hof_ + ULID or art_ + sha256, "
                f"got {ref!r}", field=field_name)
    return refs


def _id(value: Any, prefix: str, field_name: str = "id") -> str:
    text = _text(value, field_name)
    if not ULID_ID.match(text) or not text.startswith(prefix + "_"):
        raise ValidationError(f"expected {prefix}_ + a 26-character ULID, got {text!r}",
                              field=field_name)
    return text


def _bool(value: Any, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(f"expected true or false, got {value!r}", field=field_name)
    return value


def _number(value: Any, field_name: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise ValidationError(f"expected a number in [{lo}, {hi}], got {value!r}",
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
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":")) + "\n"


def validate_content(kind: str, content: Any) -> dict[str, Any]:
    """Check the content object of an event of `kind`."""
    if not isinstance(content, dict):
        raise ValidationError(f"expected an object, got {type(content).__name__}",
                              field="content")
    text_required = {"message": "text", "decision": "text", "summary": "text"}
    if kind in text_required:
        _text(content.get(text_required[kind]), f"content.{text_required[kind]}")
    if kind == "tool_call":
        _text(content.get("tool"), "content.tool")
    if kind == "tool_result":
        _text(content.get("tool"), "content.tool")
        _text(content.get("excerpt_text"), "content.excerpt_text", allow_empty=True)
        _bool(content.get("truncated", False), "content.truncated")
        line_range = content.get("line_range")
        if line_range is not None and not (
                isinstance(line_range, list) and len(line_range) == 2
                and all(isinstance(n, int) and not isinstance(n, bool) for n in line_range)):
            raise ValidationError("expected [first_line, last_line]", field="content.line_range")
    if kind == "task_update":
        _id(content.get("task_id"), "tsk", "content.task_id")
        if "status" in content:
            _choice(content["status"], TASK_STATUSES, "content.status")
    if kind == "artifact" and not ARTIFACT_ID.match(str(content.get("artifact_id", ""))):
        raise ValidationError("expected art_ + sha256 hex", field="content.artifact_id")
    # artifact references are indexed into typed columns: check them for every kind
    if "artifact_id" in content and not ARTIFACT_ID.match(str(content["artifact_id"])):
        raise ValidationError(f"expected art_ + sha256 hex, got {content['artifact_id']!r}",
                              field="content.artifact_id")
    size = content.get("bytes", 0)
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < 2**63:
        raise ValidationError(f"expected a byte count (an integer >= 0), got {size!r}",
                              field="content.bytes")
    for key in ("text", "title"):
        if key in content and not isinstance(content[key], str):
            raise ValidationError(f"expected a string, got {type(content[key]).__name__}",
                                  field=f"content.{key}")
    return content


def parse_event(obj: Any) -> Event:
    """Validate one complete event object (every field present) into an Event."""
    if not isinstance(obj, dict):
        raise ValidationError(f"expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(EVENT_FIELDS))
    if unknown:
        raise ValidationError(f"unknown field(s) {', '.join(unknown)}; expected only "
                              f"{', '.join(EVENT_FIELDS)}", field=unknown[0])
    missing = [f for f in EVENT_FIELDS if f not in obj]
    if missing:
        raise ValidationError("missing required field", field=missing[0])
    actor = obj["actor"]
    if not isinstance(actor, dict) or set(actor) != {"type", "id"}:
        raise ValidationError('expected {"type": human|agent|tool, "id": NAME}', field="actor")
    kind = _choice(obj["kind"], KINDS, "kind")
    ts = _text(obj["ts"], "ts")
    parse_ts(ts)
    digest = _text(obj["hash"], "hash")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ValidationError(f"expected sha256:<64 hex>, got {digest!r}", field="hash")
    return Event(
        id=_id(obj["id"], "evt"),
        ts=ts,
        tenant_id=_name(obj["tenant_id"], "tenant_id"),
        session_id=_name(obj["session_id"], "session_id"),
        agent_id=_name(obj["agent_id"], "agent_id"),
        channel=_choice(obj["channel"], CHANNELS, "channel"),
        actor=Actor(_choice(actor["type"], ACTOR_TYPES, "actor.type"),
                    _name(actor["id"], "actor.id")),
        kind=kind,
        content=validate_content(kind, obj["content"]),
        refs=_refs(obj["refs"]),
        tags=_str_list(obj["tags"], "tags"),
        sensitivity=_choice(obj["sensitivity"], SENSITIVITIES, "sensitivity"),
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
        obj = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise FormatError(f"malformed JSON: {exc.msg} at column {exc.colno}",
                          path=path, line=line) from None
    except ValueError as exc:  # NaN / Infinity: PostgreSQL's jsonb refuses them too
        raise FormatError(f"malformed JSON: {exc}", path=path, line=line) from None
    try:
        if "\\u0000" in text:
            reject_nul(obj)
        return parse_event(obj)
    except FormatError as exc:
        raise exc.at(path, line) from None


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


# --------------------------------------------------------------------------- Markdown records

_FENCE = re.compile(r"^---[ \t]*\r?$", re.MULTILINE)


def split_frontmatter(text: str, path: str) -> tuple[dict[str, Any], str, int]:
    """The YAML metadata, the body and the body's first line number (1-based).

    Frontmatter is opened by a first line of exactly `---` and must be closed by
    another `---` line; a file without it has no metadata.
    """
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
    opening = _FENCE.match(text)
    if opening is None:
        return {}, text, 1
    closing = _FENCE.search(text, opening.end() + 1)
    if closing is None:
        raise FormatError("frontmatter opened by '---' on line 1 is never closed; add a "
                          "'---' line after the last field", path=path, line=1)
    try:
        meta = yaml.safe_load(text[opening.end() + 1:closing.start()])
    except yaml.MarkedYAMLError as exc:
        problem, line = yaml_problem(exc, first_line=2)
        raise FormatError(f"broken YAML frontmatter: {problem}", path=path, line=line) from None
    except yaml.YAMLError as exc:
        raise FormatError(f"broken YAML frontmatter: {exc}", path=path, line=1) from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise FormatError(f"expected frontmatter of `field: value` lines, got a YAML "
                          f"{type(meta).__name__}", path=path, line=2)
    body_start = closing.end() + 1 if text[closing.end():closing.end() + 1] == "\n" \
        else closing.end()
    body_line = text.count("\n", 0, body_start) + 1
    return {str(k): v for k, v in meta.items()}, text[body_start:], body_line


def field_line(text: str, key: str) -> int | None:
    """The 1-based line of a top-level `key:` in a frontmatter document."""
    match = re.search(rf"^{re.escape(key)}\s*:", text, re.MULTILINE)
    return text.count("\n", 0, match.start()) + 1 if match else None


def _record_frontmatter(text: str, path: str, what: str) -> tuple[dict[str, Any], str, int]:
    """Frontmatter that a decision, task or summary file must open with."""
    if _FENCE.match(text.removeprefix("\ufeff")) is None:
        raise FormatError(f"a {what} file starts with YAML frontmatter between '---' lines "
                          "(id, ts, ...); line 1 is not '---'", path=path, line=1)
    return split_frontmatter(text, path)


def _check_file_name(path: str, expected: str, record_id: str, text: str) -> None:
    if not path.endswith(expected):
        raise ValidationError(f"file name does not match id {record_id} (expected {expected})",
                              path=path, line=field_line(text, "id") or 1, field="id")


def _located(exc: FormatError, text: str, path: str, body_line: int = 1) -> FormatError:
    """Locate a field error at its key's line (the body's first line for `body`).

    A missing field has no line of its own: line 1, where the frontmatter opens.
    """
    key = (exc.field or "").split(".")[0]
    if key == "body":
        return exc.at(path, body_line)
    return exc.at(path, (field_line(text, key) or 1) if key else 1)


def _yaml_value(value: Any) -> Any:
    """YAML may load timestamps as datetimes; the records keep ISO text."""
    if isinstance(value, datetime):
        return format_ts(value)
    return value


@dataclass(frozen=True)
class Decision:
    """One decision file: the body is the decision text."""

    id: str
    ts: str
    tenant_id: str
    scope: str
    status: str
    refs: tuple[str, ...]
    text: str
    title: str = ""
    rationale: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    alternatives: tuple[str, ...] = ()
    consequences: tuple[str, ...] = ()
    confidence: float | None = None
    supersedes: tuple[str, ...] = ()
    sensitivity: str = "none"
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Task:
    """One task file: the body holds its details."""

    id: str
    ts: str
    tenant_id: str
    status: str
    title: str
    details: str = ""
    owner: str = ""
    refs: tuple[str, ...] = ()
    session_id: str = ""
    sensitivity: str = "none"
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Summary:
    """A session or episode summary; every summary cites its sources."""

    id: str
    ts: str
    tenant_id: str
    scope: str
    refs: tuple[str, ...]
    text: str
    session_id: str = ""
    decisions: tuple[str, ...] = ()
    sensitivity: str = "none"
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Handoff:
    """A multi-agent handoff packet: the only context a receiving agent gets."""

    id: str
    ts: str
    tenant_id: str
    to_agent: str
    task: str
    from_agent: str = ""
    constraints: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    required_files: tuple[str, ...] = ()
    open_questions: tuple[str, ...] = ()
    refs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ViewChunk:
    """One heading-delimited part of a view: `views/x.md#anchor`."""

    anchor: str
    heading: str
    text: str
    line: int


@dataclass(frozen=True)
class View:
    """A curated Markdown view."""

    path: str
    section: str
    pinned: bool
    sensitivity: str
    channels: tuple[str, ...]
    max_tokens: int | None
    title: str
    chunks: tuple[ViewChunk, ...] = field(default_factory=tuple)


def _unknown_keys(meta: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(meta) - set(allowed))
    if unknown:
        raise ValidationError(f"unknown field; expected only {', '.join(allowed)}",
                              field=unknown[0])


DECISION_KEYS = ("id", "ts", "tenant_id", "scope", "status", "refs", "title", "rationale",
                 "constraints", "alternatives", "consequences", "confidence", "supersedes",
                 "sensitivity", "tags")


def parse_decision(text: str, path: str, default_tenant: str) -> Decision:
    """Parse and validate a decision file."""
    meta, body, body_line = _record_frontmatter(text, path, "decision")
    try:
        meta = {k: _yaml_value(v) for k, v in meta.items()}
        _unknown_keys(meta, DECISION_KEYS)
        refs = _refs(meta.get("refs"))
        if not refs:
            raise ValidationError("a decision must cite at least one source id (P4)",
                                  field="refs")
        ts = _text(meta.get("ts"), "ts")
        parse_ts(ts)
        confidence = meta.get("confidence")
        decision = Decision(
            id=_id(meta.get("id"), "dec"), ts=ts,
            tenant_id=_name(meta.get("tenant_id", default_tenant), "tenant_id"),
            scope=_choice(meta.get("scope", "project"), DECISION_SCOPES, "scope"),
            status=_choice(meta.get("status", "active"), DECISION_STATUSES, "status"),
            refs=refs, text=_text(body.strip(), "body"),
            title=_text(meta.get("title", ""), "title", allow_empty=True),
            rationale=_str_list(meta.get("rationale"), "rationale"),
            constraints=_str_list(meta.get("constraints"), "constraints"),
            alternatives=_str_list(meta.get("alternatives"), "alternatives"),
            consequences=_str_list(meta.get("consequences"), "consequences"),
            confidence=None if confidence is None else _number(confidence, "confidence", 0, 1),
            supersedes=tuple(_id(s, "dec", "supersedes")
                             for s in _str_list(meta.get("supersedes"), "supersedes")),
            sensitivity=_choice(meta.get("sensitivity", "none"), SENSITIVITIES, "sensitivity"),
            tags=_str_list(meta.get("tags"), "tags"),
        )
    except FormatError as exc:
        raise _located(exc, text, path, body_line) from None
    _check_file_name(path, f"decisions/{decision.id}.md", decision.id, text)
    return decision


TASK_KEYS = ("id", "ts", "tenant_id", "status", "title", "owner", "refs", "session_id",
             "sensitivity", "tags")


def parse_task(text: str, path: str, default_tenant: str) -> Task:
    """Parse and validate a task file."""
    meta, body, body_line = _record_frontmatter(text, path, "task")
    try:
        meta = {k: _yaml_value(v) for k, v in meta.items()}
        _unknown_keys(meta, TASK_KEYS)
        ts = _text(meta.get("ts"), "ts")
        parse_ts(ts)
        task = Task(
            id=_id(meta.get("id"), "tsk"), ts=ts,
            tenant_id=_name(meta.get("tenant_id", default_tenant), "tenant_id"),
            status=_choice(meta.get("status", "open"), TASK_STATUSES, "status"),
            title=_text(meta.get("title"), "title"), details=body.strip(),
            owner=_text(meta.get("owner", ""), "owner", allow_empty=True),
            refs=_refs(meta.get("refs")),
            session_id=_text(meta.get("session_id", ""), "session_id", allow_empty=True),
            sensitivity=_choice(meta.get("sensitivity", "none"), SENSITIVITIES, "sensitivity"),
            tags=_str_list(meta.get("tags"), "tags"),
        )
    except FormatError as exc:
        raise _located(exc, text, path, body_line) from None
    _check_file_name(path, f"tasks/{task.id}.md", task.id, text)
    return task


SUMMARY_KEYS = ("id", "ts", "tenant_id", "scope", "refs", "session_id", "decisions",
                "sensitivity", "tags")


def parse_summary(text: str, path: str, default_tenant: str) -> Summary:
    """Parse and validate a summary file."""
    meta, body, body_line = _record_frontmatter(text, path, "summary")
    try:
        meta = {k: _yaml_value(v) for k, v in meta.items()}
        _unknown_keys(meta, SUMMARY_KEYS)
        refs = _refs(meta.get("refs"))
        if not refs:
            raise ValidationError("a summary must cite the events it summarises (P4)",
                                  field="refs")
        ts = _text(meta.get("ts"), "ts")
        parse_ts(ts)
        summary = Summary(
            id=_id(meta.get("id"), "sum"), ts=ts,
            tenant_id=_name(meta.get("tenant_id", default_tenant), "tenant_id"),
            scope=_choice(meta.get("scope", "session"), SUMMARY_SCOPES, "scope"),
            refs=refs, text=_text(body.strip(), "body"),
            session_id=_text(meta.get("session_id", ""), "session_id", allow_empty=True),
            decisions=tuple(_id(d, "dec", "decisions")
                            for d in _str_list(meta.get("decisions"), "decisions")),
            sensitivity=_choice(meta.get("sensitivity", "none"), SENSITIVITIES, "sensitivity"),
            tags=_str_list(meta.get("tags"), "tags"),
        )
    except FormatError as exc:
        raise _located(exc, text, path, body_line) from None
    _check_file_name(path, f"summaries/{summary.scope}/{summary.id}.md", summary.id, text)
    return summary


HANDOFF_KEYS = ("id", "ts", "tenant_id", "from_agent", "to_agent", "task", "constraints",
                "decisions", "required_files", "open_questions", "refs")


def parse_handoff(text: str, path: str, default_tenant: str) -> Handoff:
    """Parse and validate a handoff packet (YAML)."""
    meta = load_yaml(text, path)
    try:
        meta = {k: _yaml_value(v) for k, v in meta.items()}
        _unknown_keys(meta, HANDOFF_KEYS)
        ts = _text(meta.get("ts"), "ts")
        parse_ts(ts)
        handoff = Handoff(
            id=_id(meta.get("id"), "hof"), ts=ts,
            tenant_id=_name(meta.get("tenant_id", default_tenant), "tenant_id"),
            to_agent=_name(meta.get("to_agent"), "to_agent"),
            task=_text(meta.get("task"), "task"),
            from_agent=_text(meta.get("from_agent", ""), "from_agent", allow_empty=True),
            constraints=_str_list(meta.get("constraints"), "constraints"),
            decisions=tuple(_id(d, "dec", "decisions")
                            for d in _str_list(meta.get("decisions"), "decisions")),
            required_files=_str_list(meta.get("required_files"), "required_files"),
            open_questions=_str_list(meta.get("open_questions"), "open_questions"),
            refs=_refs(meta.get("refs")),
        )
    except FormatError as exc:
        raise _located(exc, text, path) from None
    _check_file_name(path, f"handoffs/{handoff.id}.yaml", handoff.id, text)
    return handoff


VIEW_KEYS = ("section", "pinned", "sensitivity", "channels", "max_tokens", "title")
VIEW_SECTIONS = ("identity", "rules", "task_state", "relevant_decisions",
                 "retrieved_evidence", "recent_window", "tool_state")


def slugify(heading: str) -> str:
    """A GitHub-style anchor for a heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return re.sub(r"\s", "-", slug)


def _view_chunks(body: str, first_line: int) -> tuple[ViewChunk, ...]:
    chunks: list[ViewChunk] = []
    seen: dict[str, int] = {}
    heading, anchor, start = "", "", first_line
    lines: list[str] = []
    in_fence = False

    def flush() -> None:
        text = "\n".join(lines).strip()
        if text:
            chunks.append(ViewChunk(anchor=anchor, heading=heading, text=text, line=start))

    for offset, line in enumerate(body.split("\n")):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        match = None if in_fence else re.match(r"^(#{1,6})\s+(.+?)\s*#*\s*$", line)
        if match:
            flush()
            heading = match.group(2)
            base = slugify(heading) or "section"
            count = seen.get(base, 0)
            seen[base] = count + 1
            anchor = base if count == 0 else f"{base}-{count}"
            start, lines = first_line + offset, [line]
        else:
            lines.append(line)
    flush()
    return tuple(chunks)


def parse_view(text: str, path: str, default_section: str) -> View:
    """Parse a view: frontmatter options and its heading-delimited chunks."""
    meta, body, body_line = split_frontmatter(text, path)
    try:
        _unknown_keys(meta, VIEW_KEYS)
        max_tokens = meta.get("max_tokens")
        if max_tokens is not None and (isinstance(max_tokens, bool)
                                       or not isinstance(max_tokens, int) or max_tokens < 1):
            raise ValidationError(f"expected a positive integer, got {max_tokens!r}",
                                  field="max_tokens")
        channels = _str_list(meta.get("channels"), "channels")
        for channel in channels:
            _choice(channel, CHANNELS, "channels")
        name = path.rsplit("/", 1)[-1].removesuffix(".md")
        return View(
            path=path,
            section=_choice(meta.get("section", default_section), VIEW_SECTIONS, "section"),
            pinned=_bool(meta.get("pinned", False), "pinned"),
            sensitivity=_choice(meta.get("sensitivity", "none"), SENSITIVITIES, "sensitivity"),
            channels=channels, max_tokens=max_tokens,
            title=_text(meta.get("title", name), "title"),
            chunks=_view_chunks(body, body_line),
        )
    except FormatError as exc:
        raise _located(exc, text, path) from None


def yaml_problem(exc: yaml.MarkedYAMLError, first_line: int = 1) -> tuple[str, int]:
    """What a YAML parser error says, and the 1-based line it points at."""
    mark = exc.problem_mark
    line = mark.line + first_line if mark is not None else first_line
    problem = str(exc.problem)
    if exc.context and exc.context_mark is not None:
        opened = exc.context_mark.line + first_line
        if opened != line:
            problem += f" ({exc.context} that opens on line {opened})"
    return problem, line


def load_yaml(text: str, path: str) -> dict[str, Any]:
    """A YAML mapping document, or a FormatError naming its line."""
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        problem, line = yaml_problem(exc)
        raise FormatError(f"broken YAML: {problem}", path=path, line=line) from None
    except yaml.YAMLError as exc:
        raise FormatError(f"broken YAML: {exc}", path=path, line=1) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FormatError(f"expected a mapping at the top, got {type(data).__name__}",
                          path=path, line=1)
    return data


# --------------------------------------------------------------------------- writing

def _meta_without_defaults(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in pairs
            if v not in (None, "", ())}


def decision_to_text(decision: Decision) -> str:
    """The Markdown file of a decision."""
    meta = _meta_without_defaults([
        ("id", decision.id), ("ts", decision.ts), ("tenant_id", decision.tenant_id),
        ("title", decision.title), ("scope", decision.scope), ("status", decision.status),
        ("refs", decision.refs), ("supersedes", decision.supersedes),
        ("rationale", decision.rationale), ("constraints", decision.constraints),
        ("alternatives", decision.alternatives), ("consequences", decision.consequences),
        ("confidence", decision.confidence),
        ("sensitivity", None if decision.sensitivity == "none" else decision.sensitivity),
        ("tags", decision.tags),
    ])
    return _dump(meta, decision.text)


def task_to_text(task: Task) -> str:
    """The Markdown file of a task."""
    meta = _meta_without_defaults([
        ("id", task.id), ("ts", task.ts), ("tenant_id", task.tenant_id),
        ("title", task.title), ("status", task.status), ("owner", task.owner),
        ("session_id", task.session_id), ("refs", task.refs),
        ("sensitivity", None if task.sensitivity == "none" else task.sensitivity),
        ("tags", task.tags),
    ])
    return _dump(meta, task.details)


def summary_to_text(summary: Summary) -> str:
    """The Markdown file of a summary."""
    meta = _meta_without_defaults([
        ("id", summary.id), ("ts", summary.ts), ("tenant_id", summary.tenant_id),
        ("scope", summary.scope), ("session_id", summary.session_id),
        ("refs", summary.refs), ("decisions", summary.decisions),
        ("sensitivity", None if summary.sensitivity == "none" else summary.sensitivity),
        ("tags", summary.tags),
    ])
    return _dump(meta, summary.text)


def handoff_to_text(handoff: Handoff) -> str:
    """The YAML file of a handoff packet."""
    meta = _meta_without_defaults([
        ("id", handoff.id), ("ts", handoff.ts), ("tenant_id", handoff.tenant_id),
        ("from_agent", handoff.from_agent), ("to_agent", handoff.to_agent),
        ("task", handoff.task), ("constraints", handoff.constraints),
        ("decisions", handoff.decisions), ("required_files", handoff.required_files),
        ("open_questions", handoff.open_questions), ("refs", handoff.refs),
    ])
    return str(yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=88))


def _dump(meta: dict[str, Any], body: str) -> str:
    head = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=88)
    return f"---\n{head}---\n{body.strip()}\n"


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
