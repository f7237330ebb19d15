"""A results file read against SPEC §9: one Markdown row per target, met or missed by how much.

    python -m bench.summary bench/results/1m.json

It reads what a run measured; it never fails a run (exit 0 whatever the numbers).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Metrics = dict[str, dict[str, Any]]
LARGEST = "ratio naive / bounded in-process, largest tenant"  # its name holds the size


@dataclass(frozen=True)
class Check:
    """A SPEC §9 target, the metric and field that measure it, and which way is better."""

    target: str
    metric: str
    field: str            # "value", "p50", "p95", or "extra.<key>"
    limit: float
    unit: str
    higher_is_better: bool = False

    def read(self, metrics: Metrics) -> float | None:
        """The measured number, or None when the run did not take it."""
        found = metrics.get(self.metric) if self.metric else next(
            (m for n, m in metrics.items() if n.startswith(LARGEST)), None)
        if found is None:
            return None
        if self.field.startswith("extra."):
            value = found.get("extra", {}).get(self.field[6:])
        else:
            value = found.get(self.field)
        return float(value) if isinstance(value, int | float) else None

    def verdict(self, value: float) -> str:
        """`met`, or `missed` by the share of the target it falls short of or goes over
        (`missed by 27%`: 2,182 events/s for 3,000), or far off, the factor (`missed (2.1x
        over)`, `missed (40x under)`)."""
        good = value >= self.limit if self.higher_is_better else value <= self.limit
        if good:
            return "met"
        if self.higher_is_better:
            if value <= 0:
                return "missed (none)"
            if self.limit / value >= 1.5:
                return f"missed ({self.limit / value:.1f}x under)"
            return f"missed by {_share(1 - value / self.limit)}"
        if self.limit <= 0 or value / self.limit >= 1.5:
            return (f"missed ({value / self.limit:.1f}x over)" if self.limit > 0
                    else "missed")
        return f"missed by {_share(value / self.limit - 1)}"

    def shown(self, value: float) -> str:
        """The measured number with its unit, to as many digits as tell a miss from the
        target (19.96 for 20 is `19.96 x`, not `20.0 x` beside `missed`)."""
        text = _number(value)
        if self.verdict(value) != "met":
            digits = 3
            while float(text.replace(",", "")) == self.limit or (
                    self.verdict(float(text.replace(",", ""))) == "met"):
                digits += 1
                text = f"{value:.{digits}g}"
        return f"{text} {self.unit}".strip()


def _share(share: float) -> str:
    """A share missed, as a whole percentage (`27%`), never `0%` (`<1%`)."""
    return f"{share:.0%}" if share >= 0.005 else "<1%"


def _quality_target(metrics: Metrics) -> float:
    bm25 = metrics.get("bm25 baseline: evidence in first 2000 tokens", {})
    return float(bm25.get("value", 0.0))


RSS_MANY_SESSIONS = "RSS after the fast path of 2,000 sessions (more than the caches keep)"

CHECKS: tuple[Check, ...] = (
    Check("build_acb fast path over the socket: p95 ≤ 3 ms",
          "fast path (no query), warm caches", "p95", 3.0, "ms"),
    Check("… right after a record_event of another session",
          "fast path right after a record_event (another session)", "p95", 3.0, "ms"),
    Check("… right after a task update of another tenant (its file waited for)",
          "fast path right after a task update (another tenant)", "p95", 3.0, "ms"),
    Check("… of another session, while 8 clients write",
          "build_acb fast path (another session) beside 8 writing clients", "p95", 3.0, "ms"),
    Check("build_acb with retrieval over the socket: p95 ≤ 25 ms",
          "retrieval: all three sets", "p95", 25.0, "ms"),
    Check("… common terms", "retrieval: common terms", "p95", 25.0, "ms"),
    Check("… rare terms", "retrieval: rare terms", "p95", 25.0, "ms"),
    Check("… natural-language questions", "retrieval: natural-language questions", "p95",
          25.0, "ms"),
    Check("≥ 20x faster than naive ts_rank (p50, build_acb over the socket, all sets)",
          "ratio naive / build_acb over the socket (p50, all sets)", "value", 20.0, "x",
          higher_is_better=True),
    Check("… in-process, the largest tenant's requests",
          "", "value", 20.0, "x", higher_is_better=True),
    Check("… in-process, all sets", "ratio naive / bounded retrieval in-process (p50, all sets)",
          "value", 20.0, "x", higher_is_better=True),
    Check("bounded pools: recall of exact top-200 ≥ 0.9 (mean, all sets)",
          "bounded pools vs exact top 200: all sets", "value", 0.9, "",
          higher_is_better=True),
    Check("… worst single request", "bounded pools vs exact top 200: all sets", "extra.min",
          0.9, "", higher_is_better=True),
    Check("daemon cold start to first ACB ≤ 1.5 s (median)",
          "cold start: `daemon start` → first ACB answered", "value", 1.5, "s"),
    Check("record_event ≥ 3,000 events/s sustained (8 clients)",
          "record_event, 8 concurrent clients", "value", 3000.0, "events/s",
          higher_is_better=True),
    Check("… 32 clients", "record_event, 32 concurrent clients", "value", 3000.0, "events/s",
          higher_is_better=True),
    Check("… one client, JSON-RPC batches of 100", "JSON-RPC batches of 100 record_event",
          "value", 3000.0, "events/s", higher_is_better=True),
    Check("record_event single event p95 ≤ 5 ms, durable",
          "record_event, 1 client, one call at a time", "p95", 5.0, "ms"),
    Check("event appended → visible to build_acb p95 ≤ 200 ms",
          "appended by hand → in build_acb", "p95", 200.0, "ms"),
    Check("full reindex ≤ 1.5x raw COPY + index build", "ratio reindex / raw", "value", 1.5,
          "x"),
    Check("daemon RSS ≤ 300 MB (peak)", "RSS, peak since start (VmHWM)", "value", 300.0,
          "MB"),
    Check("… after the fast path of 2,000 sessions", RSS_MANY_SESSIONS, "value", 300.0, "MB"),
)


def _number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def rows(document: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) for every check, plus retrieval quality."""
    metrics: Metrics = {m["name"]: m for m in document.get("metrics", [])}
    out = []
    for check in CHECKS:
        value = check.read(metrics)
        if value is None:
            out.append((check.target, "not measured", ""))
            continue
        out.append((check.target, check.shown(value), check.verdict(value)))
    baseline = _quality_target(metrics)
    for name in ("gitmem: evidence in first 2000 tokens",
                 "gitmem, ranked items only (pinned left out): evidence in first 2000 tokens"):
        found = metrics.get(name)
        if found is None or not baseline:
            continue
        value = float(found["value"])
        label = ("retrieval quality above BM25 "
                 + ("(retrieved_evidence as given)" if "ranked" not in name
                    else "(ranked items, pinned left out)"))
        out.append((label, f"{value:.3f} vs BM25 {baseline:.3f}",
                    "met" if value > baseline else "tied, not above" if value == baseline
                    else f"missed by {baseline - value:.3f}"))
    return out


