"""Commits around pre-commit, through real git runs: which ones post-commit checks after
the fact (those pre-commit did not check) and what it prints; an amend pre-commit
cannot tell from a new commit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gitmem.hooks import install
from tests.daemons import append, event_line, new_repo
from tests.test_hooks import DAY, commit, run_git


@pytest.fixture
def root(tmp_path: Path) -> Path:
    repo = new_repo(tmp_path / "repo")
    install(repo / "memory")
    return repo


def test_a_clean_commit_without_pre_commit_prints_nothing(root: Path) -> None:
    """`git diff-tree` prints the commit's id unless told not to: a --no-verify commit,
    a cherry-pick or a rebase's pick of the store printed a stray 40-character id."""
    _, said = event_line("s", "said once", number=1)
    append(root / DAY, said)
    run_git(root, "add", "-A")
    result = run_git(root, "commit", "-q", "--no-verify", "-m", "append")
    assert result.returncode == 0, result.stderr
    assert (result.stdout, result.stderr) == ("", "")
    _, more = event_line("s", "said twice", number=2)
    append(root / DAY, more)
    assert commit(root, "more").returncode == 0
    picked = run_git(root, "rev-parse", "HEAD").stdout.strip()
    run_git(root, "checkout", "-q", "-b", "other", "HEAD^")
    result = run_git(root, "cherry-pick", picked)
    assert result.returncode == 0, result.stderr
    assert picked not in result.stdout and result.stderr == ""


def test_a_mark_left_by_an_aborted_commit_does_not_vouch_for_the_next(root: Path) -> None:
    """pre-commit passes, then a commit-msg hook refuses the commit: the mark stays.
    The next commit, made with --no-verify and rewriting a committed line, is still
    checked after the fact: the mark notes the tree pre-commit checked, not this one."""
    _, good = event_line("s", "good line", number=1)
    append(root / DAY, good)
    assert commit(root, "init").returncode == 0
    msg_hook = root / ".git" / "hooks" / "commit-msg"
    msg_hook.write_text('#!/bin/sh\ngrep -q JIRA- "$1" || { echo "need a JIRA- id"; exit 1; }\n')
    msg_hook.chmod(0o755)
    _, another = event_line("s", "another", number=2)
    append(root / DAY, another)
    refused = commit(root, "no ticket")
    assert refused.returncode == 1 and "need a JIRA- id" in refused.stdout + refused.stderr
    assert (root / ".git" / "gitmem-commit-in-progress").exists()  # left behind
    (root / DAY).write_text((root / DAY).read_text().replace("good line", "EDITED line"))
    result = run_git(root, "commit", "-q", "--no-verify", "-am", "JIRA-1 rewrite")
    assert result.returncode == 0
    assert f"{DAY}:1: events files are append-only" in result.stderr, result.stderr
    assert "made without the pre-commit check" in result.stderr
    assert not (root / ".git" / "gitmem-commit-in-progress").exists()


