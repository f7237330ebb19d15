"""Writes a crash interrupted: staged record files put in place or removed.

A crash between a write's append and its renames leaves its record files staged as
`.tmp-<event>.<day>.<name>.<random>` beside their targets. These tests make that
state on real stores the way the write path names it (`staged_prefix`): a record
written, then its file moved back to a staged name as the crash would have left it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitmem import recovery
from gitmem.autocommit import commit
from gitmem.config import Config
from gitmem.memory import Memory
from gitmem.records import Event
from gitmem.recovery import GRACE_S, staged_prefix
from gitmem.store import init_store
from gitmem.verify import verify_tree
from tests.conftest import git
from tests.daemons import (
    FAST_FLAGS,
    append,
    event_line,
    new_repo,
    running,
    short_store,
    wait_for,
)

OLD = time.time() - 10 * GRACE_S  # a staged file this old belongs to no write in flight


def unplace(store: Path, target: Path, event: Event, *, when: float = OLD) -> Path:
    """Move a record file back to the staged name its write gave it: the state a crash
    between the event's append and the rename leaves. Returns the staged path."""
    staged = target.parent / (staged_prefix(target, event.id, event.ts[:10]) + "k2x9q")
    os.replace(target, staged)
    os.utime(staged, (when, when))
    return staged


@pytest.fixture
def store(tmp_path: Path) -> Path:
    init_store(tmp_path / "repo")
    return tmp_path / "repo" / "memory"


def test_a_record_whose_event_is_durable_is_put_in_place(memory: Memory) -> None:
    store = memory.store
    evt = memory.record({"content": {"text": "the cluster is in Frankfurt"}, "session_id": "s1"})
    dec = memory.decide("Deploy from Frankfurt only", [evt.id])
    target = store / "decisions" / f"{dec.content['decision_id']}.md"
    text = target.read_bytes()
    staged = unplace(store, target, dec)
    assert [p.detail for p in verify_tree(store, memory.policies)
            if "not in the store" in p.detail]  # verify names the missing record

    report = memory.reconcile()

    assert target.read_bytes() == text and not staged.exists()
    assert report.finished == [{"path": staged.relative_to(store).as_posix(),
                                "target": f"decisions/{target.name}", "action": "placed",
                                "reason": f"its event {dec.id} is durable"}]
    assert verify_tree(store, memory.policies) == []
    assert [d["decision_id"] for d in memory.query_decisions(channel="private")] == \
        [dec.content["decision_id"]]


def test_a_record_whose_event_never_landed_is_removed(store: Path) -> None:
    target = store / "decisions" / "dec_01KHBYB0000000000000000001.md"
    staged = target.parent / (staged_prefix(target, "evt_01KHBYB0000000000000000009",
                                            "2026-03-01") + "a1b2c3")
    staged.write_text("---\nid: dec_01KHBYB0000000000000000001\n---\nnever answered\n")
    os.utime(staged, (OLD, OLD))

    [done] = recovery.finish(store)

    assert (done.action, done.target) == ("removed", f"decisions/{target.name}")
    assert "is not in events/2026-03/2026-03-01.jsonl: the write did not happen" in done.reason
    assert not staged.exists() and not target.exists()


def test_an_event_id_found_in_another_field_or_a_torn_line_is_not_the_event(store: Path
                                                                             ) -> None:
    event_id = "evt_01KHBYB0000000000000000007"
    day = store / "events" / "2026-03" / "2026-03-01.jsonl"
    day.parent.mkdir(parents=True)
    day.write_text(json.dumps({"id": "evt_01KHBYB0000000000000000008",
                               "refs": [event_id]}) + "\n" + '{"id": "' + event_id)
    target = store / "summaries" / "session" / "sum_01KHBYB0000000000000000001.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.parent / (staged_prefix(target, event_id, "2026-03-01") + "zz")
    staged.write_text("summary")
    os.utime(staged, (OLD, OLD))
    assert [d.action for d in recovery.finish(store)] == ["removed"]
    day.write_text(day.read_text() + '", "ts": "2026-03-01T10:00:00+00:00"}\n')
    staged.write_text("summary")
    os.utime(staged, (OLD, OLD))
    assert [d.action for d in recovery.finish(store)] == ["placed"]
    assert target.read_text() == "summary"


