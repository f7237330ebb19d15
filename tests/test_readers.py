"""A reindex whose rows are derived by worker processes (gitmem/readers.py) makes the
index one process makes, errors, repeats and progress included."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gitmem import indexer, readers
from gitmem.errors import FormatError, ValidationError
from gitmem.indexer import index_digest
from gitmem.memory import Memory
from gitmem.store import iter_store_files
from tests.test_copies import line as event_at
from tests.test_copies import minted
from tests.test_indexer import DAY, DAY2, line, rows, write


def mixed_store(memory: Memory) -> None:
    """Events over days and offsets, a bad line, a torn one, an id pasted into another
    day's file, a decision and a task: everything a reindex must keep in order."""
    store = memory.store
    write(store, DAY, "".join(line(n) for n in range(40)) + "not json\n" + line(40))
    write(store, DAY2, "".join(line(n, day="2026-02-10") for n in range(100, 140)) + '{"torn')
    evening = "2026-06-02T20:00:00-05:00"
    genuine = minted(evening)
    write(store, "events/2026-06/2026-06-01.jsonl",
          event_at(genuine, "forged: deploy from Berlin", "2026-06-01T10:00:00+00:00"))
    write(store, "events/2026-06/2026-06-02.jsonl",
          event_at(genuine, "deploy from Chicago", evening))
    memory.decide("We deploy on Fridays", refs=[f"evt_01JKZ3N4Q5R6S7T8V9W0X{0:05d}"])
    memory.record({"kind": "task_update", "content": {"title": "Write the runbook",
                                                      "status": "open"}})


def test_workers_make_the_index_one_process_makes(memory: Memory, dsn: str,
                                                  schema: str) -> None:
    mixed_store(memory)
    alone: list[int] = []
    one = indexer.reindex(memory.db, memory.store, memory.policies, alone.append, workers=1)
    expected = index_digest(memory.db)
    with Memory(replace(memory.config, schema=f"{schema}_w")) as other:
        shared: list[int] = []
        try:
            two = indexer.reindex(other.db, other.store, other.policies, shared.append,
                                  workers=2)
            assert index_digest(other.db) == expected
        finally:
            rows(dsn, schema, f'DROP SCHEMA "{schema}_w" CASCADE')
    assert two.errors == one.errors and len(one.errors) == 2  # the bad line, the pasted id
    assert (two.files, two.rows) == (one.files, one.rows)
    assert shared == alone and sum(shared) > 0


_UNGUARDED = """
import sys
print("the script ran", flush=True)  # at the top level: no `if __name__ == "__main__":`
from gitmem import indexer
from gitmem.config import Config
from gitmem.memory import Memory
from pathlib import Path
with Memory(Config(store=Path(sys.argv[1]), dsn=sys.argv[2], schema=sys.argv[3])) as memory:
    memory.record({"content": {"text": "one line to read"}})
    indexer.reindex(memory.db, memory.store, memory.policies, workers=2)
    print("reindexed", flush=True)
"""


def test_workers_never_run_the_callers_script_again(memory: Memory, dsn: str, schema: str,
                                                    tmp_path: Path) -> None:
    """multiprocessing ran a script's top level again in every worker it started: an
    unguarded script's writes there, and a wait for good on the schema's lock."""
    script = tmp_path / "unguarded.py"
    script.write_text(_UNGUARDED)
    other = f"{schema}_s"
    try:
        done = subprocess.run([sys.executable, str(script), str(memory.store), dsn, other],
                              capture_output=True, text=True, timeout=60,
                              cwd=Path(__file__).parent.parent)
    finally:
        rows(dsn, schema, f'DROP SCHEMA IF EXISTS "{other}" CASCADE')
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["the script ran", "reindexed"]


