"""Turn parsed files into index rows: one `FileRows` per source file.

This is where chunk text, token counts, importance and the searchable extras
are decided, so the incremental sync and the full reindex cannot disagree.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from gitmem import tokens
from gitmem.documents import (
    ViewChunk,
    field_line,
    parse_decision,
    parse_handoff,
    parse_summary,
    parse_task,
    parse_view,
    slugify,
)
from gitmem.errors import FormatError
from gitmem.folding import fold, search_text
from gitmem.ids import ANY_REF
from gitmem.policies import Policies
from gitmem.privacy import Privacy
from gitmem.records import (
    Event,
    check_storable,
    compact_json,
    content_key,
    event_text,
    iter_events,
)
from gitmem.store import StatKey, at_home

EVENT_COLUMNS = ("event_id", "tenant_id", "ts", "session_id", "agent_id", "channel",
                 "actor_type", "actor_id", "kind", "sensitivity", "tags", "refs", "content",
                 "hash", "path", "line", "home")
CHUNK_COLUMNS = ("chunk_id", "tenant_id", "source_type", "source_id", "path", "line", "ts",
                 "kind", "channel", "session_id", "agent_id", "sensitivity", "tags", "refs",
                 "hash", "token_est", "importance", "text", "search_extra", "search_keys",
                 "search_text")
DECISION_COLUMNS = ("decision_id", "tenant_id", "ts", "status", "scope", "title", "text",
                    "rationale", "constraints", "alternatives", "consequences", "confidence",
                    "supersedes", "refs", "sensitivity", "tags", "path")
TASK_COLUMNS = ("task_id", "tenant_id", "ts", "status", "title", "details", "owner", "refs",
                "session_id", "sensitivity", "tags", "path")
SUMMARY_COLUMNS = ("summary_id", "tenant_id", "ts", "scope", "session_id", "refs", "decisions",
                   "text", "sensitivity", "tags", "path")
HANDOFF_COLUMNS = ("handoff_id", "tenant_id", "ts", "from_agent", "to_agent", "task",
                   "constraints", "decisions", "required_files", "open_questions", "refs", "path")
VIEW_COLUMNS = ("path", "section", "pinned", "sensitivity", "channels", "max_tokens", "title")
VIEW_CHUNK_COLUMNS = ("path", "anchor", "ord", "heading", "line", "text", "token_est")
ARTIFACT_COLUMNS = ("artifact_id", "event_id", "tenant_id", "bytes", "path")

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "events": EVENT_COLUMNS, "chunks": CHUNK_COLUMNS, "decisions": DECISION_COLUMNS,
    "tasks": TASK_COLUMNS, "summaries": SUMMARY_COLUMNS, "handoffs": HANDOFF_COLUMNS,
    "views": VIEW_COLUMNS, "view_chunks": VIEW_CHUNK_COLUMNS, "artifacts": ARTIFACT_COLUMNS,
}
# Event kinds whose Markdown file is the retrieval unit (the event only logs the act).
FILE_BACKED_KINDS = ("decision", "summary", "task_update")
# Chunks of at most this many tokens are "short": BM25's length normalization favours
# them, and they have a GIN index of their own (sql/indexes.sql, sql/lexemes.sql).
SHORT_TOKENS = 48
BASE_IMPORTANCE = {"message": 0.3, "tool_call": 0.1, "tool_result": 0.3, "artifact": 0.2,
                   "decision": 0.8, "summary": 0.6, "task": 0.5}



@dataclass
class FileRows:
    """Rows derived from one file, per table, plus the problems found in it."""

    tables: dict[str, list[tuple[Any, ...]]] = field(
        default_factory=lambda: {name: [] for name in TABLE_COLUMNS})
    errors: list[FormatError] = field(default_factory=list)
    known: int = 0   # event lines taken from their writer's events, not decoded
    # the event rows of lines whose id an earlier line of the same read holds (not
    # indexed; the indexer names those whose content differs from the indexed line)
    repeats: list[tuple[Any, ...]] = field(default_factory=list)

    def count(self) -> int:
        """Rows over all tables."""
        return sum(len(rows) for rows in self.tables.values())

    def extend(self, other: FileRows) -> None:
        """Add another file's rows (for batched bulk loads)."""
        for name, rows in other.tables.items():
            self.tables[name].extend(rows)
        self.errors.extend(other.errors)