def test_post_commit_run_by_hand_trusts_only_a_note_of_this_commit(root: Path) -> None:
    """The pre-commit framework runs `gitmem hook post-commit` (no shell shim): the mark
    vouches for HEAD only when it notes HEAD's tree on HEAD's parent."""
    _, good = event_line("s", "good line", number=1)
    append(root / DAY, good)
    assert commit(root, "init").returncode == 0
    (root / DAY).write_text((root / DAY).read_text().replace("good line", "EDITED line"))
    (root / ".git" / "hooks" / "post-commit").unlink()
    assert run_git(root, "commit", "-q", "--no-verify", "-am", "rewrite").returncode == 0
    head = run_git(root, "rev-parse", "HEAD^{tree}", "HEAD^1").stdout.split()
    marker = root / ".git" / "gitmem-commit-in-progress"
    for noted, warned in ((f"{head[0]} {head[1]}", False), (f"{head[1]} {head[1]}", True),
                          (f"{head[0]} none", True), ("", True)):
        marker.write_text(f"123\n{noted}\n")
        result = subprocess.run([sys.executable, "-m", "gitmem", "hook", "post-commit"],
                                cwd=root, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert ("events files are append-only" in result.stderr) is warned, (noted,
                                                                             result.stderr)
        assert not marker.exists()


def test_an_amend_dropping_a_line_head_added_is_told_the_way_that_works(root: Path) -> None:
    """pre-commit checks an amend against HEAD, the commit it replaces: dropping a line
    that commit added looks like dropping a committed line. The refusal says that `git
    reset --soft HEAD^` and a commit do it, and that way is accepted."""
    _, first = event_line("s", "first", number=1)
    append(root / DAY, first)
    assert commit(root, "first").returncode == 0
    _, second = event_line("s", "second, a mistake", number=2)
    append(root / DAY, second)
    assert commit(root, "second").returncode == 0
    (root / DAY).write_text(first)
    (root / "notes.txt").write_text("why the second line went\n")
    run_git(root, "add", "-A")
    amend = run_git(root, "commit", "-q", "--amend", "-m", "notes instead")
    assert amend.returncode == 1
    assert (f"{DAY}:2: events files are append-only, but line 2 of HEAD's version is gone"
            in amend.stderr), amend.stderr
    assert ("came with HEAD itself: if this is `git commit --amend`, run `git reset --soft "
            "HEAD^` and commit instead") in amend.stderr
    assert run_git(root, "reset", "-q", "--soft", "HEAD^").returncode == 0
    redone = run_git(root, "commit", "-q", "-m", "notes instead")
    assert redone.returncode == 0, redone.stderr
    (root / DAY).write_text("")  # a line an older commit added: no such way
    dropped = commit(root, "drop")
    assert dropped.returncode == 1 and "events files are append-only" in dropped.stderr
    assert "--amend" not in dropped.stderr


def test_a_committed_link_in_the_store_is_named_as_a_link(root: Path, tmp_path: Path) -> None:
    """git holds a link as its target's path (mode 120000): pre-commit said of a link to
    a folder within a record folder "gitmem never reads this file: it is not named ...",
    and let events/ itself made a link, or a view file that is one, be committed."""
    outside = tmp_path / "outside"
    (outside / "2026-01").mkdir(parents=True)
    (outside / "view.md").write_text("# A view kept outside\n")
    store = root / "memory"
    (store / "decisions").rename(outside / "decisions")
    (store / "decisions").symlink_to(outside / "decisions", target_is_directory=True)
    (store / "events" / "2026-01").symlink_to(outside / "2026-01", target_is_directory=True)
    (store / "views" / "outside.md").symlink_to(outside / "view.md")
    result = commit(root, "links")
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in output, output
    for rel, target in (("decisions", outside / "decisions"),
                        ("events/2026-01", outside / "2026-01")):
        assert (f"memory/{rel}: a symbolic link to a folder ({target}): gitmem never enters "
                "it and git keeps only the link, so none of its files is read, versioned or "
                "reviewed; take the link out of the commit (`git rm --cached "
                f"memory/{rel}`), then move the files into the store in its place, or "
                "remove the link") in output
    assert (f"memory/views/outside.md: a symbolic link ({outside / 'view.md'}), not a file: "
            "git keeps only where it points, so the file itself is not versioned or "
            "reviewed; take the link out of the commit (`git rm --cached "
            "memory/views/outside.md`), then put the file itself in its place, or remove "
            "the link") in output
    assert "never reads this file" not in output and "3 problem(s)" in output


def test_policies_made_a_link_is_named_not_called_missing(root: Path, tmp_path: Path) -> None:
    """A commit of memory/policies made a link to a folder was refused with "missing; run
    `gitmem init`" for each policy file (wrong advice; the link never named), and a
    manifest that is a link is named as one too."""
    outside = tmp_path / "outside"
    outside.mkdir()
    store = root / "memory"
    (store / "policies").rename(outside / "policies")
    (store / "policies").symlink_to(outside / "policies", target_is_directory=True)
    (store / "manifest.json").rename(outside / "manifest.json")
    (store / "manifest.json").symlink_to(outside / "manifest.json")
    result = commit(root, "links")
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in output, output
    assert (f"memory/policies: a symbolic link ({outside / 'policies'}) in place of the "
            "policies folder: git keeps only the link, so no policy file is versioned or "
            "reviewed; take the link out of the commit (`git rm --cached memory/policies`)"
            ) in output
    assert (f"memory/manifest.json: a symbolic link ({outside / 'manifest.json'}), not a "
            "file") in output
    assert "missing" not in output and "2 problem(s)" in output, output
