"""Timing and the shape of a result: nanosecond clocks, percentiles, `Metric` rows."""

from __future__ import annotations

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
