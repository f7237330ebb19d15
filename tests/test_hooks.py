"""Git hooks through real `git commit` / `git checkout` runs: install, chaining,
core.hooksPath, what pre-commit refuses (naming path:line), and the post-* syncs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitmem.config import Config
from gitmem.hooks import CHAINED_SUFFIX, HOOK_NAMES, MARKER, install
from gitmem.memory import Memory
from gitmem.trees import GREP_IDS_MAX
from tests.conftest import git
from tests.daemons import Index, append, event_line, new_repo

DAY = "memory/events/2026-03/2026-03-01.jsonl"


def run_git(root: Path, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    # gitmem on PATH, as where it is installed: hooks shared through a committed
    # core.hooksPath call `gitmem`, not this machine's interpreter
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    full = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.com", "PATH": path,
            **(env or {})}
    full.pop("GITMEM_STORE", None)
    return subprocess.run(["git", *args], cwd=root, env=full, capture_output=True, text=True)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    repo = new_repo(tmp_path / "repo")
    install(repo / "memory")
    return repo


def commit(root: Path, message: str = "change") -> subprocess.CompletedProcess[str]:
    run_git(root, "add", "-A")
    return run_git(root, "commit", "-q", "-m", message)


# --------------------------------------------------------------------------- install

def test_install_writes_executable_hooks_and_is_idempotent(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    first = install(repo / "memory")
    hooks = repo / ".git" / "hooks"
    for name in HOOK_NAMES:
        path = hooks / name
        assert MARKER in path.read_text() and path.stat().st_mode & stat.S_IXUSR
        assert f"gitmem hook {name}" in path.read_text()
    assert all(m.endswith("installed") for m in first)
    again = install(repo / "memory")
    assert all(m.endswith("up to date") for m in again)


def test_uninstall_puts_back_the_hooks_install_kept(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    old = repo / ".git" / "hooks" / "pre-commit"
    old.write_text("#!/bin/sh\nexit 0\n")
    old.chmod(0o755)
    install(repo / "memory")
    assert MARKER in old.read_text()
    messages = _gitmem(repo, "hooks", "uninstall", env={})
    assert messages.returncode == 0, messages.stderr
    assert old.read_text() == "#!/bin/sh\nexit 0\n"  # the hook that was there, as it was
    assert not (repo / ".git" / "hooks" / f"pre-commit{CHAINED_SUFFIX}").exists()
    assert not any((repo / ".git" / "hooks" / name).exists()
                   for name in HOOK_NAMES if name != "pre-commit")
    assert run_git(repo, "config", "--get-all", "gitmem.store").stdout == ""
    again = _gitmem(repo, "hooks", "uninstall", env={})
    assert again.returncode == 0 and "no gitmem hook to remove" in again.stderr


def install_elsewhere(tmp_path: Path) -> str:
    """The pre-commit hook `install` writes into a clone's own .git/hooks."""
    repo = new_repo(tmp_path / "own")
    install(repo / "memory")
    return (repo / ".git" / "hooks" / "pre-commit").read_text()


