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
"""

from __future__ import annotations

import json
import time

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