def importance(kind: str, tags: tuple[str, ...], actor_type: str = "") -> float:
    """A small, deterministic prior: decisions > summaries > tasks > messages."""
    score = BASE_IMPORTANCE.get(kind, 0.2)
    if kind == "message" and actor_type == "human":
        score = 0.4
    if "pinned" in tags:
        return 1.0
    if "important" in tags:
        score += 0.3
    return round(min(score, 1.0), 3)


@functools.lru_cache(maxsize=1024)
def tenant_tag(tenant: str) -> str:
    """The prefix of every lexeme of the tenant's chunks (sql/schema.sql, gitmem_qualify):
    a full-text query of the tenant's own lexemes reads that tenant's posting lists only.
    Two tenants sharing a tag (one chance in 4e9) stay apart by the tenant_id test."""
    return hashlib.md5(tenant.encode()).hexdigest()[:8]


def time_keys(ts: datetime) -> list[str]:
    """The UTC day, ISO week and month of a chunk, as searchable keys (@d, @w, @m)."""
    day = ts.astimezone(UTC)
    year, week, _ = day.isocalendar()
    return [f"@d{day:%Y%m%d}", f"@w{year}{week:02d}", f"@m{day:%Y%m}"]


def search_keys(tenant: str, ts: str) -> list[str]:
    """The chunk's tenant tag, then its time keys (the search_keys column); `ts` is
    an RFC 3339 timestamp (`records.parse_ts`), as every record holds it."""
    offset = "Z" if ts.endswith("Z") else ts[-6:]
    # A local hour lies in one UTC day when the offset is whole hours; at +05:30 the
    # UTC day turns at 05:30 local time, so the keys are those of the minute
    start = ts[:13] + ":00" if offset.endswith(("Z", ":00")) else ts[:16]
    return [tenant_tag(tenant), *_period_keys(start, offset)]


@functools.lru_cache(maxsize=4096)
def _period_keys(start: str, offset: str) -> tuple[str, ...]:
    """Time keys of every instant of one local hour or minute (`start`: YYYY-MM-DDTHH:MM);
    a reindex meets each hour often."""
    return tuple(time_keys(datetime.fromisoformat(f"{start}:00{offset}")))


def search_extra(actor_id: str, tags: tuple[str, ...],
                 redact: Callable[[str], str] | None = None) -> str:
    """The actor's name and tags (`topic:memory` -> topic memory), searchable too,
    through `redact` if given, then folded as a query is (gitmem/folding.py): folding
    first could turn a secret into a form no pattern matches."""
    named = " ".join([actor_id, *tags])  # names hold no spaces: one pass of the patterns
    if redact is not None:
        named = redact(named)
    words = named.split(" ")
    words += [part for tag in words[1:] for part in tag.replace("/", ":").split(":") if part]
    return fold(" ".join(words))


def split_text(text: str, max_tokens: int) -> list[str]:
    """`text` cut at paragraph (then line) boundaries into parts of <= max_tokens."""
    return [part for part, _ in split_counted(text, max_tokens)]


def split_counted(text: str, max_tokens: int) -> list[tuple[str, int]]:
    """`split_text` with each part's token count; no string is tokenized twice."""
    encoded = tokens.encode(text)
    if len(encoded) <= max_tokens:
        return [(text, len(encoded))]
    paragraphs = text.split("\n\n")
    whole = encoded if len(paragraphs) == 1 else None
    parts: list[tuple[str, int]] = []
    current: list[tuple[str, int]] = []
    used = 0
    for piece, size in (p for para in paragraphs for p in _fit(para, max_tokens, whole)):
        if current and used + size + 1 > max_tokens:
            parts.append(_joined(current))
            current, used = [], 0
        current.append((piece, size))
        used += size + 1
    if current:
        parts.append(_joined(current))
    return parts


