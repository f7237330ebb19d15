"""The naive baseline: unbounded `ts_rank` over every match, beside bounded retrieval.

Same tenant, same data, same run. For each retrieval request of
`bench.queries` (common terms, rare terms, questions) the query is analyzed
once (untimed); then bounded retrieval (`gitmem.retrieval.retrieve`, as
build_acb runs it) and the naive query (`gitmem.baselines.naive_top`:
ts_rank over every chunk of the tenant matching any term, top 200) are timed
one right after the other, in this process, on one connection pool. A
warm-up pass runs both first. Ratios naive / bounded are given per category
(of the medians, and of the total time), and naive / build_acb over the
socket (the `acb_latency` samples of this run) when that measurement ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.acb_latency import SHARED as ACB_SHARED
from bench.acb_latency import Samples
from bench.bounded import Prepared, prepare
from bench.context import Context
from bench.queries import RETRIEVAL, asks
from bench.stats import Metric, percentile, timed, timing
from gitmem import baselines

PASSES = 1
TARGET = "bounded ≥ 20x faster than naive (SPEC §9)"
SHARED = "naive_baseline"


@dataclass
class Pair:
    """Bounded and naive milliseconds of one request."""

    prepared: Prepared
    bounded_ms: list[float] = field(default_factory=list)
    naive_ms: list[float] = field(default_factory=list)
    matches: int = 0


def _ratio(a: float, b: float) -> float:
    return round(a / b, 1) if b else 0.0


def _by_tenant(pairs: dict[str, list[Pair]]) -> dict[str, dict[str, float]]:
    """Naive and bounded p50 per asking tenant, largest first."""
    groups: dict[str, list[Pair]] = {}
    for pair in (p for c in RETRIEVAL for p in pairs[c]):
        groups.setdefault(pair.prepared.ask.tenant, []).append(pair)
    out: dict[str, dict[str, float]] = {}
    for tenant, found in sorted(groups.items(),
                                key=lambda kv: -kv[1][0].prepared.ask.tenant_chunks):
        naive = [ms for p in found for ms in p.naive_ms]
        bounded = [ms for p in found for ms in p.bounded_ms]
        out[tenant] = {"chunks": found[0].prepared.ask.tenant_chunks,
                       "naive_p50": round(percentile(naive, 50), 2),
                       "bounded_p50": round(percentile(bounded, 50), 2),
                       "ratio_p50": _ratio(percentile(naive, 50), percentile(bounded, 50))}
    return out


def _largest_tenant(pairs: dict[str, list[Pair]], acb: dict[str, Samples]) -> Metric:
    """The ratio where the spec's "hundreds of milliseconds" applies: the requests of
    the largest tenant (a third of the corpus)."""
    everyone = [p for c in RETRIEVAL for p in pairs[c]]
    size = max((p.prepared.ask.tenant_chunks for p in everyone), default=0)
    mine = [p for p in everyone if p.prepared.ask.tenant_chunks == size]
    tenant = mine[0].prepared.ask.tenant if mine else ""
    naive = [ms for p in mine for ms in p.naive_ms]
    bounded = [ms for p in mine for ms in p.bounded_ms]
    extra: dict[str, Any] = {
        "tenant": tenant, "tenant_chunks": size, "requests": len(mine),
        "naive_p50_ms": round(percentile(naive, 50), 3),
        "naive_p95_ms": round(percentile(naive, 95), 3),
        "bounded_in_process_p50_ms": round(percentile(bounded, 50), 3),
        "ratio_total_in_process": _ratio(sum(naive), sum(bounded))}
    walls = [s.wall_ms for c in RETRIEVAL if c in acb for s in acb[c].calls
             if s.ask.tenant == tenant]
    if walls:
        extra.update(acb_socket_p50_ms=round(percentile(walls, 50), 3),
                     ratio_p50_vs_acb_socket=_ratio(percentile(naive, 50),
                                                    percentile(walls, 50)))
    return Metric("naive", f"ratio naive / bounded in-process, largest tenant "
                  f"({size:,} chunks, p50)", _ratio(percentile(naive, 50),
                                                     percentile(bounded, 50)), "x",
                  target=TARGET, extra=extra)


def run(ctx: Context) -> dict[str, list[Pair]]:
    """Time both retrievals for every request; pairs per category."""
    db = ctx.ensure_index()
    policies = ctx.policies
    sets = asks(ctx)
    pairs = {c: [Pair(prepare(db, policies, a)) for a in sets[c]] for c in RETRIEVAL}
    for category in RETRIEVAL:  # warm-up
        for pair in pairs[category]:
            pair.prepared.retrieve(db, policies)
            pair.matches = len(baselines.naive_top(db, pair.prepared.ask.tenant,
                                                   pair.prepared.terms))
    for _ in range(PASSES):
        for category in RETRIEVAL:
            for pair in pairs[category]:
                with timed() as bounded:
                    pair.prepared.retrieve(db, policies)
                with timed() as naive:
                    baselines.naive_top(db, pair.prepared.ask.tenant, pair.prepared.terms)
                pair.bounded_ms.append(bounded.ms)
                pair.naive_ms.append(naive.ms)
    return pairs


def measure(ctx: Context) -> list[Metric]:
    """Naive vs bounded retrieval latency and their ratio, per category."""
    pairs = run(ctx)
    ctx.shared[SHARED] = pairs
    acb: dict[str, Samples] = ctx.shared.get(ACB_SHARED, {})
    metrics: list[Metric] = []
    naive_all: list[float] = []
    acb_all: list[float] = []
    for category in RETRIEVAL:
        naive = [ms for p in pairs[category] for ms in p.naive_ms]
        bounded = [ms for p in pairs[category] for ms in p.bounded_ms]
        naive_all += naive
        extra: dict[str, Any] = {"bounded_in_process_p50_ms": round(percentile(bounded, 50), 3),
                 "bounded_in_process_p95_ms": round(percentile(bounded, 95), 3),
                 "ratio_p50_in_process": _ratio(percentile(naive, 50), percentile(bounded, 50)),
                 "ratio_total_in_process": _ratio(sum(naive), sum(bounded))}
        if category in acb:
            walls = acb[category].walls()
            acb_all += walls
            extra.update(acb_socket_p50_ms=round(percentile(walls, 50), 3),
                         ratio_p50_vs_acb_socket=_ratio(percentile(naive, 50),
                                                        percentile(walls, 50)),
                         ratio_p95_vs_acb_socket=_ratio(percentile(naive, 95),
                                                        percentile(walls, 95)))
        slow = sorted(pairs[category], key=lambda p: -max(p.naive_ms))[:3]
        extra["slowest_naive"] = [{"ask": p.prepared.ask.label(),
                                   "naive_ms": round(max(p.naive_ms), 1),
                                   "bounded_ms": round(min(p.bounded_ms), 2)} for p in slow]
        metrics.append(timing("naive", f"ts_rank over all matches: {category}", naive,
                              **extra))
    bounded_all = [ms for c in RETRIEVAL for p in pairs[c] for ms in p.bounded_ms]
    metrics.append(_largest_tenant(pairs, acb))
    metrics.append(Metric(
        "naive", "ratio naive / bounded retrieval in-process (p50, all sets)",
        _ratio(percentile(naive_all, 50), percentile(bounded_all, 50)), "x",
        target=TARGET, extra={"ratio_total": _ratio(sum(naive_all), sum(bounded_all)),
                              "by_tenant": _by_tenant(pairs)}))
    if acb_all:
        metrics.append(Metric(
            "naive", "ratio naive / build_acb over the socket (p50, all sets)",
            _ratio(percentile(naive_all, 50), percentile(acb_all, 50)), "x", target=TARGET,
            extra={"ratio_p95": _ratio(percentile(naive_all, 95), percentile(acb_all, 95))}))
    return metrics
