"""The record files a write derives from its events: a decision's, a task's (the file
as the update leaves it), a summary's; and the checks that the records an event cites
exist and are its tenant's. Each sees the files the same write staged before it."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from gitmem import ids
from gitmem.documents import (
    Decision,
    Summary,
    Task,
    decision_to_text,
    parse_decision,
    parse_handoff,
    parse_summary,
    parse_task,
    split_frontmatter,
    summary_to_text,
    task_to_text,
)
from gitmem.errors import FormatError, UnreadableFileError, ValidationError, shown
from gitmem.policies import Policies
from gitmem.records import SENSITIVITIES, find_event, parse_ts
from gitmem.regular_files import read_regular
from gitmem.store import (
    artifact_path,
    classify,
    day_files_near,
    record_paths,
    require_task,
)
from gitmem.task_edits import edited_task
from gitmem.yamlio import load_yaml

logger = logging.getLogger(__name__)


@dataclass
class Staged:
    """A file that becomes visible only once its event line is durable."""

    target: Path
    data: bytes
    replace_existing: bool = False
    tenant: str = ""  # a task's or decision's tenant: the only one its rows concern
    fresh: bool = False  # its id minted here: no rows of its path can be indexed yet


# The files a write has staged so far, by path: a later event of the same write builds
# on them (a task created, then updated; a decision, then one superseding it).
Staging = dict[Path, Staged]


# a cited record's parser, for its tenant (an artifact is anyone's: content-addressed)
_PARSERS: dict[str, Callable[[str, str, str], Any]] = {
    "decision": parse_decision, "task": parse_task, "summary": parse_summary,
    "handoff": parse_handoff}


class RecordFiles:
    """Derives and checks record files for one store under its policies."""

    def __init__(self, store: Path, policies: Policies) -> None:
        self.store = store
        self.policies = policies

    def current(self, rel: str, staging: Staging) -> str | None:
        """A record file's text as this write leaves it so far (None: there is none)."""
        staged = staging.get(self.store / rel)
        if staged is not None:
            return staged.data.decode("utf-8")
        try:  # a FIFO there would wait for a writer for good
            return read_regular(self.store / rel).decode("utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None
        except UnreadableFileError as exc:  # a FIFO, a link to nothing: raised
            if exc.directory:  # no file there, as before
                return None
            raise

    def excerpt(self, content: dict[str, Any]) -> list[Staged]:
        """A tool result's output cut to its excerpt (in `content`); the whole output as
        an artifact when it did not fit."""
        output = content.pop("output", None)
        if output is None:
            output = content.get("excerpt_text", "")
        if not isinstance(output, str):
            raise ValidationError("expected the tool's output as a string", field="content.output")
        data = output.encode("utf-8")
        limit = self.policies.budgets.max_excerpt_bytes
        if len(data) <= limit:
            content["excerpt_text"] = output
            content["truncated"] = False
            content.setdefault("line_range", [1, _lines(data)])
            return []
        art = ids.artifact_id(data)
        total = _lines(data)
        head = cut_excerpt(data, limit * 2 // 3)
        tail = tail_excerpt(data, limit - len(head) - 200)  # the line between: < 200 bytes
        first_tail, last_head = total - _lines(tail) + 1, _lines(head)
        if first_tail <= last_head + 1:
            tail = b""  # nothing between them: no tail (the head alone is the excerpt)
        content["line_range"] = [1, last_head]
        text = head.decode("utf-8")
        if tail:
            text += (("" if head.endswith(b"\n") else "\n")
                     + f"[… {first_tail - last_head - 1} lines cut (lines {last_head + 1}-"
                     f"{first_tail - 1} of {total}); the whole output is artifact {art} …]\n"
                     + tail.decode("utf-8"))
            content["tail_range"] = [first_tail, total]
        # the output was redacted whole; a cut can leave the start of a longer word that
        # a pattern matches on its own (`AKIA` + 16 capitals of a longer run)
        content.update(excerpt_text=self.policies.privacy.redact(text), truncated=True,
                       artifact_id=art, bytes=len(data), total_lines=total)
        return [Staged(artifact_path(self.store, art), data)]

    def artifact(self, content: dict[str, Any]) -> list[Staged]:
        """An artifact event's data as its file (`content` names it by its hash)."""
        data = content.pop("data", None)
        if data is None:
            return []
        if not isinstance(data, str):
            raise ValidationError("expected the artifact's data as a string", field="content.data")
        raw = data.encode("utf-8")
        content["artifact_id"] = ids.artifact_id(raw)
        content["bytes"] = len(raw)
        return [Staged(artifact_path(self.store, content["artifact_id"]), raw)]

    def require_records(self, refs: Iterable[str], staging: Staging, tenant: str) -> None:
        """Every record an event cites (a decision, task, summary, handoff, artifact) is in
        the store or in this write, a file (something else at its path is named, never
        called missing nor taken for the record), and (but for an artifact,
        content-addressed) one of the tenant's: a line is never rewritten, so a typo in a
        ref would be a dangling reference for good. (Events cited: `Recorder._require_events`.)"""
        for ref in refs:
            paths = record_paths(ref)
            rels = [rel for rel in paths  # a link to nothing is there, and named below
                    if self.store / rel in staging or os.path.lexists(self.store / rel)]
            parse = _PARSERS.get(classify(rels[0]) or "") if rels else None
            try:
                if rels and self.store / rels[0] not in staging \
                        and not (self.store / rels[0]).is_file():
                    read_regular(self.store / rels[0])  # a FIFO, a directory, a dangling link
                text = self.current(rels[0], staging) if parse is not None else None
            except UnreadableFileError as exc:
                raise ValidationError(f"{ref} cannot be cited: {exc}; mend the file",
                                      field="refs") from None
            theirs = (text is not None and parse is not None and self.owned(
                text, rels[0], parse, tenant, f"{ref} cannot be read", "refs") is None)
            if paths and (not rels or theirs):  # another tenant's is as none at all
                raise ValidationError(f"{ref} is not in the store (a dangling reference); "
                                      "cite an id that exists", field="refs")

    def owned(self, text: str, rel: str, parse: Callable[[str, str, str], Any], tenant: str,
              unread: str, field_name: str) -> Any:
        """The record `text` holds if it is `tenant`'s, else None: the tenant is read
        before the file is parsed, so another tenant's broken file is never quoted to
        this one; a problem of the tenant's own file is raised, as `unread: <problem>`
        naming `field_name`, and so is a tenant that cannot be read (to everyone alike,
        the file unquoted)."""
        default = self.policies.manifest.default_tenant
        if _tenant_of(text, rel, default, unread, field_name) != tenant:
            return None
        try:
            found = parse(text, rel, default)
        except FormatError as exc:
            raise ValidationError(f"{unread}: {exc}", field=field_name) from None
        return found if found.tenant_id == tenant else None

    def event_tenant(self, event_id: str) -> str | None:
        """The tenant of event `event_id` if a day file holds it (None: none does), looked
        for where its event would be: the days around the time its id carries (for an
        event written elsewhere a moment ago, which the index does not hold yet)."""
        unread: UnreadableFileError | None = None
        for rel in day_files_near(event_id):
            try:
                found = find_event(read_regular(self.store / rel), event_id, rel)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except UnreadableFileError as exc:  # a FIFO, a directory, a loop of links
                unread = unread or exc
                continue
            if found is not None:
                return found[1].tenant_id
        if unread is not None:  # it may be in that file: no telling it is not
            raise ValidationError(f"{event_id} cannot be looked for: {unread}; mend the "
                                  "file, or cite another event", field="refs")
        return None

    def require_decision(self, dec: str, field_name: str, tenant: str,
                         staging: Staging) -> Decision:
        """A decision cited as superseded, handed over or stated by a summary must be
        one of the tenant's: another tenant's is named as one that does not exist."""
        rel = f"decisions/{dec}.md"
        try:
            text = self.current(rel, staging)
        except UnreadableFileError as exc:
            raise ValidationError(f"decision {dec} cannot be read: {exc}",
                                  field=field_name) from None
        found = None if text is None else self.owned(
            text, rel, parse_decision, tenant, f"decision {dec} cannot be read", field_name)
        if not isinstance(found, Decision):  # another tenant's is as none at all
            raise ValidationError(f"no decision {dec} in {self.store / 'decisions'}",
                                  field=field_name)
        return found

    def decision(self, full: dict[str, Any], when: datetime, staging: Staging) -> Staged:
        content = full["content"]
        content.setdefault("decision_id", ids.new_id("dec", when))
        decision = Decision(
            id=content["decision_id"], ts=full["ts"], tenant_id=full["tenant_id"],
            scope=content.get("scope", "project"), status="active",
            refs=tuple(full["refs"]), text=content["text"],
            title=content.get("title", ""),
            rationale=_strings(content, "rationale"),
            constraints=_strings(content, "constraints"),
            alternatives=_strings(content, "alternatives"),
            consequences=_strings(content, "consequences"),
            confidence=content.get("confidence"),
            supersedes=_strings(content, "supersedes"),
            sensitivity=full["sensitivity"], tags=tuple(full["tags"]))
        rel = f"decisions/{decision.id}.md"
        text = _valid(decision_to_text(decision), rel, full["tenant_id"], parse_decision,
                      "decision_id")
        twice = next((d for n, d in enumerate(decision.supersedes)
                      if d in decision.supersedes[:n]), None)
        if twice is not None:  # verify would read the decision as a fork of itself
            raise ValidationError(f"decision {twice} is named twice in supersedes; name it "
                                  "once", field="content.supersedes")
        for dec in decision.supersedes:
            older = self.require_decision(dec, "content.supersedes", decision.tenant_id,
                                          staging)
            if parse_ts(older.ts) > parse_ts(decision.ts):  # verify would blame the older
                raise ValidationError(
                    f"decision {dec} is dated {older.ts}, after this one ({decision.ts}): a "
                    "decision supersedes older ones; give this one a later ts",
                    field="content.supersedes")
        if (self.store / rel).exists() or self.store / rel in staging:
            raise ValidationError(f"decision {decision.id} already exists and is never "
                                  "rewritten; record a new decision that supersedes it",
                                  field="content.decision_id")
        return Staged(self.store / rel, text.encode(), tenant=decision.tenant_id)

    def task(self, full: dict[str, Any], when: datetime, staging: Staging) -> Staged:
        """The task file a `task_update` leaves: a new task (its id minted, or named with
        a title), or the tenant's task updated; another tenant's id is not found, as an
        id nobody holds without a title."""
        content = full["content"]
        task_id = content["task_id"]
        existing: Task | None = None
        rel = f"tasks/{task_id}.md"
        path = self.store / rel
        current = self.current(rel, staging)
        if current is not None:  # another tenant's task is as none at all: its tenant
            default = self.policies.manifest.default_tenant  # read first, its file unquoted
            if _tenant_of(current, rel, default, f"task {task_id} cannot be read",
                          "content.task_id") != full["tenant_id"]:
                self._no_task(task_id)
            existing = parse_task(current, rel, default)  # the tenant's own: problems named
            if existing.tenant_id != full["tenant_id"]:
                self._no_task(task_id)
        if existing is None:
            if not content.get("title"):  # an id named without a title: nothing to update
                self._no_task(task_id)
            task = Task(id=task_id, ts=full["ts"], tenant_id=full["tenant_id"],
                        status=content.get("status", "open"), title=content["title"],
                        details=content.get("text", ""), owner=content.get("owner", ""),
                        refs=tuple(dict.fromkeys((*full["refs"], full["id"]))),
                        session_id=full["session_id"],
                        sensitivity=full["sensitivity"], tags=tuple(full["tags"]))
        else:
            # an update may make a task more sensitive, never less (one that says
            # nothing of it is `none`): lowering it is a person's edit of the file
            sensitivity = max(existing.sensitivity, full["sensitivity"],
                              key=SENSITIVITIES.index)
            if full["sensitivity"] not in ("none", sensitivity):  # asked lower: said so
                logger.warning("task %s keeps sensitivity %s: an update never lowers it "
                               "(asked %s); edit its file to lower it", task_id, sensitivity,
                               full["sensitivity"])
            task = replace(
                existing, status=content.get("status", existing.status),
                title=content.get("title", existing.title),
                details=content.get("text", existing.details),
                owner=content.get("owner", existing.owner),
                refs=tuple(dict.fromkeys((*existing.refs, *full["refs"], full["id"]))),
                sensitivity=sensitivity,
                tags=tuple(dict.fromkeys((*existing.tags, *full["tags"]))))
        text = task_to_text(task)
        if existing is not None and current is not None:  # a person's lines stay theirs
            text = edited_task(current, existing, task,
                               lambda t: parse_task(t, rel, full["tenant_id"])) or text
        text = _valid(text, rel, full["tenant_id"], parse_task, "task_id")
        return Staged(path, text.encode(), replace_existing=existing is not None,
                      tenant=task.tenant_id)

    def _no_task(self, task_id: str) -> NoReturn:
        """Raise as `gitmem task --id` does for a task that is not there."""
        require_task(self.store, task_id, missing=True)
        raise AssertionError("require_task raises for a task it is told is missing")

    def new_task_id(self, full: dict[str, Any]) -> str:
        """The id of a task the write creates without naming it: it needs a title."""
        if not full["content"].get("title"):
            raise ValidationError("a new task needs a title", field="content.title")
        return ids.new_id("tsk", parse_ts(full["ts"]))

    def summary(self, full: dict[str, Any], when: datetime, staging: Staging) -> Staged:
        content = full["content"]
        if not full["refs"]:
            raise ValidationError("a summary must cite the events it summarises (P4)",
                                  field="refs")
        content.setdefault("summary_id", ids.new_id("sum", when))
        scope = content.get("scope", "session")
        summary = Summary(
            id=content["summary_id"], ts=full["ts"], tenant_id=full["tenant_id"],
            scope=scope, refs=tuple(full["refs"]), text=content["text"],
            session_id=full["session_id"], decisions=_strings(content, "decisions"),
            sensitivity=full["sensitivity"], tags=tuple(full["tags"]),
            channel=full["channel"])
        rel = f"summaries/{scope}/{summary.id}.md"
        if any((self.store / p).exists() or self.store / p in staging  # either scope's
               for p in record_paths(summary.id)):
            raise ValidationError(f"summary {summary.id} already exists and is never "
                                  "rewritten", field="content.summary_id")
        text = _valid(summary_to_text(summary), rel, full["tenant_id"], parse_summary,
                      "summary_id")
        for dec in summary.decisions:  # as a handoff's: the tenant's own, and there
            self.require_decision(dec, "content.decisions", summary.tenant_id, staging)
        return Staged(self.store / rel, text.encode())


_TENANT_LINE = re.compile(r"""^tenant_id[ \t]*:[ \t]*['"]?([^'"\s#]*)""", re.MULTILINE)


def _named_tenant(text: str, rel: str, default: str) -> str | None:
    """The tenant a record file names, read before the file is checked: from its fields,
    else (they do not load) from its one `tenant_id:` line, else the default, as a
    parse would give it (None: no telling: two such lines, or not a string)."""
    meta: dict[str, Any] | None
    try:
        meta = load_yaml(text, rel) if rel.endswith(".yaml") else split_frontmatter(text, rel)[0]
    except FormatError:
        named = set(_TENANT_LINE.findall(text))
        meta = {"tenant_id": named.pop()} if len(named) == 1 else {} if not named else None
    owner = meta.get("tenant_id", default) if isinstance(meta, dict) else None
    return owner if isinstance(owner, str) else None


def _tenant_of(text: str, rel: str, default: str, unread: str, field_name: str) -> str:
    """`_named_tenant`, raised as `unread` (naming `field_name`) when there is no telling:
    the same to every tenant, the file's owner too, and never quoting the file."""
    owner = _named_tenant(text, rel, default)
    if owner is None:
        raise ValidationError(f"{unread}: {rel} does not name one tenant (its tenant_id "
                              "is not a single string); mend the file", field=field_name)
    return owner


def _valid(text: str, rel: str, tenant: str, parse: Callable[[str, str, str], object],
           id_key: str) -> str:
    """`text`, a record file as written, once its own parser accepts it (a person reads
    it and the indexer parses it); else the problem, named as the event's field."""
    try:
        parse(text, rel, tenant)
    except FormatError as exc:  # each of the file's problems, named as its event's field
        first, *rest = [ValidationError(p.detail, field=_event_field(p.field, id_key))
                        for p in exc.problems]
        raise first.with_others(rest) from None
    return text


_EVENT_LEVEL = ("refs", "tags", "sensitivity", "session_id", "tenant_id", "ts")


def _event_field(name: str | None, id_key: str) -> str:
    """The event field behind a field of the Markdown file an event produces."""
    if name is None:
        return "content"
    if name in _EVENT_LEVEL:
        return name
    if name == "body":
        return "content.text"
    return f"content.{id_key}" if name == "id" else f"content.{name}"


def _strings(content: dict[str, Any], key: str) -> tuple[str, ...]:
    """A list-of-strings content field (a single string becomes a one-item list)."""
    value = content.get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        value = content[key] = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError(f"expected a list of strings, got {shown(value)}",
                              field=f"content.{key}")
    return tuple(value)


def _lines(data: bytes) -> int:
    """How many lines `data` holds (a last line without its newline counts)."""
    return max(1, data.count(b"\n") + (0 if data.endswith(b"\n") else 1))


def tail_excerpt(data: bytes, limit: int) -> bytes:
    """At most `limit` bytes of the end of `data`, starting at a line start (b"" when
    not one whole line fits): where a build's or a test run's error is."""
    if limit <= 0:
        return b""
    tail = data[-limit:]
    if len(tail) == len(data):
        return data
    newline = tail.find(b"\n")
    if newline < 0 or newline + 1 >= len(tail):
        return b""
    return tail[newline + 1:]


def cut_excerpt(data: bytes, limit: int) -> bytes:
    """At most `limit` bytes of `data`, ending at a line end when one is near."""
    if len(data) <= limit:
        return data
    head = data[:limit]
    newline = head.rfind(b"\n")
    if newline >= limit // 2:
        return head[:newline + 1]
    return head.decode("utf-8", errors="ignore").encode("utf-8")