def _joined(pieces: list[tuple[str, int]]) -> tuple[str, int]:
    if len(pieces) == 1:
        return pieces[0]
    text = "\n\n".join(piece for piece, _ in pieces)
    return text, tokens.count(text)


def _fit(paragraph: str, max_tokens: int,
         encoded: list[int] | None = None) -> list[tuple[str, int]]:
    """Pieces of <= max_tokens - 1 tokens, each with its token count."""
    encoded = tokens.encode(paragraph) if encoded is None else encoded
    if len(encoded) <= max_tokens - 1:
        return [(paragraph, len(encoded))]
    # Encode once and cut where a token starts a character: a token may hold part of
    # a multi-byte character, and decoding such a prefix would invent U+FFFD.
    starts = tokens.char_starts(encoded)
    out: list[tuple[str, int]] = []
    pos = 0
    limit = max_tokens - 1
    while pos < len(paragraph):
        first, budget = bisect.bisect_left(starts, pos), limit
        while True:  # a piece that begins after a space begins inside the token the
            head = _head(paragraph, starts, pos, first + budget)  # space began: its
            size = tokens.count(head.strip("\n"))                # count is taken again
            if size <= limit or budget <= 1:
                break
            budget = max(1, budget - (size - limit))
        if head.strip("\n"):
            out.append((head.strip("\n"), size))
        pos += len(head)
        while pos < len(paragraph) and paragraph[pos] in "\n \t":
            pos += 1
    return out


def _head(paragraph: str, starts: list[int], pos: int, last: int) -> str:
    """The piece of `paragraph` from `pos` to the start of token `last`, ended at a
    line's end, else a word's, where one keeps at least half of it."""
    end = starts[last] if last < len(starts) else len(paragraph)
    if end <= pos:  # one character of more tokens than the limit: keep it whole
        end = next((s for s in starts[last:] if s > pos), len(paragraph))
    head = paragraph[pos:end]
    if end < len(paragraph):  # not the last piece: a line's end, else a word's
        cut = head.rfind("\n")
        if cut <= len(head) // 2 and not paragraph[end].isspace():
            cut = max(head.rfind(" "), head.rfind("\t"))  # a word cut in two is found
        if cut > len(head) // 2:                          # by neither half
            head = head[:cut]
    return head


def event_chunk_text(event: Event) -> str:
    """What an ACB item shows for an event."""
    body = event_text(event)
    if event.kind == "message":
        return f"{event.actor.id}: {body}"
    if event.kind == "tool_call":
        return f"{event.actor.id} called {body}"
    if event.kind == "tool_result":
        where = f" {event.content['path']}" if event.content.get("path") else ""
        return f"[{event.content['tool']} result{where}]\n{event.content['excerpt_text']}".rstrip()
    return f"{event.actor.id}: {body}"


def event_row(event: Event, path: str, line: int) -> tuple[Any, ...]:
    """The `events` row of one event line (EVENT_COLUMNS)."""
    return (event.id, event.tenant_id, event.ts, event.session_id, event.agent_id,
            event.channel, event.actor.type, event.actor.id, event.kind, event.sensitivity,
            list(event.tags), list(event.refs), compact_json(event.content), event.hash,
            path, line, at_home(event.id, path, event.ts))


# The ids the write path adds to an event's content after it redacted the rest (an
# artifact's digest, a decision's or task's id): never redacted (a pattern of long hex
# matched an artifact's, and the ACB lost its link to the output).
MINTED_IDS = ("artifact_id", "decision_id", "task_id", "summary_id")


def _minted(content: dict[str, Any]) -> dict[str, str]:
    return {key: value for key in MINTED_IDS
            if isinstance(value := content.get(key), str) and ANY_REF.match(value)}


