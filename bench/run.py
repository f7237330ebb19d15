"""The gitmem benchmark, as one command (see bench/runner.py and docs/PERFORMANCE.md).

    python bench/run.py --size tiny|10k|100k|1m [--dsn DSN|embedded] [--out FILE.json]
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> int:
    """Run the benchmark from a checkout (the repository root goes on sys.path)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.runner import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
