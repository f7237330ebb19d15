"""Garbage collection for a long-running daemon.

CPython's cycle collector visits every tracked container at each collection of
the oldest generation: about 40 ms for the ~90,000 objects of a warm daemon on
the benchmark machine, paid by whichever request happens to be allocating, one
request in sixty. Nearly all of those objects (modules, classes, policies,
pools, cached rows) live as long as the process, so `install`:

- after a full collection, moves what survived it into the permanent
  generation (`gc.freeze`): the next full collections visit only what is newer;
- returns them (`gc.unfreeze`) before every `FULL_EVERY`-th full collection,
  so cyclic garbage among old objects is still reclaimed, only later;
- raises the youngest generation's threshold, so the short-lived objects of a
  request mostly die by reference count before a collection looks at them.

Reference counting frees objects as before; only cycle detection changes.
`stats` (in `daemon_status`) says how long the collections took, per generation:
their total and the longest.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

FULL_EVERY = 8           # every 8th full collection visits the frozen objects too
YOUNG_THRESHOLD = 5000   # allocations between collections of the youngest generation


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.full = 0          # full collections seen
        self.unfrozen = 0      # of which visited every object
        self.previous: tuple[int, int, int] | None = None
        self.started = 0               # perf_counter_ns of the collection under way
        self.pause_ms = [0.0, 0.0, 0.0]  # per generation: time spent collecting
        self.pause_max_ms = [0.0, 0.0, 0.0]  # ... and the longest collection
        # objects frozen, as the last freeze left them: counting them walks them all
        # (gc.get_freeze_count: 10-20 ms at 40,000 on a busy machine), too slow for
        # `daemon_status`, which every command sends the daemon first
        self.frozen = 0


_state = _State()


def _on_collect(phase: str, info: dict[str, Any]) -> None:
    generation = int(info.get("generation", 0))
    if phase == "start":
        _state.started = time.perf_counter_ns()
    elif _state.started:
        spent = (time.perf_counter_ns() - _state.started) / 1e6
        _state.started = 0
        _state.pause_ms[generation] += spent
        _state.pause_max_ms[generation] = max(_state.pause_max_ms[generation], spent)
    if generation != 2:
        return
    if phase == "start":
        _state.full += 1
        if _state.full % FULL_EVERY == 0:
            _state.unfrozen += 1
            gc.unfreeze()
    elif phase == "stop":
        gc.freeze()
        _state.frozen = gc.get_freeze_count()  # a full collection has just visited them


def install() -> None:
    """Freeze what exists now and keep freezing the survivors of full collections."""
    with _state.lock:
        if _on_collect in gc.callbacks:
            return
        _state.previous = young, middle, old = gc.get_threshold()
        gc.set_threshold(max(YOUNG_THRESHOLD, young), middle, old)
        gc.collect()
        gc.freeze()
        _state.frozen = gc.get_freeze_count()
        gc.callbacks.append(_on_collect)


def uninstall() -> None:
    """Back to CPython's defaults (every object visited again)."""
    with _state.lock:
        if _on_collect in gc.callbacks:
            gc.callbacks.remove(_on_collect)
        gc.unfreeze()
        _state.frozen = 0
        if _state.previous is not None:
            gc.set_threshold(*_state.previous)
            _state.previous = None


def stats() -> dict[str, Any]:
    """What the collector did: collections per generation, frozen objects (at the last
    freeze). Cheap: every command's status probe calls it."""
    generations = gc.get_stats()
    return {"collections": [g["collections"] for g in generations],
            "collected": sum(g["collected"] for g in generations),
            "pause_ms": [round(ms, 3) for ms in _state.pause_ms],
            "pause_max_ms": [round(ms, 3) for ms in _state.pause_max_ms],
            "frozen": _state.frozen, "full": _state.full,
            "full_unfrozen": _state.unfrozen, "installed": _on_collect in gc.callbacks}
