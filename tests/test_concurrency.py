"""Many writers at once: no line lost, torn or interleaved (issue 2, "Must hold")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gitmem.config import Config
from gitmem.memory import Memory
from gitmem.records import parse_event_line

PROCESSES = 8
RECORDS = 500

# Each process runs the real `gitmem record` command 500 times, one record operation per
# call through the CLI code path (click parsing, config, Memory, the locked append), in
# process: spawning 4,000 interpreters would cost ~0.5 s each.
WRITER = textwrap.dedent("""
    import sys
    from gitmem.cli import main

    proc, count, start_at = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    import time
    while time.time() < start_at:  # start together, so the writers really overlap
        time.sleep(0.001)
    for i in range(count):
        main(["record", f"writer {proc} record {i} " + "x" * (i % 300),
              "--session", f"w{proc}", "--agent", f"writer-{proc}",
              "--actor", f"agent:writer-{proc}", "--tag", f"n:{i}"],
             standalone_mode=False)
""")


@pytest.mark.slow
def test_8_processes_x_500_records(config: Config, tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = {**os.environ, "GITMEM_STORE": str(config.store), "GITMEM_NO_DAEMON": "1",
           "GITMEM_DSN": config.dsn or "", "GITMEM_SCHEMA": config.schema}
    start_at = time.time() + 2.0
    began = time.perf_counter()
    writers = [subprocess.Popen([sys.executable, str(script), str(p), str(RECORDS),
                                 str(start_at)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
               for p in range(PROCESSES)]
    outputs = [w.communicate(timeout=240) for w in writers]
    elapsed = time.perf_counter() - began
    for writer, (_, err) in zip(writers, outputs, strict=True):
        assert writer.returncode == 0, err
    printed = [out.split() for out, _ in outputs]
    assert [len(ids) for ids in printed] == [RECORDS] * PROCESSES

    files = sorted((config.store / "events").rglob("*.jsonl"))
    assert files
    seen: dict[str, str] = {}
    per_writer: dict[str, list[int]] = {}
    total = 0
    for path in files:
        data = path.read_bytes()
        assert data.endswith(b"\n"), f"{path} ends in a torn line"
        rel = str(path.relative_to(config.store))
        for number, raw in enumerate(data.split(b"\n")[:-1], start=1):
            event = parse_event_line(raw, path=rel, line=number)  # raises if torn/interleaved
            total += 1
            assert event.id not in seen, f"duplicate id {event.id}"
            seen[event.id] = str(event.content["text"])
            writer, _, rest = str(event.content["text"]).removeprefix("writer ").partition(" ")
            per_writer.setdefault(writer, []).append(int(rest.split()[1]))
            assert event.agent_id == f"writer-{writer}" and event.tags == (
                f"n:{rest.split()[1]}",)
    assert total == PROCESSES * RECORDS
    assert set(seen) == {i for ids in printed for i in ids}
    # each writer's records are all there, in the order it wrote them
    assert {w: sorted(n) for w, n in per_writer.items()} == {
        str(p): list(range(RECORDS)) for p in range(PROCESSES)}
    for numbers in per_writer.values():
        assert numbers == sorted(numbers)
    assert elapsed < 120, f"{elapsed:.1f}s"

    with Memory(config) as memory:
        report = memory.sync()
        assert report.errors == []
        assert memory.status()["index"]["events"] == PROCESSES * RECORDS


@pytest.mark.slow
def test_threads_and_a_batch_writer_share_one_store(config: Config) -> None:
    """Threads of one process and a batch in another never interleave either."""
    from concurrent.futures import ThreadPoolExecutor

    batch = "\n".join(json.dumps({"content": {"text": f"batch {i}"}}) for i in range(300))
    env = {**os.environ, "GITMEM_STORE": str(config.store), "GITMEM_NO_DAEMON": "1",
           "GITMEM_DSN": config.dsn or "", "GITMEM_SCHEMA": config.schema}
    console = Path(sys.executable).with_name("gitmem")  # the installed console script
    if not console.exists():
        pytest.skip(f"no gitmem console script beside {sys.executable}")
    other = subprocess.Popen([str(console), "record", "--json", "-"],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    with Memory(config) as memory, ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda i: memory.record({"content": {"text": f"thread {i}"}}).id,
                            range(400)))
        out, err = other.communicate(batch, timeout=120)
    assert other.returncode == 0, err
    lines = [line for path in (config.store / "events").rglob("*.jsonl")
             for line in path.read_bytes().split(b"\n")[:-1]]
    events = [parse_event_line(raw, path="x", line=n) for n, raw in enumerate(lines, 1)]
    assert len(events) == 700 and len({e.id for e in events}) == 700
    assert set(ids) | set(out.split()) == {e.id for e in events}
