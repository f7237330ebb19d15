"""How fast the machine is right now: a fixed piece of Python work, timed.

The load average counts the threads that want a core inside this machine; it
does not see the host. On a shared host the same code has run at half its speed
for minutes while the load read 0.5-1.3 (docs/performance-log.md, "An eleventh
machine"). The runner times this probe before and after every measurement
(`extra.cpu_probe_ms`), so a result says whether it was taken while the machine
ran fast or slow, and two results can be compared with that in view.

The work is what the daemon does most: bytecode, small dicts and strings, a
JSON encoding. Its best of `ROUNDS` is reported (a round the scheduler cut
short in between is not the machine's speed).

`--quiet-probe MS` (bench/run.py, bench.profile, bench.writers) waits before each
measurement until the probe reads at most MS (`Quiet`, `wait_quiet`): the same
code, on the same index, minutes apart, has read 2x apart on one machine.
Machines differ more than that (a best of 11 ms on one, 28 on another), so
`--quiet-probe auto` waits instead for a reading within `AUTO_MARGIN` of the
fastest the run has seen, its first included.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import dataclass, field

ROUNDS = 5
ITEMS = 20_000


def _work() -> int:
    rows = [(f"chk_{n:08d}", n * 0.001, [n % 7, n % 11]) for n in range(ITEMS)]
    kept = sorted(rows, key=lambda r: (-r[1] % 1.0, r[0]))[:200]
    items = [{"id": i, "score": s, "terms": t} for i, s, t in kept]
    return len(json.dumps(items)) + sum(len(r[0]) for r in rows)


def probe_ms(rounds: int = ROUNDS) -> float:
    """The best time of the fixed work over `rounds` rounds, in milliseconds."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter_ns()
        _work()
        best = min(best, (time.perf_counter_ns() - started) / 1e6)
    return round(best, 2)


AUTO = -1.0          # `--quiet-probe auto`
AUTO_MARGIN = 1.25   # its readings count as quiet within this of the fastest seen


@dataclass
class Quiet:
    """What a measurement waits for: the 1-minute load average below `load`, the CPU
    probe at most `probe_ms` (0: either not waited for; AUTO: within AUTO_MARGIN of the
    fastest reading this object has seen), `longest` seconds at most."""

    load: float = 0.0
    probe_ms: float = 0.0
    longest: float = 180.0
    fastest: float = field(default=float("inf"), compare=False)

    @classmethod
    def of(cls, args: argparse.Namespace) -> Quiet:
        """From the options `add_quiet_options` adds."""
        return cls(args.quiet_load, args.quiet_probe, args.quiet_wait)

    def reached(self) -> bool:
        """Whether the machine is quiet now (the probe runs only if the load is)."""
        if self.load > 0 and os.getloadavg()[0] >= self.load:
            return False
        if self.probe_ms == 0:
            return True
        reading = self.note(probe_ms())
        bound = self.fastest * AUTO_MARGIN if self.probe_ms == AUTO else self.probe_ms
        return reading <= bound

    def note(self, reading: float) -> float:
        """Count a probe reading taken elsewhere (the runner's, around each measurement)
        among those `auto` compares with; the reading."""
        self.fastest = min(self.fastest, reading)
        return reading


@dataclass(frozen=True)
class Waited:
    """How long a measurement waited for a quiet machine, and whether it came."""

    seconds: float = 0.0
    reached: bool = True

    def said(self) -> str:
        """For a line about the measurement: `after waiting 12 s`, `gave up waiting for
        a quiet machine after 180 s`, or nothing when it did not wait."""
        if not self.reached:
            return f"gave up waiting for a quiet machine after {self.seconds:.0f} s"
        return f"after waiting {self.seconds:.0f} s" if self.seconds else ""

    def noted(self, extra: dict[str, object]) -> None:
        """Recorded in a metric's `extra` (`waited_for_quiet_s`, and `quiet_not_reached`
        when the wait gave up: the number was taken on a machine not quiet)."""
        if self.seconds:
            extra.setdefault("waited_for_quiet_s", self.seconds)
        if not self.reached:
            extra.setdefault("quiet_not_reached", True)


def wait_quiet(quiet: Quiet) -> Waited:
    """Wait until the machine is quiet, at most `quiet.longest` s."""
    if quiet.reached():  # at once when nothing is waited for
        return Waited()
    started = time.monotonic()
    while time.monotonic() - started < quiet.longest:
        time.sleep(2.0)
        if quiet.reached():
            return Waited(round(time.monotonic() - started, 1))
    return Waited(round(time.monotonic() - started, 1), reached=False)


def add_quiet_options(parser: argparse.ArgumentParser) -> None:
    """`--quiet-load`, `--quiet-probe` and `--quiet-wait` (read by `Quiet.of`)."""
    parser.add_argument("--quiet-load", type=float, default=0.0, metavar="LOAD",
                        help="before each measurement, wait (up to --quiet-wait seconds) until "
                             "the 1-minute load average is below LOAD (default: no wait)")
    parser.add_argument("--quiet-probe", type=_probe_bound, default=0.0, metavar="MS|auto",
                        help="before each measurement, wait (up to --quiet-wait seconds) until "
                             "the CPU probe (bench/speed.py) reads at most MS, or with 'auto' "
                             f"within {AUTO_MARGIN}x of the fastest reading of the run: the "
                             "host's load, which the load average does not see "
                             "(default: no wait)")
    parser.add_argument("--quiet-wait", type=_seconds, default=180.0, metavar="SECONDS",
                        help="longest wait for the machine to be quiet (default 180)")


def _seconds(value: str) -> float:
    """`--quiet-wait`'s value: finite seconds, 0 or more."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {value!r}")
    return seconds


def _probe_bound(value: str) -> float:
    """`--quiet-probe`'s value: milliseconds, or 'auto'."""
    if value.strip().lower() == "auto":
        return AUTO
    try:
        bound = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected milliseconds or 'auto', got {value!r}") from None
    if not math.isfinite(bound) or bound < 0:
        raise argparse.ArgumentTypeError(f"expected milliseconds >= 0, got {value!r}")
    return bound