def _redact_text(text: str, content: dict[str, Any], privacy: Privacy) -> str:
    """`privacy.redact` over an event's chunk text, leaving the ids the write path minted
    whole (an artifact without a name shows its id: the ACB's link to the output)."""
    return _redacted_around(text, [v for v in _minted(content).values() if v in text],
                            privacy)


def _redacted_around(text: str, kept: list[str], privacy: Privacy) -> str:
    if not kept:
        return privacy.redact(text)
    # split on the id itself (a pattern made of it would be compiled per event)
    return kept[0].join(_redacted_around(part, kept[1:], privacy)
                        for part in text.split(kept[0]))


def stored_event(event: Event, privacy: Privacy) -> Event:
    """An event read from a file as the index keeps it: its content and tags redacted as
    the write path redacts them (`Privacy.redact_value`), and so are the names a pattern
    matches (the write path refuses those; verify names them), so that no row holds a
    secret a line written by hand, by a merge or under other patterns holds. The tenant
    is kept: it is what isolates one tenant's rows from another's. An event the write
    path made is its own stored form."""
    redact = privacy.redact_name
    minted = _minted(event.content)
    content = privacy.redact_value({k: v for k, v in event.content.items() if k not in minted}
                                   if minted else event.content)
    content.update(minted)
    tags = tuple(map(redact, event.tags))
    names = (event.session_id, event.agent_id, event.actor.id)
    stored = tuple(map(redact, names))
    if stored == names and tags == event.tags and content == event.content:
        return event  # the common case: nothing to redact
    return replace(event, content=content, tags=tags, session_id=stored[0],
                   agent_id=stored[1], actor=replace(event.actor, id=stored[2]))


def event_rows(event: Event, path: str, line: int, policies: Policies, out: FileRows,
               written: bool = False) -> None:
    """Rows of one event: the event, its chunks, its artifact reference. Every row holds
    its stored form (`stored_event`), and the chunks' text, what an ACB shows, goes
    through the redaction patterns, unless the event is one the write path just made
    (`written`: redacted already)."""
    privacy = policies.privacy
    if not written:  # a line from a file, written under other patterns, by hand, by a merge
        event = stored_event(event, privacy)
    tags = list(event.tags)
    refs = list(event.refs)
    out.tables["events"].append(event_row(event, path, line))
    if "artifact_id" in event.content:
        out.tables["artifacts"].append((event.content["artifact_id"], event.id, event.tenant_id,
                                        int(event.content.get("bytes", 0)), path))
    if event.kind in FILE_BACKED_KINDS:
        return
    if written:  # the write path redacted its content and tags, and refuses secret names
        text, extra = event_chunk_text(event), search_extra(event.actor.id, event.tags)
    else:  # fields joined may make a match none of them holds (`token` + `: value`)
        text = _redact_text(event_chunk_text(event), event.content, privacy)
        extra = search_extra(event.actor.id, event.tags, privacy.redact_name)
    same = content_key(event.kind, event.content)  # the dedupe key: never the line's `hash`
    parts = split_counted(text, policies.budgets.chunk_max_tokens)
    weight = importance(event.kind, event.tags, event.actor.type)
    keys = search_keys(event.tenant_id, event.ts)
    for number, (text, size) in enumerate(parts, start=1):
        chunk_id = event.id if len(parts) == 1 else f"{event.id}#{number}"
        digest = same if len(parts) == 1 else f"{same}#{number}"
        out.tables["chunks"].append((
            chunk_id, event.tenant_id, "event", event.id, path, line, event.ts, event.kind,
            event.channel, event.session_id, event.agent_id, event.sensitivity, tags, refs,
            digest, size, weight, text, extra, keys, search_text(text)))


