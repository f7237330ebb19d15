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

The events belong to a tenant and session of their own (`TENANT`), in the
last day file of the corpus; at the end the file is truncated back to its
size (the cached corpus stays as generated) and the daemon re-indexes it
before the next measurement.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from psycopg import sql

from bench import pg
from bench.context import Context
from bench.daemons import BenchDaemon, corpus_daemon
from bench.stats import Metric, percentile, timed, timing
from gitmem.client import Client
from gitmem.ids import new_id
from gitmem.records import content_hash, format_ts, parse_event, parse_ts

TENANT = "bench-visibility"
SESSION = "s_bench_visibility"
AGENT = "bench-agent"
SAMPLES = {"tiny": 20, "10k": 50}
DEFAULT_SAMPLES = 100
POLL_TIMEOUT_S = 10.0
PAUSE_S = 0.02
TARGET = "p95 ≤ 200 ms (SPEC §9)"
_MARK = f'"tenant_id":"{TENANT}"'.encode()


def last_day_file(store: Path) -> Path:
    """The newest events file of the store."""
    files = sorted((store / "events").glob("*/*.jsonl"))
    if not files:
        raise RuntimeError(f"no events files under {store / 'events'}")
    return files[-1]


def strip_leftovers(path: Path) -> int:
    """Cut lines a crashed earlier run left at the end of `path`; the clean size."""
    data = path.read_bytes()
    at = data.find(_MARK)
    if at < 0:
        return len(data)
    start = data.rfind(b"\n", 0, at) + 1
    os.truncate(path, start)
    return start


def _fields(number: int, ts: datetime) -> dict[str, Any]:
    content = {"text": f"visibility probe {number}: the canary deploy of zephyr{number} passed"}
    return {"ts": format_ts(ts), "tenant_id": TENANT, "session_id": SESSION,
            "agent_id": AGENT, "channel": "team", "actor": {"type": "agent", "id": AGENT},
            "kind": "message", "content": content, "refs": [], "tags": [],
            "sensitivity": "none"}


def hand_line(number: int, ts: datetime) -> tuple[str, bytes]:
    """A complete, valid event line (id, hash and all): its id and bytes."""
    fields = _fields(number, ts)
    event = parse_event({**fields, "id": new_id("evt", ts),
                         "hash": content_hash("message", fields["content"])})
    return event.id, event.to_line().encode("utf-8")


def _in_recent(acb: dict[str, Any], event_id: str) -> bool:
    for section in acb.get("sections", []):
        if section.get("name") == "recent_window":
            return any(str(item.get("id", "")).split("#", 1)[0] == event_id
                       for item in section.get("items", []))
    return False


class Prober:
    """Asks build_acb for the probe session until an event shows in recent_window."""

    def __init__(self, client: Client, now: str) -> None:
        self.client = client
        self.params = {"tenant_id": TENANT, "session_id": SESSION, "agent_id": AGENT,
                       "channel": "team", "now": now}
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


def by_hand(path: Path, prober: Prober, stamps: list[datetime], first: int) -> list[float]:
    """Lag of lines appended by hand, seen through build_acb."""
    lags = []
    for n, ts in enumerate(stamps, first):
        event_id, line = hand_line(n, ts)
        began = time.perf_counter_ns()
        with path.open("ab") as out:
            out.write(line)
        lags.append(prober.wait(event_id, began))
        time.sleep(PAUSE_S)
    return lags


def by_record(daemon: BenchDaemon, prober: Prober, stamps: list[datetime],
              first: int) -> tuple[list[float], list[float]]:
    """Lag of events written with record_event (answer, then visible elsewhere)."""
    lags, answers = [], []
    with daemon.client() as writer:
        for n, ts in enumerate(stamps, first):
            began = time.perf_counter_ns()
            answer = writer.call("record_event", _fields(n, ts))
            answers.append((time.perf_counter_ns() - began) / 1e6)
            lags.append(prober.wait(answer["event_id"], began))
            time.sleep(PAUSE_S)
    return lags, answers


def no_read(ctx: Context, path: Path, stamps: list[datetime], first: int) -> list[float]:
    """Lag of lines appended by hand until the events table has them (no ACB asked)."""
    schema = ctx.index_config().schema
    query = sql.SQL("SELECT 1 FROM {}.events WHERE event_id = %s").format(
        sql.Identifier(schema))
    lags = []
    with pg.connect(ctx.dsn) as conn:
        for n, ts in enumerate(stamps, first):
            event_id, line = hand_line(n, ts)
            began = time.perf_counter_ns()
            with path.open("ab") as out:
                out.write(line)
            while conn.execute(query, (event_id,)).fetchone() is None:
                if (time.perf_counter_ns() - began) / 1e9 > POLL_TIMEOUT_S:
                    raise RuntimeError(f"{event_id} not indexed after {POLL_TIMEOUT_S}s")
                time.sleep(0.001)
            lags.append((time.perf_counter_ns() - began) / 1e6)
            time.sleep(PAUSE_S)
    return lags


def _leftover_rows(ctx: Context) -> int:
    schema = ctx.index_config().schema
    with pg.connect(ctx.dsn) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) AS n FROM {}.events WHERE tenant_id = %s")
                           .format(sql.Identifier(schema)), (TENANT,)).fetchone()
    return int(row["n"]) if row else 0


def measure(ctx: Context) -> list[Metric]:
    """Append → visible lag, three ways, under the corpus daemon."""
    daemon = corpus_daemon(ctx)
    path = last_day_file(ctx.corpus.store)
    size = strip_leftovers(path)
    count = SAMPLES.get(ctx.size, DEFAULT_SAMPLES)
    day = datetime.fromisoformat(path.stem + "T00:00:00+00:00")
    now = format_ts(max(parse_ts(ctx.corpus.info["now"]), day + timedelta(days=1)))
    stamps = [day + timedelta(hours=1, milliseconds=n) for n in range(3 * count)]
    restore_s = 0.0
    try:
        with daemon.client() as client:
            prober = Prober(client, now)
            hand = by_hand(path, prober, stamps[:count], 0)
            hand_polls = list(prober.polls)
            recorded, answers = by_record(daemon, prober, stamps[count:2 * count], count)
        indexed = no_read(ctx, path, stamps[2 * count:], 2 * count)
    finally:
        os.truncate(path, size)   # the corpus stays as generated
        with timed() as clock:
            daemon.call("status")  # waits until the watcher has re-indexed the file
        restore_s = clock.s
    left = _leftover_rows(ctx)
    if left:
        raise RuntimeError(f"{left} probe events still indexed after the restore")
    note = {"file": str(path.relative_to(ctx.corpus.store)), "file_bytes": size,
            "restore_reindex_s": round(restore_s, 3)}
    return [
        timing("visible", "appended by hand → in build_acb", hand, target=TARGET,
               polls_max=max(hand_polls, default=0), **note),
        timing("visible", "record_event → in build_acb (another connection)", recorded,
               target=TARGET, record_answer_p50_ms=round(percentile(answers, 50), 3)),
        timing("visible", "appended by hand → indexed (no read; table polled)", indexed),
    ]
