"""The post-commit hook through real `git commit` runs: which commits it checks after the
fact (those pre-commit did not see) and what it prints."""

from __future__ import annotations

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