def test_a_task_updated_again_after_the_crash_keeps_its_newer_file(memory: Memory) -> None:
    store = memory.store
    first = memory.task("Move the staging cluster")
    task_id = first.content["task_id"]
    target = store / "tasks" / f"{task_id}.md"
    second = memory.task("Move the staging cluster", task_id=task_id, status="blocked")
    staged = unplace(store, target, second)  # the update to "blocked" never got in place
    target.write_text(staged.read_text().replace("blocked", "done"))  # a later update did

    [done] = recovery.finish(store)

    assert done.action == "removed" and "written after it" in done.reason
    assert "status: done" in target.read_text() and not staged.exists()


def test_a_task_update_interrupted_is_put_over_the_older_file(memory: Memory) -> None:
    store = memory.store
    first = memory.task("Move the staging cluster")
    task_id = first.content["task_id"]
    target = store / "tasks" / f"{task_id}.md"
    before = target.read_text()
    second = memory.task("Move the staging cluster", task_id=task_id, status="blocked")
    after = target.read_text()
    staged = unplace(store, target, second)
    target.write_text(before)  # what the crash left in place: the state before the update
    os.utime(target, (OLD - 60, OLD - 60))

    assert [d.action for d in recovery.finish(store)] == ["placed"]
    assert target.read_text() == after and "status: blocked" in after
    assert not staged.exists()


def test_a_staged_file_of_a_write_in_flight_is_left_alone(store: Path) -> None:
    target = store / "decisions" / "dec_01KHBYB0000000000000000001.md"
    staged = target.parent / (staged_prefix(target, "evt_01KHBYB0000000000000000009",
                                            "2026-03-01") + "fresh")
    staged.write_text("being written")
    [done] = recovery.finish(store)
    assert (done.action, done.path) == ("left", f"decisions/{staged.name}")
    assert done.reason.endswith("a write may still be finishing it; it is seen to once 30 s old")
    assert staged.read_text() == "being written"
    assert [d.action for d in recovery.finish(store, now=time.time() + 2 * GRACE_S)] == \
        ["removed"]


def test_a_lone_file_is_removed_and_a_stranger_left_and_reported(store: Path) -> None:
    handoff = store / "handoffs" / "hof_01KHBYB0000000000000000001.yaml"
    handoff.parent.mkdir(parents=True, exist_ok=True)
    lone = handoff.parent / (staged_prefix(handoff) + "q1")
    stranger = store / "decisions" / ".tmp-notes-of-mine"
    for path in (lone, stranger):
        path.write_text("x")
        os.utime(path, (OLD, OLD))

    done = {d.path: d for d in recovery.finish(store)}

    assert done[f"handoffs/{lone.name}"].action == "removed" and not lone.exists()
    assert done["decisions/.tmp-notes-of-mine"].action == "left" and stranger.exists()
    assert not handoff.exists()


def test_a_staged_name_that_names_no_record_file_is_left_alone(store: Path) -> None:
    """Names made by hand, or a target a write never stages there: reported, left."""
    day = store / "events" / "2026-03" / "2026-03-01.jsonl"
    day.parent.mkdir(parents=True)
    event_id = "evt_01KHBYB0000000000000000009"
    day.write_text(json.dumps({"id": event_id}) + "\n")
    names = [f".tmp-{event_id}.2026-03-01.....q", f".tmp-{event_id}.2026-03-01.x.md.q",
             f".tmp-{event_id}.2026-03-01.tsk_01KHBYB0000000000000000001.md.q",
             ".tmp-dec_01KHBYB0000000000000000001.md.q"]
    for name in names:
        (store / "decisions" / name).write_text("x")
        os.utime(store / "decisions" / name, (OLD, OLD))
    blocked = store / "decisions" / "dec_01KHBYB0000000000000000002.md"
    blocked.mkdir()  # where the record would go, a directory
    names.append(f".tmp-{event_id}.2026-03-01.{blocked.name}.q")
    (store / "decisions" / names[-1]).write_text("x")
    os.utime(store / "decisions" / names[-1], (OLD, OLD))
    done = recovery.finish(store)
    assert [(d.path.rsplit("/", 1)[-1], d.action) for d in done] == \
        [(name, "left") for name in sorted(names)]
    [why] = [d.reason for d in done if d.path.endswith(names[-1])]
    assert why == f"decisions/{blocked.name} is there, but not a file"
    blocked.rmdir()
    assert sorted(p.name for p in (store / "decisions").iterdir() if p.name != ".gitkeep") \
        == sorted(names)


