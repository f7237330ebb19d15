"""The benchmark's output: a table for the terminal, JSON for files, the machine it ran on."""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

from bench.stats import Metric
from bench.summary import span


def machine() -> dict[str, Any]:
    """CPU model and count, memory, OS and Python: what the numbers depend on."""
    model = platform.processor() or "?"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpu": model, "cpus": os.cpu_count(),
            "memory_gb": round(psutil.virtual_memory().total / (1 << 30), 1),
            "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version()}


def source_state(root: Path) -> dict[str, Any]:
    """The checkout measured: HEAD, and which tracked files differ from it (uncommitted
    work of the product changes what is measured)."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return done.stdout if done.returncode == 0 else ""
    return {"head": git("rev-parse", "HEAD").strip(),
            "modified": [line[3:] for line in git("status", "--porcelain",
                                                  "--untracked-files=no").splitlines()]}


def _fmt(value: float | str | None) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return f"{int(value):,}"


def table(metrics: Sequence[Metric], notes: Sequence[str] = ()) -> str:
    """A fixed-width table of the metrics, then the notes (skipped, pending)."""
    header = ("group", "measurement", "value", "unit", "p50 ms", "p95 ms", "max ms", "n",
              "load", "probe ms", "target")
    rows = [header] + [(m.group, m.name, _fmt(m.value), m.unit, _fmt(m.p50), _fmt(m.p95),
                        _fmt(m.max), _fmt(m.samples), span(m.extra.get("load_avg_1m")),
                        span(m.extra.get("cpu_probe_ms"), 0), m.target) for m in metrics]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    right = {2, 4, 5, 6, 7, 8, 9}

    def line(row: Sequence[str]) -> str:
        return "  ".join(cell.rjust(w) if i in right else cell.ljust(w)
                         for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    out = [line(header), line(["-" * w for w in widths])]
    out += [line(row) for row in rows[1:]]
    return "\n".join([*out, "", *notes]).rstrip() + "\n"
