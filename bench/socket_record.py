"""record_event over the socket, into a scratch store with a daemon of its own.

Events come from the corpus grammar (`recording.live_events`: messages, tool
calls, tool results, 2% of them 10-70 KB logs cut into excerpts + artifacts),
without ids or timestamps, as a live client sends them. Every answer means the
line is durable (the daemon's writer fsyncs before answering). The daemon
indexes what is written as it goes (its watcher), as in real use; the time it
needs to catch up after each run is reported beside the run.

- single: one client, one `record_event` call at a time;
- batched: one client sending JSON-RPC batches (arrays of `record_event`
  requests, one line) and `record_events` calls;
- concurrent: N client threads (8, 16, 32), each one call at a time, for a
  fixed duration (sustained throughput), per-call latency, and the CPU the
  daemon, PostgreSQL and the clients used meanwhile (in cores);
- reading under writes: 8 writer threads again, plus one client asking for the
  fast-path ACB of a session none of them writes to, one call after another:
  its latency while the index is behind the writers.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from itertools import cycle
from typing import Any

from bench.context import Context
from bench.corpus import new_repo
from bench.daemons import BenchDaemon, postgres_cpu_s
from bench.recording import live_events
from bench.stats import Metric, latency, medians, percentile, timed, timing
from gitmem.client import Client, result_of

# (single calls, JSON-RPC batches of 100, record_events calls of 500, seconds per concurrency)
PLAN = {"tiny": (200, 3, 2, 0.5), "10k": (500, 5, 3, 2.0)}
DEFAULT_PLAN = (2000, 20, 10, 6.0)
CLIENTS = (8, 16, 32)
POOL_EVENTS = 20000   # distinct event objects, cycled (the daemon assigns ids)
TARGET_SINGLE = "p95 ≤ 5 ms, durable (SPEC §9)"
TARGET_RATE = "≥ 3000 events/s sustained (SPEC §9)"
SHARED = "socket_record"


def _rpc(request_id: int, method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _line(message: Any) -> bytes:
    return json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n"


def single(daemon: BenchDaemon, events: Iterator[dict[str, Any]], count: int) -> Metric:
    """One client, one durable event per call."""
    samples: list[int] = []
    with daemon.client() as client:
        for _ in range(count):
            event = next(events)
            with timed() as clock:
                client.call("record_event", event)
            samples.append(clock.ns)
    return latency("socket", "record_event, 1 client, one call at a time", samples,
                   count=count, target=TARGET_SINGLE)


def jsonrpc_batches(daemon: BenchDaemon, events: Iterator[dict[str, Any]], batches: int,
                    size: int = 100) -> Metric:
    """One client sending arrays of `size` record_event requests, one line each."""
    samples: list[int] = []
    with daemon.client() as client:
        for _ in range(batches):
            line = _line([_rpc(n, "record_event", next(events)) for n in range(size)])
            with timed() as clock:
                client.send_line(line)
                answers = client.read_response()
            samples.append(clock.ns)
            for answer in answers:
                result_of(answer)   # raises on an error
    return latency("socket", f"JSON-RPC batches of {size} record_event", samples,
                   count=batches * size, per="batch")


def record_events(daemon: BenchDaemon, events: Iterator[dict[str, Any]], calls: int,
                  size: int = 500) -> Metric:
    """One client calling `record_events` with `size` events per call."""
    samples: list[int] = []
    with daemon.client() as client:
        for _ in range(calls):
            batch = [next(events) for _ in range(size)]
            with timed() as clock:
                client.call("record_events", {"events": batch})
            samples.append(clock.ns)
    return latency("socket", f"record_events, {size} events per call", samples,
                   count=calls * size, per="call")


def concurrent(daemon: BenchDaemon, pool: list[dict[str, Any]], clients: int,
               seconds: float, reads: list[tuple[int, dict[str, float]]] | None = None,
               read: dict[str, Any] | None = None) -> Metric:
    """`clients` threads, each calling record_event one at a time, for `seconds`;
    with `read`, one more thread asking build_acb for it meanwhile (into `reads`: each
    call's wall time and its phases, as `read_phases` gives them)."""
    samples: list[list[int]] = [[] for _ in range(clients)]
    errors: list[str] = []
    start = threading.Barrier(clients + 1 + (read is not None))
    deadline = [0.0]

    def reader() -> None:
        with Client(daemon.config.socket_path, timeout=120.0) as client:
            start.wait()
            while time.perf_counter() < deadline[0]:
                began = time.perf_counter_ns()
                try:
                    answer = client.call("build_acb", read)
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    return
                if reads is not None:
                    reads.append((time.perf_counter_ns() - began, read_phases(answer)))

    def work(number: int) -> None:
        mine = cycle(pool[number::clients] or pool)
        with Client(daemon.config.socket_path, timeout=120.0) as client:
            start.wait()
            while time.perf_counter() < deadline[0]:
                event = next(mine)
                began = time.perf_counter_ns()
                try:
                    client.call("record_event", event)
                except Exception as exc:  # reported, never silent
                    errors.append(f"{type(exc).__name__}: {exc}")
                    return
                samples[number].append(time.perf_counter_ns() - began)

    threads = [threading.Thread(target=work, args=(n,), daemon=True) for n in range(clients)]
    if read is not None:
        threads.append(threading.Thread(target=reader, daemon=True))
    for thread in threads:
        thread.start()
    cpu = time.process_time()
    daemon_cpu, pg_cpu = daemon.cpu_s(), postgres_cpu_s()
    deadline[0] = time.perf_counter() + seconds
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    client_cpu = time.process_time() - cpu
    daemon_cpu, pg_cpu = daemon.cpu_s() - daemon_cpu, postgres_cpu_s() - pg_cpu
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]}")
    flat = [s for per in samples for s in per]
    metric = latency("socket", f"record_event, {clients} concurrent clients", flat,
                     count=len(flat), target=TARGET_RATE if clients == 8 else "")
    metric.value = round(len(flat) / wall, 1)   # events over wall time, not summed latency
    metric.extra.update(seconds=round(wall, 2), events=len(flat),
                        cpu_cores={"daemon": round(daemon_cpu / wall, 2),
                                   "postgres": round(pg_cpu / wall, 2),
                                   "clients": round(client_cpu / wall, 2)})
    with timed() as clock:   # how far behind the indexer is: status waits for it
        daemon.call("status")
    metric.extra["index_catch_up_s"] = round(clock.s, 3)
    return metric


