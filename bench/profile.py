"""Per-request profile of bounded retrieval, in-process, on a kept index or its own.

    python -m bench.profile --size 1m-one --dsn embedded [--index-schema NAME] [--repeat 3]
                            [--quiet-load LOAD] [--quiet-probe MS] [--quiet-wait S]

Runs `retrieval.retrieve` for every retrieval request of the benchmark (common
and rare terms, questions), as `bench/bounded.py` prepares them, `--repeat`
times in passes over all requests (the median per request is reported), after
one warm-up pass. Prints p50/p95 and the sum of the medians per category, how
many requests needed a second round and what it cost, the slowest requests
with their statements, and the CPU probe's time before and after (how fast the
machine ran: bench/speed.py); `--out` writes every request's numbers as JSON. Without
`--index-schema` the index is built in a schema of the run and dropped at the
end. For A/B runs of two commits, run it from each checkout alternately on the
same kept index (same schema version).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import args as arg_types
from bench import pg, speed
from bench.bounded import prepare
from bench.context import Context
from bench.corpus import CACHE_DIR, ensure_corpus
from bench.plan import SHAPES
from bench.queries import RETRIEVAL, asks
from bench.stats import percentile, timed


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.profile",
                                     description="per-request profile of bounded retrieval")
    parser.add_argument("--size", choices=list(SHAPES), default="tiny")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dsn", default=None, help="as bench/run.py's --dsn")
    parser.add_argument("--index-schema", type=arg_types.schema, default=None, metavar="SCHEMA",
                        help="the corpus's index (built there first when missing; kept); "
                             "default: built in a schema of the run, dropped at the end")
    parser.add_argument("--repeat", type=arg_types.count, default=3,
                        help="measured passes (default 3)")
    parser.add_argument("--slowest", type=arg_types.count, default=8,
                        help="slowest requests to show")
    parser.add_argument("--out", type=Path, default=None, help="JSON of every request")
    speed.add_quiet_options(parser)
    return parser


def profile(ctx: Context, repeat: int) -> list[dict[str, Any]]:
    """Every retrieval request's median time, phases and statements per round."""
    db = ctx.ensure_index()
    policies = ctx.policies
    sets = asks(ctx)
    prepared = [prepare(db, policies, a) for c in RETRIEVAL for a in sets[c]]
    walls: list[list[float]] = [[] for _ in prepared]
    last: list[Any] = [None] * len(prepared)
    for attempt in range(repeat + 1):  # the first pass warms up
        for n, request in enumerate(prepared):
            with timed() as clock:
                last[n] = request.retrieve(db, policies)
            if attempt:
                walls[n].append(clock.ms)
    out = []
    for request, times, result in zip(prepared, walls, last, strict=True):
        out.append({"category": request.ask.category, "query": request.ask.query,
                    "ms": round(statistics.median(times), 3),
                    "timings_ms": result.timings_ms, "pool": result.pool_size,
                    "statements": result.lanes,
                    "second_round": "refill" in result.timings_ms})
    return out


def report(rows: list[dict[str, Any]], slowest: int) -> str:
    """p50/p95 per category, second rounds, the slowest requests."""
    lines = [f"{'set':10} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'sum ms':>8} {'2nd rounds':>11} "
             f"{'2nd round ms (median)':>22}"]
    for category in (*RETRIEVAL, "all"):
        mine = [r for r in rows if category in ("all", r["category"])]
        seconds = [r["timings_ms"]["refill"] for r in mine if r["second_round"]]
        ms = [r["ms"] for r in mine]
        lines.append(f"{category:10} {len(mine):4} {percentile(ms, 50):8.2f} "
                     f"{percentile(ms, 95):8.2f} {sum(ms):8.1f} {len(seconds):11} "
                     f"{statistics.median(seconds) if seconds else 0.0:22.2f}")
    lines.append("")
    for r in sorted(rows, key=lambda r: -r["ms"])[:slowest]:
        t = r["timings_ms"]
        lines.append(f"{r['ms']:7.2f} ms  {r['category']:8} {r['query']!r}: lanes "
                     f"{t.get('lanes', 0):.1f}, refill {t.get('refill', 0):.1f}, "
                     f"{len(r['statements'])} statements, pool {r['pool']}")
        lines.append("           " + ", ".join(f"{d['lane']} {d['matched']}/{d['expected']:.0f}"
                                              for d in r["statements"]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Profile every retrieval request on the kept index; print, maybe write JSON."""
    args = _parser().parse_args(argv)
    dsn = pg.resolve_dsn(args.dsn)
    corpus = ensure_corpus(args.size, args.seed, CACHE_DIR,
                           lambda n, total: print(f"  corpus: {n:,} / ~{total:,} writes",
                                                  file=sys.stderr))
    schemas = pg.Schemas(dsn)
    with tempfile.TemporaryDirectory(prefix=f"gitmem-profile-{os.getpid()}-") as scratch:
        ctx = Context(args.size, args.seed, dsn, corpus, Path(scratch), schemas,
                      index_schema=args.index_schema)
        try:
            waited = speed.wait_quiet(speed.Quiet.of(args))
            before = speed.probe_ms()
            rows = profile(ctx, args.repeat)
            after = speed.probe_ms()
        finally:
            ctx.close()
            schemas.drop_all()
    print(report(rows, args.slowest), end="")
    print(f"CPU probe (bench/speed.py): {before:.1f} ms before, {after:.1f} ms after"
          + (f" ({waited.said()})" if waited.said() else ""))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
