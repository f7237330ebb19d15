"""build_acb over the socket: p50/p95/max per category, and where the time goes.

One client on the corpus daemon (index present). A warm-up pass asks every
request once (its fast-path calls, the first of each session, are reported
apart: caches cold), then `PASSES` measured passes, category after category.
Last, each fast-path request once more right after a `record_event` of a
probe session (`bench.probes`): a write drops cached windows and must be
indexed before the next read answers; and once more right after an update of
the probe tenant's task: a task file is waited for by every read, and must
leave the other tenants' cached tasks as they were.
Each call is timed at the client (send → parsed answer); the server's own
breakdown comes from `provenance.timings_ms` (per section, retrieval's
terms/pools/score) and `index_state.catch_up_ms` (the watcher flush before
the build); `overhead` is what is left: JSON-RPC, serialisation, the socket,
the client's parse.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from bench import probes
from bench.context import Context
from bench.daemons import BenchDaemon, corpus_daemon
from bench.queries import CATEGORIES, Ask, asks
from bench.stats import Metric, client_gc, medians, percentile, timed, timing
from gitmem.client import Client

PASSES = {"tiny": 1, "10k": 2}
DEFAULT_PASSES = 2
SLOWEST = 5
TARGETS = {"fast": "p95 ≤ 3 ms (SPEC §9)"}
RETRIEVAL_TARGET = "p95 ≤ 25 ms (SPEC §9)"
SHARED = "acb_latency"


@dataclass
class Sample:
    """One timed build_acb call."""

    ask: Ask
    wall_ms: float
    phases: dict[str, float]
    pool: int
    text_chars: int


@dataclass
class Samples:
    """The calls of one category."""

    category: str
    calls: list[Sample] = field(default_factory=list)
    daemon_cpu_s: float = 0.0

    def walls(self) -> list[float]:
        """Client-side milliseconds of each call."""
        return [s.wall_ms for s in self.calls]


def call(client: Client, ask: Ask) -> Sample:
    """Time one build_acb call and read its provenance."""
    paused = client_gc.ms
    with client_gc.deferred(), timed() as clock:
        acb = client.call("build_acb", ask.params)
    wall = clock.ms
    paused = client_gc.ms - paused
    provenance = acb.get("provenance", {})
    phases = {k: float(v) for k, v in provenance.get("timings_ms", {}).items()}
    catch_up = float(provenance.get("index_state", {}).get("catch_up_ms", 0.0))
    phases["catch_up"] = catch_up
    phases["overhead"] = round(wall - phases.get("total", 0.0) - catch_up, 3)
    phases["client_gc"] = round(paused, 3)
    size = sum(len(str(i.get("text", ""))) for s in acb.get("sections", [])
               for i in s.get("items", []))
    return Sample(ask, wall, phases, int(provenance.get("candidate_pool_size", 0)), size)


def run(ctx: Context) -> dict[str, Samples]:
    """The warm-up and the measured passes; samples per category (and `fast_first`)."""
    daemon = corpus_daemon(ctx)
    sets = asks(ctx)
    passes = PASSES.get(ctx.size, DEFAULT_PASSES)
    out = {c: Samples(c) for c in CATEGORIES}
    first = Samples("fast_first")
    with daemon.client() as client:
        for category in CATEGORIES:  # warm-up: caches, plans, pages
            for ask in sets[category]:
                sample = call(client, ask)
                if category == "fast":
                    first.calls.append(sample)
        collector = client.call("daemon_status").get("gc", {})
        for _ in range(passes):
            for category in CATEGORIES:
                cpu = daemon.cpu_s()
                for ask in sets[category]:
                    out[category].calls.append(call(client, ask))
                out[category].daemon_cpu_s += daemon.cpu_s() - cpu
        daemon.stats["daemon_gc_during_passes"] = _collections(
            collector, client.call("daemon_status").get("gc", {}))
    out["fast_first"] = first
    daemon.stats["memory_before_writes"] = daemon.memory_by_process()
    out["fast_after_write"] = after_writes(ctx, daemon, sets["fast"])
    out["fast_after_task"] = after_writes(ctx, daemon, sets["fast"], task=True)
    daemon.stats["rss_after_acb_mb"] = daemon.rss_mb()
    daemon.stats["memory_after_acb"] = daemon.memory_by_process()
    return out


def _collections(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The daemon's garbage collections between two `daemon_status` reads: how many per
    generation, and the milliseconds they took (the longest since the daemon started)."""
    def delta(key: str) -> list[float]:
        return [round(b - a, 3) for a, b in zip(before.get(key, [0, 0, 0]),
                                                 after.get(key, [0, 0, 0]), strict=False)]
    return {"collections": delta("collections"), "pause_ms": delta("pause_ms"),
            "pause_max_ms_since_start": after.get("pause_max_ms")}


