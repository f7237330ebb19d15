"""One benchmark run: find or generate the corpus, take every measurement, report.

Timings are measured, never asserted: a run fails (exit 1) only when a
measurement breaks. Schemas (`bench_<pid>_*`) and scratch files are removed
at the end, whatever happened.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import args as arg_types
from bench import pg, speed, summary
from bench.context import Context, Skip
from bench.corpus import CACHE_DIR, corpus_dir, ensure_corpus
from bench.plan import SHAPES
from bench.registry import MEASUREMENTS, Measurement
from bench.report import machine, source_state, table
from bench.stats import Metric, timed
from gitmem.config import redact_dsn

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python bench/run.py",
        description="gitmem benchmark: corpus, record throughput, reindex vs raw COPY, "
                    "retrieval quality. Prints a table; writes JSON.",
        epilog="example: python bench/run.py --size tiny --out /tmp/bench.json")
    parser.add_argument("--size", choices=list(SHAPES), default="tiny",
                        help="corpus size: tiny (~1k events, CI), 10k, 100k, 1m; "
                             "1m-one: 1m in one tenant")
    parser.add_argument("--dsn", default=None,
                        help="PostgreSQL DSN, or 'embedded' (default: $GITMEM_BENCH_DSN, "
                             f"else {pg.DEFAULT_DSN})")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON results file (default: bench/results/<size>-<time>.json)")
    parser.add_argument("--seed", type=int, default=1, help="corpus seed (default 1)")
    parser.add_argument("--repeat", type=arg_types.count, default=1,
                        help="repeat the reindex / raw COPY timing N times (median reported)")
    parser.add_argument("--only", default="",
                        help="comma-separated measurement names (see --list)")
    parser.add_argument("--list", action="store_true", help="list the measurements and exit")
    parser.add_argument("--cache", type=Path, default=CACHE_DIR, help="corpus cache directory")
    parser.add_argument("--index-schema", type=arg_types.schema, default=None, metavar="SCHEMA",
                        help="use (and keep) an existing index of the corpus in SCHEMA instead "
                             "of building one in a schema of the run (for repeated runs)")
    speed.add_quiet_options(parser)
    return parser


def _selected(only: set[str], m: Measurement) -> bool:
    return m.name in only if only else not m.slow


Outcome = dict[str, Any]  # metrics, skipped, pending, failed


def run_all(ctx: Context, only: set[str], quiet: speed.Quiet | None = None,
            taken: Callable[[Outcome], None] | None = None) -> Outcome:
    """Take the selected measurements; metrics, skips, pending ones and failures.
    `taken` is given the outcome so far after each measurement (a run killed later
    keeps what it measured).

    Each metric records the 1-minute load average and the CPU probe's time
    (`bench/speed.py`) at the start and the end of its measurement
    (`extra.load_avg_1m`, `extra.cpu_probe_ms`), and how long the run waited for
    the machine to become quiet first (`--quiet-load`, `--quiet-probe`), and whether
    it gave up (`speed.Waited.noted`)."""
    quiet = quiet or speed.Quiet()  # by default, waits for nothing
    metrics: list[Metric] = []
    skipped: list[dict[str, str]] = []
    pending: list[dict[str, str]] = []
    failed: list[dict[str, str]] = []
    outcome: Outcome = {"metrics": metrics, "skipped": skipped, "pending": pending,
                        "failed": failed}  # filled in as the measurements go
    for m in MEASUREMENTS:
        if not _selected(only, m):
            continue
        if m.run is None:
            pending.append({"name": m.name, "description": m.description,
                            "needs": ", ".join(m.needs)})
            continue
        missing = m.missing()
        if missing:
            skipped.append({"name": m.name, "reason": f"needs {', '.join(missing)}"})
            continue
        waited = speed.wait_quiet(quiet)
        load, probe = round(os.getloadavg()[0], 2), quiet.note(speed.probe_ms())
        _say(f"· {m.name}: {m.description} (load {load}, CPU probe {probe:.0f} ms"
             + (f", {waited.said()})" if waited.said() else ")"))
        try:
            with timed() as clock:
                found = m.run(ctx)
        except Skip as exc:
            skipped.append({"name": m.name, "reason": str(exc)})
            continue
        except Exception as exc:
            failed.append({"name": m.name, "error": f"{type(exc).__name__}: {exc}",
                           "traceback": traceback.format_exc()})
            _say(traceback.format_exc())
            continue
        _say(f"  done in {clock.s:.1f} s")
        load_end, probe_end = round(os.getloadavg()[0], 2), quiet.note(speed.probe_ms())
        for metric in found:
            metric.extra.setdefault("load_avg_1m", [load, load_end])
            metric.extra.setdefault("cpu_probe_ms", [probe, probe_end])
            waited.noted(metric.extra)
        metrics.extend(found)
        if taken is not None:
            taken(outcome)
    return outcome


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the benchmark, print the table, write the JSON."""
    args = _parser().parse_args(argv)
    if args.list:
        for m in MEASUREMENTS:
            state = "planned" if m.run is None else ("optional" if m.slow else "default")
            print(f"{m.name:16} {state:9} {m.description}")
        return 0
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    unknown = only - {m.name for m in MEASUREMENTS}
    if unknown:
        _parser().error(f"unknown measurement(s): {', '.join(sorted(unknown))}")
    started = datetime.now(UTC)
    load_start, probe_start = os.getloadavg()[0], speed.probe_ms()
    checkout = Path(__file__).resolve().parent.parent
    source = source_state(checkout)
    dsn = pg.resolve_dsn(args.dsn)
    _say(f"gitmem bench: size {args.size}, seed {args.seed}, database {redact_dsn(dsn)}")
    out = args.out or RESULTS_DIR / f"{args.size}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    try:  # before hours of work: where the results go, and the server answers
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _parser().error(f"--out {out}: {exc.strerror or exc}")
    try:
        postgres = pg.server_info(dsn)
    except Exception as exc:  # psycopg's OperationalError, or the embedded server's
        _say(f"error: cannot reach PostgreSQL at {redact_dsn(dsn)}: {exc}".strip())
        return 2
    cached = (corpus_dir(args.size, args.seed, args.cache) / "corpus.json").is_file()
    corpus = ensure_corpus(args.size, args.seed, args.cache,
                           lambda n, total: _say(f"  corpus: {n:,} / ~{total:,} writes"))
    info = corpus.info
    _say(f"corpus: {info['events']:,} events at {corpus.root} "
         f"({'cached' if cached else 'generated'})")
    scratch = args.cache.parent / "scratch" / f"run-{os.getpid()}"
    scratch.mkdir(parents=True, exist_ok=True)
    schemas = pg.Schemas(dsn)
    ctx = Context(args.size, args.seed, dsn, corpus, scratch, schemas, repeat=args.repeat,
                  index_schema=args.index_schema)
    corpus_metrics = [
        Metric("corpus", "events written (record_many / decide / task)", info["events"],
               "events", extra={"counts": info["counts"], "tenants": info["tenants"],
                                "sessions": info["sessions"], "store_mb":
                                round(info["store_bytes"] / (1 << 20), 1)}),
        Metric("corpus", "generation (through the write path)", info["generation_s"], "s",
               extra={"events_per_s": info["events_per_s"], "cached": cached}),
    ]

    host = machine()

    def document(outcome: Outcome, probe_end: float | None = None) -> dict[str, Any]:
        return {
            "benchmark": "gitmem", "size": args.size, "seed": args.seed,
            "command": " ".join(["python", "bench/run.py", *(sys.argv[1:] if argv is None
                                                             else argv)]),
            "started": started.isoformat(timespec="seconds"),
            "duration_s": round((datetime.now(UTC) - started).total_seconds(), 1),
            "machine": host, "postgres": postgres, "dsn": redact_dsn(dsn),
            "source": source,
            "load_avg_1m": {"start": round(load_start, 2),
                            "end": round(os.getloadavg()[0], 2)},
            "cpu_probe_ms": {"start": probe_start, "end": probe_end},
            "corpus": {**info, "path": str(corpus.root)},
            "metrics": [m.to_dict() for m in corpus_metrics + outcome["metrics"]],
            "skipped": outcome["skipped"], "pending": outcome["pending"],
            "failed": outcome["failed"],
        }

    def taken(outcome: Outcome) -> None:
        partial = document(outcome)
        partial["incomplete"] = ("written after each measurement: the run went on (or was "
                                 "killed) after these")
        _write(out, partial)

    try:
        quiet = speed.Quiet.of(args)
        quiet.note(probe_start)
        outcome = run_all(ctx, only, quiet, taken)
    finally:
        ctx.close()
        schemas.drop_all()
        shutil.rmtree(scratch, ignore_errors=True)
    notes = [f"skipped {s['name']}: {s['reason']}" for s in outcome["skipped"]]
    notes += [f"pending {p['name']}: {p['description']}" for p in outcome["pending"]]
    notes += [f"FAILED {f['name']}: {f['error']}" for f in outcome["failed"]]
    print(table(corpus_metrics + outcome["metrics"], notes), end="")
    final = document(outcome, speed.probe_ms())
    if source_state(checkout) != source:
        source["changed_during_run"] = source_state(checkout)
        _say("note: the checkout changed during the run (see source.changed_during_run)")
    print("\n" + summary.markdown(final), end="")
    _write(out, final)
    _say(f"results: {out}")
    return 1 if outcome["failed"] else 0


def _write(out: Path, document: dict[str, Any]) -> None:
    """The results file, replaced whole (a reader never sees half of it)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".part")
    part.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    part.replace(out)
