"""gitmem's benchmark suite: run it with `python bench/run.py --size tiny`."""

import os
from pathlib import Path

# Where the corpora, the embedded server and the scratch stores live:
# $GITMEM_BENCH_CACHE, else bench/.cache of this checkout. Two checkouts compared on
# one corpus and one embedded server point it at the same directory.
CACHE_ROOT = Path(os.environ.get("GITMEM_BENCH_CACHE")
                  or Path(__file__).resolve().parent / ".cache")
