"""The sections of an ACB and how each is filled, for one build (`Build`).

In priority order: identity and rules (views only), task_state (the tenant's open
tasks, this session's first), relevant_decisions (the active ends of the chains
retrieval ranked, then the newest), retrieved_evidence (ranked retrieval hits, the
replies to the best questions among them, pinned events), recent_window (the
session's latest turns) and tool_state (its latest tool results); with a handoff,
the packet, its decisions and the events it cites. Curated views come first in any
section they name. Every item goes through the build's `Packer`, which keeps the caps.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gitmem import consistency, items, lexicon, planning, prompt, retrieval, tokens
from gitmem.context import ContextCache, TenantDecisions, ViewRow
from gitmem.db import Database, Row, TextArray
from gitmem.errors import ValidationError
from gitmem.packing import ITEM_SEPARATOR_TOKENS, Packer, Section
from gitmem.policies import Policies
from gitmem.privacy import ChannelRule

if TYPE_CHECKING:
    from gitmem.acb import AcbRequest

REPLY_ANCHORS = 10  # the best evidence items that, when questions, bring their next turn
EVIDENCE_TYPES = ("event", "summary", "task")  # the chunks retrieved_evidence shows


@dataclass
class Build:
    """One build_acb call: its request and clock, the policies and caches it reads, the
    packer that keeps its caps, and what it records for provenance."""

    request: AcbRequest
    policies: Policies
    cache: ContextCache
    db: Callable[[], Database]
    now: datetime
    rule: ChannelRule
    packer: Packer
    scale: float
    key: tuple[Any, ...]   # what a cached bundle or prefix of this request is kept under
    shared: bool = False   # items of the cached prefix may be handed out without a copy
    searched: str = ""     # the query as searched: what the patterns match taken out
    provenance: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    conflicts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by summary
    checked: set[str] = field(default_factory=set)  # the summaries checked for conflicts

    def cap(self, name: str, scaled: bool = True) -> int:
        """A section's cap: the policy's, scaled to the request's budget unless not."""
        budget = self.policies.budgets.sections.get(name)
        full = budget.max_tokens if budget else 0
        return int(full * self.scale) if scaled else full

    @property
    def scored(self) -> bool:  # not on a channel that may not load some rows: scores count them
        return not self.rule.hides_stored(self.policies.privacy.never_store)

    def allows(self, sensitivity: str, channel: str) -> bool:
        """Whether the request's channel may load a chunk (an event's or a summary's:
        its sensitivity and the channel it was recorded on; "" for none)."""
        return self.rule.loads_event(sensitivity, channel)

    def allows_record(self, sensitivity: str) -> bool:
        """Whether the request's channel may load a decision or task."""
        return self.rule.loads_record(sensitivity)

    def flag(self, rows: Iterable[Row]) -> None:
        """Check the summaries among these chunk rows for conflicts (`conflicts`), before
        they are packed: what their text says of them costs tokens. Once a build."""
        tenant = self.request.tenant_id
        new = [r["chunk_id"] for r in rows
               if r["source_type"] == "summary" and r["chunk_id"] not in self.checked]
        self.checked.update(new)
        self.conflicts.update(consistency.flag_summaries(
            self.db, tenant, new, lambda: self.cache.decisions(tenant)))

    def flagged(self, item: dict[str, Any]) -> dict[str, Any]:
        """`item`, with its conflicts if it is a summary `flag` found any for."""
        conflicts = self.conflicts.get(item["id"])
        if conflicts:
            item["conflicts"] = conflicts
        return item


# --------------------------------------------------------------------------- sections

def fillers(build: Build) -> dict[str, Callable[[Section], None]]:
    """What fills each section, after its views (a request without a handoff)."""
    evidence = _Evidence(build)
    return {
        "identity": lambda s: None,  # views only
        "rules": lambda s: None,
        "task_state": lambda s: _tasks(build, s),
        "relevant_decisions": lambda s: _decisions(build, s, evidence.decision_scores()),
        "retrieved_evidence": evidence.fill,
        "recent_window": lambda s: _recent(build, s),
        "tool_state": lambda s: _tools(build, s),
    }


