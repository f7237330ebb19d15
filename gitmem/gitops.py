"""Git plumbing for the store: HEAD, repository state, reading revisions, the commit marker.

HEAD is read from the files under `.git` where it can be (every sync asks). The
commit marker is how gitmem's pre-commit hook tells autocommit (gitmem/autocommit.py)
that a person's `git commit` is running its hooks.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from gitmem import processes
from gitmem.errors import GitError

if TYPE_CHECKING:  # gitpython costs ~0.1 s to import; `head` (every sync) does without it
    import git


ZERO_OID = "0" * 40
_OID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_IN_PROGRESS = (("MERGE_HEAD", "a merge"), ("CHERRY_PICK_HEAD", "a cherry-pick"),
                ("REVERT_HEAD", "a revert"), ("rebase-merge", "a rebase"),
                ("rebase-apply", "a rebase or am"), ("BISECT_LOG", "a bisect"))


def head(path: Path) -> str | None:
    """The commit HEAD points at in the repository holding `path`, or None.

    Read from the files under `.git` (every sync asks; a `git` process each time
    costs more than the sync), falling back to `git rev-parse` for anything unusual.
    """
    try:
        found = _read_head(path)
    except (OSError, UnicodeDecodeError):
        found = None
    if found is not None:
        return found or None
    result = subprocess.run(["git", "-C", str(path), "rev-parse", "--verify", "-q", "HEAD"],
                            capture_output=True, text=True)
    return result.stdout.strip() or None if result.returncode == 0 else None


def _read_head(path: Path) -> str | None:
    """HEAD's commit from the files; '' for an unborn branch; None: ask git instead."""
    if any(k in os.environ for k in ("GIT_DIR", "GIT_COMMON_DIR", "GIT_WORK_TREE")):
        return None
    git_dir = next((d / ".git" for d in (path, *path.parents) if (d / ".git").exists()), None)
    if git_dir is None:
        return None
    if git_dir.is_file():  # a worktree or submodule: "gitdir: <path>"
        text = git_dir.read_text(encoding="utf-8").strip()
        if not text.startswith("gitdir: "):
            return None
        git_dir = (git_dir.parent / text[8:]).resolve()
    common = git_dir
    if (git_dir / "commondir").is_file():
        common = (git_dir / (git_dir / "commondir").read_text(encoding="utf-8").strip()).resolve()
    if (common / "reftable").exists():
        return None
    text = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
    if _OID.fullmatch(text):
        return text
    if not text.startswith("ref: "):
        return None
    ref = text[5:]
    for base in (git_dir, common):
        if (base / ref).is_file():
            value = (base / ref).read_text(encoding="utf-8").strip()
            return value if _OID.fullmatch(value) else None
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(encoding="utf-8").splitlines():
            oid, _, name = line.partition(" ")
            if name == ref and _OID.fullmatch(oid):
                return oid
    return ""


def open_repo(path: Path) -> git.Repo:
    """The repository holding `path`, or GitError."""
    import git

    try:
        return git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise GitError(f"{path} is not inside a git repository; run `gitmem init` or "
                       "`git init` first") from None


def store_prefix(repo: git.Repo, store: Path) -> str:
    """The store's path inside the work tree, with a trailing slash ('' at the root)."""
    root = Path(str(repo.working_tree_dir)).resolve()
    rel = os.path.relpath(store.resolve(), root).replace(os.sep, "/")
    if rel.startswith(".."):
        raise GitError(f"the store {store} is outside the work tree {root}")
    return "" if rel == "." else rel + "/"


def busy_state(repo: git.Repo) -> str | None:
    """Why committing now would be wrong (an operation in progress), or None."""
    git_dir = Path(repo.git_dir)
    for name, what in _IN_PROGRESS:
        if (git_dir / name).exists():
            return f"{what} is in progress"
    if repo.git.ls_files("-u"):
        return "the index has unresolved conflicts"
    if (git_dir / "index.lock").exists():
        return "another git command holds the index lock"
    try:
        if repo.head.is_detached:
            return "HEAD is detached (no branch to commit to)"
    except (TypeError, ValueError):
        return "HEAD is not a branch"
    return commit_in_progress(git_dir)


