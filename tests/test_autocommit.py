"""Autocommit of the store: only store paths, a person's index untouched, readable
messages, never mid-merge, mid-rebase or on a detached HEAD; and the daemon's batches."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitmem import autocommit, gitops
from gitmem.config import Config
from gitmem.errors import GitError
from gitmem.memory import Memory
from gitmem.store import init_store
from tests.conftest import git
from tests.daemons import new_repo, running, short_store, wait_for


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return new_repo(tmp_path / "repo")


def record(store: Path, text: str, session: str = "s1") -> str:
    with Memory(Config(store=store)) as memory:
        return memory.record({"session_id": session, "content": {"text": text}}).id


def log(root: Path) -> list[str]:
    return git(root, "log", "--format=%s").splitlines()


def test_autocommit_commits_only_the_store_and_keeps_the_persons_index(root: Path) -> None:
    store = root / "memory"
    (root / "README.md").write_text("a person's work in progress\n")
    git(root, "add", "README.md")
    (root / "notes.txt").write_text("untracked, unstaged\n")
    (store / "views" / "identity.md").write_text("# Identity\n\nedited by a person\n")
    first = record(store, "one", "s1")
    record(store, "two", "s1")
    record(store, "three", "s2")
    with Memory(Config(store=store)) as memory:
        memory.decide("Deploy on Fridays", [first], title="Friday deploys", session_id="s1")
        memory.task("Write the runbook", owner="ana", session_id="s1")
    result = autocommit.commit(store)
    assert result is not None and result.events == 5
    committed = git(root, "show", "--name-only", "--format=", "HEAD").split()
    assert committed and all(p.startswith(("memory/events/", "memory/decisions/",
                                           "memory/tasks/")) for p in committed)
    assert git(root, "diff", "--cached", "--name-only").split() == ["README.md"]
    assert git(root, "status", "--porcelain", "--", "memory/events", "memory/decisions",
               "memory/tasks") == ""
    assert " M memory/views/identity.md" in git(root, "status", "--porcelain")
    message = git(root, "log", "-1", "--format=%B")
    subject = message.splitlines()[0]
    assert subject.startswith("gitmem: 5 events in 2 sessions; 1 decision; 1 task")
    assert len(subject) <= 72
    assert "sessions: s1 (4), s2 (1)" in message
    assert "Friday deploys" in message and "Write the runbook [open]" in message
    assert "events: 3 message" in message
    assert autocommit.commit(store) is None  # nothing left: no empty commit
    assert log(root) == [subject, "init"]


_WRITE_THAT_FAILS = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_APPEND)
fcntl.flock(fd, fcntl.LOCK_EX)  # as the write path locks a day file
size = os.fstat(fd).st_size
os.write(fd, b'{"a": "line of a write that then fails"}\\n')
print("written", flush=True)
time.sleep(0.8)  # a slow fsync, then a failure: the write path cuts its lines back
os.ftruncate(fd, size)
"""


def test_the_subject_counts_other_files_in_the_plural_too(root: Path) -> None:
    store = root / "memory"
    with Memory(Config(store=store)) as memory:
        for n in range(2):  # a long output each: an artifact each
            memory.record({"kind": "tool_result", "session_id": "s1", "content": {
                "tool": "sh", "output": "".join(f"line {n}.{i}\n" for i in range(5000))}})
    result = autocommit.commit(store)
    assert result is not None and "; 2 artifacts" in result.message.splitlines()[0]


