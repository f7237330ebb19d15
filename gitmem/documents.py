"""Markdown and YAML records: decisions, tasks, summaries, handoffs, views.

Every parser takes the file's text and its store-relative path (YAML read and
written by gitmem/yamlio.py) and raises a
`FormatError`/`ValidationError` naming `path:line`, the field and what was
expected. A record's fields are all checked (gitmem/fields.py): the error raised
is the file's first problem and carries the rest (`problems`). Parsed records are
frozen dataclasses; the `*_to_text` functions write them back in the canonical
form the store keeps.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from gitmem.errors import FormatError, ValidationError
from gitmem.fields import Fields
from gitmem.records import (
    CHANNELS,
    DECISION_SCOPES,
    DECISION_STATUSES,
    SUMMARY_SCOPES,
    TASK_STATUSES,
    check_bool,
    check_choice,
    check_str_list,
    check_text,
)
from gitmem.yamlio import SafeLoader, dump_yaml, load_yaml, yaml_error

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

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
        meta = yaml.load(text[opening.end() + 1:closing.start()], Loader=SafeLoader)
    except yaml.YAMLError as exc:
        raise yaml_error(exc, path, "broken YAML frontmatter", first_line=2) from None
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
        found = "line 1 is not '---'" if text.strip() else "the file is empty"
        raise FormatError(f"a {what} file starts with YAML frontmatter between '---' lines "
                          f"(id, ts, ...); {found}", path=path, line=1)
    return split_frontmatter(text, path)


def _check_file_name(fields: Fields, path: str, expected: str, record_id: str,
                     text: str, naming: tuple[str, ...] = ("id",)) -> None:
    """A record lives in the file its id names; unless its id (or what else names the
    file: `naming`, a summary's scope) is itself at fault, and so already reported."""
    if any(p.field in naming for p in fields.problems):
        return
    if not path.endswith(expected):
        fields.fail(ValidationError(f"file name does not match id {record_id} (expected "
                                    f"{expected})", path=path,
                                    line=field_line(text, "id") or 1, field="id"))


def _located(exc: FormatError, text: str, path: str, body_line: int = 1) -> FormatError:
    """Locate a field error at its key's line (the body's first line for `body`).

    A missing field has no line of its own: line 1, where the frontmatter opens.
    """
    key = (exc.field or "").split(".")[0]
    if key == "body":
        return exc.at(path, body_line)
    return exc.at(path, (field_line(text, key) or 1) if key else 1)


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
    channel: str = ""     # the summary event's channel ("": none, loaded on every channel)


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


DECISION_KEYS = ("id", "ts", "tenant_id", "scope", "status", "refs", "title", "rationale",
                 "constraints", "alternatives", "consequences", "confidence", "supersedes",
                 "sensitivity", "tags")


def parse_decision(text: str, path: str, default_tenant: str) -> Decision:
    """Parse and validate a decision file."""
    meta, body, body_line = _record_frontmatter(text, path, "decision")
    fields = Fields(meta, DECISION_KEYS, default_tenant)
    decision = Decision(
        id=fields.id("dec"), ts=fields.ts(), tenant_id=fields.tenant(),
        scope=fields.choice("scope", "project", DECISION_SCOPES),
        status=fields.choice("status", "active", DECISION_STATUSES),
        refs=fields.refs("a decision must cite at least one source id (P4)"),
        text=fields.body(body), title=fields.optional_text("title"),
        rationale=fields.strings("rationale"), constraints=fields.strings("constraints"),
        alternatives=fields.strings("alternatives"), consequences=fields.strings("consequences"),
        confidence=fields.number("confidence", 0, 1), supersedes=fields.ids("supersedes", "dec"),
        sensitivity=fields.sensitivity(), tags=fields.strings("tags"),
    )
    _check_file_name(fields, path, f"decisions/{decision.id}.md", decision.id, text)
    fields.raise_problems(lambda exc: _located(exc, text, path, body_line))
    return decision


TASK_KEYS = ("id", "ts", "tenant_id", "status", "title", "owner", "refs", "session_id",
             "sensitivity", "tags")


def parse_task(text: str, path: str, default_tenant: str) -> Task:
    """Parse and validate a task file."""
    meta, body, body_line = _record_frontmatter(text, path, "task")
    fields = Fields(meta, TASK_KEYS, default_tenant)
    task = Task(
        id=fields.id("tsk"), ts=fields.ts(), tenant_id=fields.tenant(),
        status=fields.choice("status", "open", TASK_STATUSES),
        title=fields.text("title"), details=body.strip(), owner=fields.optional_text("owner"),
        refs=fields.refs(), session_id=fields.optional_text("session_id"),
        sensitivity=fields.sensitivity(), tags=fields.strings("tags"),
    )
    _check_file_name(fields, path, f"tasks/{task.id}.md", task.id, text)
    fields.raise_problems(lambda exc: _located(exc, text, path, body_line))
    return task


SUMMARY_KEYS = ("id", "ts", "tenant_id", "scope", "refs", "session_id", "decisions",
                "sensitivity", "tags", "channel")


def parse_summary(text: str, path: str, default_tenant: str) -> Summary:
    """Parse and validate a summary file."""
    meta, body, body_line = _record_frontmatter(text, path, "summary")
    fields = Fields(meta, SUMMARY_KEYS, default_tenant)
    summary = Summary(
        id=fields.id("sum"), ts=fields.ts(), tenant_id=fields.tenant(),
        scope=fields.choice("scope", "session", SUMMARY_SCOPES),
        refs=fields.refs("a summary must cite the events it summarises (P4)"),
        text=fields.body(body), session_id=fields.optional_text("session_id"),
        decisions=fields.ids("decisions", "dec"),
        sensitivity=fields.sensitivity(), tags=fields.strings("tags"),
        channel=("" if fields.meta.get("channel") in (None, "")
                 else fields.choice("channel", "", CHANNELS)),
    )
    _check_file_name(fields, path, f"summaries/{summary.scope}/{summary.id}.md", summary.id,
                     text, ("id", "scope"))
    fields.raise_problems(lambda exc: _located(exc, text, path, body_line))
    return summary


HANDOFF_KEYS = ("id", "ts", "tenant_id", "from_agent", "to_agent", "task", "constraints",
                "decisions", "required_files", "open_questions", "refs")


def parse_handoff(text: str, path: str, default_tenant: str) -> Handoff:
    """Parse and validate a handoff packet (YAML)."""
    meta = load_yaml(text, path)
    fields = Fields(meta, HANDOFF_KEYS, default_tenant)
    handoff = Handoff(
        id=fields.id("hof"), ts=fields.ts(), tenant_id=fields.tenant(),
        to_agent=fields.name("to_agent"), task=fields.text("task"),
        from_agent=fields.optional_text("from_agent"), constraints=fields.strings("constraints"),
        decisions=fields.ids("decisions", "dec"), required_files=fields.strings("required_files"),
        open_questions=fields.strings("open_questions"), refs=fields.refs(),
    )
    _check_file_name(fields, path, f"handoffs/{handoff.id}.yaml", handoff.id, text)
    fields.raise_problems(lambda exc: _located(exc, text, path))
    return handoff


VIEW_KEYS = ("section", "pinned", "sensitivity", "channels", "max_tokens", "title")
VIEW_SECTIONS = ("identity", "rules", "task_state", "relevant_decisions",
                 "retrieved_evidence", "recent_window", "tool_state")


def slugify(heading: str) -> str:
    """A GitHub-style anchor for a heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return re.sub(r"\s", "-", slug)


@functools.cache
def _markdown() -> MarkdownIt:
    """The parser of views. Views are reviewed on GitHub, which renders CommonMark and GFM
    tables; only the block structure is needed to find the headings, so inline rules
    (emphasis, links) are not run. Made at the first view read: a write of an event never
    needs it (the import is a tenth of the CLI's start)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").disable("inline")

_LINE_END = re.compile(r"\r\n?|\n")  # where CommonMark (and so markdown-it) ends a line


def _view_chunks(body: str, first_line: int) -> tuple[ViewChunk, ...]:
    """The text before a view's first heading, then each top-level heading (`#` or a
    setext underline; not one in a list item or a quote) with what follows it."""
    tokens = _markdown().parse(body)
    starts = [0, *(end.end() for end in _LINE_END.finditer(body))]  # each line's offset
    cuts = [(starts[token.map[0]], tokens[i + 1].content) for i, token in enumerate(tokens)
            if token.type == "heading_open" and token.level == 0 and token.map]
    chunks: list[ViewChunk] = []
    seen: dict[str, int] = {}   # a slug's last number
    used: set[str] = set()      # every anchor given: each is a chunk's key
    heading, anchor, start, line = "", "", 0, first_line
    for end, content in [*cuts, (len(body), None)]:
        if text := body[start:end].strip():
            chunks.append(ViewChunk(anchor=anchor, heading=heading, text=text, line=line))
        if content is None:
            break
        line += len(_LINE_END.findall(body, start, end))  # a lone CR ends one too
        heading = " ".join(part.strip() for part in content.split("\n"))  # setext: lines
        base = slugify(heading) or "section"
        anchor, count = base, seen.get(base, 0)
        while anchor in used:  # `Notes` twice and `Notes 1` all slugify to notes-1
            count += 1
            anchor = f"{base}-{count}"
        seen[base] = count
        used.add(anchor)
        start = end
    return tuple(chunks)


def parse_view(text: str, path: str, default_section: str) -> View:
    """Parse a view: frontmatter options and its heading-delimited chunks (every problem
    of its frontmatter at once, as a record's)."""
    meta, body, body_line = split_frontmatter(text, path)
    fields = Fields(meta, VIEW_KEYS, "")
    name = path.rsplit("/", 1)[-1].removesuffix(".md")
    view = View(
        path=path, section=fields.choice("section", default_section, VIEW_SECTIONS),
        pinned=fields.checked(lambda: check_bool(meta.get("pinned", False), "pinned"), False),
        sensitivity=fields.sensitivity(),
        channels=fields.checked(lambda: _view_channels(meta), ()),
        max_tokens=fields.checked(lambda: _view_max_tokens(meta), None),
        title=fields.checked(lambda: check_text(meta.get("title", name), "title"), name),
        chunks=fields.checked(lambda: _view_chunks(body, body_line), ()),
    )
    fields.raise_problems(lambda exc: _located(exc, text, path))
    return view


def _view_channels(meta: Mapping[str, Any]) -> tuple[str, ...]:
    channels = check_str_list(meta.get("channels"), "channels")
    for channel in channels:
        check_choice(channel, CHANNELS, "channels")
    return channels


def _view_max_tokens(meta: Mapping[str, Any]) -> int | None:
    max_tokens = meta.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool)
                                   or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValidationError(f"expected a positive integer, got {max_tokens!r}",
                              field="max_tokens")
    return max_tokens


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
        ("channel", summary.channel), ("refs", summary.refs), ("decisions", summary.decisions),
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
    return dump_yaml(meta)


def _dump(meta: dict[str, Any], body: str) -> str:
    return f"---\n{dump_yaml(meta)}---\n{body.strip()}\n"