def _loadable_views(build: Build, section_name: str) -> list[ViewRow]:
    request, rule = build.request, build.rule
    defaults = build.policies.channels.default_views.get(request.channel, ())
    chosen: list[tuple[int, int, str, ViewRow]] = []
    for view in build.cache.views():
        if view.section != section_name:
            continue
        if (view.path in rule.suppress_views or view.sensitivity in rule.suppress_sensitivity
                or (view.channels and request.channel not in view.channels)):
            build.packer.omit("privacy", view.path)  # said even when not a default view
            continue
        listed = view.path in defaults
        if not (listed or view.pinned):
            continue
        rank = defaults.index(view.path) if listed else len(defaults)
        chosen.append((0 if view.pinned else 1, rank, view.path, view))
    chosen.sort(key=lambda c: c[:3])
    return [c[3] for c in chosen]


def views(build: Build, section: Section, section_name: str) -> None:
    """The views that load into this section: pinned first, then the channel's defaults.
    A view's own `max_tokens` keeps its start: the first chunk over it and all after it
    are left out (`budget`), never a chunk from its middle with a hole before it."""
    for view in _loadable_views(build, section_name):
        view_used = 0
        over = False
        for chunk in view.chunks:
            anchor = f"{view.path}#{chunk.anchor}"
            item: dict[str, Any] = {"type": "view", "id": anchor,
                                    "text": chunk.text, "refs": [anchor], "source": anchor,
                                    "token_est": chunk.token_est}
            if view.pinned:
                item["pinned"] = True
            over = over or (view.max_tokens is not None
                            and view_used + chunk.token_est > view.max_tokens)
            if over:
                build.packer.omit("budget", anchor)
                continue
            digest = "view:" + hashlib.sha256(chunk.text.encode()).hexdigest()
            if build.packer.add(section, item, digest) or build.packer.holds(section, anchor):
                view_used += chunk.token_est  # packed now, or by an earlier pass


def _tasks(build: Build, section: Section) -> None:
    tasks = build.cache.open_tasks(build.request.tenant_id)  # doing, blocked, open
    session = build.request.session_id
    ordered = itertools.chain(tasks.by_session.get(session, ()),  # this session's first,
                              (r for r in tasks.rows if r["session_id"] != session))  # newest
    seen: set[str] = set()
    for row in ordered:
        if build.packer.full(section):
            for sensitivity, ids in tasks.ids.items():  # all the others are left out
                reason = "budget" if build.allows_record(sensitivity) else "privacy"
                build.packer.omit_all(reason, ids, tasks.members[sensitivity], seen, section)
            return
        seen.add(row["task_id"])
        if not build.allows_record(row["sensitivity"]):
            build.packer.omit("privacy", row["task_id"])
            continue
        build.packer.add(section, items.task_item(row), row["hash"])


def _decisions(build: Build, section: Section, scores: dict[str, float]) -> None:
    chain: TenantDecisions = build.cache.decisions(build.request.tenant_id)
    for decision_id in sorted(scores):
        if decision_id in chain.superseded_by:
            build.packer.omit("superseded", decision_id)
    relevant: dict[str, float] = {}
    for decision_id, score in scores.items():
        latest = chain.latest(decision_id)
        if latest:
            relevant[latest] = max(relevant.get(latest, 0.0), score)
    ranked = sorted(relevant, key=lambda d: (-relevant[d], d))
    # the newest active ones fill the rest, read only as far as needed (a tenant may
    # have thousands)
    rest = (row["decision_id"] for row in chain.active if row["decision_id"] not in relevant)
    shown = relevant if build.scored else {}
    room = build.policies.budgets.decisions_max  # of the ones the channel may load: the
    for decision_id in itertools.chain(ranked, rest):  # hidden took the visible's places
        if room == 0:
            break
        row = chain.by_id[decision_id]
        if not build.allows_record(row["sensitivity"]):
            build.packer.omit("privacy", decision_id)
            continue
        room -= 1
        build.packer.add(section, items.decision_item(row, shown.get(decision_id)),
                         row["hash"])


