"""What an autocommit killed part-way leaves (a stale git index, a temporary directory),
made by really killing a process in the middle of one, and putting it right."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitmem import autocommit, gitops
from gitmem.config import Config
from gitmem.daemon import running_pid
from gitmem.memory import Memory
from gitmem.policies import load_policies
from gitmem.verify import verify_staged
from tests.conftest import git
from tests.daemons import Daemon, new_repo, short_store, wait_for

_SHIM = """#!/bin/sh
# git, but when {flag} exists, sleep in the subcommand it names (the pid of the caller
# is written to {hit} first): a window for a test to kill the caller there.
if [ -e {flag} ]; then
  for a in "$@"; do
    if [ "$a" = "$(cat {flag})" ]; then echo $PPID > {hit}; sleep 30; break; fi
  done
fi
exec {git} "$@"
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return new_repo(tmp_path / "repo")


def record(store: Path, text: str) -> None:
    with Memory(Config(store=store)) as memory:
        memory.record({"session_id": "s1", "content": {"text": text}})


def slow_git(tmp: Path) -> tuple[dict[str, str], Path, Path]:
    """An environment whose `git` stalls in the subcommand written to the flag file; the
    flag file, and the file the stalled git writes its caller's pid to."""
    shim = tmp / "slowgit"
    shim.mkdir(exist_ok=True)
    flag, hit = shim / "ENABLE", shim / "HIT"
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True,
                          check=True).stdout.strip()
    (shim / "git").write_text(_SHIM.format(flag=flag, hit=hit, git=real))
    (shim / "git").chmod(0o755)
    return {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}, flag, hit


def autocommit_killed_in(store: Path, tmp: Path, subcommand: str) -> None:
    """Run an autocommit in a process of its own and kill -9 it inside `git SUBCOMMAND`."""
    env, flag, hit = slow_git(tmp)
    flag.write_text(subcommand)
    code = ("import sys; from pathlib import Path; from gitmem import autocommit; "
            "autocommit.commit(Path(sys.argv[1]))")
    proc = subprocess.Popen([sys.executable, "-c", code, str(store)], env=env,
                            start_new_session=True)
    try:
        wait_for(hit.exists, timeout=20)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # and the stalled git with it
        proc.wait()
        flag.unlink()


def day_file(store: Path) -> str:
    return git(store.parent, "ls-files", "--others", "--modified", "memory/events").strip() \
        or git(store.parent, "ls-files", "memory/events").split()[-1]


def test_an_index_a_killed_autocommit_left_behind_is_put_right(root: Path,
                                                               tmp_path: Path) -> None:
    store = root / "memory"
    (root / "README.md").write_text("a person's staged work\n")
    git(root, "add", "README.md")
    record(store, "first fact")
    path = day_file(store)
    autocommit_killed_in(store, tmp_path, "reset")  # after update-ref, before the index
    assert git(root, "log", "-1", "--format=%B").rstrip().endswith(
        "Committed by the gitmem daemon (autocommit of the memory store).")
    staged = git(root, "diff", "--cached", "--name-status").split()
    assert staged[-2:] == ["D", path]  # the crash: the new day file staged as deleted
    record(store, "second fact, after the crash")
    on_disk = (root / path).read_bytes()
    assert autocommit.recover(store) == [path]  # put right; the appended line waits
    assert git(root, "diff", "--cached", "--name-status").split() == staged[:-2]
    assert "README.md" in staged
    assert (root / path).read_bytes() == on_disk


def test_autocommit_puts_a_stale_index_right_with_nothing_new_to_commit(
        root: Path, tmp_path: Path) -> None:
    store = root / "memory"
    record(store, "first fact")
    assert autocommit.commit(store) is not None
    record(store, "second fact")
    path = day_file(store)
    autocommit_killed_in(store, tmp_path, "reset")
    assert git(root, "diff", "--cached", "--name-only").split() == [path]  # lines "gone"
    assert autocommit.commit(store) is None  # nothing to commit, and yet:
    assert git(root, "diff", "--cached", "--name-only") == ""
    assert git(root, "status", "--porcelain") == ""


def test_a_persons_staged_edit_of_an_autocommitted_file_stays_staged(root: Path) -> None:
    store = root / "memory"
    with Memory(Config(store=store)) as memory:
        first = memory.record({"session_id": "s1", "content": {"text": "we ship"}}).id
        memory.decide("Deploy on Fridays", [first], title="Friday deploys", session_id="s1")
    assert autocommit.commit(store) is not None
    rel = next(p for p in git(root, "ls-files", "memory/decisions").split()
               if p.endswith(".md"))
    edited = root / rel
    edited.write_text(edited.read_text() + "\nA person's note.\n")
    git(root, "add", rel)
    assert autocommit.recover(store) == [rel]
    assert git(root, "diff", "--cached", "--name-only").split() == [rel]