def test_the_write_path_names_its_staged_files_for_recovery(store: Path) -> None:
    target = store / "decisions" / "dec_01KHBYB0000000000000000001.md"
    name = staged_prefix(target, "evt_01KHBYB0000000000000000009", "2026-03-01") + "x_Y9"
    assert name == (".tmp-evt_01KHBYB0000000000000000009.2026-03-01."
                    "dec_01KHBYB0000000000000000001.md.x_Y9")
    artifact = store / "artifacts" / "ab" / ("ab" + "c" * 62)
    assert staged_prefix(artifact, "evt_01KHBYB0000000000000000009", "2026-03-01") == \
        f".tmp-evt_01KHBYB0000000000000000009.2026-03-01.{artifact.name}."


def test_gitmem_sync_says_what_it_finished(memory: Memory, config: Config) -> None:
    from tests.conftest import Cli
    evt = memory.record({"content": {"text": "note"}, "session_id": "s1"})
    dec = memory.decide("Keep it", [evt.id])
    target = memory.store / "decisions" / f"{dec.content['decision_id']}.md"
    unplace(memory.store, target, dec)
    result = Cli(config)("sync")
    assert f"interrupted write: placed decisions/.tmp-{dec.id}." in result.output
    assert target.exists()


def test_autocommit_never_commits_a_staged_file_and_verify_names_one(tmp_path: Path) -> None:
    root = new_repo(tmp_path / "repo")
    store = root / "memory"
    staged = store / "decisions" / ".tmp-evt_01KHBYB0000000000000000009.2026-03-01.x.md.q"
    staged.write_text("half a write")
    _, line = event_line("s1", "Alice runs deploys")
    day = store / "events" / "2026-03" / "2026-03-01.jsonl"
    day.parent.mkdir(parents=True)
    day.write_text(line + "\n")

    result = commit(store)

    assert result is not None and result.paths == ["events/2026-03/2026-03-01.jsonl"]
    assert git(root, "status", "--porcelain", "--untracked-files=all").strip() == \
        f"?? memory/decisions/{staged.name}"
    from gitmem.policies import load_policies
    problems = verify_tree(store, load_policies(store))
    assert [(p.path, p.detail.split(":")[0]) for p in problems] == [
        (f"memory/decisions/{staged.name}",
         "a staging file of a write that did not finish (a crash)")]


@pytest.fixture
def daemon_config(dsn: str, schema: str) -> Iterator[Config]:
    with short_store(dsn, schema, "gmr") as config:
        yield config


def test_a_daemon_finishes_an_interrupted_write_when_it_starts(daemon_config: Config) -> None:
    with Memory(daemon_config) as memory:
        evt = memory.record({"content": {"text": "the cluster is in Frankfurt"},
                             "session_id": "s1"})
        dec = memory.decide("Deploy from Frankfurt only", [evt.id])
    target = daemon_config.store / "decisions" / f"{dec.content['decision_id']}.md"
    unplace(daemon_config.store, target, dec)
    with running(daemon_config) as daemon:
        answer = daemon.call("query_decisions", {"tenant_id": "default", "channel": "private"})
        assert [d["decision_id"] for d in answer] == [dec.content["decision_id"]]
        assert "an interrupted write: placed" in daemon.log()
    assert target.exists()


def test_an_empty_or_missing_day_file_holds_no_event(store: Path) -> None:
    target = store / "decisions" / "dec_01KHBYB0000000000000000001.md"
    for day in ("2026-03-01", "2026-03-02"):  # the first exists and is empty
        staged = target.parent / (staged_prefix(target, "evt_01KHBYB0000000000000000009",
                                                day) + "e")
        staged.write_text("x")
        os.utime(staged, (OLD, OLD))
    (store / "events" / "2026-03").mkdir(parents=True)
    (store / "events" / "2026-03" / "2026-03-01.jsonl").write_bytes(b"")
    assert [d.action for d in recovery.finish(store)] == ["removed", "removed"]
    assert not target.exists() and not list(target.parent.glob(".tmp-*"))


def test_a_running_daemon_finishes_another_writers_interrupted_write(daemon_config: Config
                                                                     ) -> None:
    """A CLI writer that crashed while the daemon ran: the daemon's next full reconcile
    (every second here) puts its staged decision in place, and indexes it."""
    with running(daemon_config, *FAST_FLAGS, "--reconcile-interval", "1") as daemon:
        with Memory(daemon_config) as memory:  # a writer of its own, as the CLI is
            evt = memory.record({"content": {"text": "the cluster is in Oslo"},
                                 "session_id": "s1"})
            dec = memory.decide("Deploy from Oslo only", [evt.id])
        target = daemon_config.store / "decisions" / f"{dec.content['decision_id']}.md"
        staged = unplace(daemon_config.store, target, dec)
        wait_for(target.exists, timeout=10)
        assert not staged.exists()
        wait_for(lambda: [d["decision_id"] for d in daemon.call(
            "query_decisions", {"channel": "private"})] == [dec.content["decision_id"]],
            timeout=10)