class _Evidence:
    """Retrieval for retrieved_evidence; also ranks decisions by the same query."""

    def __init__(self, build: Build) -> None:
        self.build = build
        self.result: retrieval.Retrieval | None = None
        self.rows: tuple[dict[str, Row], dict[str, Row]] | None = None  # evidence_rows'

    def run(self) -> retrieval.Retrieval | None:
        build = self.build
        if self.result is not None or not build.request.query_text.strip():
            return self.result
        started = time.perf_counter()
        db = build.db()
        terms = lexicon.analyze(db, build.searched)
        limits = planning.Limits.of(build.policies.budgets)
        self.result = retrieval.retrieve(db, build.request.tenant_id, terms, limits, build.now,
                                         build.rule)
        build.provenance.update({"path": "retrieval", "retrieved": len(self.result.candidates),
                                 "candidate_pool_size": self.result.loadable})
        if not build.scored:
            # statistics count rows the channel may not load (IDF, lanes, the phases that
            # ran: timings_ms): they would tell whether hidden text holds a word
            build.provenance["query_terms"] = [
                {"term": t.text, "query": t.query, "phrase": t.phrase} for t in terms]
        else:
            build.provenance.update(lanes=self.result.lanes, query_terms=retrieval.describe(
                self.result.terms, self.result.idf), terms_not_searched=self.result.unsearched)
            build.timings.update({f"retrieval_{k}": v for k, v in self.result.timings_ms.items()})
        build.timings["retrieval"] = round((time.perf_counter() - started) * 1000, 3)
        return self.result

    def decision_scores(self) -> dict[str, float]:
        result = self.run()
        if result is None:
            return {}
        return {c.source_id: c.score for c in result.candidates if c.source_type == "decision"}

    def fill(self, section: Section) -> None:
        """Ranked evidence, then the pinned items (room for them is kept first). A
        pinned decision that another supersedes is not current: it never shows."""
        build = self.build
        pinned = []
        chain = build.cache.decisions(build.request.tenant_id)
        for row in sorted(build.cache.pinned(build.request.tenant_id),
                          key=lambda r: chunk_order(r["chunk_id"])):
            if row["source_type"] == "decision" and row["source_id"] in chain.superseded_by:
                build.packer.omit("superseded", row["source_id"])
            elif build.allows(row["sensitivity"], row["channel"]):
                pinned.append(row)
            else:
                build.packer.omit("privacy", row["chunk_id"])
        build.flag(pinned)
        reserve = min(section.cap, sum(
            r["token_est"] + ITEM_SEPARATOR_TOKENS + prompt.STAMP_TOKENS for r in pinned
            if r["hash"] not in build.packer.seen))
        section.cap -= reserve
        try:
            self._ranked(section)
        finally:
            section.cap += reserve
        for row in pinned:
            item = build.flagged(items.chunk_item(row))
            item["pinned"] = True
            build.packer.add(section, item, row["hash"])

    def _ranked(self, section: Section) -> None:
        build = self.build
        result = self.run()
        if result is None:
            return
        # decisions have a section of their own; a task found here is shown with its
        # status ("Task [done] ..."): one task_state holds (open) is shown there only,
        # a finished one here only
        chosen = [c for c in result.candidates if c.source_type in EVIDENCE_TYPES]
        if not chosen:
            return
        if self.rows is None:  # read once: a second pass fills the section again
            self.rows = evidence_rows(build.db(), build.request.tenant_id, chosen)
        found, replies = self.rows
        build.flag(found.values())
        # rows of this build alone: their items are made once, not kept as templates to
        # copy (2-3 us a row on the slowest machines)
        scored = build.scored
        for cand in chosen:
            hit = found.get(cand.chunk_id)
            if hit is None:
                continue
            item = build.flagged(items.chunk_template(hit))
            if scored:
                item["score"] = cand.score
            build.packer.add(section, item, hit["hash"])
            reply = replies.get(cand.chunk_id)
            if reply is None:
                continue
            if not build.allows(reply["sensitivity"], reply["channel"]):
                continue  # not named: which matches have a hidden answer is the query's
            item = items.chunk_template(reply)
            item["reply_to"] = cand.chunk_id  # the turn after a match: often its answer
            build.packer.add(section, item, reply["hash"])


