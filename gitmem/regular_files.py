"""Regular files only: the one rule by which gitmem opens a file of the store (or a
policy file) that anyone can have replaced with something else. A FIFO's plain open
waits for a writer for good (a sync, the daemon's indexer wedged until kill -9), a
loop of links fails; so a file is opened without waiting (which a regular file's
reads and writes ignore) and looked at before a byte is read or written."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from gitmem.errors import UnreadableFileError

_NOT_FILES = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
              (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
DIRECTORY = "a directory, not a file"  # the reason of a directory in a file's place


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading when it is a regular file (links followed); else
    UnreadableFileError saying what is there, or FileNotFoundError when nothing is."""
    return open(_open_fd(path, os.O_RDONLY), "rb")


def read_regular(path: Path) -> bytes:
    """The bytes of `path` under `open_regular`'s rule."""
    with open_regular(path) as handle:
        return handle.read()


def open_append(path: Path) -> int:
    """A descriptor of `path` for appending, the file created if nothing is there; else
    UnreadableFileError saying what is there (a FIFO would take the bytes and block once
    full, under the day file's lock), or the system's OSError. A link to nothing is
    refused, never followed: the file would be made where it points, outside the
    repository, and git would keep only the link."""
    flags = os.O_RDWR | os.O_APPEND
    try:
        return _open_fd(path, flags)
    except FileNotFoundError:
        pass
    try:  # nothing there: made here, never through a link put in its place meanwhile
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(path):
            raise UnreadableFileError(str(path), _dangling(path)) from None
        raise
    return _checked(fd, path)


def _open_fd(path: Path, flags: int) -> int:
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except (FileNotFoundError, NotADirectoryError):
        if not os.path.islink(path):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory",
                                    str(path)) from None
        raise UnreadableFileError(str(path), _dangling(path)) from None
    except IsADirectoryError:  # opened for writing
        raise UnreadableFileError(str(path), DIRECTORY, directory=True) from None
    except OSError as exc:  # a loop of links (ELOOP), no permission
        if exc.errno != errno.ELOOP and flags != os.O_RDONLY:
            raise  # a writer says the system's reason itself
        raise UnreadableFileError(str(path), _os_reason(exc)) from None
    return _checked(fd, path)


def _checked(fd: int, path: Path) -> int:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnreadableFileError(str(path), _not_file(st.st_mode),
                                  directory=stat.S_ISDIR(st.st_mode))
    return fd


def _dangling(path: Path) -> str:
    return f"a symbolic link to nothing ({os.readlink(path)})"


def _not_file(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return DIRECTORY
    what = next((name for test, name in _NOT_FILES if test(mode)), "not a file")
    return f"{what}, not a regular file"


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a loop of symbolic links"
    return exc.strerror or str(exc)