# --------------------------------------------------------------------------- a batch across days

_KILLED_IN_BATCH = """
import os, signal, sys
from pathlib import Path
import gitmem.recovery as recovery
from gitmem.config import Config
from gitmem.memory import Memory

real, calls = recovery.append_locked, []
def append_locked(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:  # the first day file's lines are durable: the crash
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)
recovery.append_locked = append_locked  # where a batch's files are appended
with Memory(Config(store=Path(sys.argv[1]), dsn=sys.argv[2], schema=sys.argv[3])) as memory:
    memory.record_many([{"content": {"text": "part one"}, "ts": "2026-10-01T10:00:00Z"},
                        {"content": {"text": "part two"}, "ts": "2026-10-02T10:00:00Z"}])
"""

OCT_1 = "events/2026-10/2026-10-01.jsonl"
OCT_2 = "events/2026-10/2026-10-02.jsonl"


def test_a_batch_across_day_files_a_crash_cut_short_is_cut_back(memory: Memory,
                                                                  config: Config) -> None:
    """A crash after the first day file's lines were durable left them for good, though
    the call was never answered: a batch is written whole or not at all."""
    before = memory.record({"content": {"text": "answered before"},
                            "ts": "2026-10-01T09:00:00Z"})
    kept = (memory.store / OCT_1).read_bytes()
    killed = subprocess.run([sys.executable, "-c", _KILLED_IN_BATCH, str(memory.store),
                             config.dsn or "", config.schema], capture_output=True)
    assert killed.returncode == -9
    assert b"part one" in (memory.store / OCT_1).read_bytes()  # the crash's half
    assert list((memory.store / "events").glob(recovery.BATCH_PREFIX + "*"))

    report = memory.reconcile()

    assert (memory.store / OCT_1).read_bytes() == kept  # the batch's lines, and only those
    assert not (memory.store / OCT_2).exists() or not (memory.store / OCT_2).read_bytes()
    assert not list((memory.store / "events").glob(recovery.BATCH_PREFIX + "*"))
    assert [(f["target"], f["action"]) for f in report.finished] == [(OCT_1, "cut back")]
    texts = [e["content"]["text"] for e in map(json.loads, kept.decode().splitlines())]
    assert texts == ["answered before"] and before.id in kept.decode()


def test_a_finished_batch_leaves_no_journal_and_a_stale_one_cuts_nothing_else(
        memory: Memory) -> None:
    """The journal goes before the batch is answered; one that outlived its write cuts
    nothing that is not its write's: where other lines follow, none is cut and the
    journal stays for a person (verify names it)."""
    memory.record_many([{"content": {"text": "one"}, "ts": "2026-10-01T10:00:00Z"},
                        {"content": {"text": "two"}, "ts": "2026-10-02T10:00:00Z"}])
    assert not list((memory.store / "events").glob(recovery.BATCH_PREFIX + "*"))
    day = memory.store / OCT_1
    stranger = "evt_01KHBYB0000000000000000009"
    journal = recovery.begin_batch(memory.store, [(OCT_1, day.stat().st_size, [stranger])])
    append(day, event_line("s", "appended by hand", number=3)[1])
    grown = day.read_bytes()

    [done] = recovery.finish(memory.store)

    assert (done.target, done.action) == (OCT_1, "left") and "none of its lines" in done.reason
    assert day.read_bytes() == grown and journal.exists()
    assert [p.detail for p in verify_tree(memory.store, memory.policies)
            if "the journal of a write that did not finish" in p.detail]
    journal.unlink()