def evidence_rows(db: Database, tenant: str, chosen: Sequence[retrieval.Candidate]
                  ) -> tuple[dict[str, Row], dict[str, Row]]:
    """The rows of the chosen candidates by id, and the replies to the best of them that
    are questions, by the question's id. Read where the lanes found them (their ctids);
    any that moved since (a file reindexed in between), by id."""
    found: dict[str, Row] = {}
    replies: dict[str, Row] = {}  # a question among the best: its answer follows
    anchors = TextArray(c.chunk_id for c in chosen[:REPLY_ANCHORS])

    def read(ids: TextArray, tids: TextArray | None) -> None:
        for row in db.fetchall_planned("evidence_items", {"tenant": tenant, "ids": ids,
                                                          "tids": tids, "anchors": anchors}):
            if row["anchor"] is None:
                found[row["chunk_id"]] = row
            else:
                replies[row["anchor"]] = row

    read(TextArray(c.chunk_id for c in chosen), TextArray(c.tid for c in chosen))
    moved = TextArray(c.chunk_id for c in chosen if c.chunk_id not in found)
    if moved:
        read(moved, None)
    return found, replies


def _session_rows(build: Build, kind: str, limit: int) -> list[Row]:
    rows = build.cache.session(kind, build.request.tenant_id, build.request.session_id, limit)
    kept = []
    for row in rows:
        if build.allows(row["sensitivity"], row["channel"]):
            kept.append(row)
        else:
            build.packer.omit("privacy", row["chunk_id"])
    return kept


def _recent(build: Build, section: Section) -> None:
    """The session's latest turns, every one of them, oldest first.

    A transcript's turns are told apart by event id, not content: "no" to two
    questions is two answers, and dropping one as a copy of the other would leave the
    question before it unanswered. A turn retrieval packed already (as evidence, a
    section packed before this one) moves here when it fits: it appears once, and in
    its place, so that the transcript reads whole; where it does not fit, it stays
    evidence. Another event retrieved with a turn's very content gives way to the
    turn as a duplicate.

    A turn of several chunks is shown whole or not at all, but for the newest: what
    was said last is never gone while its start fits, and is shown cut (`_cut_head`).
    Nothing older than a turn left out or cut is shown: the window has no hole.
    """
    rows = _session_rows(build, "recent", build.policies.budgets.recent_window_events)
    turns = [list(g) for _, g in itertools.groupby(rows, key=lambda row: row["source_id"])]
    for number, turn in enumerate(turns):  # newest first: they matter most when the cap bites
        made = [items.chunk_item(row) for row in turn]
        if number == 0:
            _uncut(build, section, turn)  # a first pass's cut head: the second has more room
        if _fits_whole(build, section, made):
            for row, item in zip(turn, made, strict=True):
                build.packer.add(section, item, row["hash"], turn=True)
        if number == 0 and not build.packer.holds(section, turn[0]["chunk_id"]):
            _cut_head(build, section, turn, made)  # one chunk too: what was said last
        if not all(build.packer.holds(section, row["chunk_id"]) for row in turn):
            section.short = True  # out of budget: older turns would leave a gap
            for older in itertools.chain.from_iterable(turns[number:]):
                if not build.packer.holds(section, older["chunk_id"]):
                    build.packer.omit("budget", older["chunk_id"])
            break
    section.items.sort(key=_reading_order)