def test_autocommit_never_commits_the_lines_of_a_write_in_flight(root: Path) -> None:
    """A batch's lines on disk during a slow fsync were committed; the batch then failed
    and cut them back, leaving HEAD with lines never answered and the file shorter than
    HEAD's for good."""
    store = root / "memory"
    record(store, "one")
    assert autocommit.commit(store) is not None
    day = next((store / "events").rglob("*.jsonl"))
    writer = subprocess.Popen([sys.executable, "-c", _WRITE_THAT_FAILS, str(day)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "written\n"
        head = log(root)
        assert autocommit.commit(store) is None  # waited for the write: nothing of it
        assert log(root) == head
    finally:
        writer.wait()


def test_autocommit_never_commits_half_a_batch_a_crash_cut_short(root: Path) -> None:
    """A batch across day files killed after its first file: autocommit committed that
    half (never answered), and the next write cut it out from under HEAD."""
    from tests.test_recovery import A_BATCH, stopped_in_batch

    store = root / "memory"
    record(store, "one")
    assert autocommit.commit(store) is not None
    writer = stopped_in_batch(store, A_BATCH)
    writer.kill()
    writer.wait()
    head = log(root)
    assert autocommit.commit(store) is None  # its lines cut back: nothing to commit
    assert log(root) == head
    assert "never answered" not in git(root, "log", "-p")


def test_autocommit_takes_a_record_file_a_write_puts_in_place_while_it_runs(
        root: Path) -> None:
    """A decision's file is staged (`.tmp-`), its event line appended, then the file put
    in place: an autocommit reading the day file in between waits for the write, and
    commits the line with its file, holding nothing back (it held the day file back,
    calling the decision lost)."""
    import threading

    store = root / "memory"
    first = record(store, "one")
    with Memory(Config(store=store)) as memory:
        decided = memory.decide("Deploy on Fridays", [first]).content["decision_id"]
    target = store / "decisions" / f"{decided}.md"
    staged = target.with_name(f".tmp-{target.name}.x1y2z3")
    target.rename(staged)
    timer = threading.Timer(0.2, staged.rename, [target])
    timer.start()
    try:
        result = autocommit.commit(store)
    finally:
        timer.join()
    assert result is not None and result.held_back == {}
    assert f"memory/decisions/{decided}.md" in git(root, "show", "--name-only", "--format=",
                                                   "HEAD").split()
    assert git(root, "status", "--porcelain", "--", "memory") == ""


def test_a_task_updated_while_autocommit_runs_holds_nothing_back(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The task file was read after the day files: an update between them left it citing
    a line the commit did not hold, and the whole day file was held back, with warnings
    to restore files that were fine. The task file is now read with the day files."""
    store = root / "memory"
    with Memory(Config(store=store)) as memory:
        task = memory.task("Busy task").content["task_id"]
    record(store, "hello")
    real = autocommit._snapshot

    def snapshot_then_update(*args: object, **kwargs: object) -> object:
        found = real(*args, **kwargs)  # type: ignore[arg-type]
        with Memory(Config(store=store)) as writer:  # another writer, at this moment
            writer.task(None, task_id=task, status="doing")
        return found

    monkeypatch.setattr(autocommit, "_snapshot", snapshot_then_update)
    result = autocommit.commit(store)
    assert result is not None and result.sha is not None and result.held_back == {}
    committed = git(root, "show", f"HEAD:memory/tasks/{task}.md")
    assert "status: open" in committed  # as the day file read held it; the update waits
    monkeypatch.setattr(autocommit, "_snapshot", real)
    later = autocommit.commit(store)
    assert later is not None and later.held_back == {}
    assert "status: doing" in git(root, "show", f"HEAD:memory/tasks/{task}.md")
    assert git(root, "status", "--porcelain", "--", "memory") == ""


def test_autocommit_starts_the_history_of_a_fresh_repository(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    store = init_store(root).store
    record(store, "first words")
    result = autocommit.commit(store)
    assert result is not None
    assert git(root, "rev-list", "--count", "HEAD").strip() == "1"
    files = git(root, "show", "--name-only", "--format=", "HEAD").split()
    assert all(f.startswith("memory/events/") or f.endswith(".gitkeep") for f in files)


def test_autocommit_waits_out_a_merge_with_conflicts(root: Path) -> None:
    (root / "shared.txt").write_text("base\n")
    git(root, "add", "shared.txt")
    git(root, "commit", "-q", "-m", "shared")
    git(root, "checkout", "-q", "-b", "other")
    (root / "shared.txt").write_text("theirs\n")
    git(root, "commit", "-q", "-am", "theirs")
    git(root, "checkout", "-q", "-")
    (root / "shared.txt").write_text("ours\n")
    git(root, "commit", "-q", "-am", "ours")
    record(root / "memory", "recorded during the merge")
    head = git(root, "rev-parse", "HEAD")
    merge = git_may_fail(root, "merge", "other")
    assert merge != 0
    with pytest.raises(GitError, match="a merge is in progress"):
        autocommit.commit(root / "memory")
    assert git(root, "rev-parse", "HEAD") == head


def test_autocommit_never_on_a_rebase_or_a_detached_head(root: Path) -> None:
    store = root / "memory"
    record(store, "x")
    (Path(git(root, "rev-parse", "--absolute-git-dir").strip()) / "rebase-merge").mkdir()
    with pytest.raises(GitError, match="rebase"):
        autocommit.commit(store)
    (Path(git(root, "rev-parse", "--absolute-git-dir").strip()) / "rebase-merge").rmdir()
    git(root, "checkout", "-q", "--detach")
    with pytest.raises(GitError, match="detached"):
        autocommit.commit(store)


def test_autocommit_outside_git_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="not inside a git repository"):
        autocommit.commit(tmp_path)


def git_may_fail(root: Path, *args: str) -> int:
    import subprocess

    return subprocess.run(["git", *args], cwd=root, capture_output=True,
                          env={"GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@x",
                               "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@x",
                               "PATH": "/usr/bin:/bin"}).returncode


@pytest.fixture
def daemon_root(dsn: str, schema: str) -> Iterator[Config]:
    with short_store(dsn, schema, "gmc") as config:
        yield config


def test_the_daemon_commits_in_batches_and_on_stop(daemon_root: Config) -> None:
    root = daemon_root.root
    with running(daemon_root, "--autocommit", "--commit-max-events", "5",
                 "--commit-interval", "60") as daemon:
        with daemon.client() as client:
            for n in range(5):
                client.call("record_event", {"session_id": "auto",
                                             "content": {"text": f"batch {n}"}})
        deadline = time.monotonic() + 10
        while len(log(root)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert log(root)[0].startswith("gitmem: 5 events in 1 session")
        daemon.call("record_event", {"session_id": "auto", "content": {"text": "one more"}})
        time.sleep(0.5)
        assert len(log(root)) == 2  # below the batch size and the interval: it waits
        state = daemon.call("daemon_status")["autocommit"]
        assert state["commits"] == 1 and state["uncommitted_changes"]
    assert log(root)[0].startswith("gitmem: 1 event in 1 session")  # committed on stop
    assert git(root, "status", "--porcelain", "--", "memory/events") == ""
    assert git(root, "log", "--merges", "--format=%H") == ""


def test_the_daemon_commits_once_the_interval_has_passed(daemon_root: Config) -> None:
    root = daemon_root.root
    with running(daemon_root, "--autocommit", "--commit-max-events", "1000",
                 "--commit-interval", "1.5") as daemon:
        daemon.call("record_event", {"session_id": "tick", "content": {"text": "one"}})
        recorded = time.monotonic()
        time.sleep(0.5)
        assert len(log(root)) == 1  # one event of a thousand, half the interval: it waits
        deadline = recorded + 10
        while len(log(root)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert time.monotonic() - recorded >= 1.5
        assert log(root)[0] == "gitmem: 1 event in 1 session"
        # the commit is in the log a moment before the committer counts it
        wait_for(lambda: daemon.call("daemon_status")["autocommit"]["commits"] == 1)
        assert git(root, "status", "--porcelain", "--", "memory/events") == ""


def test_the_daemon_commits_what_was_written_before_it_started(daemon_root: Config) -> None:
    root, store = daemon_root.root, daemon_root.store
    record(store, "written while no daemon runs")
    assert git(root, "status", "--porcelain", "--", "memory/events").startswith("??")
    with running(daemon_root, "--autocommit", "--commit-interval", "60") as daemon:
        wait_for(lambda: daemon.call("daemon_status")["autocommit"]["uncommitted_changes"])
        assert len(log(root)) == 1  # the interval has not passed
    assert log(root)[0] == "gitmem: 1 event in 1 session"  # committed on stop
    assert git(root, "status", "--porcelain", "--", "memory/events") == ""
    record(store, "and once more")
    with running(daemon_root, "--autocommit", "--commit-interval", "0.2") as daemon:
        wait_for(lambda: daemon.call("daemon_status")["autocommit"]["commits"] == 1)
        assert git(root, "status", "--porcelain", "--", "memory/events") == ""


def test_the_daemon_never_commits_what_the_pre_commit_hook_refuses(daemon_root: Config) -> None:
    from tests.daemons import append, event_line

    root, store = daemon_root.root, daemon_root.store
    rewritten = store / "events/2026-03/2026-03-01.jsonl"
    secret = store / "events/2026-03/2026-03-02.jsonl"
    deleted = store / "events/2026-03/2026-03-03.jsonl"
    append(rewritten, event_line("s", "deploy runs in Frankfurt", number=1)[1])
    append(deleted, event_line("s", "keep me", ts="2026-03-03T10:00:00+00:00", number=2)[1])
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "events")
    committed = git(root, "show", "HEAD:memory/events/2026-03/2026-03-01.jsonl")
    with running(daemon_root, "--autocommit", "--commit-interval", "0.3") as daemon:
        rewritten.write_text(rewritten.read_text().replace("Frankfurt", "Paris"))
        append(secret, event_line("s", "aws key AKIAIOSFODNN7EXAMPLE",
                                  ts="2026-03-02T10:00:00+00:00", number=3)[1])
        deleted.unlink()
        daemon.call("record_event", {"session_id": "clean", "content": {"text": "fine"}})
        deadline = time.monotonic() + 10
        while len(log(root)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert log(root)[0] == "gitmem: 1 event in 1 session"  # the clean event only
        time.sleep(1.2)  # a few more rounds: the problems are logged once each
        state = daemon.call("daemon_status")["autocommit"]
        status = daemon.cli("daemon", "status").stdout
        daemon_log = daemon.log()
    assert len(log(root)) == 3  # nor on stop
    assert git(root, "show", "HEAD:memory/events/2026-03/2026-03-01.jsonl") == committed
    assert "2026-03-03.jsonl" in git(root, "ls-tree", "-r", "--name-only", "HEAD")
    assert "2026-03-02.jsonl" not in git(root, "ls-tree", "-r", "--name-only", "HEAD")
    held = state["held_back"]
    assert sorted(held) == [f"memory/events/2026-03/2026-03-0{n}.jsonl" for n in (1, 2, 3)]
    assert "append-only, but this line differs" in held[
        "memory/events/2026-03/2026-03-01.jsonl"][0]
    assert "secrets are never stored" in held["memory/events/2026-03/2026-03-02.jsonl"][0]
    assert "this one is deleted" in held["memory/events/2026-03/2026-03-03.jsonl"][0]
    assert "not committed: memory/events/2026-03/2026-03-02.jsonl:1: matches the redaction" \
        in status
    assert daemon_log.count("secrets are never stored") == 1
    assert daemon_log.count("this one is deleted") == 1


def test_autocommit_waits_for_a_persons_git_commit_running_its_hooks(
        daemon_root: Config) -> None:
    import subprocess

    from gitmem.hooks import install

    root = daemon_root.root
    install(daemon_root.store)
    slow = root / ".git" / "hooks" / "pre-commit.pre-gitmem"  # a slow linter, chained
    slow.write_text("#!/bin/sh\nsleep 2\n")
    slow.chmod(0o755)
    (root / "work.txt").write_text("a person's work\n")
    git(root, "add", "work.txt")
    env = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@x",
           "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@x"}
    env.pop("GITMEM_STORE", None)
    with running(daemon_root, "--autocommit", "--commit-interval", "0.2") as daemon:
        user = subprocess.Popen(["git", "commit", "-q", "-m", "user commit"], cwd=root,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        time.sleep(0.3)
        daemon.call("record_event", {"session_id": "s", "content": {"text": "meanwhile"}})
        _, stderr = user.communicate(timeout=60)
        assert user.returncode == 0, stderr
        deadline = time.monotonic() + 10
        while len(log(root)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "a `git commit` is running its hooks" in daemon.log()
    assert log(root) == ["gitmem: 1 event in 1 session", "user commit", "init"]
    assert not (root / ".git" / gitops.COMMIT_MARKER).exists()  # post-commit cleared it


def test_a_commit_marker_of_a_commit_that_died_is_ignored(root: Path) -> None:
    git_dir = root / ".git"
    gitops.mark_commit(git_dir, 999_999_999)  # no such process
    assert gitops.commit_in_progress(git_dir) is not None  # fresh: honoured anyway
    later = time.time() + gitops.COMMIT_MARKER_FRESH_S + 1
    assert gitops.commit_in_progress(git_dir, now=later) is None
    gitops.mark_commit(git_dir, os.getpid())  # the committing process still runs
    assert gitops.commit_in_progress(git_dir, now=later) is not None
    assert gitops.commit_in_progress(
        git_dir, now=time.time() + gitops.COMMIT_MARKER_MAX_S + 1) is None
