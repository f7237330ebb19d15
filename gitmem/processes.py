"""Whether a process runs, by its pid (a pid file's, a lock's): signal 0, which
checks without sending anything."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether process `pid` exists (another user's too: not ours to signal, but there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
