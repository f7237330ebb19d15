"""Durable writes to the store: appends to the day files (complete lines, one write
under an exclusive lock, fsync; all or nothing: a failed append is cut back out under
its lock), and the record files that come with an event, staged beside their targets
before the append and put in place after it (gitmem/recovery.py)."""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from gitmem.errors import StoreError, UnreadableFileError
from gitmem.regular_files import open_append
from gitmem.rows import Announced
from gitmem.store import StatKey, staging_file, stat_key

logger = logging.getLogger(__name__)


def fsync_dir(directory: Path) -> None:
    """Make a directory entry (a new or renamed file) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_lines(path: Path, lines: list[bytes],
                 announce: Callable[[Announced], None] | None = None,
                 ) -> tuple[int, bytes, StatKey]:
    """Append complete lines with one write under an exclusive lock, then fsync.

    If the file ends in a torn line (a writer crashed mid-write), a newline is
    written first so the fragment stays a line of its own, reported by the
    indexer, and never glued to a good record. Returns where the lines begin
    in the file, their bytes, and the file's (size, ctime_ns, inode) right after
    the write (taken under the lock, so no other writer's append is in it).
    `announce` is told, under the lock and before the write, the file's (size,
    ctime_ns, inode) and the size it will have once the lines are in.

    All or nothing: when the write or the fsync fails (disk full, file too
    large, I/O error), the file is cut back to where the append began, still
    under the lock, and StoreError names the file and the system's reason.
    """
    with append_lock(path) as fd:
        _, offset, data, _, stat = append_locked(fd, path, lines, announce)
    return offset, data, stat


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of `data`: a write may be short (a signal, a file size limit, a disk
    filling part way), and the rest is written, or its error raised."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def make_dirs(directory: Path) -> None:
    """`directory` and its missing parents made, each new one's entry durable (a new
    month's folder of day files, say: fsyncing the file's own folder alone leaves the
    folder's name in its parent to the next flush)."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for made in reversed(missing):
        made.mkdir(exist_ok=True)
        fsync_dir(made.parent)


@contextmanager
def append_lock(path: Path) -> Iterator[int]:
    """A descriptor of `path` (created if need be, its name made durable before any line
    is written: a journaled write across day files counts on that) for appending, under
    an exclusive lock."""
    created = not path.exists()
    with ExitStack() as held:
        try:
            if created:
                make_dirs(path.parent)
            fd = open_append(path)  # a FIFO, a directory: refused before any byte
            held.callback(os.close, fd)  # closing releases the lock
            fcntl.flock(fd, fcntl.LOCK_EX)
            if created or os.fstat(fd).st_size == 0:  # another writer may have made it
                fsync_dir(path.parent)  # and not yet made its name durable
        except UnreadableFileError as exc:
            raise StoreError(f"cannot append to {path}: it is {exc.reason}; nothing was "
                             "written") from exc
        except OSError as exc:
            raise StoreError(f"cannot append to {path}: {exc.strerror or exc}; "
                             "nothing was written") from exc
        yield fd


def append_locked(fd: int, path: Path, lines: list[bytes],
                   announce: Callable[[Announced], None] | None,
                   ) -> tuple[int, int, bytes, StatKey, StatKey]:
    """`append_lines` on a locked descriptor: (where its bytes begin, where the lines
    begin, their bytes, the stat before, the stat after). A failure leaves the file as
    it was."""
    before = os.fstat(fd)
    size = before.st_size
    data = b"".join(lines)
    torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
    payload = b"\n" + data if torn else data
    if announce is not None:
        announce((stat_key(before), size + len(payload)))
    if not payload:  # nothing to write (and a write of nothing would not move the offset)
        return size, size, data, stat_key(before), stat_key(before)
    start: int | None = None  # where O_APPEND put the first bytes, once some are written
    try:
        written = os.write(fd, payload)
        start = os.lseek(fd, 0, os.SEEK_CUR) - written
        write_all(fd, memoryview(payload)[written:])  # after a short write, the rest
        os.fsync(fd)
        st = os.fstat(fd)
    except BaseException as exc:
        if start is not None:
            cut_back(fd, path, start)
        if isinstance(exc, OSError):
            raise StoreError(f"appending to {path} failed: {exc.strerror or exc}; the file "
                             "is as it was, nothing was written") from exc
        raise
    return start, start + len(payload) - len(data), data, stat_key(before), stat_key(st)


def cut_back(fd: int, path: Path, size: int) -> None:
    """Take an append back out (its lock still held): the file as it was before it, or
    none where it was empty (made by the write: no empty day file is left of it)."""
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
        if size == 0:
            path.unlink(missing_ok=True)
    except OSError as exc:  # the caller raises the first error; this one is logged
        logger.error("cannot cut %s back to %d bytes after a failed write: %s; a partial "
                     "line may remain (the next append starts a new line)", path, size,
                     exc.strerror or exc)


def stage_file(target: Path, data: bytes, prefix: str) -> Path:
    """`data` written and fsynced under a temporary name beginning with `prefix`, beside
    `target`; that name. A failure (a full disk, a directory that cannot be written)
    removes the file it began, so no empty `.tmp-` file is left for `gitmem verify` to
    name, and is a StoreError naming `target`: nothing of the write is on disk yet."""
    name: str | None = None
    try:
        make_dirs(target.parent)
        fd, name = staging_file(target.parent, prefix)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException as exc:
        if name is not None:
            _remove(Path(name))
        if isinstance(exc, OSError):
            raise StoreError(f"writing {target} failed: {_reason(exc, target)}; nothing was "
                             f"written (free space on its disk or make {target.parent} "
                             "writable, then write again)") from exc
        raise
    return Path(name)


def discard(staged: Sequence[Path]) -> None:
    """Remove staged files whose write did not happen."""
    for path in staged:
        _remove(path)


def place_staged(moves: Sequence[tuple[Path, Path]]) -> dict[Path, str]:
    """Rename each staged file (tmp, target) to its target and make the renames durable;
    the system's reason for each target that could not be put in place (none, almost
    always). Those are left staged, not raised: with an event line durable already (the
    write's commit point) the write has happened and must not be tried again (the
    daemon's writer would append its lines twice), and `recovery.finish` puts them in
    place later."""
    failed: dict[Path, str] = {}
    for tmp, target in moves:
        try:
            os.replace(tmp, target)
        except OSError as exc:
            failed[target] = _reason(exc, target)
    for directory in {target.parent for _, target in moves if target not in failed}:
        try:
            fsync_dir(directory)
        except OSError as exc:  # the renames are done; a crash now could undo them
            logger.error("cannot make the files put in %s durable: %s", directory,
                         exc.strerror or exc)
    return failed


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:  # the caller raises the first error; this one is logged
        logger.error("cannot remove the staged file %s: %s", path, exc.strerror or exc)


def _reason(exc: OSError, target: Path) -> str:
    """The system's reason for `exc`, with the path it names when that is not in the
    target's directory (a directory above it that is a file, say)."""
    reason = exc.strerror or str(exc)
    where = exc.filename
    if isinstance(where, str) and Path(where).parent != target.parent:
        reason += f": {where}"
    return reason
