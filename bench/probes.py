"""Probe events written into the corpus store during a measurement, and removed after.

Probe events belong to a tenant and session of their own (`TENANT`, `SESSION`)
and are stamped within the corpus's last day, so they land in its last day
file. `probing` remembers that file's size and truncates it back at the end
(the cached corpus stays as generated), deletes the probe task's file (one
task, `TASK_ID`, updated by `task_fields`), waits until the daemon has
re-indexed both, and checks that no probe row is left in the index. What a
crashed earlier run left behind is removed first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from psycopg import sql

from bench import pg
from bench.context import Context
from bench.daemons import BenchDaemon
from bench.stats import timed
from gitmem.ids import new_id
from gitmem.records import content_hash, format_ts, parse_event, parse_ts

TENANT = "bench-visibility"
SESSION = "s_bench_visibility"
AGENT = "bench-agent"
TASK_ID = "tsk_" + "0" * 12 + "BENCHPR0BETASK"  # a valid id no write path mints (year 1970)
_MARK = f'"tenant_id":"{TENANT}"'.encode()


def last_day_file(store: Path) -> Path:
    """The newest events file of the store."""
    files = sorted((store / "events").glob("*/*.jsonl"))
    if not files:
        raise RuntimeError(f"no events files under {store / 'events'}")
    return files[-1]


def strip_leftovers(path: Path) -> int:
    """Cut probe lines a crashed earlier run left at the end of `path`; the clean size."""
    data = path.read_bytes()
    at = data.find(_MARK)
    if at < 0:
        return len(data)
    start = data.rfind(b"\n", 0, at) + 1
    os.truncate(path, start)
    return start


def task_path(store: Path) -> Path:
    """The probe task's file."""
    return store / "tasks" / f"{TASK_ID}.md"


def task_fields(number: int, ts: datetime) -> dict[str, Any]:
    """An update of the probe task (its file rewritten), as a client sends it."""
    status = ("open", "doing")[number % 2]
    return {**fields(number, ts), "kind": "task_update",
            "content": {"task_id": TASK_ID, "title": f"probe task {number}", "status": status}}


def fields(number: int, ts: datetime) -> dict[str, Any]:
    """A probe event as a client sends it (no id, no hash)."""
    content = {"text": f"visibility probe {number}: the canary deploy of zephyr{number} passed"}
    return {"ts": format_ts(ts), "tenant_id": TENANT, "session_id": SESSION,
            "agent_id": AGENT, "channel": "team", "actor": {"type": "agent", "id": AGENT},
            "kind": "message", "content": content, "refs": [], "tags": [],
            "sensitivity": "none"}


def line(number: int, ts: datetime) -> tuple[str, bytes]:
    """A complete, valid probe event line (id, hash and all): its id and bytes."""
    obj = fields(number, ts)
    event = parse_event({**obj, "id": new_id("evt", ts),
                         "hash": content_hash("message", obj["content"])})
    return event.id, event.to_line().encode("utf-8")


@dataclass
class Probe:
    """Where probe events go, their timestamps, and the clock ACB requests use."""

    path: Path
    size: int
    day: datetime
    now: str
    used: int = 0
    stats: dict[str, Any] = field(default_factory=dict)

    def stamp(self) -> tuple[int, datetime]:
        """The next probe's number and timestamp (1 ms apart, within the day)."""
        self.used += 1
        return self.used, self.day + timedelta(hours=1, milliseconds=self.used)

    def acb_params(self) -> dict[str, Any]:
        """A fast-path build_acb request for the probe session."""
        return {"tenant_id": TENANT, "session_id": SESSION, "agent_id": AGENT,
                "channel": "team", "now": self.now}


def _leftover_rows(ctx: Context) -> int:
    schema = sql.Identifier(ctx.index_config().schema)
    with pg.connect(ctx.dsn) as conn:
        row = conn.execute(sql.SQL(
            "SELECT (SELECT count(*) FROM {}.events WHERE tenant_id = %s)"
            " + (SELECT count(*) FROM {}.tasks WHERE tenant_id = %s) AS n").format(
                schema, schema), (TENANT, TENANT)).fetchone()
    return int(row["n"]) if row else 0


@contextmanager
def probing(ctx: Context, daemon: BenchDaemon) -> Iterator[Probe]:
    """Probe events may be written inside; the day file is restored on the way out."""
    path = last_day_file(ctx.corpus.store)
    size = strip_leftovers(path)
    task_path(ctx.corpus.store).unlink(missing_ok=True)
    day = datetime.fromisoformat(path.stem + "T00:00:00+00:00")
    now = format_ts(max(parse_ts(ctx.corpus.info["now"]), day + timedelta(days=1)))
    probe = Probe(path, size, day, now)
    try:
        yield probe
    finally:
        os.truncate(path, size)
        task_path(ctx.corpus.store).unlink(missing_ok=True)
        with timed() as clock:
            daemon.call("status")  # waits until the watcher has re-indexed the file
        probe.stats.update(file=str(path.relative_to(ctx.corpus.store)), file_bytes=size,
                           restore_reindex_s=round(clock.s, 3))
    left = _leftover_rows(ctx)
    if left:
        raise RuntimeError(f"{left} probe events still indexed after the restore")
