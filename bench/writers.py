"""Sustained record_event throughput alone, for A/B runs of the write path.

    python -m bench.writers [--clients 8] [--seconds 6] [--runs 2] [--dsn DSN]
                            [--quiet-load LOAD] [--quiet-probe MS] [--quiet-wait S]

A daemon of its own on a scratch store (as `socket_record` starts one), a
2-second warm-up, then `--runs` runs of `--clients` writer threads: per run the
events per second, the daemon's CPU per event, the index's catch-up after the
burst and the CPU probe's reading before it. `--quiet-probe MS` waits before
each run until the probe reads at most MS (`--quiet-load` for the load
average), as bench/run.py does. `--profile FILE` also records the daemon with
`py-spy record --gil` (raw stacks) during the first run. To compare two
checkouts, run this from one and with `PYTHONPATH` set to the other
alternately: the daemon is started through the `gitmem` script, so it imports
the code `PYTHONPATH` names first.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import pg, speed
from bench.corpus import new_repo
from bench.daemons import BenchDaemon
from bench.recording import live_events
from bench.socket_record import POOL_EVENTS, concurrent

WARM_UP_S = 2.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.writers",
                                     description="sustained record_event throughput")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dsn", default=None, help="as bench/run.py's --dsn")
    parser.add_argument("--profile", type=Path, default=None,
                        help="py-spy's raw stacks of the daemon during the first run")
    speed.add_quiet_options(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Start a scratch daemon, load it, print one line per run."""
    args = _parser().parse_args(argv)
    spy_path = None
    if args.profile is not None:
        spy_path = shutil.which("py-spy") or shutil.which(
            "py-spy", path=str(Path(sys.executable).parent))
        if spy_path is None:
            print("--profile needs py-spy (pip install py-spy): not found on PATH nor beside "
                  f"{sys.executable}", file=sys.stderr)
            return 2
    dsn = pg.resolve_dsn(args.dsn)
    schemas = pg.Schemas(dsn)
    scratch = Path(tempfile.mkdtemp(prefix="gitmem-writers-"))
    daemon = BenchDaemon(new_repo(scratch / "repo"), dsn, schemas.name("writers"))
    try:
        daemon.start()
        pool = live_events(POOL_EVENTS, args.seed + 2000)
        concurrent(daemon, pool, args.clients, WARM_UP_S)
        quiet = speed.Quiet.of(args)
        for run in range(args.runs):
            waited = speed.wait_quiet(quiet)
            probe = speed.probe_ms()
            spy = None
            if spy_path is not None and run == 0 and daemon.pid is not None:
                spy = subprocess.Popen(
                    [spy_path, "record", "--gil", "--nonblocking", "-f", "raw", "-p",
                     str(daemon.pid), "-d", str(max(1, int(args.seconds))), "-o",
                     str(args.profile)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            metric = concurrent(daemon, pool, args.clients, args.seconds)
            if spy is not None:
                spy.wait()
            cores = metric.extra["cpu_cores"]
            print(f"{args.clients} clients, {metric.extra['seconds']} s: {metric.value:,.0f} "
                  f"events/s, daemon {cores['daemon'] / metric.value * 1e6:.0f} us/event, "
                  f"cores daemon {cores['daemon']} postgres {cores['postgres']} "
                  f"clients {cores['clients']}, index catch-up "
                  f"{metric.extra['index_catch_up_s']} s, CPU probe {probe:.0f} ms"
                  + (f" ({waited.said()})" if waited.said() else ""), flush=True)
        writer = daemon.call("daemon_status").get("writer") or {}
        if writer.get("batches"):
            print(f"writer: {writer['events'] / writer['batches']:.1f} events per batch")
    except BaseException:
        log = daemon.store.parent / ".gitmem" / "daemon.log"
        if log.exists():
            kept = Path(tempfile.mkdtemp(prefix="gitmem-writers-failed-")) / "daemon.log"
            shutil.copy(log, kept)
            print(f"the daemon's log: {kept}", file=sys.stderr)
        raise
    finally:
        daemon.stop()
        schemas.drop_all()
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