def _record_chunk(out: FileRows, *, chunk_id: str, tenant: str, source_type: str, path: str,
                  line: int, ts: str, kind: str, session: str, sensitivity: str,
                  tags: tuple[str, ...], refs: tuple[str, ...], text: str,
                  weight: float, channel: str = "") -> None:
    digest = "sha256:" + hashlib.sha256(f"{source_type}\0{text}".encode()).hexdigest()
    out.tables["chunks"].append((
        chunk_id, tenant, source_type, chunk_id, path, line, ts, kind, channel, session, "",
        sensitivity, list(tags), list(refs), digest, tokens.count(text), weight, text,
        search_extra("", tags), search_keys(tenant, ts), search_text(text)))


def decision_text(title: str, text: str, rationale: tuple[str, ...]) -> str:
    """What an ACB item shows for a decision: its text, then its rationale."""
    head = f"Decision: {title}\n{text}" if title else f"Decision: {text}"
    return head + (f"\nRationale: {'; '.join(rationale)}" if rationale else "")


# An append the writer is about to make: the file's (size, ctime_ns, inode) under the
# writer's lock before it writes, and the file's size once the lines are in.
Announced = tuple[StatKey, int]


@dataclass(frozen=True)
class Appended:
    """Lines this process appended to an events file: where, the bytes, their events."""

    offset: int                  # where the lines begin in the file
    data: bytes                  # the lines (one per event, each with its newline)
    events: tuple[Event, ...]
    # the file's (size, ctime_ns, inode) right after the write, under the writer's
    # lock: a later stat that differs means someone else changed the file since
    stat: StatKey | None = None
    # ... and right before it: when it is the stat after the write before (or the one a
    # sync read the file at), nobody else changed the file in between
    before: StatKey | None = None

    @property
    def end(self) -> int:
        """Where the lines end in the file."""
        return self.offset + len(self.data)


def split_known(appended: Sequence[Appended], offset: int,
                data: bytes) -> list[tuple[bytes, tuple[Event, ...] | None]]:
    """`data` (complete lines at `offset`) cut into runs: appended lines, with their
    events, and anything else (a line written by another process or by hand, a torn
    line's newline, a rewrite), with None: those bytes are parsed."""
    starts = {a.offset: a for a in appended if a.data}
    runs: list[tuple[bytes, tuple[Event, ...] | None]] = []
    position = other = 0
    while position < len(data):
        found = starts.get(offset + position)
        if found is not None and data.startswith(found.data, position):
            if other < position:
                runs.append((data[other:position], None))
            runs.append((found.data, found.events))
            position = other = position + len(found.data)
        else:  # on to the next line
            position = data.find(b"\n", position) + 1 or len(data)
    if other < len(data):
        runs.append((data[other:], None))
    return runs


def repeated_id(event_id: str, first_path: str, first_line: int, path: str,
                line: int) -> FormatError:
    """The error of a line whose event id an earlier line holds with other content: the
    index keeps the first, so this one is named rather than silently left out."""
    return FormatError(f"{event_id} is also {first_path}:{first_line} with other content; "
                       "ids never repeat (this line is not indexed); remove it and record it again "
                       "without its id, which mints a new one", path=path, line=line,
                       field="id")


def _line_starts(run: bytes) -> list[int]:
    starts, position = [0], run.find(b"\n")
    while position >= 0:
        starts.append(position + 1)
        position = run.find(b"\n", position + 1)
    return starts


def _torn(error: FormatError, run: bytes, starts: list[int], index: int,
          at: int) -> FormatError:
    """`error` of the run's line `index` (the run at byte `at`), with how to take the
    line out where it is a write of gitmem's a crash tore (as `gitmem verify` says it;
    whether it is committed, which the index cannot tell, is left to verify): in
    `gitmem status` and the daemon's, the bare "malformed JSON" said nothing of it."""
    from gitmem.recovery import torn_hint  # recovery imports this module

    begin = starts[index]
    raw = run[begin:run.find(b"\n", begin) if index + 1 < len(starts) else len(run)]
    # never `truncate -s`: lines appended after it (later, or in a run not read here)
    hint = torn_hint(raw, at + begin, error.path, last=False, committed=None)
    return FormatError(error.detail + hint, path=error.path, line=error.line,
                       field=error.field) if hint else error


