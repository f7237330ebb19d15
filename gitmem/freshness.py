"""Is a file what the index reflects? Its stat key first (size, ctime, inode: an
unchanged stat means an unchanged file, unless taken within the racy window);
otherwise its content: a Markdown/YAML file's hash; a JSONL file's prefix anchors
(the first and last 4 KiB of the indexed bytes) and the CRC-32 of the whole prefix,
which a same-length edit in its middle changes, however many lines were appended
since. Only where this process knows every byte added since it last read the file
(its own appends, each made from the stat the one before left) is the prefix not
read again: the daemon's writes to a growing day file cost what they add, not the
file's size. `assess` says what a sync would do with the file.

A path that holds no regular file (`store.open_regular`) is never read: a directory in
an indexed file's place is the file gone; a FIFO, a socket, a device, a link to nothing
or a loop of links is `unreadable`, indexed with no rows and one problem naming it
(`unread_rows`), which status lists until it is mended. A file behind a symbolic link to
a folder (a record folder that is one, or a folder within) is never read: gone, if it
was indexed."""

from __future__ import annotations

import hashlib
import os
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitmem.db import Row
from gitmem.errors import FormatError, UnreadableFileError
from gitmem.policies import Policies
from gitmem.rows import Appended, FileRows
from gitmem.store import (
    StatKey,
    classify,
    link_on_way,
    open_regular,
    stat_key,
    stat_store_files,
)

ANCHOR_BYTES = 4096
RACY_NS = 2_000_000_000
UNREAD = "unread"  # the content hash of a file indexed as `unreadable` (no sha256 is)
READ_FILES_KEPT = 4096  # events files whose last reading this process remembers


@dataclass(frozen=True)
class Assessment:
    """What sync would do to one file, and with which bytes."""

    path: str
    kind: str
    action: str          # new | append | rewrite | truncate | changed | touched | deleted
                         # | unreadable | unchanged
    reason: str
    data: bytes = b""    # complete content to index (JSONL: complete new lines)
    start_line: int = 1
    state: dict[str, Any] = field(default_factory=dict)   # the new source_files row
    pending_bytes: int = 0  # JSONL bytes after the last newline (a torn or growing line)
    # an events file whose first lines are as indexed (gitmem/reread.py):
    # how many, and their events' ids; `data` is what follows them
    kept_lines: int = 0
    kept: tuple[str, ...] = ()
    unread: str = ""  # what the path holds instead of a regular file (`unreadable`)

    @property
    def stale(self) -> bool:
        """True when the index does not yet reflect this file's content."""
        return self.action not in ("unchanged", "touched")


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _stat_fields(st: os.stat_result) -> dict[str, int]:
    # A file modified within RACY_NS may change again inside the same timestamp tick
    # (coarse filesystem clocks) with the same size: its stat is not trusted (-1
    # never matches), so the next sync compares its content instead (as git does).
    ctime = st.st_ctime_ns if time.time_ns() - st.st_ctime_ns >= RACY_NS else -1
    return {"size": st.st_size, "ctime_ns": ctime, "inode": st.st_ino}


def _crc(handle: Any, size: int) -> int:
    """CRC-32 of a file's first `size` bytes, read from where `handle` stands."""
    crc = 0
    while size > 0:
        block = handle.read(min(size, 1 << 20))
        if not block:
            break
        crc = zlib.crc32(block, crc)
        size -= len(block)
    return crc


class ReadFiles:
    """What this process last read of each events file: the file's exact stat then,
    and the length and CRC-32 of its complete lines. Where the index's state is that
    prefix and the file has since grown by this process's own appends alone (each
    made from the stat the one before left, under the writers' lock), the prefix is
    as read: checking it again would read the whole file for every batch."""

    def __init__(self, kept: int = READ_FILES_KEPT) -> None:
        self._lock = threading.Lock()
        self._kept = kept
        self._read: OrderedDict[str, tuple[StatKey, int, int]] = OrderedDict()

    def note(self, path: Path, st: os.stat_result, offset: int, crc: int) -> None:
        """`path` was read at `st`: its first `offset` bytes have CRC-32 `crc`."""
        with self._lock:
            self._read[str(path)] = (stat_key(st), offset, crc)
            self._read.move_to_end(str(path))
            while len(self._read) > self._kept:
                self._read.popitem(last=False)

    def grown_by(self, path: Path, state: Row, st: os.stat_result,
                 appended: Sequence[Appended]) -> bool:
        """True when the file is what was last read of it, the index's prefix, plus
        `appended` (this process's appends) and nothing else."""
        with self._lock:
            read = self._read.get(str(path))
        if read is None or (read[1], read[2]) != (state["byte_offset"], state["prefix_crc"]):
            return False
        links = {a.before: a.stat for a in appended
                 if a.before is not None and a.stat is not None}
        at, steps = read[0], 0
        while at in links and steps <= len(links):  # each append from the stat before it
            at, steps = links[at], steps + 1
        return steps > 0 and at == stat_key(st)


