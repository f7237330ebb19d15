"""Full reindex of the corpus beside a raw COPY + index build of the same rows.

`gitmem.indexer.reindex` reads every file, derives the rows and bulk-loads
them. The baseline takes the rows that reindex produced (dumped with COPY TO
into files), and in a fresh schema times only: bare tables from schema.sql,
COPY FROM of every dump, indexes.sql and ANALYZE, in one transaction. The
ratio is what the file parsing and row derivation cost on top of the database.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from typing import Any

from bench import pg
from bench.context import Context
from bench.stats import Metric, percentile, timed
from gitmem import indexer

TARGET = "≤ 1.5 x raw COPY + index build (SPEC §9)"


def measure(ctx: Context) -> list[Metric]:
    """Reindex time, raw COPY time, their ratio, and what the index holds."""
    db = ctx.index_database()
    store, policies = ctx.corpus.store, ctx.policies
    reindex_s: list[float] = []
    cpu_s: list[float] = []
    load = [round(os.getloadavg()[0], 2)]
    report = None
    for _ in range(ctx.repeat):
        cpu = time.process_time()
        with timed() as clock:
            report = indexer.reindex(db, store, policies)
        reindex_s.append(clock.s)
        cpu_s.append(time.process_time() - cpu)
        load.append(round(os.getloadavg()[0], 2))
    ctx.indexed = True
    assert report is not None
    raw_s: list[float] = []
    phases: dict[str, float] = {}
    dump_dir = ctx.scratch / "dump"
    with pg.connect(ctx.dsn) as conn:
        dumps = pg.dump_tables(conn, db.schema, dump_dir)
        for _ in range(ctx.repeat):
            phases = {}
            pg.load_raw(conn, ctx.schemas.name("raw"), dumps, phases)
            raw_s.append(phases["total_s"])
            load.append(round(os.getloadavg()[0], 2))
        sizes = pg.relation_sizes(conn, db.schema)
        indexes = pg.index_sizes(conn, db.schema)
        events = pg.count_rows(conn, db.schema, "events")
        chunks = pg.count_rows(conn, db.schema, "chunks")
    dump_bytes = sum(path.stat().st_size for _, path in dumps.values())
    shutil.rmtree(dump_dir, ignore_errors=True)
    reindex, raw = percentile(reindex_s, 50), percentile(raw_s, 50)
    mb = 1 << 20
    total = sum(int(r["total_bytes"]) for r in sizes)
    index_total = sum(indexes.values())
    return [
        Metric("reindex", "gitmem reindex (files → index)", round(reindex, 2), "s",
               samples=len(reindex_s),
               extra={"runs_s": [round(s, 3) for s in reindex_s],
                      "client_cpu_s": [round(s, 3) for s in cpu_s], "files": report.files,
                      "rows": report.rows, "parse_errors": len(report.errors),
                      "events_per_s": round(events / reindex, 1) if reindex else None}),
        Metric("reindex", "raw COPY + indexes + ANALYZE (same rows)", round(raw, 2), "s",
               samples=len(raw_s),
               extra={"runs_s": [round(s, 3) for s in raw_s],
                      "phases_s": {k: round(v, 3) for k, v in phases.items()},
                      "copy_text_mb": round(dump_bytes / mb, 1)}),
        Metric("reindex", "ratio reindex / raw", round(reindex / raw, 2) if raw else 0.0, "x",
               target=TARGET, extra={"best_of_runs": round(min(reindex_s) / min(raw_s), 2),
                                     "load_avg_1m": load}),
        Metric("index", "events", events, "rows"),
        Metric("index", "chunks", chunks, "rows"),
        Metric("index", "size on disk (tables + indexes)", round(total / mb, 1), "MB",
               extra={"tables": {r["table"]: _sizes(r) for r in sizes}}),
        Metric("index", "indexes", round(index_total / mb, 1), "MB",
               extra={name: round(size / mb, 2) for name, size in indexes.items()}),
    ]


def _sizes(row: dict[str, Any]) -> dict[str, float]:
    mb = 1 << 20
    return {"rows": int(row["rows"]), "table_mb": round(int(row["table_bytes"]) / mb, 2),
            "index_mb": round(int(row["index_bytes"]) / mb, 2),
            "total_mb": round(int(row["total_bytes"]) / mb, 2)}


def measure_digest(ctx: Context) -> list[Metric]:
    """`gitmem.indexer.index_digest` of the corpus index: a faster reindex must not change it."""
    db = ctx.ensure_index()
    with timed() as clock:
        digests = indexer.index_digest(db)
    combined = hashlib.sha256("".join(f"{k}={v}\n" for k, v in sorted(digests.items()))
                              .encode())
    return [Metric("index", "content digest (indexer.index_digest)",
                   combined.hexdigest()[:16], "sha256",
                   extra={"tables": digests, "seconds": round(clock.s, 2)})]
