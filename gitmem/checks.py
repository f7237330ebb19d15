"""The checks of `gitmem verify` and the pre-commit hook, over a tree of store files
(`Checker`; gitmem/verify.py runs it over the work tree, the git index or a commit).

Each problem is a FormatError naming `path:line`:
- an events file that is not a pure append of its committed version (P1);
- a record that does not parse or validate (events, decisions, tasks, summaries,
  handoffs, views, policies: each problem of a record or policy file), an events
  file whose last line has no newline, a policy file or the manifest missing;
- a dangling reference: `refs`, `supersedes` or `decisions` naming an id that
  no file of the tree holds, or a record removed while others still cite it;
- an event id on a line that is not its original (gitmem/copies.py): another
  event under a recorded id, or the same event in a second day file (the index
  keeps one line per id, and would lose the event with that line's file); a check
  of what a commit adds looks its new lines' ids up in every committed day file;
- an event in another day's file than its ts's;
- a record or event that cites another tenant's record or event (a decision that
  supersedes, a handoff that hands over, another's decision): the write path refuses
  them all (gitmem/ref_owners.py reads the tenants);
- a decision that supersedes itself, or is on a loop of `supersedes` (none on it is
  active: gitmem/supersession.py);
- a secret: `sensitivity: secret`, text matching a redaction pattern of
  `policies/privacy.yaml` (an event's object keys too), or an event's value under a
  key that names a secret (`redact_keys`) left unredacted (the write path redacts; a
  hand edit may not);
- a staging file of a write a crash interrupted (`.tmp-`: gitmem/recovery.py), a file
  of a record directory gitmem never reads (misnamed), a summary id in both scopes;
- a symbolic link in the store, committed or on disk (gitmem/link_checks.py);
- a torn last line, with how to take it out while HEAD lacks it (recovery.torn_hint).
A work tree checked out with CRLF line endings (core.autocrlf) is compared with its
committed version as git commits it, with LF.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path

from gitmem.copies import Copy, EventLines, why_original
from gitmem.documents import (
    Decision,
    field_line,
    parse_decision,
    parse_handoff,
    parse_summary,
    parse_task,
)
from gitmem.errors import FormatError, ValidationError
from gitmem.ids import ANY_EVENT_ID
from gitmem.link_checks import behind_policy_link, committed_link, file_link, linked_folders_on_disk
from gitmem.policies import (
    Policies,
    parse_budgets,
    parse_channels,
    parse_manifest,
    parse_privacy,
)
from gitmem.policy_warnings import pinned_view_too_big
from gitmem.records import content_hash, find_event, iter_events, parse_ts
from gitmem.recovery import BATCH_PREFIX, PREFIX, torn_hint
from gitmem.ref_owners import Owners, cited
from gitmem.regular_files import DIRECTORY
from gitmem.rows import parse_file
from gitmem.store import classify, day_file_rel, day_files_near, misnamed, record_paths
from gitmem.supersession import Link, closing_entry, supersede_loops
from gitmem.trees import GitTree, Tree, WorkTree

PRIVACY_POLICY = "policies/privacy.yaml"
_EVENT_ID = re.compile(rb'"id":\s*"(evt_[0-9A-HJKMNP-TV-Z]{26})"')
# Each policy file's parser; given a list, it adds every problem of the file to it.
_POLICY_PARSERS: dict[str, Callable[[str, str, list[FormatError]], object]] = {
    "policies/budgets.yaml": parse_budgets, "policies/privacy.yaml": parse_privacy,
    "policies/channels.yaml": parse_channels, "manifest.json": parse_manifest}


@dataclass
class _Ref:
    path: str
    line: int | None
    field: str
    target: str
    tenant: str = ""  # the citer's: what it cites (but an artifact) must be that tenant's


@dataclass
class Checker:
    """Runs the checks over `tree`; `base` is the committed version (append-only check)."""

    tree: Tree
    policies: Policies
    display: str = ""          # prefix that names files as the user sees them (memory/)
    base: Tree | None = None
    merging: bool = False      # a merge commit: HEAD's lines must survive, in order
    base_rev: str = "HEAD"     # the revision `base` is, for the commands messages give
    base_name: str = ""        # how messages name it ("" -> "HEAD's version")
    only_new: bool = False     # events: check appended lines only (the committed were checked)
    # HEAD's first parent, when what is checked is to be committed on HEAD: lines that
    # HEAD itself added may be dropped by `git commit --amend`, which no hook can tell
    amend_base: Tree | None = None
    disk: Tree | None = None   # the work tree, when the index is checked (`_staged_only`)
    committed: bool = False    # `tree` is a commit's: its lines are committed (no torn hint)
    problems: list[FormatError] = field(default_factory=list)
    refs: list[_Ref] = field(default_factory=list)
    event_ids: EventLines = field(default_factory=EventLines)
    written: list[_Ref] = field(default_factory=list)  # the record files events wrote
    links: dict[str, Link] = field(default_factory=dict)  # the decisions read, by id
    retired: set[str] = field(default_factory=set)  # decisions read with `status: superseded`
    owners: Owners = field(init=False)  # the tenants of the records and events cited

    def __post_init__(self) -> None:
        self.owners = Owners(self.tree, self.policies.manifest.default_tenant)

    def fail(self, rel: str, line: int | None, message: str,
             field_name: str | None = None) -> None:
        """Record one problem (a value it quotes that looks like a secret, redacted: the
        report is printed, by the pre-commit hook too)."""
        self.problems.append(ValidationError(self.policies.privacy.redact_message(message),
                                             path=self.display + rel, line=line,
                                             field=field_name))

    def located(self, exc: FormatError, rel: str) -> None:
        """Record a parser's error, each problem it stands for (a record file's every
        one), named as the user sees the file."""
        redact = self.policies.privacy.redact_message
        self.problems += [p.redacted(redact, self.display + (p.path or rel))
                          for p in exc.problems]

    # ------------------------------------------------------------------ files

    def check_file(self, rel: str) -> None:
        """Every check that concerns one file alone."""
        kind = classify(rel)
        if committed_link(self.tree, rel, kind, self.display, self.fail):
            return
        file_link(self.tree, rel, kind, self.fail)
        if kind is None:
            if rel.rsplit("/", 1)[-1].startswith(BATCH_PREFIX):
                self.fail(rel, None, "the journal of a write that did not "
                          "finish (a crash): `gitmem sync` cuts its lines back, or says why "
                          "it cannot; never commit it")
            elif rel.rsplit("/", 1)[-1].startswith(PREFIX):
                self.fail(rel, None, "a staging file of a write that did not finish (a "
                          "crash): `gitmem sync` puts it in place or removes it; never "
                          "commit it")
            elif (expected := misnamed(rel)) is not None and self.tree.read(rel) is not None:
                self.fail(rel, None, f"gitmem never reads this file: it is not named "
                          f"{expected}; rename it, or move it out of {rel.partition('/')[0]}/")
            return
        data = self.tree.read(rel)
        if data is None:
            if isinstance(self.tree, WorkTree) and rel in self.tree.unread:
                self.fail(rel, None, f"cannot be read: {self.tree.unread[rel]}; gitmem skips "
                          "it (put a file in its place, or remove it)")
            elif kind == "policy" and isinstance(self.tree, WorkTree) and (
                    self.tree.store / rel).is_dir():
                self.fail(rel, None, f"cannot be read: {DIRECTORY}")  # as the loader says
            elif kind == "policy" and not behind_policy_link(self.tree, rel):
                self.fail(rel, None, "missing; run `gitmem init` to create the default")
            elif kind == "events" and self.base is not None and self.base.read(rel) is not None:
                self.fail(rel, None, "events files are append-only, but this one is deleted; "
                          + (self._staged_only(rel, self.base.read(rel) or b"")
                             or f"restore it with `git checkout {self.base_rev} -- "
                             f"{self.display}{rel}`"))
            return
        if kind == "events":
            self._check_events(rel, data)
        elif kind == "artifact":
            digest = hashlib.sha256(data).hexdigest()
            if digest != rel.rsplit("/", 1)[-1]:
                self.fail(rel, None, f"content does not match its name (sha256 {digest}); "
                          "artifacts are content-addressed and never edited")
        else:
            self._check_record(rel, kind, data)

    def _check_events(self, rel: str, data: bytes) -> None:
        start = 1
        before = self.base.read(rel) if self.base is not None else None
        raw = data  # as read: a torn line's offsets are in the file on disk (`_as_on_disk`)
        torn = _Torn(lambda: self._as_on_disk(rel, raw), self.display + rel)
        if before is not None and isinstance(self.tree, WorkTree) and b"\r\n" in data \
                and b"\r" not in before:  # checked out with CRLF (core.autocrlf): git
            data = data.replace(b"\r\n", b"\n")  # commits it as it was, with LF
        if before is not None and not data.startswith(before):
            if self.merging and _keeps_lines(before, data):
                before = None  # a union merge: every committed line is still there
            else:
                self._rewritten(rel, before, data)
                before = None  # which lines are new is unknown: check them all
        elif not self.committed and self.base_rev == "HEAD":  # a torn line HEAD lacks
            head = before or b""  # is named (not HEAD's last line with no newline)
            torn.new_from = head.count(b"\n") + 1 + (head[-1:] not in (b"", b"\n"))
        committed = b""  # lines not read again: a new line's id is looked up in them
        # the lines up to this one are the committed version's (a duplicate id's original)
        kept = before.count(b"\n") if before is not None else 0
        if before is not None and self.only_new:
            start = kept + 1
            data = data[len(before):]
            committed = before
        lines = data.split(b"\n")
        if data and not data.endswith(b"\n"):
            self.fail(rel, start + data.count(b"\n"), "the last line has no newline "
                      "(a torn write?); finish or remove it"
                      + torn.hint(start + data.count(b"\n"), lines[-1], last=True))
        held: set[bytes] | None = None  # the ids the committed lines hold, read once
        for number, event in iter_events(data, rel, start):
            if isinstance(event, FormatError):
                hint = "" if number - start == len(lines) - 1 else torn.hint(
                    number, lines[number - start], last=False)
                self.located(FormatError(event.detail + hint, path=event.path, line=event.line,
                                         field=event.field) if hint else event, rel)
                self._secrets(rel, number, lines[number - start].decode("utf-8", "replace"))
                continue
            found = self.policies.privacy.find_secret_in([  # names too: never redacted
                event.content, list(event.tags), event.tenant_id, event.session_id,
                event.agent_id, event.actor.id])
            if found is not None:
                self.fail(rel, number, f"{found} of policies/privacy.yaml: secrets are never "
                          "stored; remove it")
            if event.sensitivity in self.policies.privacy.never_store:
                self.fail(rel, number, f"sensitivity {event.sensitivity!r} is never stored "
                          "(policies/privacy.yaml); remove this line", "sensitivity")
            if committed and event.id not in self.event_ids:
                if held is None:  # one pass, not a search of them all for each new line
                    held = set(ANY_EVENT_ID.findall(committed))  # (20,001 took 33 s)
                if event.id.encode() in held:
                    self._committed_line(rel, committed, event.id)
            self.event_ids.add(event.id, Copy(rel, number, event.hash, number <= kept, event.ts))
            self.owners.events.setdefault(event.id, event.tenant_id)
            home = day_file_rel(event.when)
            if home != rel:
                self.fail(rel, number, f"{event.id} belongs in {home}, the file of its ts's "
                          "date, not here", "ts")
            expected = content_hash(event.kind, event.content)
            if event.hash != expected:  # the dedupe key: a wrong one hides another event
                self.fail(rel, number, f"does not match the content (expected {expected})",
                          "hash")
            self.refs += [_Ref(rel, number, "refs", ref, event.tenant_id) for ref in event.refs]
            key = _RECORD_KEYS.get(event.kind)
            record = event.content.get(key) if key else None
            if isinstance(record, str) and record_paths(record):
                self.written.append(_Ref(rel, number, f"content.{key}", record))

    def _rewritten(self, rel: str, before: bytes, data: bytes) -> None:
        """Name where an events file stops being an append of its base, and the way back
        that keeps the lines appended since."""
        version = self.base_name or f"{self.base_rev}'s version"
        path = f"{self.display}{rel}"
        restore = f"`git checkout {self.base_rev} -- {path}`"
        line = before[:_common_prefix(before, data)].count(b"\n") + 1
        staged_only = self._staged_only(rel, before)
        if before.startswith(data):
            last = before.count(b"\n")
            gone = f"line {line}" if line == last else f"lines {line}-{last}"
            self.fail(rel, line, f"events files are append-only, but {gone} of {version} "
                      f"{'is' if line == last else 'are'} gone"
                      + (f" from what is staged; {staged_only}" if staged_only else
                         f"; restore {path} with {restore}") + self._amend_hint(rel, data))
            return
        on_disk = data if self.disk is None else self.disk.read(rel) or b""
        added = on_disk.count(b"\n") - before.count(b"\n")
        way_back = staged_only or (
            f"restore it with {restore}" if added <= 0 else
            f"put it back as `git show {self.base_rev}:{path}` has it ({restore} would "
            f"also drop the {added} line(s) appended since)") + (
            ", and record a correction as a new event")
        self.fail(rel, line, f"events files are append-only, but this line differs from "
                  f"{version}; {way_back}" + self._amend_hint(rel, data))

    def _as_on_disk(self, rel: str, data: bytes) -> bytes | None:
        """The bytes of `rel` on disk when `data` (as checked) is them, else None (the work
        tree's file differs from what is staged, or git made its line ends LF)."""
        if isinstance(self.tree, WorkTree):
            return data
        return data if isinstance(self.tree, GitTree) and self.tree.on_disk(rel) == data \
            else None

    def _staged_only(self, rel: str, before: bytes) -> str:
        """The way back when only the index lacks lines of `before`, the file on disk keeps
        them all (as a crashed autocommit leaves it), and a checkout would lose lines."""
        on_disk = self.disk.read(rel) if self.disk is not None else None
        path = f"{self.display}{rel}"
        return "" if on_disk is None or not on_disk.startswith(before) else (
            f"the file on disk keeps every line: stage it as it is with `git add {path}`, "
            f"or unstage the change with `git reset -q HEAD -- {path}` (not a checkout, "
            "which would drop the lines appended on disk since)")

    def _amend_hint(self, rel: str, data: bytes) -> str:
        """The way for `git commit --amend` when every line it drops or changes is one
        HEAD itself added: pre-commit cannot tell an amend from a new commit on HEAD, but
        after `git reset --soft HEAD^` the commit is a new one on HEAD^, which lacks them."""
        if self.amend_base is None or not data.startswith(self.amend_base.read(rel) or b""):
            return ""
        return (". Every line of HEAD's version this drops or changes came with HEAD "
                "itself: if this is `git commit --amend`, run `git reset --soft HEAD^` and "
                "commit instead (the commit is then checked against HEAD^, which lacks them)")

    def _committed_line(self, rel: str, committed: bytes, event_id: str) -> None:
        """Note where the committed lines of `rel` hold `event_id`, if they do."""
        found = find_event(committed, event_id, rel)
        if found is not None:
            number, event = found
            self.event_ids.add(event_id, Copy(rel, number, event.hash, committed=True, ts=event.ts))

    def _committed_elsewhere(self) -> None:
        """Note where the committed version's other files hold the ids of the new lines
        checked: a line pasted into another day file under a recorded id must not pass
        because its own file never held it. `git grep` finds the few files to read."""
        if not (self.only_new and isinstance(self.base, GitTree)):
            return
        wanted = {i for i, c in self.event_ids.first.items() if not c.committed}
        for rel in self.base.files_holding(wanted, "events/"):
            data = self.base.read(rel) or b""
            for event_id in sorted(wanted.intersection(
                    m.decode() for m in ANY_EVENT_ID.findall(data))):
                self._committed_line(rel, data, event_id)

    def _check_copies(self) -> None:
        """Name each line that repeats an event id and is not its original
        (gitmem/copies.py): a check of new lines names new lines only."""
        for event_id, copy, first in self.event_ids.not_original():
            if self.only_new and copy.committed:
                continue  # not what this commit adds
            where = f"{self.display}{first.path}:{first.line}"
            if copy.hash == first.hash:
                self.fail(copy.path, copy.line, f"{event_id} is also {where}; an event "
                          "lives in one day file (the index keeps one copy, and loses it "
                          "with that file)", "id")
                continue
            way = ("remove this line and record it again without its id, which mints a new "
                   "one") if not copy.committed else (
                "the index leaves this line out; remove it, committing with `git commit "
                "--no-verify` (events files are append-only, and this line is not the "
                "original), and record it again without its id if it should stay")
            self.fail(copy.path, copy.line, f"{event_id} is also {where} with other content; "
                      f"ids never repeat: {way} (that line is the original: "
                      f"{why_original(event_id, first, copy)})", "id")

    def _check_record(self, rel: str, kind: str, data: bytes) -> None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.fail(rel, data.count(b"\n", 0, exc.start) + 1, "not valid UTF-8")
            return
        patterns = self._own_patterns() if rel == PRIVACY_POLICY else ()
        for number, line in enumerate(text.splitlines(), start=1):
            if not _defines(line, patterns):  # a pattern may name a secret's words itself
                self._secrets(rel, number, line)
            if line.startswith(("<<<<<<< ", ">>>>>>> ", "||||||| ")):
                self.fail(rel, number, "an unresolved merge conflict marker; resolve the "
                          "conflict and remove the markers")
        tenant = self.policies.manifest.default_tenant
        try:
            if kind == "decision":
                decision = parse_decision(text, rel, tenant)
                self.links[decision.id] = _link(rel, text, decision)
                if decision.status == "superseded":
                    self.retired.add(decision.id)
                self._cite(rel, text, "refs", decision.refs, decision.tenant_id)
                self._cite(rel, text, "supersedes", decision.supersedes, decision.tenant_id)
            elif kind == "task":
                task = parse_task(text, rel, tenant)
                self._cite(rel, text, "refs", task.refs, task.tenant_id)
            elif kind == "summary":
                summary = parse_summary(text, rel, tenant)
                self._cite(rel, text, "refs", summary.refs, summary.tenant_id)
                self._cite(rel, text, "decisions", summary.decisions, summary.tenant_id)
                twin = next((p for p in record_paths(rel.rsplit("/", 1)[-1][:-3])
                             if p != rel and self.tree.read(p) is not None), None)
                if twin is not None and twin < rel:
                    self.fail(rel, None, f"{self.display}{twin} has this summary's id too; ids "
                              "never repeat, and the index takes one of them: remove one")
            elif kind == "handoff":
                handoff = parse_handoff(text, rel, tenant)
                self._cite(rel, text, "refs", handoff.refs, handoff.tenant_id)
                self._cite(rel, text, "decisions", handoff.decisions, handoff.tenant_id)
            elif kind == "policy":
                errors: list[FormatError] = []
                _POLICY_PARSERS[rel](text, rel, errors)
                for problem in errors:
                    self.located(problem, rel)
                return
            # the rows the index makes of it: what the parse lets through but the index
            # refuses (a NUL a YAML escape puts in a value) is named here as by a sync
            rows = parse_file(rel, kind, data, self.policies)
            for problem in rows.errors:
                self.located(problem, rel)
            if kind == "view":
                self.problems += pinned_view_too_big(rows, self.policies.budgets, text,
                                                     self.display + rel)
        except FormatError as exc:
            self.located(exc, rel)

    def _cite(self, rel: str, text: str, key: str, ids: Iterable[str], tenant: str = "") -> None:
        line = field_line(text, key)
        self.refs += [_Ref(rel, line, key, target, tenant) for target in ids]

    def _own_patterns(self) -> tuple[str, ...]:
        """The sources of the redaction patterns privacy.yaml defines."""
        privacy = self.policies.privacy
        return tuple(p.pattern for p in (*privacy.patterns, *privacy.key_patterns))

    def _secrets(self, rel: str, number: int, text: str) -> None:
        pattern = self.policies.privacy.find_secret(text)
        if pattern is not None:
            self.fail(rel, number, f"matches the redaction pattern {pattern!r} of "
                      "policies/privacy.yaml: secrets are never stored; remove it")

    # ------------------------------------------------------------------ references

    def check_refs(self, *, complete: bool) -> None:
        """Every collected reference must name something the tree holds.

        `complete`: every events file was read, so `event_ids` is the whole set;
        otherwise the tree's events files are scanned, newest first, until found.
        """
        self._committed_elsewhere()
        self._check_copies()
        paths = set(self.tree.paths())
        for made in self.written:
            if not any(p in paths for p in record_paths(made.target)):
                self.fail(made.path, made.line, f"this event wrote {made.target}, which is "
                          "not in the store: a write that did not finish (`gitmem sync` puts "
                          "its staged file in place) or a record removed; restore it", made.field)
        wanted = {r.target for r in self.refs if r.target.startswith("evt_")}
        missing_events = wanted - set(self.event_ids)
        if missing_events and not complete:
            missing_events -= self._scan_event_ids(missing_events)
        for ref in self.refs:
            if ref.target.startswith("evt_"):
                exists = ref.target not in missing_events
            else:
                exists = any(p in paths for p in record_paths(ref.target))
            if not exists and (unread := self._unread_day(ref.target)) is not None:
                self.fail(ref.path, ref.line, f"{ref.target} cannot be looked for: "
                          f"{self.display}{unread}; mend the file, or cite another event",
                          ref.field)
            elif not exists:
                self.fail(ref.path, ref.line, f"{ref.target} is not in the store (a dangling "
                          "reference); cite an id that exists", ref.field)
            elif ref.tenant and self.owners.tenant(ref.target) not in (None, ref.tenant):
                self.fail(ref.path, ref.line, f"{ref.target} is {cited(ref.target)} of "
                          f"another tenant than {ref.tenant!r}; cite only its own tenant's "
                          "records and events", ref.field)
        self._check_loops()
        if complete:
            self._check_forks()
            linked_folders_on_disk(self.tree, self.fail)

    def _unread_day(self, ref: str) -> str | None:
        """The work tree's day file that may hold event `ref` (its own date, or a day
        either side, as the write path looks) but could not be read, and what is there: a
        link to nothing, a loop of links, a FIFO (None: no such file, or not an event)."""
        if not ref.startswith("evt_") or not isinstance(self.tree, WorkTree):
            return None
        unread = self.tree.unread
        return next((f"{rel}: cannot be read: {unread[rel]}" for rel in day_files_near(ref)
                     if rel in unread), None)

    def _check_forks(self) -> None:
        """A warning where two active decisions supersede the same one (two branches that
        each replaced it, merged): the chain has no single latest. Settled, as
        docs/FORMATS.md says, once all but one are superseded (`status: superseded`, or
        a later decision's `supersedes`)."""
        by_target: dict[str, dict[str, _Ref]] = {}  # a decision -> its successors' files
        for ref in self.refs:  # one entry a decision: one naming it twice is no fork
            if ref.field == "supersedes" and ref.path.startswith("decisions/"):
                by_target.setdefault(ref.target, {}).setdefault(ref.path, ref)
        for target, refs in sorted(by_target.items()):
            active = [r for r in refs.values() if Path(r.path).stem not in by_target
                      and Path(r.path).stem not in self.retired]
            if len(active) < 2:
                continue
            first, *others = sorted(active, key=lambda r: r.path)
            for ref in others:
                self.problems.append(ValidationError(
                    f"{target} is also superseded by {Path(first.path).stem}: both are active "
                    "(a fork, as two branches that each replaced it leave once merged); record "
                    "a decision that supersedes both, or the one that should stay",
                    path=self.display + ref.path, line=ref.line, field=ref.field,
                    severity="warning"))

    def _check_loops(self) -> None:
        """An error at each decision on a loop of `supersedes` through a decision this
        check read. A chain is followed into the tree's other decisions: a staged check
        reads only the files a commit changes, and the loop it closes runs through others."""
        links = dict(self.links)
        pending = [target for link in self.links.values() for target in link.supersedes]
        while pending:
            target = pending.pop()
            if target not in links and (read := self._tree_decision(target)) is not None:
                links[target] = _link(*read)
                pending += links[target].supersedes
        loops = supersede_loops({d: link.supersedes for d, link in links.items()})
        for decision_id, loop in sorted(loops.items()):
            if self.links.keys().isdisjoint(loop):
                continue  # an older loop this check reaches: not what it is about
            link = links[decision_id]
            if loop == [decision_id]:
                self.fail(link.path, link.line, f"{decision_id} supersedes itself, so it is "
                          "never active and has left every ACB; remove it from its own "
                          "supersedes", "supersedes")
                continue
            closer, target = closing_entry(loop, {d: links[d].ts for d in loop})
            self.fail(link.path, link.line, f"{decision_id} is on a loop of supersedes "
                      f"({' -> '.join([*loop, decision_id])}, each superseding the next): none "
                      "of them is active, so all have left every ACB; remove the entry that "
                      f"closes the loop: {target} from the supersedes of {self.display}"
                      f"{links[closer].path}:{links[closer].line} ({closer} is not newer than "
                      f"{target}, and a decision supersedes older ones)", "supersedes")

    def _tree_decision(self, decision_id: str) -> tuple[str, str, Decision] | None:
        """A decision of the tree, as (path, text, decision); None when it cannot be read
        (a missing file is a dangling reference, a broken one its own problem)."""
        rel = f"decisions/{decision_id}.md"
        data = self.tree.read(rel)
        if data is None:
            return None
        try:
            text = data.decode("utf-8")
            return rel, text, parse_decision(text, rel, self.policies.manifest.default_tenant)
        except (UnicodeDecodeError, FormatError):
            return None

    def _scan_event_ids(self, wanted: set[str]) -> set[str]:
        found: set[str] = set()
        for rel in sorted((p for p in self.tree.paths() if classify(p) == "events"),
                          reverse=True):
            data = self.tree.read(rel) or b""
            found.update(m.decode() for m in _EVENT_ID.findall(data) if m.decode() in wanted)
            if found >= wanted:
                break
        return found


class _Torn:
    """A torn line's hint (recovery.torn_hint), for a line from `new_from` on (none
    committed; None: unknown, no hint), at its offset in the file's bytes on disk (`disk`,
    read at the first hint; None: unknown, no offsets), whose line starts are summed once."""

    def __init__(self, disk: Callable[[], bytes | None], path: str) -> None:
        self.disk, self.path = disk, path
        self.new_from: int | None = None
        self._lines: list[bytes] | None = None
        self._starts: list[int] = []

    def hint(self, number: int, line: bytes, *, last: bool) -> str:
        if self.new_from is None or number < self.new_from:
            return ""
        if self._lines is None:
            on_disk = self.disk()
            self._lines = [] if on_disk is None else on_disk.split(b"\n")
            self._starts = list(accumulate((len(each) + 1 for each in self._lines), initial=0))
        if not self._lines:
            return torn_hint(line, None, self.path, last=last)
        return torn_hint(self._lines[number - 1], self._starts[number - 1], self.path, last=last)


def _link(rel: str, text: str, decision: Decision) -> Link:
    return Link(rel, field_line(text, "supersedes"), parse_ts(decision.ts), decision.supersedes)


# The record file an event of each kind writes, by the content key naming it.
_RECORD_KEYS = {"decision": "decision_id", "task_update": "task_id", "summary": "summary_id"}


def _common_prefix(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def _keeps_lines(before: bytes, after: bytes) -> bool:
    """Every line of `before` appears in `after`, in order (a union merge keeps them)."""
    remaining = iter(after.split(b"\n"))
    return all(any(line == other for other in remaining) for line in before.split(b"\n"))


def _defines(line: str, patterns: Sequence[str]) -> bool:
    """Whether a line of privacy.yaml is (a part of) a redaction pattern's definition:
    a literal pattern (a codename) matches itself, and must not make the file a
    secret. Any other line is scanned as every file's is."""
    text = line.strip().removeprefix("- ").strip().strip("'\"").replace("''", "'")
    return bool(text) and any(text in pattern for pattern in patterns)