# Written by gitmem's pre-commit hook (the git process's pid; once its checks pass,
# the tree and parent it checked: `mark_checked`), removed by its post-commit hook:
# while `git commit` runs its hooks it holds no lock, and a HEAD moved meanwhile makes
# the commit fail ("cannot lock ref 'HEAD'").
COMMIT_MARKER = "gitmem-commit-in-progress"
COMMIT_MARKER_FRESH_S = 60.0       # honoured this long whatever the pid says
COMMIT_MARKER_MAX_S = 3600.0       # and while the committing git process runs, up to this


def commit_in_progress(git_dir: Path, now: float | None = None) -> str | None:
    """Why a person's `git commit` seems to be running in this work tree, or None.

    A marker of a commit that died (its git process is gone and it is over
    COMMIT_MARKER_FRESH_S old, or over COMMIT_MARKER_MAX_S) is ignored.
    """
    marker = git_dir / COMMIT_MARKER
    try:
        age = (time.time() if now is None else now) - marker.stat().st_mtime
        text = marker.read_text(encoding="utf-8", errors="replace").split()
    except OSError:
        return None
    if age >= COMMIT_MARKER_MAX_S:
        return None
    if age >= COMMIT_MARKER_FRESH_S:
        pid = int(text[0]) if text and text[0].isdigit() else 0
        if pid <= 1 or not processes.alive(pid):
            return None
    return "a `git commit` is running its hooks"


def mark_commit(git_dir: Path, pid: int) -> None:
    """Note that `git commit` (process `pid`) runs its hooks (see COMMIT_MARKER)."""
    (git_dir / COMMIT_MARKER).write_text(f"{pid}\n", encoding="utf-8")


def mark_checked(repo: git.Repo) -> None:
    """Add to the commit-in-progress mark what pre-commit checked: the tree the commit
    will record (the index, as `git write-tree` makes it) on the commit it will follow.

    A commit that git then aborts (a commit-msg hook refuses it, an empty message)
    leaves the mark behind, and post-commit must not take the next commit made
    without pre-commit for a checked one: it is, only when it is that tree on that
    parent (`checked_commit`). Nothing is added when the index has no tree yet (a
    conflict: the commit fails anyway)."""
    marker = Path(repo.git_dir) / COMMIT_MARKER
    try:
        pid = marker.read_text(encoding="utf-8").split("\n", 1)[0]
    except OSError:
        return
    tree = str(repo.git.write_tree(with_exceptions=False)).strip()
    if _OID.fullmatch(tree):
        marker.write_text(f"{pid}\n{tree} {_commit_parent(repo, 'HEAD')}\n", encoding="utf-8")


def _commit_parent(repo: git.Repo, rev: str) -> str:
    """`rev`'s commit id, or `none` (an unborn branch, a root commit's parent)."""
    found = str(repo.git.rev_parse("-q", "--verify", f"{rev}^{{commit}}",
                                   with_exceptions=False)).strip()
    return found or "none"


def unmark_commit(git_dir: Path) -> str | None:
    """The commit finished (post-commit) or was refused: remove the mark; what pre-commit
    noted in it as checked (`mark_checked`; '' when nothing), or None when unmarked."""
    marker = git_dir / COMMIT_MARKER
    try:
        text = marker.read_text(encoding="utf-8", errors="replace")
        marker.unlink()
    except FileNotFoundError:
        return None
    lines = text.splitlines()
    return lines[1].strip() if len(lines) > 1 else ""