def parse_file(path: str, kind: str, data: bytes, policies: Policies, *,
               start_line: int = 1, offset: int = 0,
               appended: Sequence[Appended] = ()) -> FileRows:
    """Rows for `data`, the content of the store file `path` of kind `kind`.

    For events files `data` holds complete lines only, the first being line
    `start_line`, at byte `offset`. Lines this process has just written
    (`appended`) are indexed from their events, without decoding them again.
    A bad line or file is recorded in `errors`, never raised; a value an error
    quotes goes through the redaction patterns (`gitmem status` and the daemon's
    status show them to any caller, as verify's to whoever commits).
    """
    out = _parse_file(path, kind, data, policies, start_line, offset, appended)
    out.errors = [e.redacted(policies.privacy.redact_message) for e in out.errors]
    return out


def _parse_file(path: str, kind: str, data: bytes, policies: Policies, start_line: int,
                offset: int, appended: Sequence[Appended]) -> FileRows:
    out = FileRows()
    tenant = policies.manifest.default_tenant
    if kind == "events":
        seen: set[str] = set()
        line, at = start_line, offset
        for run, known in (split_known(appended, offset, data) if appended else [(data, None)]):
            if known is None:
                parsed = iter_events(run, path, line)
            else:
                parsed = zip(range(line, line + len(known)), known, strict=True)
                out.known += len(known)
            starts: list[int] | None = None  # where each line of the run begins, once
            for number, event in parsed:
                if isinstance(event, FormatError):
                    if starts is None:
                        starts = _line_starts(run)
                    out.errors.append(_torn(event, run, starts, number - line, at))
                    continue
                if event.id in seen:  # a union merge may repeat a line: index it once
                    out.repeats.append(event_row(event, path, number))
                    continue
                seen.add(event.id)
                event_rows(event, path, number, policies, out, written=known is not None)
            line += run.count(b"\n")
            at += len(run)
        return out
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        out.errors.append(FormatError(f"not valid UTF-8 (byte 0x{data[exc.start]:02x})",
                                      path=path, line=data.count(b"\n", 0, exc.start) + 1))
        return out
    if "\x00" in text:
        out.errors.append(FormatError("contains a NUL character, which the index cannot store; "
                                      "remove it", path=path,
                                      line=text.count("\n", 0, text.index("\x00")) + 1))
        return out
    try:
        _markdown_rows(path, kind, text, tenant, out, policies.privacy.redact)
        _check_storable_rows(out, path, text)
    except FormatError as exc:  # a record's every problem, each its own error
        out = FileRows()
        out.errors += [problem.at(path, 1) for problem in exc.problems]
    return out


R = TypeVar("R")


def _redacted(record: R, redact: Callable[[str], str], *names: str) -> R:
    """`record` with these fields (a text, or a tuple of texts) redacted."""
    changes: dict[str, Any] = {}
    for name in names:
        value = getattr(record, name)
        changes[name] = redact(value) if isinstance(value, str) else tuple(map(redact, value))
    return replace(record, **changes)  # type: ignore[type-var]


def _served_chunk(chunk: ViewChunk, redact: Callable[[str], str]) -> ViewChunk:
    """A view chunk as it is served: its text and heading redacted, and its anchor (an
    item's id names it) made from the redacted heading, with its line to stay unique."""
    heading = redact(chunk.heading)
    anchor = chunk.anchor if heading == chunk.heading else \
        f"{slugify(heading) or 'section'}-{chunk.line}"
    return replace(chunk, heading=heading, anchor=anchor, text=redact(chunk.text))


def _check_storable_rows(out: FileRows, path: str, text: str) -> None:
    """The raw text has no NUL, but a YAML escape ("\\0") puts one into a value, which
    COPY would refuse for the whole batch: name the field and its line instead.
    Chunks are made of the record's values, so the record's row names the field."""
    for table, rows in out.tables.items():
        if table == "chunks":
            continue
        for row in rows:
            for column, value in zip(TABLE_COLUMNS[table], row, strict=True):
                try:
                    check_storable(value, column)
                except FormatError as exc:
                    raise exc.at(path, field_line(text, column) or 1) from None


