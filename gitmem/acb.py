"""build_acb: the Active Context Bundle put in front of each LLM call.

Sections are filled in the budgets' priority order (identity, rules,
task_state, relevant_decisions, retrieved_evidence, recent_window,
tool_state; or, with a handoff, only the packet, its decisions and a little
evidence). Hard rules, all enforced in `Packer` (gitmem/packing.py): privacy suppression before
scoring (omissions list ids, never text); one copy per content hash across
sections; pinned items first; no section over its cap and nothing over
max_tokens - reserve, counted with the tokenizer that counted the chunks.
The same request on the same files gives the same sections, omissions and
acb_id (P7): every ordering ends in an id, and the clock is the request's.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from gitmem import consistency, items, lexicon, planning, retrieval, tokens
from gitmem.context import ContextCache, ReadScope, TenantDecisions, ViewRow
from gitmem.db import Database, Row, TextArray
from gitmem.errors import ValidationError
from gitmem.packing import ITEM_SEPARATOR_TOKENS, Packed, Packer, Section
from gitmem.policies import ChannelRule, Policies
from gitmem.records import (
    CHANNELS,
    check_choice,
    check_name,
    check_storable,
    compact_json,
    format_ts,
    name_or,
    parse_ts,
)

REPLY_ANCHORS = 10  # the best evidence items that, when questions, bring their next turn
REQUEST_FIELDS = ("tenant_id", "session_id", "agent_id", "channel", "intent", "query_text",
                  "max_tokens", "now", "handoff_id")
HANDOFF_SECTIONS = ("handoff", "relevant_decisions", "retrieved_evidence")
# Sections the same for every question (no chunks of events, so no summaries): those
# of them a retrieval build packs before its query's are kept packed (`ContextCache.
# prefix`). 240 open tasks cost 0.8 ms a build to pack at 1M on the slowest machines.
PREFIX_SECTIONS = frozenset({"identity", "rules", "task_state"})


@dataclass(frozen=True)
class AcbRequest:
    """What an agent asks for; `now` fixes the clock (recency, ts)."""

    tenant_id: str
    session_id: str = "default"
    agent_id: str = "agent"
    channel: str = "private"
    intent: str = ""
    query_text: str = ""
    max_tokens: int | None = None
    now: str | None = None
    handoff_id: str | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], default_tenant: str) -> AcbRequest:
        """Validate a request object (JSON-RPC params, CLI flags), naming bad fields."""
        unknown = sorted(set(data) - set(REQUEST_FIELDS))
        if unknown:
            raise ValidationError(f"unknown field; expected only {', '.join(REQUEST_FIELDS)}",
                                  field=unknown[0])
        for name in ("tenant_id", "session_id", "agent_id", "intent", "query_text", "now",
                     "handoff_id", "channel"):
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                raise ValidationError(f"expected a string, got {type(value).__name__}", field=name)
            if value:
                check_storable(value, name)
        max_tokens = data.get("max_tokens")
        if max_tokens is not None and (isinstance(max_tokens, bool)
                                       or not isinstance(max_tokens, int) or max_tokens < 1):
            raise ValidationError(f"expected a positive integer, got {max_tokens!r}",
                                  field="max_tokens")
        channel = check_choice(data.get("channel", "private"), CHANNELS, "channel")
        now = data.get("now")
        if now is not None:
            parse_ts(now, "now")
        handoff = data.get("handoff_id")
        return cls(tenant_id=name_or(data.get("tenant_id"), default_tenant, "tenant_id"),
                   session_id=name_or(data.get("session_id"), "default", "session_id"),
                   agent_id=name_or(data.get("agent_id"), "agent", "agent_id"), channel=channel,
                   intent=data.get("intent") or "", query_text=data.get("query_text") or "",
                   max_tokens=max_tokens, now=now,
                   handoff_id=None if handoff is None else check_name(handoff, "handoff_id"))


def read_scope(request: AcbRequest) -> ReadScope:
    """What new data can change the ACB `request` asks for (see `ReadScope`)."""
    return ReadScope(request.tenant_id, request.session_id,
                     bool(request.query_text.strip() or request.handoff_id))


@dataclass
class _Build:
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
    provenance: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def cap(self, name: str, scaled: bool = True) -> int:
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


def build_acb(request: AcbRequest, policies: Policies, cache: ContextCache,
              db: Callable[[], Database],
              index_state: Mapping[str, Any] | None = None, *,
              encoded: bool = False) -> dict[str, Any]:
    """Assemble the ACB for `request` (see the module docstring for the rules).

    Without a query or handoff (the fast path) nothing depends on the clock, so
    the packed sections are kept in the cache until the next change to the files.
    `encoded`: a cached bundle's sections and omissions come as `orjson.Fragment`s,
    JSON encoded once (for an answer about to be encoded, not for reading).
    """
    started = time.perf_counter()
    budgets = policies.budgets
    now = parse_ts(request.now) if request.now else datetime.now(UTC)
    max_tokens = min(request.max_tokens or budgets.total, budgets.total)
    scale = max_tokens / budgets.total
    reserve = int(budgets.reserve * scale)
    key = (request.tenant_id, request.session_id, request.agent_id, request.channel,
           max_tokens)
    build = _Build(request, policies, cache, db, now, policies.privacy.rule(
        request.channel), Packer(max_tokens - reserve), scale, key, shared=encoded)
    fast = not request.query_text.strip() and not request.handoff_id
    packed = cache.bundle(key, lambda: _pack(build)) if fast else _pack(build)
    sections: Any = packed.sections
    omissions: Any = packed.omissions
    if fast:
        build.timings["cached"] = 1
        if encoded:
            sections, omissions = packed.fragments(cache.share)
        else:
            packed = packed.copy()
            sections, omissions = packed.sections, packed.omissions
    request_view = asdict(request) | {"now": format_ts(now), "max_tokens": max_tokens}
    # a cached bundle's content was hashed when it was packed (re-encoding it per
    # call was 70% of a warm fast-path build)
    digest = _fingerprint({"request": request_view, "bundle": packed.digest})
    build.timings["total"] = round((time.perf_counter() - started) * 1000, 3)
    rule = build.rule
    provenance = {
        "intent": request.intent, "path": build.provenance.pop("path", "fast"),
        "query_text": request.query_text,
        "query_terms": build.provenance.pop("query_terms", []),
        "candidate_pool_size": build.provenance.pop("candidate_pool_size", 0),
        "retrieved": build.provenance.pop("retrieved", 0),
        "filters": {"tenant_id": request.tenant_id, "channel": request.channel,
                    "session_id": request.session_id, "agent_id": request.agent_id,
                    "suppressed_sensitivity": sorted(rule.suppress_sensitivity),
                    "suppressed_views": sorted(rule.suppress_views),
                    "event_channels": None if rule.event_channels is None
                    else sorted(rule.event_channels)},
        "scoring": {"alpha": budgets.alpha, "beta": budgets.beta, "gamma": budgets.gamma,
                    "recency_tau_days": budgets.recency_tau_days},
        "budget": {"max_tokens": max_tokens, "reserve_tokens": reserve,
                   "available": max_tokens - reserve, "scale": round(scale, 6)},
        "policy_hashes": dict(sorted(policies.hashes.items())),
        "index_state": dict(index_state or {}),
        "timings_ms": build.timings,
        **build.provenance,
    }
    return {
        "acb_id": "acb_" + digest[:32],
        "ts": format_ts(now), "budget_tokens": max_tokens,
        "token_used_est": packed.used,
        "sections": sections, "omissions": omissions, "provenance": provenance,
    }


def _fingerprint(value: Any) -> str:
    """sha256 hex of `value` as compact JSON with sorted keys (what `acb_id` is made
    of; orjson's encoding saves 0.7 ms of a retrieval build at 1M events)."""
    return hashlib.sha256(compact_json(value, sort_keys=True).encode()).hexdigest()


def _pack(build: _Build) -> Packed:
    """Fill every section of the request in priority order."""
    request, budgets = build.request, build.policies.budgets
    order = budgets.section_order()
    if request.handoff_id:
        order = [name for name in order if name in HANDOFF_SECTIONS]
        fillers = _handoff_fillers(build)
    else:
        order = [name for name in order if name != "handoff"]
        fillers = _fillers(build)
    prefix: list[str] = []
    if request.query_text.strip() and not request.handoff_id:
        prefix = list(itertools.takewhile(PREFIX_SECTIONS.__contains__, order))
    if prefix:
        step = time.perf_counter()
        build.packer = build.cache.prefix(
            build.key, lambda: _pack_sections(build, prefix, fillers).copy()).copy()
        build.timings["prefix"] = round((time.perf_counter() - step) * 1000, 3)
    _pack_sections(build, order[len(prefix):], fillers)
    for summary_id in consistency.flag_summaries(  # a packed summary that went stale (P4)
            (i for s in build.packer.sections.values() for i in s.items), build.db,
            request.tenant_id, lambda: build.cache.decisions(request.tenant_id)):
        build.packer.omit("conflict", summary_id)
    sections = [{"name": s.name, "token_est": s.used,
                 "items": s.items if build.shared or s.name not in prefix
                 else [dict(i) for i in s.items]}  # the cached prefix's stay as they are
                for s in build.packer.sections.values()]
    conflicts = [(i["id"], i["conflicts"]) for part in build.packer.sections.values()
                 for i in part.items if "conflicts" in i]
    omissions = build.packer.omissions()
    digest = _fingerprint(
        {"items": build.packer.ledger, "conflicts": conflicts, "omissions": omissions})
    summaries = any(i.get("type") == "summary" for part in build.packer.sections.values()
                    for i in part.items)
    return Packed(sections, omissions, build.packer.used, digest, summaries)


def _pack_sections(build: _Build, names: Sequence[str],
                   fillers: Mapping[str, Callable[[Section], None]]) -> Packer:
    """Fill these sections, in this order; the packer."""
    for name in names:
        section = build.packer.open(name, build.cap(name), build.cap(name, scaled=False))
        step = time.perf_counter()
        if not build.request.handoff_id:
            _views(build, section, name)  # curated views first, in any section they name
        fillers[name](section)
        build.timings[name] = round((time.perf_counter() - step) * 1000, 3)
    return build.packer


# --------------------------------------------------------------------------- sections

def _fillers(build: _Build) -> dict[str, Callable[[Section], None]]:
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


def _loadable_views(build: _Build, section_name: str) -> list[ViewRow]:
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


def _views(build: _Build, section: Section, section_name: str) -> None:
    for view in _loadable_views(build, section_name):
        view_used = 0
        for chunk in view.chunks:
            anchor = f"{view.path}#{chunk.anchor}"
            item: dict[str, Any] = {"type": "view", "id": anchor,
                                    "text": chunk.text, "refs": [anchor], "source": anchor,
                                    "token_est": chunk.token_est}
            if view.pinned:
                item["pinned"] = True
            if view.max_tokens is not None and view_used + chunk.token_est > view.max_tokens:
                build.packer.omit("budget", anchor)
                continue
            digest = "view:" + hashlib.sha256(chunk.text.encode()).hexdigest()
            if build.packer.add(section, item, digest):
                view_used += chunk.token_est


def _tasks(build: _Build, section: Section) -> None:
    tasks = build.cache.open_tasks(build.request.tenant_id)  # doing, blocked, open
    session = build.request.session_id
    ordered = itertools.chain(tasks.by_session.get(session, ()),  # this session's first,
                              (r for r in tasks.rows if r["session_id"] != session))  # newest
    seen: set[str] = set()
    for row in ordered:
        if build.packer.full(section):
            for sensitivity, ids in tasks.ids.items():  # all the others are left out
                reason = "budget" if build.allows_record(sensitivity) else "privacy"
                build.packer.omit_all(reason, ids, tasks.members[sensitivity], seen)
            return
        seen.add(row["task_id"])
        if not build.allows_record(row["sensitivity"]):
            build.packer.omit("privacy", row["task_id"])
            continue
        build.packer.add(section, items.task_item(row), row["hash"])


def _decisions(build: _Build, section: Section, scores: dict[str, float]) -> None:
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
    considered = list(itertools.islice(itertools.chain(ranked, rest),
                                       build.policies.budgets.decisions_max))
    shown = relevant if build.scored else {}
    for decision_id in considered:
        row = chain.by_id[decision_id]
        if not build.allows_record(row["sensitivity"]):
            build.packer.omit("privacy", decision_id)
            continue
        build.packer.add(section, items.decision_item(row, shown.get(decision_id)),
                         row["hash"])


class _Evidence:
    """Retrieval for retrieved_evidence; also ranks decisions by the same query."""

    def __init__(self, build: _Build) -> None:
        self.build = build
        self.result: retrieval.Retrieval | None = None

    def run(self) -> retrieval.Retrieval | None:
        build = self.build
        if self.result is not None or not build.request.query_text.strip():
            return self.result
        started = time.perf_counter()
        db = build.db()
        terms = lexicon.analyze(db, build.request.query_text)
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
        """Ranked evidence, then the pinned items (room for them is kept first)."""
        build = self.build
        pinned = []
        for row in sorted(build.cache.pinned(build.request.tenant_id),
                          key=lambda r: r["chunk_id"]):
            if build.allows(row["sensitivity"], row["channel"]):
                pinned.append(row)
            else:
                build.packer.omit("privacy", row["chunk_id"])
        reserve = min(section.cap, sum(r["token_est"] + ITEM_SEPARATOR_TOKENS for r in pinned
                                       if r["hash"] not in build.packer.seen))
        section.cap -= reserve
        try:
            self._ranked(section)
        finally:
            section.cap += reserve
        for row in pinned:
            item = items.chunk_item(row)
            item["pinned"] = True
            build.packer.add(section, item, row["hash"])

    def _ranked(self, section: Section) -> None:
        build = self.build
        result = self.run()
        if result is None:
            return
        chosen = [c for c in result.candidates if c.source_type in ("event", "summary")]
        if not chosen:
            return
        found, replies = evidence_rows(build.db(), build.request.tenant_id, chosen)
        # rows of this build alone: their items are made once, not kept as templates to
        # copy (2-3 us a row on the slowest machines)
        scored = build.scored
        for cand in chosen:
            hit = found.get(cand.chunk_id)
            if hit is None:
                continue
            item = items.chunk_template(hit)
            if scored:
                item["score"] = cand.score
            build.packer.add(section, item, hit["hash"])
            reply = replies.get(cand.chunk_id)
            if reply is None:
                continue
            if not build.allows(reply["sensitivity"], reply["channel"]):
                build.packer.omit("privacy", reply["chunk_id"])
                continue
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


def _session_rows(build: _Build, kind: str, limit: int) -> list[Row]:
    rows = build.cache.session(kind, build.request.tenant_id, build.request.session_id, limit)
    kept = []
    for row in rows:
        if build.allows(row["sensitivity"], row["channel"]):
            kept.append(row)
        else:
            build.packer.omit("privacy", row["chunk_id"])
    return kept


def _recent(build: _Build, section: Section) -> None:
    rows = _session_rows(build, "recent", build.policies.budgets.recent_window_events)
    for number, row in enumerate(rows):  # newest first: they matter most when the cap bites
        if not build.packer.add(section, items.chunk_item(row), row["hash"]) \
                and row["hash"] not in build.packer.seen:
            for older in rows[number + 1:]:  # out of budget: older turns would leave a gap
                build.packer.omit("budget", older["chunk_id"])
            break
    section.items.sort(key=_reading_order)


def _tools(build: _Build, section: Section) -> None:
    cut = None  # the result whose next chunk did not fit: the rest of it would leave a gap
    for row in _session_rows(build, "tools", build.policies.budgets.tool_state_events):
        if row["source_id"] == cut:
            build.packer.omit("budget", row["chunk_id"])
        elif not build.packer.add(section, items.chunk_item(row), row["hash"]) \
                and row["hash"] not in build.packer.seen:
            cut = row["source_id"]
    section.items.sort(key=_reading_order)


def _reading_order(item: dict[str, Any]) -> tuple[str, str, int]:
    """Oldest event first; a long event's chunks (`evt_x#2`, ...) in order."""
    base, _, part = item["id"].partition("#")
    return (item["ts"], base, int(part or 0))


# --------------------------------------------------------------------------- handoff

def _handoff_fillers(build: _Build) -> dict[str, Callable[[Section], None]]:
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
        for chunk in rows[:limit]:
            if not build.allows(chunk["sensitivity"], chunk["channel"]):
                build.packer.omit("privacy", chunk["chunk_id"])
                continue
            build.packer.add(section, items.chunk_item(chunk), chunk["hash"])

    return {"handoff": packet, "relevant_decisions": decisions, "retrieved_evidence": evidence}