def _cut_head(build: Build, section: Section, turn: Sequence[Row],
              made: Sequence[dict[str, Any]]) -> None:
    """Pack the most leading chunks of the newest turn that fit with a note ending them
    (`prompt.TURN_NOTE`, counted in), else the start of its first chunk cut to fit (not
    when that chunk is shown whole elsewhere): each marked `truncated`, with the whole
    turn's `full_token_est`, as a pinned item cut to fit is. The rest is left out
    (`budget`)."""
    full: int = sum(i["token_est"] for i in made)
    for count in range(len(made) - 1, 0, -1):
        head = [{**i, "truncated": True, "full_token_est": full} for i in made[:count]]
        shown: int = sum(i["token_est"] for i in head)
        head[-1]["text"] += prompt.TURN_NOTE.format(shown, full)
        head[-1]["token_est"] += prompt.turn_note_tokens(shown, full)
        if _fits_whole(build, section, head):
            for row, item in zip(turn, head, strict=False):
                build.packer.add(section, item, row["hash"], turn=True)
            if build.packer.holds(section, made[0]["id"]):
                return
    if made[0]["id"] in build.packer.packed:
        return
    first = made[0]
    room = build.packer.room(section)
    room -= ITEM_SEPARATOR_TOKENS + prompt.overhead(first) + (
        0 if section.items else prompt.header_tokens(section.name))
    limit = room - prompt.turn_note_tokens(room, full)
    if limit < items.CUT_MIN_TOKENS:
        return
    text = items.cut_text(first["text"], limit)
    shown = tokens.count(text)
    if shown >= items.CUT_MIN_TOKENS:
        build.packer.add(section, {
            **first, "text": text + prompt.TURN_NOTE.format(shown, full), "truncated": True,
            "token_est": shown + prompt.turn_note_tokens(shown, full), "full_token_est": full,
        }, turn[0]["hash"], turn=True)


def _uncut(build: Build, section: Section, turn: Sequence[Row]) -> None:
    """Take out the head of `turn` a first pass packed cut, so that it is packed anew:
    whole, or cut after more of it."""
    ids = {row["chunk_id"] for row in turn}
    for item in [i for i in section.items if i["id"] in ids and i.get("truncated")]:
        build.packer.release(item["id"])


def _fits_whole(build: Build, section: Section, made: Sequence[dict[str, Any]]) -> bool:
    """Whether every chunk of a turn fits the window (a turn of several chunks is shown
    whole or not at all: its start alone would read as the whole turn). What a chunk
    packed elsewhere would give back when it moves here is not counted: a turn this
    leaves out stays where it is."""
    return len(made) == 1 or build.packer.fits(section, made)  # one: the packer says


def _tools(build: Build, section: Section) -> None:
    """The session's latest tool results, newest first. Of an output in several chunks,
    the first (the tool, the path, the head) and the last (the end of its excerpt's
    tail, where a build's or a test run's error is) go before the rest, which follows
    in order until a chunk does not fit (the rest would leave a second gap); where the
    first does not fit, none of the middle goes in (it would not say what it is)."""
    rows = _session_rows(build, "tools", build.policies.budgets.tool_state_events)
    for _, result in itertools.groupby(rows, key=lambda row: row["source_id"]):
        chunks = list(result)
        cut = not _placed(build, section, chunks[0])
        for row in chunks[1:][-1:]:
            build.packer.add(section, items.chunk_item(row), row["hash"])
        for row in chunks[1:-1]:
            if cut:
                build.packer.omit("budget", row["chunk_id"])
            else:
                cut = not _placed(build, section, row)
    section.items.sort(key=_reading_order)
    _mark_gaps(section.items)


def _mark_gaps(packed: Sequence[dict[str, Any]]) -> None:
    """Name, on a chunk shown after a hole in its output (its middle left out for
    budget), the chunks not shown before it (`gap_before`); the text says so by the
    note of the artifact of an output that was cut (`prompt.GAP_NOTE`)."""
    prior: dict[str, int] = {}
    for item in packed:
        item.pop("gap_before", None)  # a second pass may have filled the hole
        if "source_id" not in item:
            continue  # a view
        part = chunk_order(item["id"])[1]
        before = prior.get(item["source_id"])
        if before is not None and part > before + 1:
            item["gap_before"] = [f"{item['source_id']}#{n}" for n in range(before + 1, part)]
        prior[item["source_id"]] = part


