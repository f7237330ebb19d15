"""gitmem's benchmark suite: run it with `python bench/run.py --size tiny`."""