READ_FILES = ReadFiles()


def _same_stat(state: Row, st: os.stat_result) -> bool:
    return (state["size"], state["ctime_ns"], state["inode"]) == stat_key(st)


def assess(store: Path, rel: str, kind: str, state: Row | None,
           policies: Policies | None = None,
           appended: Sequence[Appended] = ()) -> Assessment:
    """Compare one file with its indexed state (reads only what it must). `appended`:
    lines this process appended to it (an events file), with the stats around each."""
    path = store / rel
    if classify(rel) is None:  # indexed when gitmem read more names than it does now
        if state is None:
            return Assessment(rel, kind, "unchanged", "no record's name, not indexed")
        return Assessment(rel, kind, "deleted", "indexed, but its name is no record's: "
                          "gitmem reads it no more (`gitmem status` lists it as ignored)")
    if (link := link_on_way(store, rel)) is not None:  # never entered (store.linked_folders)
        if state is None:
            return Assessment(rel, kind, "unchanged", f"behind the link {link}/, not entered")
        return Assessment(rel, kind, "deleted", f"indexed, now behind the symbolic link "
                          f"{link}/, which gitmem never enters: its rows are removed")
    try:
        handle = open_regular(path)
    except FileNotFoundError:
        if state is None:
            return Assessment(rel, kind, "unchanged", "not on disk, not indexed")
        return Assessment(rel, kind, "deleted", "indexed but no longer on disk")
    except UnreadableFileError as exc:
        return _unreadable(path, rel, kind, state, exc)
    with handle:
        st = os.fstat(handle.fileno())
        if state is not None and _same_stat(state, st):
            pending = st.st_size - state["byte_offset"] if kind == "events" else 0
            return Assessment(rel, kind, "unchanged", "stat unchanged", pending_bytes=pending)
        if kind == "events":
            return _assess_jsonl(path, rel, handle, st, state, appended)
        data = handle.read()
    digest = _sha(data)
    new_state = {"path": rel, "kind": kind, "content_hash": digest, "byte_offset": len(data),
                 "line_count": 0, "head_hash": "", "prefix_crc": 0, **_stat_fields(st)}
    if state is None:
        return Assessment(rel, kind, "new", "not indexed yet", data, state=new_state)
    if state["content_hash"] == digest:
        new_state["errors"] = state["errors"]
        return Assessment(rel, kind, "touched", "stat changed, content identical",
                          state=new_state)
    return Assessment(rel, kind, "changed", "content hash differs from the index", data,
                      state=new_state)


def _unreadable(path: Path, rel: str, kind: str, state: Row | None,
                exc: UnreadableFileError) -> Assessment:
    """What sync does with a path that holds no regular file: a directory in its place
    is the file gone; anything else is indexed with no rows, its problem kept in its
    state (where status and the daemon list it), its stat (or its link's) as found."""
    if exc.directory:
        if state is None:
            return Assessment(rel, kind, "unchanged", "a directory, not indexed")
        return Assessment(rel, kind, "deleted", f"indexed, now {exc.reason}: its rows are "
                          "removed")
    try:
        st = os.stat(path)
    except OSError:
        st = os.lstat(path)
    new_state = {"path": rel, "kind": kind, "content_hash": UNREAD, "byte_offset": 0,
                 "line_count": 0, "head_hash": "", "prefix_crc": 0, "errors": [],
                 **_stat_fields(st)}
    problem = unread_problem(rel, exc.reason)
    if state is not None and state["content_hash"] == UNREAD \
            and list(state["errors"]) == [problem.to_dict()]:
        if _same_stat(state, st):
            return Assessment(rel, kind, "unchanged", f"still {exc.reason}")
        new_state["errors"] = state["errors"]
        return Assessment(rel, kind, "touched", f"still {exc.reason}", state=new_state)
    said = "indexed, now" if state is not None else "not read:"
    return Assessment(rel, kind, "unreadable", f"{said} {exc.reason}", state=new_state,
                      unread=exc.reason)


