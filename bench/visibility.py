"""Append → visible in build_acb, under the daemon serving the indexed corpus store.

Each event is timed from just before it is written to the first build_acb
answer (over the socket) whose recent_window holds it:

- by hand: a line appended to the corpus's last day file by this process (open,
  write, close, as a script or an editor does); the ACB is then asked at once,
  and again until the event shows;
- record_event: written through the daemon on one connection, the ACB asked
  on another (no read-your-writes shortcut);
- no read: a line appended by hand, then the index's `events` table polled
  directly every millisecond: how long the watcher alone takes to index it.

The events are `bench.probes` events (a tenant and session of their own, in
the corpus's last day file, which is restored afterwards).
"""

from __future__ import annotations

import time
from typing import Any

from psycopg import sql

from bench import pg, probes
from bench.context import Context
from bench.daemons import BenchDaemon, corpus_daemon
from bench.probes import Probe
from bench.stats import Metric, percentile, timing
from gitmem.client import Client

SAMPLES = {"tiny": 20, "10k": 50}
DEFAULT_SAMPLES = 100
POLL_TIMEOUT_S = 10.0
PAUSE_S = 0.02
TARGET = "p95 ≤ 200 ms (SPEC §9)"


def _in_recent(acb: dict[str, Any], event_id: str) -> bool:
    for section in acb.get("sections", []):
        if section.get("name") == "recent_window":
            return any(str(item.get("id", "")).split("#", 1)[0] == event_id
                       for item in section.get("items", []))
    return False


class Prober:
    """Asks build_acb for the probe session until an event shows in recent_window."""

    def __init__(self, client: Client, params: dict[str, Any]) -> None:
        self.client = client
        self.params = params
        self.polls: list[int] = []

    def wait(self, event_id: str, began_ns: int) -> float:
        """Milliseconds from `began_ns` until an ACB shows `event_id`."""
        polls = 0
        while True:
            polls += 1
            if _in_recent(self.client.call("build_acb", self.params), event_id):
                self.polls.append(polls)
                return (time.perf_counter_ns() - began_ns) / 1e6
            if (time.perf_counter_ns() - began_ns) / 1e9 > POLL_TIMEOUT_S:
                raise RuntimeError(f"{event_id} not in build_acb after {POLL_TIMEOUT_S}s")


def by_hand(probe: Probe, prober: Prober, count: int) -> list[float]:
    """Lag of lines appended by hand, seen through build_acb."""
    lags = []
    for _ in range(count):
        event_id, data = probes.line(*probe.stamp())
        began = time.perf_counter_ns()
        with probe.path.open("ab") as out:
            out.write(data)
        lags.append(prober.wait(event_id, began))
        time.sleep(PAUSE_S)
    return lags


def by_record(daemon: BenchDaemon, probe: Probe, prober: Prober,
              count: int) -> tuple[list[float], list[float]]:
    """Lag of events written with record_event (answer, then visible elsewhere)."""
    lags, answers = [], []
    with daemon.client() as writer:
        for _ in range(count):
            event = probes.fields(*probe.stamp())
            began = time.perf_counter_ns()
            answer = writer.call("record_event", event)
            answers.append((time.perf_counter_ns() - began) / 1e6)
            lags.append(prober.wait(answer["event_id"], began))
            time.sleep(PAUSE_S)
    return lags, answers


def no_read(ctx: Context, probe: Probe, count: int) -> list[float]:
    """Lag of lines appended by hand until the events table has them (no ACB asked)."""
    schema = ctx.index_config().schema
    query = sql.SQL("SELECT 1 FROM {}.events WHERE event_id = %s").format(
        sql.Identifier(schema))
    lags = []
    with pg.connect(ctx.dsn) as conn:
        for _ in range(count):
            event_id, data = probes.line(*probe.stamp())
            began = time.perf_counter_ns()
            with probe.path.open("ab") as out:
                out.write(data)
            while conn.execute(query, (event_id,)).fetchone() is None:
                if (time.perf_counter_ns() - began) / 1e9 > POLL_TIMEOUT_S:
                    raise RuntimeError(f"{event_id} not indexed after {POLL_TIMEOUT_S}s")
                time.sleep(0.001)
            lags.append((time.perf_counter_ns() - began) / 1e6)
            time.sleep(PAUSE_S)
    return lags


def measure(ctx: Context) -> list[Metric]:
    """Append → visible lag, three ways, under the corpus daemon."""
    daemon = corpus_daemon(ctx)
    count = SAMPLES.get(ctx.size, DEFAULT_SAMPLES)
    with probes.probing(ctx, daemon) as probe, daemon.client() as client:
        prober = Prober(client, probe.acb_params())
        hand = by_hand(probe, prober, count)
        hand_polls = list(prober.polls)
        recorded, answers = by_record(daemon, probe, prober, count)
        indexed = no_read(ctx, probe, count)
    return [
        timing("visible", "appended by hand → in build_acb", hand, target=TARGET,
               polls_max=max(hand_polls, default=0), **probe.stats),
        timing("visible", "record_event → in build_acb (another connection)", recorded,
               target=TARGET, record_answer_p50_ms=round(percentile(answers, 50), 3)),
        timing("visible", "appended by hand → indexed (no read; table polled)", indexed),
    ]