def checked_commit(repo: git.Repo, noted: str | None) -> bool:
    """Whether HEAD is the commit pre-commit checked, as `unmark_commit` read the note:
    the tree it noted, on the parent it noted."""
    if not noted:
        return False
    tree = str(repo.git.rev_parse("-q", "--verify", "HEAD^{tree}", with_exceptions=False))
    return noted == f"{tree.strip()} {_commit_parent(repo, 'HEAD^1')}"


def has_head(repo: git.Repo) -> bool:
    """Whether HEAD points at a commit (False in a fresh repository)."""
    return bool(repo.git.rev_parse("--verify", "-q", "HEAD", with_exceptions=False))


def read_blob(repo: git.Repo, spec: str) -> bytes | None:
    """The bytes of `REV:path` / `:path` (the index), or None when absent."""
    try:
        return repo.git.get_object_data(spec)[3]
    except ValueError:
        return None


def parents(repo: git.Repo, rev: str) -> list[str]:
    """The parents of commit `rev` (none for a root commit)."""
    return str(repo.git.rev_list("--parents", "-n", "1", rev)).split()[1:]


def fast_forwarded_from(repo: git.Repo) -> str | None:
    """Where a merge that just fast-forwarded HEAD (`git merge`, `git pull`: no commit
    made, so no pre-merge-commit check) left it, by id: ORIG_HEAD when it is an older
    commit of HEAD's own history and HEAD's reflog says the move was a fast-forward
    (it may land on a merge commit someone else made); without a reflog, when HEAD is
    no merge commit. Else None."""
    orig = str(repo.git.rev_parse("--verify", "-q", "ORIG_HEAD^{commit}",
                                  with_exceptions=False)).strip()
    head = str(repo.git.rev_parse("--verify", "-q", "HEAD^{commit}",
                                  with_exceptions=False)).strip()
    if not orig or not head or orig == head:
        return None
    moved = str(repo.git.log("-g", "-1", "--format=%gs", "HEAD", with_exceptions=False)).strip()
    if not (moved.endswith("Fast-forward") if moved else len(parents(repo, head)) < 2):
        return None
    ancestor = repo.git.merge_base("--is-ancestor", orig, head, with_exceptions=False,
                                   with_extended_output=True)[0] == 0
    return orig if ancestor else None


def fork_point(repo: git.Repo, since: str) -> str:
    """The commit where HEAD's history left `since`'s (their merge base), by its id:
    what a pull request from HEAD into `since` adds is what HEAD has beyond it."""
    if not repo.git.rev_parse("--verify", "-q", f"{since}^{{commit}}", with_exceptions=False):
        raise GitError(f"unknown revision {since!r}: name a branch or commit this one grew "
                       "from (e.g. origin/main; a CI checkout may need `git fetch origin "
                       "main` first)")
    base = str(repo.git.merge_base(since, "HEAD", with_exceptions=False)).strip()
    if base:
        return base
    if repo.git.rev_parse("--is-shallow-repository", with_exceptions=False).strip() == "true":
        raise GitError(f"no common commit of {since!r} and HEAD in this shallow clone (it "
                       "holds only the newest commits): fetch the history (`git fetch "
                       "--unshallow`, or `fetch-depth: 0` with actions/checkout) and run "
                       "this again")
    raise GitError(f"{since!r} and HEAD share no history; name a branch or commit this one "
                   "grew from (e.g. origin/main)")


def hooks_dir(repo: git.Repo) -> Path:
    """Where git looks for hooks (honours core.hooksPath)."""
    out = repo.git.rev_parse("--git-path", "hooks")
    path = Path(out)
    return path if path.is_absolute() else Path(str(repo.working_tree_dir)) / path


@contextlib.contextmanager
def unnamed(data: bytes) -> Iterator[IO[bytes]]:
    """`data` in a file that has no name, for a git command's standard input (a list
    too long for its arguments). Nothing is left behind when the process dies, however
    it dies: the kernel frees a file no name and no descriptor hold."""
    with tempfile.TemporaryFile() as unnamed:
        unnamed.write(data)
        unnamed.flush()
        unnamed.seek(0)
        yield unnamed
