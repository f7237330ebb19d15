"""A reindex's reading of the store's files into rows, on every core, in path order.

Deriving rows is Python (decode, validate, redact, count tokens, fold the search
text): at a million events it is most of a reindex's time, and one process holds
one core while PostgreSQL's COPY needs less than the other. So a large store is
read by worker processes, each file read and derived whole by one of them; the
reindex takes the files' rows back in path order, as it would have read them
itself, and keeps everything that depends on the order (which line of a repeated
id is kept, the batches, the COPY) to itself.

Workers come from multiprocessing's fork server (not forked from the caller,
which holds database connections and threads), which imports this module only,
never the caller's `__main__`: multiprocessing would run the caller's script again
in each (a script without an `if __name__ == "__main__":` guard that reindexed
ran its own writes there, and waited for good on the schema's lock the reindex
held), so a placeholder stands for `__main__` while workers start (`_main_unseen`).
They are handed the store and the policies once.
At most READ_AHEAD tasks per worker wait to be taken back, so the rows in
flight stay a few files' worth. Should a worker die (the kernel's OOM killer,
a kill), the files not yet taken back are read in the calling process: a
reindex is never lost to its workers. A worker hands its rows back in a file of
a private temporary directory and sends only the file's name, a message one write
puts in the pipe whole: a worker killed while it sent a task's rows through the
pipe left half a message there, which the executor waited on for good. Should the
reindex die, its workers end
within WATCH_S (each watches it): nothing is left running. A small store (under MIN_BYTES) is read
in the calling process: a worker's start would cost more than it saves.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import os
import pickle
import sys
import tempfile
import threading
import time
import types
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitmem.freshness import assess, unread_rows
from gitmem.policies import Policies
from gitmem.rows import FileRows, parse_file

logger = logging.getLogger(__name__)

MIN_BYTES = 64 << 20   # a store smaller than this is read in the calling process
TASK_BYTES = 4 << 20   # files are handed out in tasks of about this many bytes
TASK_FILES = 512       # ... or this many files (the small record files)
READ_AHEAD = 3         # tasks per worker that may wait to be taken back
MAX_WORKERS = 8
WATCH_S = 1.0         # how often a worker looks whether its caller is alive


@dataclass
class Read:
    """One file read for a reindex: its source_files state, the bytes it counted for
    (progress), and its rows."""

    rel: str
    state: dict[str, Any]
    size: int
    rows: FileRows


def read_all(store: Path, files: Sequence[tuple[str, str]], policies: Policies,
             workers: int | None = None) -> Iterator[Read]:
    """The rows of each of `files` ((path, kind), store-relative), in their order; a file
    that vanished since it was listed is left out, one that holds no regular file (a
    FIFO, a loop of links) has no rows and its problem. `workers`: how many processes read
    (None: one per core, up to MAX_WORKERS, when the store is MIN_BYTES or more; 1: the
    calling process)."""
    tasks = _tasks(store, files)
    count = workers if workers is not None else _workers(sum(size for _, size in tasks))
    if count <= 1:
        for task, _ in tasks:
            yield from _read(store, policies, task)
        return
    left: deque[list[tuple[str, str]]] = deque(task for task, _ in tasks)
    try:
        yield from _in_workers(store, policies, count, left)
    except (OSError, BrokenProcessPool) as exc:
        logger.warning("a reindex's worker process failed (%s); reading the %d files "
                       "left in this process", exc or type(exc).__name__,
                       sum(len(task) for task in left))
    while left:
        yield from _read(store, policies, left.popleft())


def _in_workers(store: Path, policies: Policies, count: int,
                left: deque[list[tuple[str, str]]]) -> Iterator[Read]:
    """The reads of the tasks `left`, in order, by `count` workers; a task is taken off
    `left` once its reads are back."""
    server = multiprocessing.get_context("forkserver")
    server.set_forkserver_preload([__name__])
    with tempfile.TemporaryDirectory(prefix="gitmem-reads-") as spool, \
            ProcessPoolExecutor(count, mp_context=server, initializer=_start,
                                initargs=(store, policies, os.getpid(), spool)) as pool:
        pending: deque[Future[str]] = deque()
        for task in list(left)[:count * READ_AHEAD]:
            pending.append(_submit(pool, task))
        while pending:
            reads = _taken(pending.popleft().result())
            if len(left) > len(pending) + 1:
                pending.append(_submit(pool, left[len(pending) + 1]))
            left.popleft()
            yield from reads


def _submit(pool: ProcessPoolExecutor, task: list[tuple[str, str]]) -> Future[str]:
    """`pool.submit`, which starts a worker (and the fork server) when it needs one."""
    with _main_unseen():
        return pool.submit(_work, task)


@contextlib.contextmanager
def _main_unseen() -> Iterator[None]:
    """An empty module as `__main__` for the block: multiprocessing hands a worker it
    starts the path or name of the caller's `__main__`, which the worker runs again."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def _workers(total_bytes: int) -> int:
    if total_bytes < MIN_BYTES:
        return 1
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


