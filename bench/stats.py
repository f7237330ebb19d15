"""Timing and the shape of a result: nanosecond clocks, percentiles, `Metric` rows."""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return float(ordered[rank - 1])


@dataclass
class Clock:
    """Elapsed nanoseconds of a `timed()` block."""

    ns: int = 0

    @property
    def ms(self) -> float:
        """Elapsed milliseconds."""
        return self.ns / 1e6

    @property
    def s(self) -> float:
        """Elapsed seconds."""
        return self.ns / 1e9


class _Collections:
    """Milliseconds this process has spent in its own garbage collections, and a way to
    hold them off during a timed call: the benchmark's heap (every sample so far, the
    corpus's questions) is the client's, and a full collection of it inside a call
    made 2.9 ms of the 5.6-5.8 ms outside the daemon's build in the slowest twentieth
    of retrieval calls (docs/performance-log.md). As `timeit` does, the collector is
    paused for the call; it runs after the clock stops."""

    def __init__(self) -> None:
        self.ms = 0.0
        self._started = 0

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """The collector paused for the block (if it was on)."""
        was_on = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if was_on:
                gc.enable()

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        elif self._started:
            self.ms += (time.perf_counter_ns() - self._started) / 1e6
            self._started = 0


client_gc = _Collections()
gc.callbacks.append(client_gc)


@contextmanager
def timed() -> Iterator[Clock]:
    """Measure the block with `time.perf_counter_ns`."""
    clock = Clock()
    start = time.perf_counter_ns()
    try:
        yield clock
    finally:
        clock.ns = time.perf_counter_ns() - start


@dataclass
class Metric:
    """One measured number, with the latency distribution it came from when it has one."""

    group: str
    name: str
    value: float | str
    unit: str
    p50: float | None = None
    p95: float | None = None
    max: float | None = None
    dist_unit: str = ""          # unit of p50/p95/max (e.g. ms per event)
    samples: int | None = None
    target: str = ""             # the SPEC §9 target it is compared with, for reading
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (empty fields dropped)."""
        return {k: v for k, v in asdict(self).items() if v not in (None, "", {})}


def latency(group: str, name: str, samples_ns: Sequence[int], *, count: int,
            target: str = "", unit_name: str = "events/s", **extra: Any) -> Metric:
    """A throughput metric (`count` items over the samples' total time) with its
    per-sample p50/p95/max in milliseconds."""
    total_s = sum(samples_ns) / 1e9
    ms = [s / 1e6 for s in samples_ns]
    return Metric(group, name, round(count / total_s, 1) if total_s else 0.0, unit_name,
                  p50=round(percentile(ms, 50), 3), p95=round(percentile(ms, 95), 3),
                  max=round(max(ms), 3) if ms else None, dist_unit="ms",
                  samples=len(samples_ns), target=target, extra=dict(extra))


def timing(group: str, name: str, samples_ms: Sequence[float], *, target: str = "",
           **extra: Any) -> Metric:
    """A latency distribution in milliseconds; its value is the p95 (what SPEC §9 reads)."""
    p95 = round(percentile(samples_ms, 95), 3)
    return Metric(group, name, p95, "ms p95", p50=round(percentile(samples_ms, 50), 3),
                  p95=p95, max=round(max(samples_ms), 3) if samples_ms else None,
                  dist_unit="ms", samples=len(samples_ms), target=target, extra=dict(extra))


def medians(rows: Sequence[dict[str, float]], digits: int = 3) -> dict[str, float]:
    """The median of each key over the dicts that have it (e.g. per-phase timings)."""
    keys: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            if isinstance(value, int | float):
                keys.setdefault(key, []).append(float(value))
    return {key: round(percentile(values, 50), digits) for key, values in keys.items()}
