"""Paired A/B of two checkouts, request by request, on one kept index.

    python -m bench.pair --vs CHECKOUT [--size 1m] [--dsn DSN] [--index-schema NAME]
                         [--what retrieve|build] [--passes 3] [--out FILE]

    python -m bench.pair --vs ../other --size 1m --dsn embedded --index-schema inv1m --what build

Two worker processes, one per checkout (A: this one, B: `--vs`), each importing
its own `gitmem` and `bench` (`PYTHONPATH`), open the same index of the same
corpus and prepare the benchmark's retrieval requests (`bench.queries`). The
driver then has each request run by both workers, one right after the other,
the order alternating, `--passes` times. Both timings of a pair are taken within
milliseconds of each other, in the same phase of the machine: their ratio holds
where two runs of the same code minutes apart differ by 20%, and where one
process after the other cannot tell a 2% change from the noise
(docs/performance-log.md, "An eighteenth machine").

- `retrieve`: bounded retrieval, as `bench.profile` times it (query analysis
  done beforehand);
- `build`: a whole `build_acb` in the worker's process (caches warm, no
  catch-up: the index is the files').

Prints per set p50, p95 and the sum for each side, and the median of the
per-request ratios B/A (each request's median over its passes) with a bootstrap
95% interval; `--out` writes every request's timings. The corpus and the index
are this checkout's: built first (untimed) when missing, in `--index-schema`
(kept) or in a schema of the run (dropped at the end). A worker never rebuilds
it: both checkouts must read the same index schema version. `--vs .` pairs this
checkout with itself (the method's own noise, what CI runs). The other checkout
needs no copy of this file: both workers run this one (`WORKER`, by its path),
each importing the `gitmem` and `bench` of its checkout, and both read the
corpus cache of this one (`GITMEM_BENCH_CACHE`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve()
WORKER = str(HERE)
RESAMPLES = 2000
SETS = ("common", "rare", "question")


# --------------------------------------------------------------------------- the worker

def _worker(args: argparse.Namespace) -> int:
    """Serve timings: the request list first, then one line per request number read."""
    import gc
    import time

    from bench import pg
    from bench.bounded import prepare
    from bench.context import Context
    from bench.corpus import CACHE_DIR, ensure_corpus
    from bench.queries import RETRIEVAL, asks

    corpus = ensure_corpus(args.size, args.seed, CACHE_DIR)
    with tempfile.TemporaryDirectory(prefix="gitmem-pair-") as scratch:
        ctx = Context(args.size, args.seed, args.dsn, corpus, Path(scratch),
                      pg.Schemas(args.dsn), index_schema=args.index_schema)
        if not ctx.index_database().schema_exists():  # never rebuilt here: B shares it
            print(f"{args.index_schema}: no index this checkout's code can read (another "
                  "schema version?)", file=sys.stderr)
            return 2
        db = ctx.ensure_index()
        policies = ctx.policies
        requests = [a for c in RETRIEVAL for a in asks(ctx)[c]]
        if args.what == "retrieve":
            prepared = [prepare(db, policies, a) for a in requests]

            def run(n: int) -> dict[str, Any]:
                result = prepared[n].retrieve(db, policies)
                return {"pool": result.pool_size,
                        "second_round": "refill" in result.timings_ms}
        else:
            from gitmem import acb, load_config
            from gitmem.memory import Memory

            memory = Memory(load_config(store=corpus.store, dsn=args.dsn,
                                        schema=db.schema))
            tenant = memory.policies.manifest.default_tenant

            def run(n: int) -> dict[str, Any]:
                request = acb.AcbRequest.from_mapping(requests[n].params, tenant)
                built = acb.build_acb(request, memory.policies, memory.cache,
                                      lambda: memory.db)
                return {"pool": built["provenance"].get("candidate_pool_size", 0),
                        "second_round": "retrieval_refill" in
                        built["provenance"]["timings_ms"]}

        for n in range(len(requests)):  # warm-up: caches, prepared statements
            run(n)
        _send(sys.stdout, {"requests": [[a.category, a.label()] for a in requests]})
        for line in sys.stdin:
            n = int(line)
            gc.disable()  # collections run between calls, not inside one (as timeit)
            started = time.perf_counter_ns()
            out = run(n)
            out["ms"] = (time.perf_counter_ns() - started) / 1e6
            gc.enable()
            gc.collect(0)
            _send(sys.stdout, out)
        ctx.close()
    return 0


def _send(stream: IO[str], message: dict[str, Any]) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


# --------------------------------------------------------------------------- the driver

@dataclass
class Side:
    """One checkout's worker."""

    name: str
    checkout: Path
    process: subprocess.Popen[str]
    requests: list[list[str]] = field(default_factory=list)

    def ask(self, n: int) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{n}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} worker ({self.checkout}) stopped")
        answer: dict[str, Any] = json.loads(line)
        return answer