def test_a_new_day_files_name_is_durable_before_its_batchs_journal_goes(
        memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that made a day file in a new month's folder: the folder's name and the
    file's were fsynced only after the journal was removed, so a power loss between
    could lose that file's lines and keep the other's, with no journal to undo them."""
    from gitmem import appends

    synced: list[tuple[str, bool]] = []  # (folder fsynced, whether a journal was there)
    real = appends.fsync_dir

    def fsync_dir(directory: Path) -> None:
        events = memory.store / "events"
        synced.append((str(directory.relative_to(memory.store)),
                       bool(list(events.glob(recovery.BATCH_PREFIX + "*")))))
        real(directory)

    monkeypatch.setattr(appends, "fsync_dir", fsync_dir)
    monkeypatch.setattr(recovery, "fsync_dir", fsync_dir)
    memory.record_many([{"content": {"text": "one"}, "ts": "2026-10-01T10:00:00Z"},
                        {"content": {"text": "two"}, "ts": "2026-11-01T10:00:00Z"}])
    assert (memory.store / "events" / "2026-11" / "2026-11-01.jsonl").exists()
    journal = next(i for i, (_, there) in enumerate(synced) if there)
    before = [where for where, _ in synced[:journal]]
    assert before.count("events") == 2  # the two months' folders' names, then their files'
    assert {"events/2026-10", "events/2026-11"} <= set(before)
    assert synced[-1] == ("events", False)  # the journal's removal, the last


def test_a_write_after_a_crash_cuts_the_crashed_batch_back_first(memory: Memory,
                                                                  config: Config) -> None:
    """Recovery ran only at a sync or a daemon's start: a write in between put its line
    after the crash's, and recovery then kept that file's half of the batch and cut the
    other's."""
    kept = memory.record({"content": {"text": "answered before"},
                          "ts": "2026-10-01T09:00:00Z"})
    killed = subprocess.run([sys.executable, "-c", _KILLED_IN_BATCH, str(memory.store),
                             config.dsn or "", config.schema], capture_output=True)
    assert killed.returncode == -9
    later = memory.record({"content": {"text": "answered later"}, "ts": "2026-10-01T11:00:00Z"})

    texts = [json.loads(line)["content"]["text"]
             for line in (memory.store / OCT_1).read_text().splitlines()]
    assert texts == ["answered before", "answered later"] and kept.id != later.id
    assert not list((memory.store / "events").glob(recovery.BATCH_PREFIX + "*"))


def test_two_crashed_batches_are_cut_back_the_newest_first(store: Path) -> None:
    """Sizes only grow: the older batch's journal, seen first, found the newer one's
    lines after its own and kept its half."""
    days = (OCT_1, OCT_2)
    journals = []
    for n, when in ((1, OLD - 60), (2, OLD)):
        sizes = [(store / d).stat().st_size if (store / d).exists() else 0 for d in days]
        lines = [event_line("s", f"batch {n} {d}", number=10 * n + i) for i, d in enumerate(days)]
        journal = recovery.begin_batch(store, [(d, size, [line[0]]) for d, size, line in
                                               zip(days, sizes, lines, strict=True)])
        os.utime(journal, (when, when))
        journals.append(journal)
        for d, (_, text) in zip(days, lines, strict=True):
            append(store / d, text)
    for journal in journals:  # named so that the older sorts first
        journal.rename(journal.with_name(recovery.BATCH_PREFIX + ("a" if journal == journals[0]
                                                                  else "b")))

    done = recovery.finish(store)

    assert [d.action for d in done] == ["cut back"] * 4
    assert not any((store / d).exists() for d in days)  # made by the batches: gone


def test_a_journal_naming_a_file_that_cannot_be_written_is_left_not_a_crash(
        store: Path) -> None:
    (store / OCT_1).mkdir(parents=True)  # a directory where the day file would be
    journal = recovery.begin_batch(store, [(OCT_1, 0, ["evt_01KHBYB0000000000000000009"])])

    [done] = recovery.finish(store)

    assert done.action == "left" and "could not be seen to" in done.reason
    assert journal.exists()


_JOURNAL_PAST_A_SIZE_LIMIT = """
import resource, signal, sys
from pathlib import Path
from gitmem import recovery
from gitmem.errors import StoreError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
resource.setrlimit(resource.RLIMIT_FSIZE, (200, resource.RLIM_INFINITY))
ids = [f"evt_01KHBYB{n:019d}" for n in range(40)]
try:
    recovery.begin_batch(Path(sys.argv[1]), [(sys.argv[2], 0, ids)])
except StoreError as exc:
    print(exc)
"""


def test_a_journal_that_cannot_be_written_whole_fails_the_write_and_is_removed(
        store: Path) -> None:
    """A write is short at a file size limit (or a disk filling part way): the journal
    was kept cut short, and the batch went on as if it were whole."""
    done = subprocess.run([sys.executable, "-c", _JOURNAL_PAST_A_SIZE_LIMIT, str(store), OCT_1],
                          capture_output=True, text=True, check=True, timeout=60)

    assert "journaling a write in" in done.stdout
    assert "File too large; nothing was written" in done.stdout
    assert [p.name for p in (store / "events").iterdir()] == [".gitkeep"]  # no journal, no draft


def test_a_task_update_builds_on_an_earlier_one_whose_file_was_left_staged(
        memory: Memory) -> None:
    """An update's event was durable (and answered) but its file not put in place: the
    next update read the file before it, and recovery then threw the staged one away
    as older than the file in place."""
    store = memory.store
    first = memory.task("Ship it")
    task_id = first.content["task_id"]
    target = store / "tasks" / f"{task_id}.md"
    before = target.read_text()
    done = memory.task(task_id=task_id, status="done")
    unplace(store, target, done, when=time.time())  # its renaming failed
    target.write_text(before)
    os.utime(target, (OLD, OLD))

    memory.task(task_id=task_id, owner="bob")

    text = target.read_text()
    assert "status: done" in text and "owner: bob" in text
    assert not list((store / "tasks").glob(".tmp-*"))




_STOPPED_IN_BATCH = """
import json, os, signal, sys
from pathlib import Path
import gitmem.recorder as recorder
import gitmem.recovery as recovery
from gitmem.policies import load_policies

real = recovery.append_locked
def append_locked(*args, **kwargs):
    done = real(*args, **kwargs)  # the first day file's lines are durable: stopped there,
    print("appended", flush=True)  # its locks held, to be killed
    os.kill(os.getpid(), signal.SIGSTOP)
    return done
recovery.append_locked = append_locked  # where a batch's files are appended
store = Path(sys.argv[1])
recorder.Recorder(store, load_policies(store)).record_many(json.loads(sys.argv[2]))
"""


def stopped_in_batch(store: Path, events: list[dict[str, Any]]) -> subprocess.Popen[str]:
    """A writer of a batch across day files, stopped (holding its locks) once its first
    day file's lines are durable; the caller kills it."""
    proc = subprocess.Popen([sys.executable, "-c", _STOPPED_IN_BATCH, str(store),
                             json.dumps(events)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "appended\n"
    return proc


A_BATCH = [{"content": {"text": "A day one, never answered"}, "ts": "2026-10-01T10:00:00Z"},
           {"content": {"text": "A day two, never answered"}, "ts": "2026-10-02T10:00:00Z"}]


def test_a_write_waiting_for_a_crashed_batchs_lock_cuts_it_back_first(memory: Memory) -> None:
    """The check for a crashed batch ran before a write took its locks: a write that was
    waiting for them when the batch's writer died put its line after the crash's half
    batch, which then stayed for good."""
    memory.record({"content": {"text": "before"}, "ts": "2026-10-01T09:00:00Z"})
    writer = stopped_in_batch(memory.store, A_BATCH)
    waiting: list[Any] = []
    thread = threading.Thread(target=lambda: waiting.append(memory.record(
        {"content": {"text": "B, answered"}, "ts": "2026-10-01T11:00:00Z"})))
    thread.start()
    time.sleep(0.5)  # B waits for the day file's lock
    assert not waiting
    writer.kill()
    writer.wait()
    thread.join(timeout=30)
    texts = [json.loads(line)["content"]["text"]
             for line in (memory.store / OCT_1).read_text().splitlines()]
    assert texts == ["before", "B, answered"]
    assert not list((memory.store / "events").glob(".tmp-batch*"))


def test_a_task_update_after_a_crashed_batch_never_places_its_task_file(
        memory: Memory) -> None:
    """A crashed batch's task update had its file staged and its line durable: the next
    update put the file in place, then the batch's line was cut back, leaving the task
    `done` by an update that never happened."""
    first = memory.task("first task").content["task_id"]
    second = memory.task("second task").content["task_id"]
    writer = stopped_in_batch(memory.store, [
        {"kind": "task_update", "content": {"task_id": first, "status": "done"},
         "ts": "2026-10-01T10:00:00Z"}, A_BATCH[1]])
    writer.kill()
    writer.wait()
    memory.task(task_id=second, status="doing")
    text = (memory.store / "tasks" / f"{first}.md").read_text()
    assert "status: open" in text
    assert not list((memory.store / "tasks").glob(".tmp-*"))
    assert verify_tree(memory.store, memory.policies) == []


def test_a_journal_half_written_by_a_dead_writer_is_removed(store: Path) -> None:
    """A journal is written under another name and renamed once whole: one killed while
    being written (nothing was appended yet) goes at the next sync, said (it stayed for
    30 s, unsaid, while verify named it and told to run `gitmem sync`); one its writer
    still holds stays."""
    import fcntl

    (store / "events").mkdir(exist_ok=True)
    writing = store / "events" / (recovery.JOURNAL_WRITING + "k2x9q")
    writing.write_text('{"files": [')
    held = store / "events" / (recovery.JOURNAL_WRITING + "alive")
    held.write_text('{"files": [')
    for path in (writing, held):
        os.utime(path, (time.time() - 2, time.time() - 2))
    with open(held, "rb") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # its writer, alive
        [done] = recovery.finish(store)
        assert held.exists()
    assert (done.path, done.action) == (writing.relative_to(store).as_posix(), "removed")
    assert "cut short before its first line: nothing of it was written" in done.reason
    assert not writing.exists()


# --------------------------------------------------------------------------- a batch to one day

_TORN_IN_ONE_FILE = """
import os, resource, signal, sys
from pathlib import Path
from gitmem.config import Config
from gitmem.memory import Memory

store, day = Path(sys.argv[1]), Path(sys.argv[1]) / sys.argv[4]
batch = [{"content": {"text": f"never answered {n} " + "q" * 1000},
          "ts": "2026-10-01T10:00:00Z"} for n in range(100)]  # 100 KB, one day file
with Memory(Config(store=store, dsn=sys.argv[2], schema=sys.argv[3])) as memory:
    # the kernel writes the append up to a size limit (a short write, as a SIGKILL
    # between pages leaves it) and kills the writer at the next byte: a real tear
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_FSIZE, (day.stat().st_size + 16384,
                                               resource.RLIM_INFINITY))
    memory.record_many(batch)
"""


def test_a_batch_to_one_day_file_a_crash_tore_is_cut_back(memory: Memory,
                                                           config: Config) -> None:
    """A batch to one day file was one `write`, not journaled: a crash midway (Linux
    stops a large write between pages at a SIGKILL) left its first lines, never
    answered, and a torn one that the next write ended with a newline (a malformed line
    for good). Now it is journaled and cut back to the file as it was before it."""
    import signal

    memory.record({"content": {"text": "answered before"}, "ts": "2026-10-01T09:00:00Z"})
    kept = (memory.store / OCT_1).read_bytes()
    killed = subprocess.run([sys.executable, "-c", _TORN_IN_ONE_FILE, str(memory.store),
                             config.dsn or "", config.schema, OCT_1], capture_output=True)
    assert killed.returncode == -signal.SIGXFSZ, killed.stderr
    torn = (memory.store / OCT_1).read_bytes()
    assert torn.count(b"never answered") > 5 and not torn.endswith(b"\n")  # the crash's part

    memory.record({"content": {"text": "answered later"}, "ts": "2026-10-01T11:00:00Z"})

    texts = [json.loads(line)["content"]["text"]
             for line in (memory.store / OCT_1).read_text().splitlines()]
    assert texts == ["answered before", "answered later"]
    assert (memory.store / OCT_1).read_bytes().startswith(kept)
    assert not list((memory.store / "events").glob(".tmp-batch*"))
    assert verify_tree(memory.store, memory.policies) == []


def test_only_a_large_write_to_one_day_file_is_journaled(memory: Memory,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """The journal costs three fsyncs: a single event, or a small batch, is one write
    that takes microseconds and goes without it; a batch of more than
    `JOURNAL_ABOVE` bytes to one day file is journaled."""
    journaled: list[list[str]] = []
    real = recovery.begin_batch

    def begin_batch(store: Path, files: Any) -> Path:
        journaled.append([rel for rel, _, _ in files])
        return real(store, files)

    monkeypatch.setattr(recovery, "begin_batch", begin_batch)
    memory.record({"content": {"text": "one"}, "ts": "2026-10-01T09:00:00Z"})
    memory.record_many([{"content": {"text": f"small {n}"}, "ts": "2026-10-01T09:00:00Z"}
                        for n in range(20)])
    assert journaled == []
    big = "q" * (recovery.JOURNAL_ABOVE // 4)
    memory.record_many([{"content": {"text": f"large {n} {big}"},
                         "ts": "2026-10-01T10:00:00Z"} for n in range(5)])
    assert journaled == [[OCT_1]]
    assert not list((memory.store / "events").glob(".tmp-batch*"))


def test_a_torn_line_not_committed_says_how_to_take_it_out(memory: Memory) -> None:
    """A write below `JOURNAL_ABOVE` a crash cut short leaves a torn last line, which the
    next write ends with a newline: verify (and autocommit, holding the file back) said
    "malformed JSON" and nothing of how to get out."""
    memory.record({"content": {"text": "answered"}, "ts": "2026-10-01T09:00:00Z"})
    day = memory.store / OCT_1
    size = day.stat().st_size
    append(day, day.read_text()[:120])  # the start of a line as gitmem writes it
    [torn] = [p.detail for p in verify_tree(memory.store, memory.policies)]
    assert "the last line has no newline" in torn
    assert f"(bytes {size}-{size + 120})" in torn and f"truncate -s {size} " in torn

    memory.record({"content": {"text": "answered later"}, "ts": "2026-10-01T10:00:00Z"})
    [ended] = [p for p in verify_tree(memory.store, memory.policies)]
    assert ended.line == 2 and "malformed JSON" in ended.detail
    assert f"(bytes {size}-{size + 120})" in ended.detail and "delete that line" in ended.detail
    lines = day.read_bytes().split(b"\n")
    day.write_bytes(b"\n".join(lines[:1] + lines[2:]))  # taken out as it says
    assert verify_tree(memory.store, memory.policies) == []


def test_a_torn_hint_is_for_a_line_head_lacks_and_its_bytes_on_disk(memory: Memory,
                                                                     repo: Path) -> None:
    """The hint's `truncate -s` ate committed bytes: a committed line that lost its end
    (the file no longer begins with HEAD's version) was called "not committed ...
    removing it loses nothing"; and under core.autocrlf the offsets were of the file with
    its CRLF made LF, one byte short per line."""
    for number in range(3):
        memory.record({"content": {"text": f"note {number}"}, "ts": "2026-10-01T09:00:00Z"})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "three")
    day = memory.store / OCT_1
    committed = day.read_bytes()
    day.write_bytes(committed[:-7])  # the committed last line lost its end
    details = [p.detail for p in verify_tree(memory.store, memory.policies)]
    assert any("line 3 of HEAD's version is gone" in d for d in details), details
    [torn] = [d for d in details if "the last line has no newline" in d]
    assert "not committed" not in torn and "truncate" not in torn

    git(repo, "config", "core.autocrlf", "true")
    day.unlink()
    git(repo, "checkout", "--", f"memory/{OCT_1}")
    size = day.stat().st_size
    assert size == len(committed) + 3  # checked out with CRLF
    append(day, committed[:40].decode())  # the start of a line as gitmem writes it
    [torn] = [p.detail for p in verify_tree(memory.store, memory.policies)]
    assert f"(bytes {size}-{size + 40})" in torn and f"truncate -s {size} " in torn
    os.truncate(day, size)  # taken out as it says: every committed byte kept
    assert verify_tree(memory.store, memory.policies) == []
    assert day.read_bytes().replace(b"\r\n", b"\n") == committed


def test_a_torn_line_staged_says_no_offsets_the_file_on_disk_has_not(memory: Memory,
                                                                     repo: Path) -> None:
    """The pre-commit hook gave `truncate -s` at the offset of the staged version, though
    the file on disk had more lines after it: the command cut them too. A committed torn
    line (the post-commit hook's check of a commit) is not called "not committed"."""
    from gitmem.verify import verify_commit, verify_staged

    memory.record({"content": {"text": "answered"}, "ts": "2026-10-01T09:00:00Z"})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    day = memory.store / OCT_1
    size = day.stat().st_size
    append(day, day.read_text()[:40])
    git(repo, "add", "-A")
    [staged] = [p.detail for p in verify_staged(memory.store, memory.policies)]
    assert f"truncate -s {size} " in staged  # the file on disk is what is staged
    append(day, "\n" + day.read_text().splitlines()[0] + "\n")  # a line on disk since
    [staged] = [p.detail for p in verify_staged(memory.store, memory.policies)]
    assert "not committed and stops mid-record" in staged and "truncate" not in staged
    assert "bytes" not in staged
    git(repo, "commit", "-q", "--no-verify", "-m", "torn")
    [after] = [p.detail for p in verify_commit(memory.store, memory.policies)]
    assert "the last line has no newline" in after and "not committed" not in after