def _placed(build: Build, section: Section, row: Row) -> bool:
    """Add a chunk; False if it did not fit (one packed already as a copy did)."""
    return build.packer.add(section, items.chunk_item(row), row["hash"]) \
        or row["hash"] in build.packer.seen


def chunk_order(chunk_id: str) -> tuple[str, int]:
    """A record's chunks in reading order: `evt_x#2` before `evt_x#10`."""
    base, _, part = chunk_id.partition("#")
    return (base, int(part or 0))


def _reading_order(item: dict[str, Any]) -> tuple[str, str, int, int]:
    """Oldest event first, and of events at the same instant the earlier line of its
    file (as they were written: ids minted by two processes have no order); a long
    event's chunks (`evt_x#2`, ...) in order. A view the section loads (`section:
    recent_window` in its front matter) has no time: views lead, in the order they were
    packed (the sort is stable)."""
    if "ts" not in item:
        return ("", "", 0, 0)
    path, _, line = item["source"].rpartition(":")
    return (item["ts"], path, int(line), chunk_order(item["id"])[1])


# --------------------------------------------------------------------------- handoff

def handoff_fillers(build: Build) -> dict[str, Callable[[Section], None]]:
    """What fills each section of a handoff build: the packet, its decisions, its events."""
    db = build.db()
    row = db.fetchone("handoff", {"id": build.request.handoff_id})
    if row is None or row["tenant_id"] != build.request.tenant_id:
        raise ValidationError(f"no handoff {build.request.handoff_id} for tenant "
                              f"{build.request.tenant_id} (a handoff file that does not parse "
                              "is named by `gitmem status`)", field="handoff_id")
    if row["to_agent"] != build.request.agent_id:
        raise ValidationError(
            f"handoff {row['handoff_id']} is addressed to agent {row['to_agent']!r}, "
            f"not {build.request.agent_id!r}", field="agent_id")
    build.provenance["path"] = "handoff"
    build.provenance["handoff_id"] = row["handoff_id"]

    def packet(section: Section) -> None:
        lines = [f"Handoff {row['handoff_id']} from {row['from_agent'] or 'unknown'} "
                 f"to {row['to_agent']}", f"Task: {row['task']}"]
        for label, key in (("Constraints", "constraints"), ("Required files", "required_files"),
                           ("Open questions", "open_questions")):
            if row[key]:
                lines.append(f"{label}: " + "; ".join(row[key]))
        text = "\n".join(lines)
        item = {"type": "handoff", "id": row["handoff_id"], "text": text,
                "refs": list(dict.fromkeys([*row["decisions"], *row["refs"]])),
                "source": f"{row['path']}#{row['handoff_id']}", "token_est": tokens.count(text)}
        build.packer.add(section, item, "handoff:" + hashlib.sha256(text.encode()).hexdigest())

    def decisions(section: Section) -> None:
        chain = build.cache.decisions(build.request.tenant_id)
        for decision_id in row["decisions"]:
            if decision_id not in chain.by_id:  # another tenant's, or none at all: alike
                build.packer.omit("unknown", decision_id)
                continue
            latest = chain.latest(decision_id)
            if latest != decision_id:
                build.packer.omit("superseded", decision_id)
            if not latest:
                continue
            drow = chain.by_id[latest]
            if not build.allows_record(drow["sensitivity"]):
                build.packer.omit("privacy", latest)
                continue
            build.packer.add(section, items.decision_item(drow, None), drow["hash"])

    def evidence(section: Section) -> None:
        limit = build.policies.budgets.handoff_evidence_max
        event_ids = [r for r in row["refs"] if r.startswith(("evt_", "sum_"))]
        rows = db.fetchall("event_chunks", {"tenant": build.request.tenant_id, "ids": event_ids})
        build.flag(rows[:limit])
        for chunk in rows[:limit]:
            if not build.allows(chunk["sensitivity"], chunk["channel"]):
                build.packer.omit("privacy", chunk["chunk_id"])
                continue
            build.packer.add(section, build.flagged(items.chunk_item(chunk)), chunk["hash"])

    return {"handoff": packet, "relevant_decisions": decisions, "retrieved_evidence": evidence}