def _start(name: str, checkout: Path, args: argparse.Namespace, dsn: str,
           cache: str) -> Side:
    env = {**os.environ, "PYTHONPATH": str(checkout), "GITMEM_BENCH_CACHE": cache}
    command = [sys.executable, WORKER, "--worker", "--size", args.size, "--seed",
               str(args.seed), "--dsn", dsn, "--index-schema", args.index_schema,
               "--what", args.what]
    process = subprocess.Popen(command, cwd=checkout, env=env, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    side = Side(name, checkout, process)
    assert process.stdout is not None
    first = process.stdout.readline()
    if not first:
        raise RuntimeError(f"the {name} worker ({checkout}) did not start")
    side.requests = json.loads(first)["requests"]
    return side


def ratio_interval(a: Sequence[float], b: Sequence[float], seed: int = 1
                   ) -> tuple[float, float, float]:
    """The median of the per-request ratios b/a and its bootstrap 95% interval
    (resampled requests, a seeded generator: the same numbers give the same interval)."""
    ratios = sorted(y / x for x, y in zip(a, b, strict=True) if x > 0)
    if not ratios:
        return (0.0, 0.0, 0.0)
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios)))
                     for _ in range(RESAMPLES))
    return (statistics.median(ratios), medians[int(0.025 * RESAMPLES)],
            medians[int(0.975 * RESAMPLES) - 1])


def report(categories: Sequence[str], a: Sequence[float], b: Sequence[float]) -> str:
    """Per set and over all: each side's p50, p95 and sum, and the median ratio B/A."""
    from bench.stats import percentile  # the driver runs with this checkout's bench

    lines = [f"{'set':10} {'n':>4} {'A p50':>8} {'B p50':>8} {'A p95':>8} {'B p95':>8} "
             f"{'A sum':>8} {'B sum':>8}  B/A (median, 95% interval)"]
    for name in (*SETS, "all"):
        mine = [n for n, c in enumerate(categories) if name in ("all", c)]
        if not mine:
            continue
        xa, xb = [a[n] for n in mine], [b[n] for n in mine]
        mid, low, high = ratio_interval(xa, xb)
        lines.append(f"{name:10} {len(mine):4} {percentile(xa, 50):8.2f} "
                     f"{percentile(xb, 50):8.2f} {percentile(xa, 95):8.2f} "
                     f"{percentile(xb, 95):8.2f} {sum(xa):8.1f} {sum(xb):8.1f}  "
                     f"{mid:.3f} ({low:.3f}-{high:.3f})")
    return "\n".join(lines) + "\n"


