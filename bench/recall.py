"""Recall of the bounded candidate pools against exact ranking's top 200.

For each retrieval request of `bench.queries` (questions, common terms, rare
terms): `gitmem.retrieval.retrieve` (bounded pools, scored, its best
`retrieved_chunks_max`) beside `gitmem.baselines.exact_top` (the same score
function over every matching chunk, top 200), with the same terms, weights,
channel filter and clock. Recall = share of the exact top 200 found by the
bounded retrieval; requests matching nothing are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.bounded import limits, prepare
from bench.context import Context
from bench.queries import RETRIEVAL, Ask, asks
from bench.stats import Metric, percentile, timed
from gitmem import baselines

TOP = 200
TARGET = "≥ 0.9 (SPEC §9)"
WORST = 5


@dataclass(frozen=True)
class Recall:
    """One request's recall."""

    ask: Ask
    recall: float
    exact: int
    pool: int
    exact_ms: float


def run(ctx: Context) -> dict[str, list[Recall]]:
    """Recall of every retrieval request, per category."""
    db = ctx.ensure_index()
    policies = ctx.policies
    bounds = limits(policies)
    out: dict[str, list[Recall]] = {}
    for category in RETRIEVAL:
        found: list[Recall] = []
        for ask in asks(ctx)[category]:
            prepared = prepare(db, policies, ask)
            result = prepared.retrieve(db, policies)
            with timed() as clock:
                exact = baselines.exact_top(db, ask.tenant, result.terms, bounds, prepared.now,
                                            prepared.rule, top=TOP)
            if not exact:
                continue
            got = {c.chunk_id for c in result.candidates}
            found.append(Recall(ask, len(got & set(exact)) / len(exact), len(exact),
                                result.pool_size, clock.ms))
        out[category] = found
    return out


def _metric(name: str, found: list[Recall]) -> Metric:
    values = [r.recall for r in found]
    worst = sorted(found, key=lambda r: r.recall)[:WORST]
    mean = sum(values) / len(values) if values else 0.0
    return Metric("recall", name, round(mean, 4), "mean", samples=len(values), target=TARGET,
                  extra={"min": round(min(values, default=0.0), 4),
                         "p5": round(percentile(values, 5), 4),
                         "below_0.9": sum(v < 0.9 for v in values),
                         "exact_ranking_p50_ms": round(percentile([r.exact_ms for r in found],
                                                                  50), 1),
                         "worst": [{"ask": r.ask.label(), "recall": round(r.recall, 3),
                                    "pool": r.pool, "exact": r.exact} for r in worst]})


def measure(ctx: Context) -> list[Metric]:
    """Mean and min recall per category and over all requests."""
    found = run(ctx)
    metrics = [_metric(f"bounded pools vs exact top {TOP}: {c}", found[c]) for c in RETRIEVAL]
    metrics.append(_metric(f"bounded pools vs exact top {TOP}: all sets",
                           [r for c in RETRIEVAL for r in found[c]]))
    return metrics
