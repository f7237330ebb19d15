"""Record throughput: the Python API (one event, batches) and the CLI, into a scratch store.

Events come from the corpus grammar (same vocabulary, tool output sizes and
huge-output share), without ids or timestamps, as a live client sends them.
Every write is durable (flock, write, fsync) before the call returns.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.context import Context, Skip
from bench.corpus import new_repo
from bench.plan import make_plan
from bench.sessions import session_ops
from bench.stats import Metric, latency, timed
from gitmem.policies import load_policies
from gitmem.recorder import Recorder

# (single events, batches of 100, batches of 1000, CLI batch events, CLI single processes)
PLAN = {"tiny": (200, 3, 1, 1000, 5), "10k": (1000, 10, 5, 5000, 10)}
DEFAULT_PLAN = (2000, 20, 10, 10000, 10)
TARGET = "≥ 3000 events/s, p95 ≤ 5 ms (SPEC §9, over the socket)"


def live_events(count: int, seed: int) -> list[dict[str, Any]]:
    """`count` event objects as a client sends them (no id, ts or hash). Their refs
    name the plan's ids, which a client leaving ids to the write path never learns,
    and a cited event must be recorded: left out too, and with them the summaries
    (1 event in 400), which must cite what they summarise."""
    plan = make_plan(count + count // 5 + 50, 2, 0, seed)
    out: list[dict[str, Any]] = []
    for session in plan.sessions:
        for op in session_ops(session):
            if op.action == "event" and op.fields.get("kind") != "summary":
                out.append({k: v for k, v in op.fields.items() if k not in ("id", "ts", "refs")})
                if len(out) == count:
                    return out
    return out


def gitmem_command() -> list[str]:
    """The `gitmem` console script installed beside this Python."""
    script = Path(sys.executable).with_name("gitmem")
    found = str(script) if script.exists() else shutil.which("gitmem")
    if found is None:
        raise Skip("no `gitmem` executable beside this Python or on PATH")
    return [found]


def measure(ctx: Context) -> list[Metric]:
    """Events/s and per-call latency of each way to record."""
    singles, b100, b1000, cli_batch, cli_single = PLAN.get(ctx.size, DEFAULT_PLAN)
    total = singles + 100 * b100 + 1000 * b1000 + cli_batch + cli_single
    events = iter(live_events(total, ctx.seed + 1000))
    root = ctx.scratch / "record"
    shutil.rmtree(root, ignore_errors=True)
    store = new_repo(root)
    recorder = Recorder(store, load_policies(store))
    metrics: list[Metric] = []

    samples: list[int] = []
    for _ in range(singles):
        event = next(events)
        with timed() as clock:
            recorder.record(event)
        samples.append(clock.ns)
    metrics.append(latency("record", "python single (durable)", samples, count=singles,
                           target=TARGET))
    for size, batches in ((100, b100), (1000, b1000)):
        samples = []
        for _ in range(batches):
            batch = [next(events) for _ in range(size)]
            with timed() as clock:
                recorder.record_many(batch)
            samples.append(clock.ns)
        metrics.append(latency("record", f"python record_many({size})", samples,
                               count=size * batches, per="batch"))
    metrics.append(_cli_batch(store, [next(events) for _ in range(cli_batch)], root))
    metrics.append(_cli_single(store, [next(events) for _ in range(cli_single)]))
    return metrics


def _cli_batch(store: Path, batch: list[dict[str, Any]], root: Path) -> Metric:
    source = root / "batch.jsonl"
    source.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in batch))
    command = [*gitmem_command(), "--store", str(store), "record", "--json", str(source)]
    with timed() as clock:
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    written = len(done.stdout.split())
    return Metric("record", f"cli record --json ({len(batch)} events, 1 process)",
                  round(written / clock.s, 1), "events/s", samples=1,
                  extra={"wall_s": round(clock.s, 3), "events": written})


def _cli_single(store: Path, events: list[dict[str, Any]]) -> Metric:
    samples: list[int] = []
    for event in events:
        command = [*gitmem_command(), "--store", str(store), "record",
                   "--content", json.dumps(event["content"]), "--kind", event["kind"],
                   "--session", event["session_id"], "--tenant", event["tenant_id"]]
        with timed() as clock:
            done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"gitmem record failed: {done.stderr.strip()}")
        samples.append(clock.ns)
    return latency("record", "cli record (1 process per event)", samples, count=len(events),
                   note="includes interpreter start-up")
