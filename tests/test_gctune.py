"""The daemon's collector settings: old objects frozen, cycles among them still freed.

Each test runs in a Python process of its own: the settings are process-wide.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def _run(code: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True,
                          capture_output=True, text=True, timeout=60)
    return dict(json.loads(done.stdout))


def test_survivors_of_a_full_collection_are_frozen() -> None:
    out = _run("""
        import gc, json
        from gitmem import gctune
        before = gc.get_threshold()[0]
        gctune.install()
        frozen_at_install = gc.get_freeze_count()
        kept = [[n] for n in range(20000)]   # long-lived containers
        gc.collect()                          # a full collection, not the unfreezing one
        after = gc.get_freeze_count()
        stats = gctune.stats()
        gctune.uninstall()
        print(json.dumps({"before": before, "threshold": stats, "at_install": frozen_at_install,
                          "after": after, "uninstalled": gc.get_freeze_count(),
                          "restored": gc.get_threshold()[0]}))
    """)
    assert int(out["at_install"]) > 0  # type: ignore[call-overload]
    assert int(out["after"]) >= int(out["at_install"]) + 20000  # type: ignore[call-overload]
    assert out["uninstalled"] == 0
    assert out["restored"] == out["before"]
    stats = out["threshold"]
    assert isinstance(stats, dict) and stats["installed"] is True and stats["full"] == 1
    assert stats["pause_ms"][2] >= stats["pause_max_ms"][2] > 0  # the full collection, timed
    assert stats["frozen"] == out["after"]  # as that collection's freeze left them


def test_cycles_among_frozen_objects_are_freed_by_the_periodic_full_visit() -> None:
    out = _run("""
        import gc, json, weakref
        from gitmem import gctune

        class Node:
            pass

        gctune.install()
        a, b = Node(), Node()
        a.other, b.other = b, a               # a cycle
        probe = weakref.ref(a)
        gc.collect()                          # survives: frozen now
        del a, b                              # garbage, but frozen: not visited
        gc.collect()
        alive_after_one = probe() is not None
        for _ in range(gctune.FULL_EVERY):
            gc.collect()
        stats = gctune.stats()
        gctune.uninstall()
        print(json.dumps({"alive_after_one": alive_after_one, "freed": probe() is None,
                          "unfrozen": stats["full_unfrozen"]}))
    """)
    assert out["alive_after_one"] is True
    assert out["freed"] is True
    assert int(out["unfrozen"]) >= 1  # type: ignore[call-overload]
