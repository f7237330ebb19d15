"""What an autocommit killed part-way leaves behind, and putting it right.

Autocommit (gitmem/autocommit.py) builds its commit in a temporary index in a directory
under `.git`, notes there the paths it commits (`note_pending`), moves HEAD with
`update-ref`, then resets the person's index to the new HEAD for those paths. A crash
(kill -9, a power cut) in between leaves:

- the person's index still at the old version of those paths, once HEAD moved: git
  shows the commit's appends as staged removals (a new day file staged as deleted,
  lines of an old one staged as gone) although the files on disk are whole, and a
  `git commit` of anything else would record them or be refused by pre-commit;
- the temporary directory `.git/gitmem-commit-*`, a full copy of the index.

`repair_index` and `remove_temporary` put both right; the daemon runs them when it
starts and autocommit before every commit. Only the paths a dead autocommit noted are
ever reset: an index entry that merely looks like a crash's (a person's `git rm
--cached` of a day file just autocommitted) is the person's, and stays.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from gitmem.appends import fsync_dir, write_all

if TYPE_CHECKING:
    import git

logger = logging.getLogger(__name__)

TEMPORARY_PREFIX = "gitmem-commit-"
LOCK_NAME = "lock"
PENDING_NAME = "pending"  # the paths whose index entries the autocommit is about to reset
# A directory whose lock is free is removed once this old (the lock is taken right after
# the directory is made); one without a lock (made by an older gitmem) once it is very old.
UNLOCKED_MIN_AGE_S = 2.0
LOCKLESS_MIN_AGE_S = 3600.0
# The last paragraph of every autocommit's message (autocommit.describe).
AUTOCOMMIT_TRAILER = "Committed by the gitmem daemon (autocommit of the memory store)."
_ZERO = "0" * 40


@contextlib.contextmanager
def temporary_index(repo: git.Repo) -> Iterator[tuple[dict[str, str], Path]]:
    """A temporary directory under `.git` for an autocommit's index (the environment that
    points git at it, and the directory), locked while in use: `remove_temporary` spares
    it. The kernel drops the lock when the process dies, however it dies."""
    with tempfile.TemporaryDirectory(prefix=TEMPORARY_PREFIX, dir=repo.git_dir) as tmp:
        fd = os.open(os.path.join(tmp, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield {"GIT_INDEX_FILE": os.path.join(tmp, "index")}, Path(tmp)
        finally:
            os.close(fd)


def note_pending(tmp: Path, paths: list[str]) -> None:
    """Note, durably, in an autocommit's temporary directory the paths it commits, before
    it moves HEAD: what `repair_index` may reset if it dies before the index agrees."""
    fd = os.open(tmp / PENDING_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_all(fd, b"\0".join(p.encode() for p in paths))
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(tmp)  # the note's name, and the directory's own in .git
    fsync_dir(tmp.parent)


def remove_temporary(git_dir: Path, now: float | None = None) -> list[Path]:
    """Remove the temporary directories of autocommits that died; the ones removed.

    A directory is a dead one's when no process holds its lock (and it is over
    UNLOCKED_MIN_AGE_S old or holds a `note_pending` note, written after the lock was
    taken), or, holding no lock file, when it is over LOCKLESS_MIN_AGE_S old."""
    now = time.time() if now is None else now
    removed = []
    for directory in sorted(git_dir.glob(TEMPORARY_PREFIX + "*")):
        try:
            age = now - directory.stat().st_mtime
            if not directory.is_dir() or (age < UNLOCKED_MIN_AGE_S and not (
                    directory / PENDING_NAME).exists()):  # a note comes after the lock
                continue
            if _abandoned(directory, age):
                shutil.rmtree(directory)
                removed.append(directory)
        except FileNotFoundError:
            continue  # its commit finished meanwhile
    if removed:
        logger.info("removed %d temporary director%s left by an autocommit that died: %s",
                    len(removed), "y" if len(removed) == 1 else "ies",
                    ", ".join(str(d) for d in removed))
    return removed


def _abandoned(directory: Path, age: float) -> bool:
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDONLY)
    except FileNotFoundError:
        return age >= LOCKLESS_MIN_AGE_S
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # a running autocommit's
    finally:
        os.close(fd)
    return True


def repair_index(repo: git.Repo, specs: list[str]) -> list[str]:
    """Reset to HEAD the paths under `specs` whose index entry an autocommit that died
    left behind; the paths reset (names in the work tree).

    Only a path a dead autocommit noted (`note_pending`: its temporary directory is
    still there, its lock free) is touched, and only when its entry is exactly what
    the crash leaves: the last commit that changed the path is an autocommit, and the
    index holds the path as that commit's parent had it (absent included). Anything
    else staged (a person's edit, `git add` of another version, `git rm --cached`)
    stays staged. The reset changes only the index: the files on disk are never
    touched, so nothing on disk is lost. Call it before `remove_temporary`, which
    removes the notes.
    """
    pending = _pending(Path(repo.git_dir))
    if not pending:
        return []
    stale = [path for path, staged in _staged_changes(repo, specs)
             if path in pending and _left_by_autocommit(repo, path, staged)]
    if stale:
        repo.git.reset("-q", "HEAD", "--", *stale)
        logger.warning("the git index still held the version before an autocommit that "
                       "died (kill -9?) of %s; reset it to HEAD (the files on disk are "
                       "unchanged)", ", ".join(stale))
    return stale


def _pending(git_dir: Path) -> set[str]:
    """The paths noted by autocommits that died (their directories' locks are free: a
    directory holding a note had its lock taken before)."""
    found: set[str] = set()
    for note in git_dir.glob(f"{TEMPORARY_PREFIX}*/{PENDING_NAME}"):
        try:
            if _abandoned(note.parent, age=0.0):
                found.update(p.decode() for p in note.read_bytes().split(b"\0") if p)
        except FileNotFoundError:
            continue  # its commit finished meanwhile
    return found


def _staged_changes(repo: git.Repo, specs: list[str]) -> list[tuple[str, str]]:
    """(path, its index blob; '' when the index lacks it) of the paths under `specs`
    that the index changes or deletes from HEAD (an added path is never a crash's)."""
    if not specs or not repo.git.rev_parse("--verify", "-q", "HEAD", with_exceptions=False):
        return []
    out = repo.git.diff_index("--cached", "--no-renames", "-z", "HEAD", "--", *specs)
    fields = [f for f in out.split("\0") if f]
    found = []
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        parts = meta.split()
        if len(parts) >= 5 and parts[4][0] in "MDT":
            found.append((path, "" if parts[3] == _ZERO else parts[3]))
    return found


def _left_by_autocommit(repo: git.Repo, path: str, staged: str) -> bool:
    last = str(repo.git.rev_list("-n", "1", "HEAD", "--", path)).strip()
    if not last:
        return False
    message = str(repo.git.log("-1", "--format=%B", last))
    if AUTOCOMMIT_TRAILER not in message:
        return False
    before = str(repo.git.rev_parse("-q", "--verify", f"{last}^1:{path}",
                                    with_exceptions=False)).strip()
    return before == staged