def _driver(args: argparse.Namespace) -> int:
    from bench import CACHE_ROOT, pg
    from bench.context import Context
    from bench.corpus import CACHE_DIR, ensure_corpus

    dsn = pg.resolve_dsn(args.dsn)  # the embedded server starts here, once, for both
    here, there = HERE.parents[1], Path(args.vs).resolve()
    if not (there / "gitmem").is_dir():
        print(f"--vs {there}: not a checkout of gitmem (no gitmem/ in it)", file=sys.stderr)
        return 2
    corpus = ensure_corpus(args.size, args.seed, CACHE_DIR,
                           lambda n, total: print(f"  corpus: {n:,} / ~{total:,} writes",
                                                  file=sys.stderr))
    schemas = pg.Schemas(dsn)
    with tempfile.TemporaryDirectory(prefix="gitmem-pair-") as scratch:
        ctx = Context(args.size, args.seed, dsn, corpus, Path(scratch), schemas,
                      index_schema=args.index_schema)
        ctx.ensure_index()  # built (untimed) by this checkout's code when missing
        args.index_schema = ctx.index_config().schema
        ctx.close()
    sides = [_start("A", here, args, dsn, str(CACHE_ROOT))]
    try:
        sides.append(_start("B", there, args, dsn, str(CACHE_ROOT)))
        if sides[0].requests != sides[1].requests:
            print("the two checkouts prepare different requests: compare them on the same "
                  "corpus and benchmark", file=sys.stderr)
            return 2
        count = len(sides[0].requests)
        times: list[dict[str, list[float]]] = [{"A": [], "B": []} for _ in range(count)]
        rows: list[dict[str, Any]] = [{} for _ in range(count)]
        for number in range(args.passes):
            for n in range(count):
                order = sides if (n + number) % 2 == 0 else sides[::-1]
                for side in order:
                    answer = side.ask(n)
                    times[n][side.name].append(answer["ms"])
                    rows[n][side.name] = {k: v for k, v in answer.items() if k != "ms"}
    finally:
        for side in sides:
            if side.process.stdin is not None:
                side.process.stdin.close()
            side.process.wait(timeout=120)
        schemas.drop_all()  # the run's own index, when it made one (a kept one stays)
    categories = [category for category, _ in sides[0].requests]
    a = [statistics.median(t["A"]) for t in times]
    b = [statistics.median(t["B"]) for t in times]
    print(f"A: {here}\nB: {there}\n{args.what}, {count} requests x {args.passes} passes each")
    print(report(categories, a, b), end="")
    if args.out:
        args.out.write_text(json.dumps(
            {"a": str(here), "b": str(there), "what": args.what, "passes": args.passes,
             "requests": [{"category": c, "ask": label, "a_ms": t["A"], "b_ms": t["B"], **r}
                          for (c, label), t, r in zip(sides[0].requests, times, rows,
                                                      strict=True)]},
            indent=1) + "\n")
    return 0


# The worker runs this file under the other checkout's `bench`, which may lack newer
# modules: what the arguments need is here, not imported (bench/args.py alike).
SIZES = ("tiny", "10k", "100k", "1m", "1m-one")
_SCHEMA = re.compile(r"(?!pg_)[a-z_][a-z0-9_]{0,62}")


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def _schema(text: str) -> str:
    if not _SCHEMA.fullmatch(text):
        raise argparse.ArgumentTypeError(f"schema name {text!r} must match [a-z_][a-z0-9_]* "
                                         "(at most 63 characters), not beginning with pg_")
    return text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.pair",
                                     description="paired A/B of two checkouts")
    parser.add_argument("--vs", default=".", help="the other checkout (B); default: this one")
    parser.add_argument("--size", choices=SIZES, default="tiny")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dsn", default=None, help="as bench/run.py's --dsn")
    parser.add_argument("--index-schema", type=_schema, default=None, metavar="SCHEMA",
                        help="the corpus's index (built there first when missing; kept); "
                             "default: built in a schema of the run, dropped at the end")
    parser.add_argument("--what", choices=("retrieve", "build"), default="retrieve")
    parser.add_argument("--passes", type=_count, default=3)
    parser.add_argument("--out", type=Path, default=None, help="JSON of every request")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the driver, or (`--worker`) serve one checkout's timings."""
    args = _parser().parse_args(argv)
    return _worker(args) if args.worker else _driver(args)


if __name__ == "__main__":
    # run by its path as a worker: this directory's modules are not top-level ones
    # (`bench` and `gitmem` come from the checkout PYTHONPATH names)
    if sys.path and Path(sys.path[0]).resolve() == HERE.parent:
        sys.path.pop(0)
    sys.exit(main())