def test_install_honours_core_hooks_path_and_chains_existing_hooks(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    git(repo, "config", "core.hooksPath", ".githooks")
    (repo / ".githooks").mkdir()
    old = repo / ".githooks" / "pre-commit"
    old.write_text('#!/bin/sh\necho "old hook ran" >> "$(git rev-parse --show-toplevel)'
                   '/old-hook.log"\n')
    old.chmod(0o755)
    messages = install(repo / "memory")
    assert any("kept the existing hook" in m for m in messages)
    assert (repo / ".githooks" / f"pre-commit{CHAINED_SUFFIX}").is_file()
    assert MARKER in old.read_text()
    assert sys.executable not in old.read_text()  # committed for the team: no local path
    assert sys.executable in install_elsewhere(tmp_path)
    assert not (repo / ".git" / "hooks" / "post-merge").exists()
    install(repo / "memory")  # idempotent: the chained hook is not wrapped twice
    assert not (repo / ".githooks" / f"pre-commit{CHAINED_SUFFIX}{CHAINED_SUFFIX}").exists()
    with Memory(Config(store=repo / "memory")) as memory:
        memory.record({"content": {"text": "hello"}})
    assert commit(repo).returncode == 0
    assert (repo / "old-hook.log").read_text() == "old hook ran\n"
    old.with_name(f"pre-commit{CHAINED_SUFFIX}").write_text("#!/bin/sh\nexit 1\n")
    (repo / "x.txt").write_text("x")
    assert commit(repo).returncode == 1  # a failing old hook still stops the commit


def test_gitmem_init_installs_the_hooks(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "gitmem", "init", str(tmp_path / "new")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert MARKER in (tmp_path / "new" / ".git" / "hooks" / "pre-commit").read_text()


# --------------------------------------------------------------------------- pre-commit

def record(root: Path, text: str, **fields: object) -> str:
    with Memory(Config(store=root / "memory")) as memory:
        return memory.record({"content": {"text": text}, "ts": "2026-03-01T09:00:00+00:00",
                              **fields}).id


def test_pre_commit_accepts_a_pure_append(root: Path) -> None:
    record(root, "first")
    assert commit(root).returncode == 0
    record(root, "second")
    result = commit(root)
    assert result.returncode == 0, result.stderr


def test_pre_commit_refuses_an_edited_event_line(root: Path) -> None:
    record(root, "what was said")
    record(root, "and then this")
    assert commit(root).returncode == 0
    path = root / DAY
    path.write_text(path.read_text().replace("and then this", "and then that"))
    result = commit(root)
    assert result.returncode == 1
    assert f"{DAY}:2: events files are append-only" in result.stderr
    assert "git commit --no-verify" in result.stderr


def test_pre_commit_refuses_a_new_line_repeating_a_committed_id_with_other_content(
        root: Path) -> None:
    """The index keeps an id's first line; a later one with other content would be left
    out of it. Only the committed lines holding the id are read again."""
    record(root, "before")
    event_id, said = event_line("s", "said once", number=1)
    append(root / DAY, said)
    assert commit(root).returncode == 0
    _, retried = event_line("s", "said once", number=1)  # the same event again: harmless
    append(root / DAY, retried)
    assert commit(root).returncode == 0
    _, other = event_line("s", "said otherwise", number=1)
    append(root / DAY, other)
    result = commit(root)
    assert result.returncode == 1
    assert (f"{DAY}:4: field 'id': {event_id} is also {DAY}:2 with other content; ids "
            "never repeat") in result.stderr


@pytest.mark.parametrize("count", [3, GREP_IDS_MAX + 4])
def test_pre_commit_finds_committed_ids_pasted_into_another_day_file(root: Path,
                                                                      count: int) -> None:
    """Many new lines (an autocommit after a burst of writes) are looked up in one pass
    over the day files: `git grep -F` with one pattern per id took 26 s for 12,415."""
    lines = [event_line("s", f"said once {n}", number=n) for n in range(1, count + 1)]
    append(root / DAY, "".join(line for _, line in lines))
    assert commit(root).returncode == 0
    other = "memory/events/2026-03/2026-03-02.jsonl"
    append(root / other, "".join(event_line("s", f"said otherwise {n}", number=n)[1]
                                 for n in range(1, count + 1)))
    result = commit(root)
    assert result.returncode == 1
    for n, (event_id, _) in enumerate(lines, start=1):
        assert f"{other}:{n}: field 'id': {event_id} is also {DAY}:{n} with other content" \
            in result.stderr


def test_pre_commit_refuses_invalid_records_naming_path_and_line(root: Path) -> None:
    record(root, "fine")
    _, bad = event_line("s", "wrong channel", number=1, channel="radio")
    append(root / DAY, bad)
    decision = root / "memory" / "decisions" / "dec_01KHBYB0000000000000000009.md"
    decision.write_text("---\nid: dec_01KHBYB0000000000000000009\nts: yesterday\n---\nx\n")
    result = commit(root)
    assert result.returncode == 1
    assert f"{DAY}:2: field 'channel'" in result.stderr
    assert "memory/decisions/dec_01KHBYB0000000000000000009.md:" in result.stderr


def test_pre_commit_refuses_an_impossible_unquoted_date_naming_the_file(root: Path) -> None:
    cited = record(root, "fine")
    rel = "memory/decisions/dec_01KHBYB0000000000000000009.md"
    (root / rel).write_text("---\nid: dec_01KHBYB0000000000000000009\n"
                            f"ts: 2026-02-30T00:00:00Z\nrefs: [{cited}]\n---\nx\n")
    result = commit(root)
    assert result.returncode == 1
    assert f"{rel}:3: field 'ts': '2026-02-30T00:00:00Z' is not a date and time" \
        in result.stderr
    assert "Traceback" not in result.stderr


def test_pre_commit_refuses_dangling_refs_and_supersedes(root: Path) -> None:
    cited = record(root, "the reason")
    with Memory(Config(store=root / "memory")) as memory:
        first = memory.decide("Use Postgres", [cited]).content["decision_id"]
    assert commit(root).returncode == 0
    text = (root / "memory" / "decisions" / f"{first}.md").read_text()
    ghost_dec = "dec_01KHBYB0000000000000000077"
    ghost_evt = "evt_01KHBYB0000000000000000078"
    new = root / "memory" / "decisions" / "dec_01KHBYB0000000000000000079.md"
    new.write_text(text.replace(first, "dec_01KHBYB0000000000000000079")
                   .replace(cited, ghost_evt).replace("refs:", f"supersedes:\n- {ghost_dec}\n"
                                                      "refs:"))
    result = commit(root)
    assert result.returncode == 1
    assert f"{ghost_evt} is not in the store" in result.stderr
    assert f"field 'supersedes': {ghost_dec} is not in the store" in result.stderr


def test_pre_commit_refuses_deleting_a_cited_decision(root: Path) -> None:
    cited = record(root, "because")
    with Memory(Config(store=root / "memory")) as memory:
        decision = memory.decide("Keep it", [cited]).content["decision_id"]
        memory.decide("Keep it better", [cited], supersedes=[decision])
    assert commit(root).returncode == 0
    (root / "memory" / "decisions" / f"{decision}.md").unlink()
    result = commit(root)
    assert result.returncode == 1 and f"cites {decision}, which this commit deletes" in \
        result.stderr


def test_pre_commit_refuses_secrets(root: Path) -> None:
    record(root, "fine")
    assert commit(root).returncode == 0
    _, leaked = event_line("s", "the key is sk-abcdefghijklmnopqrstuvwxyz123456", number=5)
    append(root / DAY, leaked)
    _, secret = event_line("s", "classified", number=6, sensitivity="secret")
    append(root / DAY, secret)
    _, quoted = event_line("s", "fine", number=7, channel="sk-proj1234567890abcdefghijklmnop")
    append(root / DAY, quoted)
    result = commit(root)
    assert result.returncode == 1
    assert f"{DAY}:2: matches the redaction pattern" in result.stderr
    assert "sk-abcdefghij" not in result.stderr  # the secret itself is never echoed
    assert f"{DAY}:3: field 'sensitivity'" in result.stderr
    # nor a value an error quotes (a key pasted into the wrong field)
    assert f"{DAY}:4: field 'channel'" in result.stderr and "[REDACTED]" in result.stderr
    assert "sk-proj1234" not in result.stderr


def test_pre_commit_refuses_a_self_supersede_and_a_loop_it_closes_through_the_tree(
        root: Path) -> None:
    """The staged check reads only the changed files; a loop a staged decision closes is
    followed through the decisions the commit leaves as they are."""
    cited = record(root, "the reason")
    with Memory(Config(store=root / "memory")) as memory:
        ids = [memory.decide("Use Postgres", [cited]).content["decision_id"]]
        for title in ("Use Postgres 16", "Use Postgres 17"):
            ids.append(memory.decide(title, [cited], supersedes=ids[-1:]).content["decision_id"])
        alone = memory.decide("Keep it small", [cited]).content["decision_id"]
    assert commit(root).returncode == 0
    first, middle, last = ids
    decisions = root / "memory" / "decisions"
    for decision, superseded in ((first, last), (alone, alone)):
        path = decisions / f"{decision}.md"
        head, rest = path.read_text().split("\n", 1)
        path.write_text(f"{head}\nsupersedes:\n- {superseded}\n{rest}")
    result = commit(root)
    assert result.returncode == 1
    assert (f"memory/decisions/{alone}.md:2: field 'supersedes': {alone} supersedes itself"
            in result.stderr)
    assert (f"memory/decisions/{first}.md:2: field 'supersedes': {first} is on a loop of "
            f"supersedes ({first} -> {last} -> {middle} -> {first}, each superseding the "
            f"next)") in result.stderr
    assert (f"remove the entry that closes the loop: {last} from the supersedes of "
            f"memory/decisions/{first}.md:2") in result.stderr
    for unchanged in (middle, last):  # on the loop too, though the commit leaves them
        assert f"memory/decisions/{unchanged}.md:" in result.stderr


def test_pre_commit_refuses_a_policy_file_removed_and_names_each_problem_of_one(
        root: Path) -> None:
    """Every command needs the policy files: a commit that deletes one (the work tree
    may still hold it) is refused, and a staged one is checked for all its problems."""
    assert run_git(root, "rm", "-q", "--cached", "memory/policies/channels.yaml").returncode == 0
    result = run_git(root, "commit", "-q", "-m", "drop")
    assert result.returncode == 1
    assert ("memory/policies/channels.yaml: missing; run `gitmem init` to create the "
            "default") in result.stderr
    budgets = root / "memory" / "policies" / "budgets.yaml"
    text = budgets.read_text()
    budgets.write_text(text.replace("alpha: 0.7", "alpha: x").replace("beta: 0.2", "beta: -1"))
    assert run_git(root, "add", "memory/policies").returncode == 0
    budgets.write_text(text)  # staged only: the hook reads the work tree's to run at all
    result = run_git(root, "commit", "-q", "-m", "weights")
    assert result.returncode == 1
    assert "field 'retrieval.weights.alpha'" in result.stderr
    assert "field 'retrieval.weights.beta'" in result.stderr


def test_pre_commit_lists_a_policy_files_problems_beside_every_other(root: Path) -> None:
    """A policy file deleted with the commit, or broken in the work tree (the hook reads
    the store with it), is one problem among the others, each named once, as `gitmem
    verify` lists them (it used to stop at the policy file)."""
    append(root / DAY, event_line("s1", "a good line")[1] + '{"torn": ')
    assert run_git(root, "rm", "-q", "memory/policies/channels.yaml").returncode == 0
    result = commit(root)
    assert result.returncode == 1
    problems = [line.strip() for line in result.stderr.splitlines() if line.startswith("  ")]
    assert problems == [
        f"{DAY}:2: the last line has no newline (a torn write?); finish or remove it",
        "memory/policies/channels.yaml: missing; run `gitmem init` to create the default"]
    assert run_git(root, "checkout", "HEAD", "--", "memory/policies").returncode == 0
    budgets = root / "memory" / "policies" / "budgets.yaml"
    budgets.write_text(budgets.read_text() + "broken: [\n")
    run_git(root, "add", DAY)
    result = run_git(root, "commit", "-q", "-m", "torn")  # budgets.yaml is not staged
    assert result.returncode == 1
    assert f"{DAY}:2: the last line has no newline" in result.stderr
    assert "memory/policies/budgets.yaml:" in result.stderr and "broken YAML" in result.stderr


def test_pre_commit_refuses_a_staged_file_of_an_interrupted_write(root: Path) -> None:
    staged = "memory/decisions/.tmp-evt_01KHBYB0000000000000000009.2026-03-01.dec_x.md.q1"
    (root / staged).write_text("---\nid: dec_x\n---\nhalf a write\n")
    result = commit(root)
    assert result.returncode == 1
    assert f"{staged}: a staging file of a write that did not finish" in result.stderr
    assert "gitmem sync" in result.stderr


def test_pre_commit_ignores_changes_outside_the_store(root: Path) -> None:
    (root / "README.md").write_text("password: hunter2 in docs is not our business\n")
    assert commit(root).returncode == 0
    budgets = root / "memory" / "policies" / "budgets.yaml"
    budgets.write_text(budgets.read_text() + "  bogus: [\n")  # an edit in progress, unstaged
    (root / "README.md").write_text("more docs\n")
    run_git(root, "add", "README.md")
    result = run_git(root, "commit", "-q", "-m", "docs")  # nothing of the store staged
    assert result.returncode == 0, result.stderr


def test_hooks_shared_with_a_clone_without_gitmem_stop_only_what_they_cannot_check(
        tmp_path: Path) -> None:
    """Hooks committed under core.hooksPath run in a teammate's clone where gitmem is not
    installed: every commit failed with only `No module named gitmem`."""
    repo = new_repo(tmp_path / "repo")
    git(repo, "config", "core.hooksPath", ".githooks")
    install(repo / "memory")
    assert commit(repo, "hooks").returncode == 0
    without = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ""}  # no gitmem, no venv
    (repo / "notes.txt").write_text("unrelated work\n")
    run_git(repo, "add", "notes.txt")
    result = run_git(repo, "commit", "-q", "-m", "notes", env=without)
    assert result.returncode == 0, result.stderr
    _, line = event_line("s", "a hand-written line", number=1)
    append(repo / DAY, line)
    run_git(repo, "add", DAY)
    result = run_git(repo, "commit", "-q", "-m", "event", env=without)
    assert result.returncode == 1
    assert "gitmem is not installed here (pip install gitmem)" in result.stderr
    assert "the change staged in memory cannot be checked" in result.stderr
    assert "No module named" not in result.stderr
    git(repo, "config", "--unset-all", "gitmem.store")  # a clone: no store recorded yet
    result = run_git(repo, "commit", "-q", "-m", "event", env=without)
    assert result.returncode == 1 and "cannot be checked" in result.stderr
    run_git(repo, "reset", "-q", "HEAD", "--", DAY)
    result = run_git(repo, "commit", "-q", "--allow-empty", "-m", "nothing", env=without)
    assert result.returncode == 0, result.stderr
    result = run_git(repo, "checkout", "-q", "-b", "other", env=without)
    assert result.returncode == 0
    assert "the index was not brought up to date" in result.stderr


def test_a_revert_or_cherry_pick_that_breaks_the_rules_is_named_after_the_commit(
        root: Path) -> None:
    """git revert and git cherry-pick make their commits without pre-commit; post-commit
    then checks what the commit recorded, and says how to take it back."""
    record(root, "first")
    assert commit(root, "first").returncode == 0
    record(root, "second")
    assert commit(root, "second").returncode == 0
    result = run_git(root, "revert", "--no-edit", "HEAD")
    assert result.returncode == 0  # made: a hook after the commit cannot refuse it
    assert (f"{DAY}:2: events files are append-only, but line 2 of HEAD^1's version is "
            f"gone; restore {DAY} with `git checkout HEAD^1 -- {DAY}`") in result.stderr
    assert "made without the pre-commit check" in result.stderr
    assert "`git reset --soft HEAD^` undoes the commit" in result.stderr
    assert run_git(root, "reset", "-q", "--soft", "HEAD^").returncode == 0  # as advised
    assert run_git(root, "restore", "--staged", "--worktree", ".").returncode == 0
    assert run_git(root, "status", "--porcelain").stdout == ""
    main = run_git(root, "branch", "--show-current").stdout.strip()
    run_git(root, "checkout", "-q", "-b", "other", "HEAD^")
    result = run_git(root, "cherry-pick", main)  # a clean append: nothing to say
    assert result.returncode == 0 and "gitmem" not in result.stderr, result.stderr


def test_a_commit_the_pre_commit_hook_checked_is_not_checked_again(root: Path) -> None:
    _, said = event_line("s", "said once", number=1)
    append(root / DAY, said)
    result = commit(root)
    assert result.returncode == 0 and result.stderr == ""
    _, secret = event_line("s", "classified", number=2, sensitivity="secret")
    append(root / DAY, secret)
    result = run_git(root, "commit", "-q", "-am", "classified", "--no-verify")
    assert result.returncode == 0
    assert f"{DAY}:2: field 'sensitivity'" in result.stderr
    assert not (root / ".git" / "gitmem-commit-in-progress").exists()


def test_a_rebase_checks_the_commits_it_makes_of_the_store(root: Path) -> None:
    """A rebase's picks are new commits: a clean append passes, a rewrite is named."""
    record(root, "first")
    assert commit(root, "first").returncode == 0
    main = run_git(root, "branch", "--show-current").stdout.strip()
    run_git(root, "checkout", "-q", "-b", "side")
    (root / "notes.txt").write_text("side work\n")
    assert commit(root, "side").returncode == 0
    record(root, "side fact", ts="2026-03-02T09:00:00+00:00")
    assert commit(root, "side fact").returncode == 0
    run_git(root, "checkout", "-q", main)
    record(root, "second")
    assert commit(root, "second").returncode == 0
    run_git(root, "checkout", "-q", "side")
    result = run_git(root, "rebase", main)
    assert result.returncode == 0, result.stderr
    assert "gitmem" not in result.stderr
    run_git(root, "checkout", "-q", "-b", "bad", main)
    (root / DAY).write_text("")  # committed lines dropped
    assert run_git(root, "commit", "-q", "-am", "drop", "--no-verify").returncode == 0
    run_git(root, "checkout", "-q", main)
    (root / "other.txt").write_text("main moves on\n")
    assert commit(root, "other").returncode == 0
    run_git(root, "checkout", "-q", "bad")
    result = run_git(root, "rebase", main)  # the drop, replayed: a new commit
    assert result.returncode == 0, result.stderr
    assert f"{DAY}:1: events files are append-only" in result.stderr, result.stderr


def test_a_merge_git_concludes_by_itself_is_checked_before_it_is_made(root: Path) -> None:
    """A merge without conflicts runs pre-merge-commit, not pre-commit."""
    record(root, "first")
    assert commit(root, "first").returncode == 0
    main = run_git(root, "branch", "--show-current").stdout.strip()
    run_git(root, "checkout", "-q", "-b", "rewrite")
    _, line = event_line("s", "rewritten", number=9)
    (root / DAY).write_text(line)
    assert run_git(root, "commit", "-q", "-am", "rewrite", "--no-verify").returncode == 0
    run_git(root, "checkout", "-q", main)
    record(root, "second", ts="2026-03-02T09:00:00+00:00")
    assert commit(root, "second").returncode == 0
    result = run_git(root, "merge", "--no-edit", "rewrite")
    assert result.returncode != 0
    assert f"{DAY}:1: events files are append-only" in result.stderr, result.stderr
    assert "git merge --no-verify" in result.stderr
    run_git(root, "merge", "--abort")
    assert run_git(root, "rev-parse", "-q", "--verify", "MERGE_HEAD").returncode != 0
    run_git(root, "checkout", "-q", "-b", "fine", "HEAD~1")
    record(root, "appended", ts="2026-03-03T09:00:00+00:00")
    assert commit(root, "appended").returncode == 0
    run_git(root, "checkout", "-q", main)
    result = run_git(root, "merge", "--no-edit", "fine")
    assert result.returncode == 0, result.stderr


def test_a_fast_forward_that_takes_lines_out_is_named_after_the_merge(root: Path) -> None:
    """A fast-forward (`git merge`, `git pull`) makes no merge commit, so no pre-merge
    check runs: a branch that dropped a committed line went in without a word, and
    `gitmem verify` said nothing either."""
    record(root, "keep me")
    record(root, "keep me too", ts="2026-03-01T11:00:00+00:00")
    assert commit(root, "both").returncode == 0
    main = run_git(root, "branch", "--show-current").stdout.strip()
    run_git(root, "checkout", "-q", "-b", "teammate")
    lines = (root / DAY).read_text().splitlines(keepends=True)
    (root / DAY).write_text("".join(lines[1:]))
    assert run_git(root, "commit", "-q", "-am", "drop", "--no-verify").returncode == 0
    run_git(root, "checkout", "-q", main)
    result = run_git(root, "merge", "teammate")
    assert result.returncode == 0 and "Fast-forward" in result.stdout
    assert f"{DAY}:1: events files are append-only" in result.stderr, result.stderr
    assert "this merge fast-forwarded" in result.stderr
    assert "`git reset --keep ORIG_HEAD`" in result.stderr
    assert run_git(root, "reset", "-q", "--keep", "ORIG_HEAD").returncode == 0  # as advised
    assert (root / DAY).read_text() == "".join(lines)
    run_git(root, "checkout", "-q", "-b", "appends", main)
    record(root, "an honest append", ts="2026-03-02T09:00:00+00:00")
    assert commit(root, "append").returncode == 0
    run_git(root, "checkout", "-q", main)
    result = run_git(root, "merge", "appends")  # a clean fast-forward: nothing to say
    assert result.returncode == 0 and "gitmem" not in result.stderr, result.stderr
    run_git(root, "checkout", "-q", "-b", "side", main)  # the drop, under a merge commit
    (root / "notes.txt").write_text("side work\n")
    assert commit(root, "side").returncode == 0
    run_git(root, "checkout", "-q", "teammate")
    assert run_git(root, "merge", "-q", "--no-ff", "--no-verify", "--no-edit",
                   "side").returncode == 0
    run_git(root, "checkout", "-q", main)
    result = run_git(root, "merge", "teammate")  # fast-forwards onto that merge commit
    assert result.returncode == 0 and "Fast-forward" in result.stdout
    assert "this merge fast-forwarded" in result.stderr, result.stderr


def test_verify_since_checks_a_branch_against_where_it_left_the_other(
        root: Path, tmp_path: Path) -> None:
    """In CI a checkout's HEAD is the work tree: only `--since` can tell that a pull
    request rewrote a committed line."""
    record(root, "first")
    assert commit(root, "first").returncode == 0
    main = run_git(root, "branch", "--show-current").stdout.strip()
    run_git(root, "checkout", "-q", "-b", "topic")
    _, line = event_line("s", "rewritten", number=9)
    (root / DAY).write_text(line)  # a valid line, in place of the committed one
    assert run_git(root, "commit", "-q", "-am", "rewrite", "--no-verify").returncode == 0
    run_git(root, "checkout", "-q", main)
    record(root, "main moved on")
    assert commit(root, "later").returncode == 0
    run_git(root, "checkout", "-q", "topic")
    env = {"GITMEM_STORE": str(root / "memory")}
    plain = _gitmem(root, "verify", env=env)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    since = _gitmem(root, "verify", "--since", main, env=env)
    assert since.returncode == 1
    assert f"{DAY}:1: events files are append-only" in since.stderr, since.stderr
    fork = run_git(root, "merge-base", main, "HEAD").stdout.strip()
    assert f"git checkout {fork} -- {DAY}" in since.stderr
    assert f"where this branch left {main} (commit {fork[:12]})" in since.stderr
    unknown = _gitmem(root, "verify", "--since", "no-such-branch", env=env)
    assert unknown.returncode == 1
    assert "unknown revision 'no-such-branch'" in unknown.stderr
    assert "origin/main" in unknown.stderr
    shallow = tmp_path / "shallow"  # as a CI checkout fetches a pull request
    assert run_git(tmp_path, "clone", "-q", "--depth", "1", "--branch", "topic",
                   f"file://{root}", str(shallow)).returncode == 0
    assert run_git(shallow, "fetch", "-q", "--depth", "1", "origin",
                   f"{main}:refs/remotes/origin/{main}").returncode == 0
    cut = _gitmem(shallow, "verify", "--since", f"origin/{main}",
                  env={"GITMEM_STORE": str(shallow / "memory")})
    assert cut.returncode == 1 and "shallow clone" in cut.stderr
    assert "git fetch --unshallow" in cut.stderr


def _gitmem(root: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {key: value for key, value in os.environ.items() if key != "GITMEM_STORE"}
    return subprocess.run([sys.executable, "-m", "gitmem", *args], cwd=root,
                          env={**full, **env}, capture_output=True, text=True)


# --------------------------------------------------------------------------- post-* hooks

@pytest.fixture
def indexed(root: Path, dsn: str, schema: str) -> Iterator[tuple[Path, dict[str, str]]]:
    env = {"GITMEM_DSN": dsn, "GITMEM_SCHEMA": schema, "GITMEM_NO_DAEMON": ""}
    with Memory(Config(store=root / "memory", dsn=dsn, schema=schema)) as memory:
        memory.sync()
    yield root, env


def test_post_checkout_and_merge_sync_the_index_without_a_daemon(
        indexed: tuple[Path, dict[str, str]], dsn: str, schema: str) -> None:
    root, env = indexed
    old = record(root, "old fact")
    assert run_git(root, "add", "-A", env=env).returncode == 0
    assert run_git(root, "commit", "-q", "-m", "old", env=env).returncode == 0
    new = record(root, "new fact")
    run_git(root, "add", "-A", env=env)
    assert run_git(root, "commit", "-q", "-m", "new", env=env).returncode == 0
    index = Index(Config(store=root / "memory", dsn=dsn, schema=schema))
    try:
        checkout = run_git(root, "checkout", "-q", "HEAD~1", env=env)
        assert checkout.returncode == 0, checkout.stderr
        assert index.has_event(old) and not index.has_event(new)
        run_git(root, "checkout", "-q", "-", env=env)
        assert index.has_event(new)
    finally:
        index.close()


def test_post_merge_and_post_rewrite_sync_the_index_without_a_daemon(
        indexed: tuple[Path, dict[str, str]], dsn: str, schema: str) -> None:
    root, env = indexed

    def git_ok(*args: str) -> None:
        result = run_git(root, *args, env=env)
        assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"

    main = run_git(root, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip()
    git_ok("checkout", "-q", "-b", "side")
    side = record(root, "a fact from the side branch")
    git_ok("add", "-A")
    git_ok("commit", "-q", "-m", "side")
    git_ok("checkout", "-q", main)
    index = Index(Config(store=root / "memory", dsn=dsn, schema=schema))
    try:
        assert not index.has_event(side)
        git_ok("merge", "-q", "--no-edit", "side")  # only post-merge runs
        assert index.has_event(side)
        git_ok("checkout", "-q", "-b", "topic")
        topic = record(root, "a fact from the topic branch")
        git_ok("add", "-A")
        git_ok("commit", "-q", "-m", "topic")
        git_ok("checkout", "-q", main)
        ours = record(root, "a fact from main meanwhile")
        git_ok("add", "-A")
        git_ok("commit", "-q", "-m", "main")
        git_ok("checkout", "-q", "topic")
        assert index.has_event(topic) and not index.has_event(ours)
        (root / ".git" / "hooks" / "post-checkout").unlink()  # so only post-rewrite can sync
        git_ok("rebase", "-q", main)  # the same day file on both sides: union, no conflict
        assert index.has_event(topic) and index.has_event(ours)
        assert index.scalar("SELECT count(*) FROM events") == len(
            (root / DAY).read_text().splitlines())
    finally:
        index.close()


def test_post_checkout_with_the_database_down_only_warns(root: Path) -> None:
    env = {"GITMEM_DSN": "postgresql://nobody@127.0.0.1:1/none", "GITMEM_SCHEMA": "t_down"}
    record(root, "x")
    run_git(root, "add", "-A")
    assert run_git(root, "commit", "-q", "-m", "x", env=env).returncode == 0
    result = run_git(root, "checkout", "-q", "HEAD~1", env=env)
    assert result.returncode == 0
    assert "gitmem: the index was not updated" in result.stderr


def test_hooks_never_block_git_in_a_repository_without_a_store(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    install(repo / "memory")
    run_git(repo, "rm", "-r", "-q", "memory")
    result = commit(repo, "drop the store")
    assert result.returncode == 0, result.stderr
    assert "gitmem pre-commit hook skipped: no memory/ store" in result.stderr


def test_hook_command_rejects_unknown_names(root: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "gitmem", "hook", "pre-push"], cwd=root,
                            capture_output=True, text=True)
    assert result.returncode == 1 and "unknown hook 'pre-push'" in result.stderr


def test_pre_commit_framework_manifest_lists_the_hooks() -> None:
    import yaml

    manifest = yaml.safe_load((Path(__file__).parent.parent / ".pre-commit-hooks.yaml")
                              .read_text())
    ids = {hook["id"]: hook for hook in manifest}
    assert ids["gitmem-verify"]["entry"] == "gitmem hook pre-commit"
    assert ids["gitmem-verify-merge"]["stages"] == ["pre-merge-commit"]
    assert "post-checkout" in ids["gitmem-sync"]["stages"]
    assert ids["gitmem-committed"]["entry"] == "gitmem hook post-commit"
    assert ids["gitmem-committed"]["stages"] == ["post-commit"]
    for name in HOOK_NAMES:
        shim = (Path(__file__).parent.parent / "hooks" / name).read_text()
        assert shim.startswith("#!/bin/sh") and f'exec gitmem hook {name} "$@"' in shim
    assert json.dumps(manifest)


# --------------------------------------------------------------------------- store in a subdir

def test_hooks_find_a_store_in_a_subdirectory_of_the_repository(
        tmp_path: Path, dsn: str, schema: str) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README").write_text("x\n")
    assert commit(root, "init").returncode == 0
    result = subprocess.run([sys.executable, "-m", "gitmem", "init", "proj"], cwd=root,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert git(root, "config", "--get-all", "gitmem.store").split() == ["proj/memory"]
    store = root / "proj" / "memory"
    env = {"GITMEM_DSN": dsn, "GITMEM_SCHEMA": schema, "GITMEM_NO_DAEMON": ""}
    config = Config(store=store, dsn=dsn, schema=schema)
    with Memory(config) as memory:
        first = memory.record({"content": {"text": "first"},
                               "ts": "2026-03-01T09:00:00+00:00"}).id
    assert commit(root, "store").returncode == 0
    path = store / "events/2026-03/2026-03-01.jsonl"
    path.write_text(path.read_text().replace('"first"', '"rewritten"'))
    refused = commit(root, "rewrite an event line")
    assert refused.returncode == 1, refused.stderr
    assert "proj/memory/events/2026-03/2026-03-01.jsonl:1: events files are append-only" \
        in refused.stderr
    run_git(root, "checkout", "-q", "HEAD", "--", ".")
    with Memory(config) as memory:
        second = memory.record({"content": {"text": "second"}}).id
        memory.sync()
    run_git(root, "add", "-A")
    assert run_git(root, "commit", "-q", "-m", "second", env=env).returncode == 0
    index = Index(config)
    try:
        assert index.has_event(second)
        checkout = run_git(root, "checkout", "-q", "HEAD~1", env=env)  # post-checkout syncs
        assert checkout.returncode == 0 and "skipped" not in checkout.stderr, checkout.stderr
        assert index.has_event(first) and not index.has_event(second)
    finally:
        index.close()


def test_commands_at_the_top_of_the_repository_find_its_recorded_store(tmp_path: Path) -> None:
    """A CI job runs at the top of the work tree; a store in a subdirectory is found
    through the git config that `init` wrote, as the hooks find it."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    assert _gitmem(root, "init", "proj", env={}).returncode == 0
    found = _gitmem(root, "verify", env={})
    assert found.returncode == 0, found.stderr
    assert f"{root / 'proj' / 'memory'}: no problems" in found.stderr + found.stdout
    assert _gitmem(root, "init", "other", env={}).returncode == 0
    both = _gitmem(root, "verify", env={})  # verify checks every store of the repository
    assert both.returncode == 0, both.stderr
    assert f"{root / 'other' / 'memory'}: no problems" in both.stderr
    one = _gitmem(root, "status", env={})   # a command on one store must be told which
    assert one.returncode == 1
    assert "holds 2 gitmem stores" in one.stderr and str(root / "other" / "memory") in \
        one.stderr and "--store" in one.stderr
    elsewhere = _gitmem(tmp_path, "verify", env={})  # not in a repository at all
    assert elsewhere.returncode == 1 and "no memory/ store in" in elsewhere.stderr


def test_a_fresh_clone_guards_and_verifies_every_store_it_holds(tmp_path: Path) -> None:
    """A clone's git config records no store: `hooks install` and `verify` at the top
    of its work tree find the stores it tracks, each one."""
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q")
    for name in ("proj1", "proj2"):
        assert _gitmem(origin, "init", name, env={}).returncode == 0
        with Memory(Config(store=origin / name / "memory")) as memory:
            memory.record({"content": {"text": "x"}, "ts": "2026-03-01T09:00:00+00:00"})
    run_git(origin, "add", "-A")
    assert run_git(origin, "commit", "-q", "--no-verify", "-m", "stores").returncode == 0
    clone = tmp_path / "clone"
    assert run_git(tmp_path, "clone", "-q", str(origin), str(clone)).returncode == 0
    assert run_git(clone, "config", "--get-all", "gitmem.store").stdout == ""
    installed = _gitmem(clone, "hooks", "install", env={})
    assert installed.returncode == 0, installed.stderr
    assert git(clone, "config", "--get-all", "gitmem.store").split() == [
        "proj1/memory", "proj2/memory"]
    path = clone / "proj2" / DAY
    path.write_text(path.read_text().replace('"x"', '"y"'))
    refused = commit(clone, "rewrite")
    assert refused.returncode == 1 and f"proj2/{DAY}:1: events files are append-only" \
        in refused.stderr
    run_git(clone, "config", "--unset-all", "gitmem.store")
    checked = _gitmem(clone, "verify", env={})
    assert checked.returncode == 1 and f"{clone / 'proj1' / 'memory'}: no problems" \
        in checked.stderr and f"problem(s) in {clone / 'proj2' / 'memory'}" in checked.stderr


def test_hooks_run_for_every_store_of_the_repository(tmp_path: Path) -> None:
    root = new_repo(tmp_path / "repo")
    install(root / "memory")
    subprocess.run([sys.executable, "-m", "gitmem", "init", "sub"], cwd=root, check=True,
                   capture_output=True)
    assert git(root, "config", "--get-all", "gitmem.store").split() == ["memory",
                                                                        "sub/memory"]
    for store in (root / "memory", root / "sub" / "memory"):
        with Memory(Config(store=store)) as memory:
            memory.record({"content": {"text": "x"}, "ts": "2026-03-01T09:00:00+00:00"})
    assert commit(root, "both").returncode == 0
    for prefix in ("", "sub/"):
        path = root / f"{prefix}{DAY}"
        original = path.read_text()
        path.write_text(original.replace('"x"', '"y"'))
        result = commit(root, "rewrite")
        assert result.returncode == 1 and f"{prefix}{DAY}:1: events files are append-only" \
            in result.stderr
        path.write_text(original)