def reading_under_writes(daemon: BenchDaemon, pool: list[dict[str, Any]],
                         seconds: float, writers: int = 8) -> Metric:
    """Fast-path ACBs of a session nobody else writes to, while `writers` clients write."""
    tenant = str(pool[0].get("tenant_id") or "default")
    request = {"tenant_id": tenant, "session_id": "bench-reader", "channel": "team"}
    with daemon.client() as client:
        for n in range(3):
            client.call("record_event", {**request, "kind": "message",
                                         "content": {"text": f"reader's own turn {n}"}})
        client.call("build_acb", request)   # its caches warm
    reads: list[tuple[int, dict[str, float]]] = []
    writes = concurrent(daemon, pool, writers, seconds, reads, request)
    walls = [ns / 1e6 for ns, _ in reads]
    slow = percentile(walls, 95)
    tail = [phases for (ns, phases) in reads if ns / 1e6 >= slow]
    return timing("socket", f"build_acb fast path (another session) beside {writers} "
                  "writing clients", walls, writes_per_s=writes.value,
                  index_catch_up_s=writes.extra["index_catch_up_s"],
                  phases_median_ms=medians([phases for _, phases in reads]),
                  tail_p95={"calls": len(tail), "phases_median_ms": medians(tail),
                            "waited": sum(1 for phases in tail if phases["awaited_files"])})


def read_phases(answer: dict[str, Any]) -> dict[str, float]:
    """What a fast-path answer says of its time: the build, the catch-up before it, and
    whether it waited for files being indexed (or named some it did not wait for)."""
    provenance = answer.get("provenance", {})
    state = provenance.get("index_state", {})
    return {"build": float(provenance.get("timings_ms", {}).get("total", 0.0)),
            "catch_up": float(state.get("catch_up_ms", 0.0)),
            "awaited_files": float(len(state.get("caught_up_files", ()))),
            "not_awaited_files": float(len(state.get("not_awaited_files", ())))}


def measure(ctx: Context) -> list[Metric]:
    """Throughput and latency of record_event over the socket, single to 32 clients."""
    singles, rpc_batches, bulk_calls, seconds = PLAN.get(ctx.size, DEFAULT_PLAN)
    pool = live_events(POOL_EVENTS if ctx.size != "tiny" else 2000, ctx.seed + 2000)
    events = cycle(pool)
    root = ctx.scratch / "socket"
    shutil.rmtree(root, ignore_errors=True)
    store = new_repo(root)
    daemon = BenchDaemon(store, ctx.dsn, ctx.schemas.name("sock"))
    ctx.cleanups.append(daemon.stop)  # before the start: an interrupt in it cleans up too
    daemon.start()
    metrics = [single(daemon, events, singles),
               jsonrpc_batches(daemon, events, rpc_batches),
               record_events(daemon, events, bulk_calls)]
    for clients in CLIENTS:
        metrics.append(concurrent(daemon, pool, clients, seconds))
    metrics.append(reading_under_writes(daemon, pool, seconds))
    state = daemon.call("daemon_status")
    ctx.shared[SHARED] = {"rss_mb": daemon.rss_mb(), "peak_rss_mb": daemon.peak_rss_mb(),
                          "writer": state.get("writer"),
                          "watcher_batches": state.get("watcher", {}).get("batches")}
    daemon.stop()
    return metrics