def _tasks(store: Path, files: Sequence[tuple[str, str]],
           ) -> list[tuple[list[tuple[str, str]], int]]:
    """`files` in consecutive groups of about TASK_BYTES or TASK_FILES, with their sizes."""
    tasks: list[tuple[list[tuple[str, str]], int]] = []
    group: list[tuple[str, str]] = []
    size = 0
    for rel, kind in files:
        with contextlib.suppress(OSError):  # vanished: its reading says so
            size += (store / rel).stat().st_size
        group.append((rel, kind))
        if size >= TASK_BYTES or len(group) >= TASK_FILES:
            tasks.append((group, size))
            group, size = [], 0
    if group:
        tasks.append((group, size))
    return tasks


def _read(store: Path, policies: Policies, files: list[tuple[str, str]]) -> list[Read]:
    reads = []
    for rel, kind in files:
        found = assess(store, rel, kind, None, policies)
        if found.action == "unchanged":  # vanished between listing and reading
            continue
        if found.action == "unreadable":  # no regular file: named, no rows
            reads.append(Read(rel, found.state, 0, unread_rows(found)))
            continue
        reads.append(Read(rel, found.state, len(found.data) + found.pending_bytes,
                          parse_file(rel, kind, found.data, policies)))
    return reads


_worker: dict[str, Any] = {}


def _start(store: Path, policies: Policies, caller: int, spool: str) -> None:
    """A worker's set-up: what every task reads, where it leaves their rows, no cyclic
    garbage collection (the rows are acyclic tuples, freed as each task's are handed
    back), and a watch on the caller."""
    gc.disable()
    _worker.update(store=store, policies=policies, spool=spool)
    threading.Thread(target=_watch, args=(caller,), name="gitmem-reader-watch",
                     daemon=True).start()


def _watch(caller: int) -> None:
    """End this worker once the process it reads for is gone (a kill, a crash): nothing
    would take its rows or hand it tasks, and it would wait for that for good, holding
    its memory (its parent is the fork server, which stays while its workers do)."""
    while True:
        time.sleep(WATCH_S)
        try:
            os.kill(caller, 0)
        except OSError:  # gone (or its pid another user's process now)
            os._exit(1)


def _work(files: list[tuple[str, str]]) -> str:
    """Read a task's files; the name of the file holding their reads."""
    reads = _read(_worker["store"], _worker["policies"], files)
    spool: str = _worker["spool"]
    fd, name = tempfile.mkstemp(dir=spool)
    with os.fdopen(fd, "wb") as handle:
        pickle.dump(reads, handle, protocol=pickle.HIGHEST_PROTOCOL)
    return name


def _taken(name: str) -> list[Read]:
    """The reads a worker left in file `name`, which goes."""
    try:
        with open(name, "rb") as handle:
            reads: list[Read] = pickle.load(handle)
    finally:
        os.unlink(name)
    return reads
