"""The daemon's resident memory after the ACB runs: steady and peak.

Steady: RSS of the corpus daemon after `SETTLE_S` idle seconds, once the
latency, visibility and quality measurements have used it (when none ran,
one pass of every build_acb request first). Peak: the kernel's high-water mark
(VmHWM) since the daemon started, start-up reconcile included. The scratch
daemon of `socket_record` (write load) is reported beside it when it ran.
"""

from __future__ import annotations

import time

from bench import pg
from bench.acb_latency import SHARED as ACB_SHARED
from bench.context import Context
from bench.daemons import BenchDaemon, corpus_daemon
from bench.queries import CATEGORIES, asks
from bench.socket_record import SHARED as RECORD_SHARED
from bench.stats import Metric
from bench.summary import RSS_MANY_SESSIONS

SETTLE_S = 2.0
MANY_SESSIONS = 2000
MANY_STEP = 500
TARGET = "RSS ≤ 300 MB (SPEC §9)"


def measure(ctx: Context) -> list[Metric]:
    """Steady and peak RSS of the corpus daemon (and the write-load daemon)."""
    daemon = corpus_daemon(ctx)
    if ACB_SHARED not in ctx.shared:
        with daemon.client() as client:
            for category in CATEGORIES:
                for ask in asks(ctx)[category]:
                    client.call("build_acb", ask.params)
    time.sleep(SETTLE_S)
    metrics = [
        Metric("daemon", "RSS, steady (corpus daemon, after the ACB runs)", daemon.rss_mb(),
               "MB", target=TARGET, extra={**daemon.stats,
                                           "by_process": daemon.memory_by_process()}),
        Metric("daemon", "RSS, peak since start (VmHWM)", daemon.peak_rss_mb(), "MB",
               target=TARGET),
    ]
    metrics.append(_many_sessions(ctx, daemon))
    written = ctx.shared.get(RECORD_SHARED)
    if written:
        metrics.append(Metric("daemon", "RSS, peak of the socket_record daemon (write load)",
                              written["peak_rss_mb"], "MB", target=TARGET, extra=written))
    return metrics


def _many_sessions(ctx: Context, daemon: BenchDaemon) -> Metric:
    """RSS after the fast path of more sessions than the caches keep."""
    db = ctx.ensure_index()
    with pg.connect(ctx.dsn) as conn:
        sessions = pg.sample_sessions(conn, db.schema, MANY_SESSIONS)
    now = next((q["now"] for q in ctx.corpus.questions()), None)
    curve: dict[int, float] = {}
    with daemon.client() as client:
        for number, row in enumerate(sessions, 1):
            client.call("build_acb", {**row, "now": now})
            if number % MANY_STEP == 0 or number == len(sessions):
                curve[number] = daemon.rss_mb()
    time.sleep(SETTLE_S)
    return Metric("daemon", RSS_MANY_SESSIONS, daemon.rss_mb(), "MB", target=TARGET,
                  extra={"sessions": len(sessions), "rss_mb_after_sessions": curve,
                         "peak_mb": daemon.peak_rss_mb(),
                         "by_process": daemon.memory_by_process()})