def markdown(document: dict[str, Any]) -> str:
    """The rows as a Markdown table."""
    size = document.get("size", "?")
    lines = [f"| SPEC §9 target (set for 1M events; this run: {size}) | measured | verdict |",
             "| --- | ---: | --- |"]
    lines += [f"| {t} | {m} | {v} |" for t, m, v in rows(document)]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return _number(value)
    return f"{value:,}" if isinstance(value, int) else str(value)


def span(value: Any, digits: int = 1) -> str:
    """"low-high" of a metric's [start, end] readings (load, CPU probe); "" if absent."""
    if isinstance(value, list) and value and all(isinstance(x, int | float) for x in value):
        return f"{min(value):.{digits}f}-{max(value):.{digits}f}"
    return ""


def full_table(document: dict[str, Any]) -> str:
    """Every metric of the run as a Markdown table (with the load and the CPU probe's
    time at the start and the end of its measurement)."""
    lines = ["| group | measurement | value | unit | p50 ms | p95 ms | max ms | n | load "
             "| probe ms |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for m in document.get("metrics", []):
        extra = m.get("extra", {})
        lines.append("| " + " | ".join([
            m["group"], m["name"].replace("|", "/"), _cell(m.get("value")), m.get("unit", ""),
            _cell(m.get("p50")), _cell(m.get("p95")), _cell(m.get("max")),
            _cell(m.get("samples")), span(extra.get("load_avg_1m")),
            span(extra.get("cpu_probe_ms"), 0)]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the Markdown table of a results file."""
    parser = argparse.ArgumentParser(prog="python -m bench.summary", description=__doc__)
    parser.add_argument("results", type=Path, help="a JSON file written by bench/run.py")
    parser.add_argument("--full", action="store_true", help="every metric, not the targets")
    args = parser.parse_args(argv)
    try:
        document = json.loads(args.results.read_text())
    except OSError as exc:
        parser.error(f"{args.results}: {exc.strerror or exc}")
    except ValueError as exc:
        parser.error(f"{args.results} is not a results file (JSON): {exc}")
    print(full_table(document) if args.full else markdown(document), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
