"""Every measurement the benchmark knows, in the order a run takes them.

To add one: write `def measure_x(ctx: Context) -> list[Metric]` in a module of
its own, and list it here with the modules it needs (`needs`). A measurement
whose modules do not import yet is reported as skipped, with the reason; one
that raises `Skip` likewise. Entries with `run=None` are planned (SPEC §9) and
shown as pending until someone writes them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from bench import (
    acb_latency,
    cold_start,
    indexing,
    naive,
    quality,
    recall,
    recording,
    rss,
    socket_record,
    visibility,
)
from bench.context import Context
from bench.stats import Metric

Measure = Callable[[Context], list[Metric]]


@dataclass(frozen=True)
class Measurement:
    """A named measurement: what it does, what it needs, the function (None: planned)."""

    name: str
    description: str
    run: Measure | None = None
    needs: tuple[str, ...] = ()
    slow: bool = False   # skipped unless asked for by name (e.g. index_digest)

    def missing(self) -> list[str]:
        """Modules this measurement needs that are not importable here."""
        return [m for m in self.needs if importlib.util.find_spec(m) is None]


MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement("record", "record throughput: Python API single/batched, CLI batch and single",
                recording.measure),
    Measurement("reindex", "full reindex beside raw COPY + index build; index size and counts",
                indexing.measure),
    Measurement("index_digest", "indexer.index_digest of the corpus index (same-index check)",
                indexing.measure_digest, slow=True),
    Measurement("quality_bm25", "BM25 baseline: evidence within 2,000 tokens",
                quality.measure_bm25),
    # ---- over the socket and in-process against the corpus index (SPEC §9) ----
    Measurement("socket_record", "record_event over the socket: single, batched, 8/16/32 "
                "clients; events/s, p95, CPU", socket_record.measure, needs=("gitmem.server",)),
    Measurement("cold_start", "daemon start to first ACB (median of runs)", cold_start.measure,
                needs=("gitmem.server",)),
    Measurement("append_visible", "append → visible in build_acb, p95 under the daemon (by hand, "
                "record_event, no read)",
                visibility.measure, needs=("gitmem.server", "gitmem.acb")),
    Measurement("acb_latency", "build_acb over the socket p50/p95/max: fast path, common "
                "terms, rare terms, questions", acb_latency.measure,
                needs=("gitmem.server", "gitmem.acb")),
    Measurement("naive_baseline", "unbounded ts_rank over all matches; ratio to build_acb",
                naive.measure, needs=("gitmem.acb",)),
    Measurement("pool_recall", "recall of bounded candidate pools vs exact top-200",
                recall.measure, needs=("gitmem.acb",)),
    Measurement("quality_gitmem", "gitmem retrieved_evidence within 2,000 tokens vs BM25 "
                "(quality.acb_retriever)", quality.measure_gitmem, needs=("gitmem.acb",)),
    Measurement("daemon_rss", "daemon resident memory after the runs", rss.measure,
                needs=("gitmem.server",)),
)