def unread_problem(rel: str, reason: str) -> FormatError:
    """The problem a file indexed as `unreadable` is listed with."""
    return FormatError(f"cannot be read: {reason}; skipped (put a file in its place, or "
                       "remove it)", path=rel)


def unread_rows(a: Assessment) -> FileRows:
    """The rows of a file indexed as `unreadable`: none, and its problem."""
    return FileRows(errors=[unread_problem(a.path, a.unread)])


def _assess_jsonl(path: Path, rel: str, handle: Any, st: os.stat_result, state: Row | None,
                  appended: Sequence[Appended]) -> Assessment:
    offset = state["byte_offset"] if state else 0
    changed_in_place = False
    appendable = state is not None and st.st_size >= offset
    if appendable and state is not None:
        head = handle.read(min(ANCHOR_BYTES, offset))
        handle.seek(max(0, offset - ANCHOR_BYTES))
        tail = handle.read(offset - max(0, offset - ANCHOR_BYTES))
        appendable = (_sha(head) == state["head_hash"] and _sha(tail) == state["content_hash"])
        if appendable and not (st.st_size > state["size"]
                               and READ_FILES.grown_by(path, state, st, appended)):
            # the stat moved: bytes may have changed in place (a redaction of the same
            # length) where the anchors do not reach, lines appended since or not
            handle.seek(0)
            appendable = _crc(handle, offset) == state["prefix_crc"]
            if not appendable:
                changed_in_place = True
    if appendable and state is not None:
        handle.seek(offset)
        start_line = state["line_count"] + 1
        action, reason = "append", "lines appended since the index"
        prefix_errors = list(state["errors"])
        crc = state["prefix_crc"]
    else:
        handle.seek(0)
        offset, start_line, crc = 0, 1, 0
        prefix_errors = []
        if state is None:
            action, reason = "new", "not indexed yet"
        elif st.st_size < state["byte_offset"]:
            action, reason = "rewrite", "shorter than the indexed prefix (checkout or rewrite)"
        elif changed_in_place:
            action, reason = "rewrite", "indexed prefix changed in place"
        else:
            action, reason = "rewrite", "indexed prefix changed (checkout or rewrite)"
    rest = handle.read()
    cut = rest.rfind(b"\n") + 1
    complete = rest[:cut]
    new_offset = offset + len(complete)
    if action == "append" and not complete:
        action, reason = "touched", "no complete new line"
    handle.seek(0)
    head = handle.read(min(ANCHOR_BYTES, new_offset))
    handle.seek(max(0, new_offset - ANCHOR_BYTES))
    tail = handle.read(new_offset - max(0, new_offset - ANCHOR_BYTES))
    new_state = {"path": rel, "kind": "events", "content_hash": _sha(tail),
                 "byte_offset": new_offset,
                 "line_count": start_line - 1 + complete.count(b"\n"),
                 "head_hash": _sha(head), "prefix_crc": zlib.crc32(complete, crc),
                 "errors": prefix_errors, **_stat_fields(st)}
    READ_FILES.note(path, st, new_offset, new_state["prefix_crc"])
    return Assessment(rel, "events", action, reason, complete, start_line, new_state,
                      pending_bytes=len(rest) - cut)


FileStat = tuple[str, int, int, int]  # kind, size, ctime_ns, inode: what a reconcile compares


def candidates(store: Path, known: Mapping[str, FileStat]) -> list[tuple[str, str]]:
    """Files whose stat differs from the index, new files and deleted files."""
    out: list[tuple[str, str]] = []
    on_disk = stat_store_files(store)
    for rel, (kind, st) in on_disk.items():
        old = known.get(rel)
        if old is None or st is None or old[1:] != stat_key(st):
            out.append((rel, kind))
    out.extend((rel, old[0]) for rel, old in known.items() if rel not in on_disk)
    return sorted(out)