def after_writes(ctx: Context, daemon: BenchDaemon, fast: list[Ask], *,
                 task: bool = False) -> Samples:
    """Each fast-path request right after a record_event (of another session, on
    another connection): what an agent loop of write-then-read sees, the caches
    dropped by the write and the new line indexed before the answer. With `task`,
    the write updates the probe tenant's task (its file too)."""
    out = Samples("fast_after_task" if task else "fast_after_write")
    make = probes.task_fields if task else probes.fields
    with probes.probing(ctx, daemon) as probe, daemon.client() as writer, \
            daemon.client() as reader:
        for ask in fast:  # warm again: the last probing's restore dropped every window
            call(reader, ask)
        cpu = daemon.cpu_s()
        for ask in fast:
            writer.call("record_event", make(*probe.stamp()))
            out.calls.append(call(reader, ask))
        out.daemon_cpu_s = daemon.cpu_s() - cpu  # the writes' share included
    return out


def _slowest(samples: Samples) -> list[dict[str, Any]]:
    worst = sorted(samples.calls, key=lambda s: -s.wall_ms)[:SLOWEST]
    return [{"ask": s.ask.label(), "wall_ms": round(s.wall_ms, 3), "pool": s.pool,
             "phases": {k: v for k, v in s.phases.items() if v}} for s in worst]


def by_tenant(samples: Samples) -> dict[str, dict[str, float]]:
    """p50/p95 per asking tenant, largest tenant first."""
    groups: dict[str, list[Sample]] = {}
    for sample in samples.calls:
        groups.setdefault(sample.ask.tenant, []).append(sample)
    ordered = sorted(groups.items(), key=lambda kv: -kv[1][0].ask.tenant_chunks)
    return {tenant: {"chunks": found[0].ask.tenant_chunks, "n": len(found),
                     "p50": round(percentile([s.wall_ms for s in found], 50), 2),
                     "p95": round(percentile([s.wall_ms for s in found], 95), 2)}
            for tenant, found in ordered}


def tail(samples: Samples) -> dict[str, Any]:
    """The calls at or above the p95: how many had a second round of lanes, and the mean
    of each phase over them (a phase a call did not have counts as 0), beside the
    same means over all calls: what the p95 is made of."""
    if not samples.calls:
        return {}
    line = percentile(samples.walls(), 95)
    slow = [s for s in samples.calls if s.wall_ms >= line]

    def means(calls: list[Sample]) -> dict[str, float]:
        keys = sorted({k for s in calls for k in s.phases})
        return {k: round(sum(s.phases.get(k, 0.0) for s in calls) / len(calls), 3)
                for k in keys}
    return {"calls": len(slow), "second_rounds": sum("retrieval_refill" in s.phases
                                                     for s in slow),
            "second_rounds_all": sum("retrieval_refill" in s.phases for s in samples.calls),
            "tenants": dict(sorted(collections.Counter(s.ask.tenant for s in slow).items(),
                                   key=lambda kv: -kv[1])),
            "phases_mean_ms": means(slow), "phases_mean_all_ms": means(samples.calls)}


def metric(samples: Samples, name: str, target: str) -> Metric:
    """One category's distribution with its median phases and slowest calls."""
    pools = [float(s.pool) for s in samples.calls]
    cpu_ms = samples.daemon_cpu_s * 1000 / len(samples.calls) if samples.calls else 0.0
    return timing("acb", name, samples.walls(), target=target,
                  daemon_cpu_ms_per_call=round(cpu_ms, 3),
                  phases_median_ms=medians([s.phases for s in samples.calls]),
                  pool_median=percentile(pools, 50), pool_max=max(pools, default=0.0),
                  text_chars_median=percentile([float(s.text_chars) for s in samples.calls],
                                               50),
                  by_tenant=by_tenant(samples), tail_p95=tail(samples),
                  slowest=_slowest(samples))


def measure(ctx: Context) -> list[Metric]:
    """build_acb latency per category, over the socket."""
    found = run(ctx)
    ctx.shared[SHARED] = found
    names = {"fast": "fast path (no query), warm caches",
             "fast_first": "fast path, first call per session (cold caches)",
             "fast_after_write": "fast path right after a record_event (another session)",
             "fast_after_task": "fast path right after a task update (another tenant)",
             "common": "retrieval: common terms", "rare": "retrieval: rare terms",
             "question": "retrieval: natural-language questions"}
    metrics = [metric(found[c], names[c], TARGETS.get(c, RETRIEVAL_TARGET))
               for c in ("fast", "common", "rare", "question")]
    retrieval = Samples("retrieval", [s for c in ("common", "rare", "question")
                                      for s in found[c].calls],
                        sum(found[c].daemon_cpu_s for c in ("common", "rare", "question")))
    metrics.append(metric(retrieval, "retrieval: all three sets", RETRIEVAL_TARGET))
    daemon = corpus_daemon(ctx)
    metrics[-1].extra["daemon_gc_during_passes"] = daemon.stats.get("daemon_gc_during_passes")
    metrics.append(metric(found["fast_first"], names["fast_first"], ""))
    metrics.append(metric(found["fast_after_write"], names["fast_after_write"], ""))
    metrics.append(metric(found["fast_after_task"], names["fast_after_task"], ""))
    return metrics
