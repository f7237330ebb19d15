"""Git plumbing for the store: HEAD, repository state, commits of store paths."""

from __future__ import annotations

import subprocess
from pathlib import Path


def head(path: Path) -> str | None:
    """The commit HEAD points at in the repository holding `path`, or None."""
    result = subprocess.run(["git", "-C", str(path), "rev-parse", "--verify", "-q", "HEAD"],
                            capture_output=True, text=True)
    return result.stdout.strip() or None if result.returncode == 0 else None