def _markdown_rows(path: str, kind: str, text: str, tenant: str, out: FileRows,
                   redact: Callable[[str], str]) -> None:
    """A record's rows, every free text it serves through `redact` (the write path
    redacts what it writes; a person's edit, or a pattern added since, is caught here)."""
    if kind == "decision":
        d = _redacted(parse_decision(text, path, tenant), redact, "title", "text",
                      "rationale", "constraints", "alternatives", "consequences", "tags")
        out.tables["decisions"].append((
            d.id, d.tenant_id, d.ts, d.status, d.scope, d.title, d.text, list(d.rationale),
            list(d.constraints), list(d.alternatives), list(d.consequences), d.confidence,
            list(d.supersedes), list(d.refs), d.sensitivity, list(d.tags), path))
        _record_chunk(out, chunk_id=d.id, tenant=d.tenant_id, source_type="decision", path=path,
                      line=1, ts=d.ts, kind="decision", session="", sensitivity=d.sensitivity,
                      tags=d.tags, refs=d.refs, text=decision_text(d.title, d.text, d.rationale),
                      weight=importance("decision", d.tags))
    elif kind == "task":
        t = _redacted(parse_task(text, path, tenant), redact, "title", "details", "owner",
                      "tags")
        out.tables["tasks"].append((
            t.id, t.tenant_id, t.ts, t.status, t.title, t.details, t.owner, list(t.refs),
            t.session_id, t.sensitivity, list(t.tags), path))
        body = (f"Task [{t.status}] {t.title}" + (f" (owner: {t.owner})" if t.owner else "")
                + (f"\n{t.details}" if t.details else ""))
        finished = t.status in ("done", "cancelled")  # memory still, of less weight
        _record_chunk(out, chunk_id=t.id, tenant=t.tenant_id, source_type="task", path=path,
                      line=1, ts=t.ts, kind="task", session=t.session_id,
                      sensitivity=t.sensitivity, tags=t.tags, refs=t.refs, text=body,
                      weight=0.2 if finished else importance("task", t.tags))
    elif kind == "summary":
        s = _redacted(parse_summary(text, path, tenant), redact, "text", "tags")
        out.tables["summaries"].append((
            s.id, s.tenant_id, s.ts, s.scope, s.session_id, list(s.refs), list(s.decisions),
            s.text, s.sensitivity, list(s.tags), path))
        _record_chunk(out, chunk_id=s.id, tenant=s.tenant_id, source_type="summary", path=path,
                      line=1, ts=s.ts, kind="summary", session=s.session_id,
                      sensitivity=s.sensitivity, tags=s.tags, refs=s.refs,
                      text=f"Summary ({s.scope}): {s.text}", weight=importance("summary", s.tags),
                      channel=s.channel)
    elif kind == "handoff":
        h = _redacted(parse_handoff(text, path, tenant), redact, "task", "constraints",
                      "required_files", "open_questions", "from_agent", "to_agent")
        out.tables["handoffs"].append((
            h.id, h.tenant_id, h.ts, h.from_agent, h.to_agent, h.task, list(h.constraints),
            list(h.decisions), list(h.required_files), list(h.open_questions), list(h.refs),
            path))
    elif kind == "view":
        section = "identity" if path == "views/identity.md" else "rules"
        v = parse_view(text, path, section)
        v = replace(v, title=redact(v.title), chunks=tuple(
            _served_chunk(chunk, redact) for chunk in v.chunks))
        out.tables["views"].append((v.path, v.section, v.pinned, v.sensitivity,
                                    list(v.channels), v.max_tokens, v.title))
        for order, chunk in enumerate(v.chunks):
            out.tables["view_chunks"].append((v.path, chunk.anchor, order, chunk.heading,
                                              chunk.line, chunk.text, tokens.count(chunk.text)))
