"""build_acb: the Active Context Bundle put in front of each LLM call.

Sections are filled in the budgets' priority order (identity, rules,
task_state, relevant_decisions, retrieved_evidence, recent_window,
tool_state; or, with a handoff, only the packet, its decisions and a little
evidence), each by its filler in gitmem/sections.py. Hard rules, all enforced
in `Packer` (gitmem/packing.py): privacy suppression before scoring (omissions
list ids, never text); one copy per content hash across sections; pinned items
first; no section over its cap and nothing over max_tokens - reserve, counted
with the tokenizer that counted the chunks.
The same request on the same files gives the same sections, omissions and
acb_id (P7): every ordering ends in an id, and the clock is the request's.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

from gitmem import sections
from gitmem.context import ContextCache, ReadScope
from gitmem.db import Database
from gitmem.errors import ValidationError, json_kind, shown
from gitmem.packing import Packed, Packer, Section
from gitmem.policies import Policies
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
from gitmem.sections import Build

REQUEST_FIELDS = ("tenant_id", "session_id", "agent_id", "channel", "intent", "query_text",
                  "max_tokens", "now", "handoff_id")
HANDOFF_SECTIONS = ("handoff", "relevant_decisions", "retrieved_evidence")
# Sections whose fillers show their items oldest first, whatever order they packed them in
SELF_ORDERED = frozenset({"recent_window", "tool_state"})
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
        if not isinstance(data, Mapping):
            raise ValidationError(f"a request is an object of fields, got {json_kind(data)}")
        unknown = sorted(set(data) - set(REQUEST_FIELDS))
        if unknown:
            raise ValidationError(f"unknown field; expected only {', '.join(REQUEST_FIELDS)}",
                                  field=unknown[0])
        for name in ("tenant_id", "session_id", "agent_id", "intent", "query_text", "now",
                     "handoff_id", "channel"):
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                raise ValidationError(f"expected a string, got {json_kind(value)}", field=name)
            if value:
                check_storable(value, name)
        max_tokens = data.get("max_tokens")
        if max_tokens is not None and (isinstance(max_tokens, bool)
                                       or not isinstance(max_tokens, int) or max_tokens < 1):
            raise ValidationError(f"expected a positive integer, got {shown(max_tokens)}",
                                  field="max_tokens")
        channel = data.get("channel")  # left out or null: the default, as for every field
        channel = "private" if channel is None else check_choice(channel, CHANNELS, "channel")
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
    privacy = policies.privacy  # a secret asked about is no more shown than one stored,
    searched = privacy.without_secrets(request.query_text)  # nor searched: none is stored
    request = replace(request, query_text=privacy.redact(request.query_text),
                      intent=privacy.redact(request.intent))
    now = parse_ts(request.now) if request.now else datetime.now(UTC)
    max_tokens = min(request.max_tokens or budgets.total, budgets.total)
    scale = max_tokens / budgets.total
    reserve = int(budgets.reserve * scale)
    key = (request.tenant_id, request.session_id, request.agent_id, request.channel,
           max_tokens)
    build = Build(request, policies, cache, db, now, policies.privacy.rule(
        request.channel), Packer(max_tokens - reserve), scale, key, shared=encoded,
                  searched=searched)
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
        "budget": {"max_tokens": max_tokens, "requested_max_tokens": request.max_tokens,
                   "reserve_tokens": reserve,
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


def _pack(build: Build) -> Packed:
    """Fill every section of the request in priority order."""
    request, budgets = build.request, build.policies.budgets
    order = budgets.section_order()
    if request.handoff_id:
        order = [name for name in order if name in HANDOFF_SECTIONS]
        fillers = sections.handoff_fillers(build)
    else:
        order = [name for name in order if name != "handoff"]
        fillers = sections.fillers(build)
    prefix: list[str] = []
    if request.query_text.strip() and not request.handoff_id:
        prefix = list(itertools.takewhile(PREFIX_SECTIONS.__contains__, order))
    if prefix:
        step = time.perf_counter()
        build.packer = build.cache.prefix(
            build.key, lambda: _pack_sections(build, prefix, fillers).copy()).copy()
        build.timings["prefix"] = round((time.perf_counter() - step) * 1000, 3)
    _pack_sections(build, order[len(prefix):], fillers)
    _spend_leftover(build, order, fillers)
    build.packer.settle()
    conflicts = [(i["id"], i["conflicts"]) for part in build.packer.sections.values()
                 for i in part.items if "conflicts" in i]
    for summary_id, _ in conflicts:  # a packed summary that went stale (P4)
        build.packer.omit("conflict", summary_id)
    packed = [{"name": s.name, "token_est": s.used,
               "items": s.items if build.shared or s.name not in prefix
               else [dict(i) for i in s.items]}  # the cached prefix's stay as they are
              for s in build.packer.sections.values()]
    omissions = build.packer.omissions()
    digest = _fingerprint(
        {"items": build.packer.ledger(), "conflicts": conflicts, "omissions": omissions})
    summaries = any(i.get("type") == "summary" for part in build.packer.sections.values()
                    for i in part.items)
    return Packed(packed, omissions, build.packer.used, digest, summaries)


def _spend_leftover(build: Build, order: Sequence[str],
                    fillers: Mapping[str, Callable[[Section], None]]) -> None:
    """The second pass: what the first left unused goes to what it left out for budget.

    The first pass holds each section to its policy cap scaled to the request's budget,
    so that no section crowds out those after it. What the sections leave unused is then
    given, in priority order, to those that left items out for budget, each up to its
    policy's own cap (never more, and never past max_tokens - reserve): each filler runs
    again, finds what it packed packed (an item is packed once), and offers what it left
    out in its own order. A higher-priority section so takes all it can use before a
    lower one gets any: nothing goes to a lower-priority section in this pass while a
    higher-priority one has an item waiting that the space would hold. Without a scaled
    cap (the whole budget), a section has a second pass only where a later one took
    items out of it (the recent window takes its session's turns from the evidence): the
    room they leave goes to what it left out.
    """
    packer = build.packer
    started = time.perf_counter()
    for name in order:
        section = packer.sections[name]
        cap = build.cap(name, scaled=False)
        if not section.short or (cap <= section.cap and not section.gave_up):
            continue
        if packer.spent():
            break
        packer.reopen(section, cap)
        if not build.request.handoff_id:
            sections.views(build, section, name)
        fillers[name](section)
        if name not in SELF_ORDERED:
            packer.arrange(section)
        build.timings["second_pass"] = round((time.perf_counter() - started) * 1000, 3)


def _pack_sections(build: Build, names: Sequence[str],
                   fillers: Mapping[str, Callable[[Section], None]]) -> Packer:
    """Fill these sections, in this order; the packer."""
    for name in names:
        section = build.packer.open(name, build.cap(name), build.cap(name, scaled=False))
        step = time.perf_counter()
        if not build.request.handoff_id:
            sections.views(build, section, name)  # curated views first, in any section they name
        fillers[name](section)
        build.timings[name] = round((time.perf_counter() - step) * 1000, 3)
    return build.packer