def test_a_persons_git_rm_cached_of_a_day_file_just_autocommitted_stays_staged(
        root: Path) -> None:
    store = root / "memory"
    record(store, "first fact")
    path = day_file(store)
    assert autocommit.commit(store) is not None
    git(root, "rm", "-q", "--cached", path)  # what a crash also leaves, but done by hand
    staged = git(root, "diff", "--cached", "--name-status").split()
    assert staged == ["D", path]
    assert not list((root / ".git").glob("gitmem-commit-*"))  # no autocommit died
    assert autocommit.recover(store) == [path]  # untracked in the index now: it waits
    assert autocommit.commit(store) is None  # HEAD holds it as it is on disk
    assert git(root, "diff", "--cached", "--name-status").split() == staged


def test_a_killed_autocommits_note_names_the_paths_it_was_committing(
        root: Path, tmp_path: Path) -> None:
    store = root / "memory"
    record(store, "first fact")
    path = day_file(store)
    autocommit_killed_in(store, tmp_path, "reset")
    [note] = (root / ".git").glob("gitmem-commit-*/pending")
    assert note.read_bytes().split(b"\0") == [path.encode()]
    assert autocommit.recover(store) == []  # put right: nothing waits
    assert not list((root / ".git").glob("gitmem-commit-*"))  # and the note is gone


@pytest.mark.parametrize("commits_before", [0, 1])
def test_pre_commit_advice_after_a_killed_autocommit_keeps_every_line(
        root: Path, tmp_path: Path, commits_before: int) -> None:
    store = root / "memory"
    record(store, "first fact")
    for _ in range(commits_before):  # then the crash truncates a committed file
        assert autocommit.commit(store) is not None
        record(store, "another fact")
    path = day_file(store)
    autocommit_killed_in(store, tmp_path, "reset")
    record(store, "recorded after the crash")
    problems = [str(p) for p in verify_staged(store, load_policies(store))]
    assert len(problems) == 1, problems
    assert "git checkout" not in problems[0].replace("(not a checkout", "")
    assert f"`git add {path}`" in problems[0]
    assert f"`git reset -q HEAD -- {path}`" in problems[0]
    lines = (root / path).read_bytes()
    git(root, "add", path)  # the advice
    assert verify_staged(store, load_policies(store)) == []
    assert (root / path).read_bytes() == lines and b"recorded after the crash" in lines


def test_pre_commit_still_advises_a_checkout_where_it_loses_nothing(root: Path) -> None:
    store = root / "memory"
    record(store, "first fact")
    assert autocommit.commit(store) is not None
    path = day_file(store)
    git(root, "rm", "-q", path)  # gone from disk too: a checkout loses nothing
    problems = [str(p) for p in verify_staged(store, load_policies(store))]
    assert problems == [f"{path}: events files are append-only, but this one is deleted; "
                        f"restore it with `git checkout HEAD -- {path}`"]


@pytest.fixture
def daemon_root(dsn: str, schema: str) -> Iterator[Config]:
    with short_store(dsn, schema, "gml") as config:
        yield config


def test_a_restarted_daemon_puts_right_the_index_its_killed_autocommit_left(
        daemon_root: Config, tmp_path: Path) -> None:
    root = daemon_root.root
    env, flag, hit = slow_git(tmp_path)
    daemon = Daemon(daemon_root, ("--autocommit", "--commit-interval", "0.1"),
                    env_extra={"PATH": env["PATH"]})
    flag.write_text("reset")
    pid = daemon.start()
    try:
        daemon.call("record_event", {"session_id": "s", "content": {"text": "first fact"}})
        wait_for(hit.exists, timeout=20)
        os.killpg(pid, signal.SIGKILL)  # the daemon, and the stalled git with it
        wait_for(lambda: running_pid(daemon_root) is None, timeout=10)
        flag.unlink()
        path = git(root, "diff", "--cached", "--name-only").strip()
        assert path.startswith("memory/events/")  # staged as deleted: the crash
        daemon.start()
        wait_for(lambda: git(root, "diff", "--cached", "--name-only") == "", timeout=10)
        wait_for(lambda: "an autocommit that died" in daemon.log(), timeout=10)  # said after
        assert git(root, "status", "--porcelain") == ""
    finally:
        if running_pid(daemon_root) is not None:
            daemon.stop()


def test_the_temporary_directory_of_a_killed_autocommit_is_removed(root: Path,
                                                                   tmp_path: Path) -> None:
    store = root / "memory"
    git_dir = root / ".git"
    record(store, "first fact")
    autocommit_killed_in(store, tmp_path, "write-tree")
    [left] = git_dir.glob("gitmem-commit-*")
    assert (left / "index").exists()
    _age(left, 5)
    old_style = git_dir / "gitmem-commit-oldstyle"  # an older gitmem's: no lock file
    old_style.mkdir()
    _age(old_style, 7200)
    assert autocommit.commit(store) is not None
    assert list(git_dir.glob("gitmem-commit-*")) == []


def test_the_temporary_directory_of_a_running_autocommit_is_spared(root: Path) -> None:
    from gitmem.leftovers import remove_temporary, temporary_index

    repo = gitops.open_repo(root)
    try:
        with temporary_index(repo) as (_, tmp):
            _age(tmp, 600)
            fresh = root / ".git" / "gitmem-commit-fresh"  # no lock yet, just made
            fresh.mkdir()
            assert remove_temporary(root / ".git") == []
            assert tmp.is_dir() and fresh.is_dir()
        assert not tmp.exists()
    finally:
        repo.close()


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))