def test_files_left_by_a_killed_worker_are_read_in_this_process(
        memory: Memory, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A worker killed mid-reindex (the OOM killer, say): the files it had not sent
    back are read here, and every file is read once, in order."""
    mixed_store(memory)
    files = list(iter_store_files(memory.store))
    expected = [(r.rel, r.rows.count(), len(r.rows.errors))
                for r in readers.read_all(memory.store, files, memory.policies, workers=1)]
    monkeypatch.setattr(readers, "TASK_FILES", 1)  # a task a file: many tasks
    spools = set(Path(tempfile.gettempdir()).glob("gitmem-reads-*"))
    reads = readers.read_all(memory.store, files, memory.policies, workers=2)
    got = [next(reads)]
    for pid in _workers_of_the_fork_server():  # mid-task, even mid-hand-back: never a hang
        os.kill(pid, signal.SIGKILL)
    got += list(reads)
    assert [(r.rel, r.rows.count(), len(r.rows.errors)) for r in got] == expected
    assert set(Path(tempfile.gettempdir()).glob("gitmem-reads-*")) == spools  # rows gone
    assert len(expected) > 2 * readers.READ_AHEAD + 1  # tasks were left to hand out
    assert "a reindex's worker process failed" in caplog.text


def test_workers_end_when_the_reindex_that_started_them_is_killed(memory: Memory) -> None:
    """A reindex killed (kill -9) while its workers hold rows for it: they would wait
    for it for good; each ends within seconds, and the fork server with them."""
    mixed_store(memory)
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from gitmem import readers\n"
        "from gitmem.policies import load_policies\n"
        "from gitmem.store import iter_store_files\n"
        "store = Path(sys.argv[1])\n"
        "readers.TASK_FILES = 1\n"
        "reads = readers.read_all(store, list(iter_store_files(store)), "
        "load_policies(store), workers=2)\n"
        "next(reads)\n"
        "print('reading', flush=True)\n"
        "time.sleep(600)\n")
    reader = subprocess.Popen([sys.executable, "-c", script, str(memory.store)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "reading\n"
        family = _descendants(reader.pid)
        assert len(family) >= 3, family  # the fork server and its two workers at least
    finally:
        reader.kill()
        reader.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(pid) for pid in family):
        time.sleep(0.2)
    assert not [pid for pid in family if _alive(pid)]


def _stat(pid: int) -> tuple[str, int] | None:
    """A process's state and parent (/proc/PID/stat), or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def _descendants(root: int) -> list[int]:
    """Every process below `root`."""
    parents = {pid: found[1] for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
               if (found := _stat(pid)) is not None}
    found_below, frontier = [], [root]
    while frontier:
        below = [pid for pid, parent in parents.items() if parent in frontier]
        found_below += below
        frontier = below
    return found_below


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped, does not)."""
    found = _stat(pid)
    return found is not None and found[0] != "Z"


def _workers_of_the_fork_server() -> list[int]:
    """The processes this process's fork server made (it is this process's child, they
    are its)."""
    found = [pid for pid in _descendants(os.getpid())
             if (stat := _stat(pid)) is not None and stat[1] != os.getpid()
             and b"multiprocessing.forkserver" in _cmdline(pid)]
    assert found, "no worker found"
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_files_go_in_tasks_in_path_order(tmp_path: Path) -> None:
    files = [(f"events/2026-01/2026-01-{day:02d}.jsonl", "events") for day in range(1, 9)]
    for rel, _ in files:
        write(tmp_path, rel, "x" * (readers.TASK_BYTES // 3 + 1))
    tasks = readers._tasks(tmp_path, files)
    assert [f for group, _ in tasks for f in group] == files
    assert [len(group) for group, _ in tasks] == [3, 3, 2]
    assert readers._workers(readers.MIN_BYTES - 1) == 1


def test_format_errors_keep_their_place_through_pickling() -> None:
    """Workers send a file's errors back: path, line, field and severity survive."""
    for error in (FormatError("expected JSON", path="events/a.jsonl", line=3),
                  ValidationError("unknown field", field="colour", severity="warning")
                  .at("decisions/d.md", 2)):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and str(back) == str(error)
        assert (back.path, back.line, back.field, back.severity) == (
            error.path, error.line, error.field, error.severity)
