"""Writes a crash interrupted: the record files a write staged but did not put in place.

A write stages each file that comes with an event (a decision, a task as the update
leaves it, a summary, an artifact) as `.tmp-…` beside its target, appends and fsyncs
the event lines, then renames the staged files into place (gitmem/recorder.py). The
event line is the commit point. A crash between the two leaves a staged file whose
event is durable: the write happened, but its record is missing (`gitmem verify`
names the event). A crash before the append leaves one whose event is not: the
write never happened, and its files must not appear.

A staged file is named for what it belongs to, `.tmp-<event id>.<YYYY-MM-DD>.<target
name>.<random>` (the event's day file), or `.tmp-<target name>.<random>` for a file
written alone (a handoff). `finish` reads each one older than `GRACE_S` (younger ones,
which may belong to a write in flight, are reported and left) and:
- puts it in place when its event's line is in its day file and the target was not
  written since it was staged (a task updated again meanwhile keeps the newer file);
- removes it when its event's line is not there, or it was written alone (the call
  that wrote it was never answered), or its target moved on;
- leaves any other `.tmp-` file where it is (not ours, or from an older gitmem),
  reported for a person to look at.

A write whose lines go to more than one day file (a batch across midnight, or of
events of several days), or more than `JOURNAL_ABOVE` bytes to one, is written whole
or not at all, a crash included: before its first byte it journals each file's size
(`events/.tmp-batch.<random>`, fsynced), and it removes the journal (durably) only
once every file's lines are; then it is answered. (One `write` to a day file is not
whole under a SIGKILL: Linux stops it between pages, and a large batch's first hundred
lines stayed, with a torn one after them. Below `JOURNAL_ABOVE` a write takes
microseconds and the journal, three fsyncs, would cost more than the append: a crash
there can still leave a torn last line, which the next write ends with a newline and
`gitmem verify` names.) The journal is written under another name and renamed once
whole. Every write takes the writers' locks of its day files and of every journal's
(`settled`), in the one order all writers lock in, and with them held undoes each
journal left by a writer that is gone, the newest first: each day file is cut back to
the size it had (a file the batch made is removed), so none of the batch's lines stays
(its call was never answered) and no line is ever written after them. Autocommit and a
task update do the same first; `finish` (a sync, a daemon's start) undoes those whose
files no writer holds. Where a file holds other lines after the batch's (appended by
hand after the crash), none is cut back: the journal stays, and `gitmem verify` names
it.

A task update reads the task's file and writes it back under a lock; a task file
staged and left (its renaming failed, or a crash) is seen to before the next update
reads the file (`finish_tasks`), whatever its age, so that no update builds on the
file before it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import mmap
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from gitmem.appends import append_lock, append_locked, cut_back, fsync_dir, write_all
from gitmem.errors import StoreError
from gitmem.rows import Announced
from gitmem.store import StatKey, classify, exclusive, staging_file, try_exclusive, walk_files

logger = logging.getLogger(__name__)

PREFIX = ".tmp-"
GRACE_S = 30.0  # a staged file younger than this may belong to a write still in flight
STAGING_DIRS = ("decisions", "tasks", "summaries", "handoffs", "artifacts")
_WITH_EVENT = re.compile(r"\.tmp-(evt_[0-9A-Za-z]+)\.(\d{4}-\d{2}-\d{2})\.(.+)\.[^.]+")
_ALONE = re.compile(r"\.tmp-(hof_[0-9A-Za-z]+\.yaml)\.[^.]+")
_WITH_EVENT_KINDS = ("decision", "task", "summary", "artifact")  # what comes with an event
_NOT_OURS = "not a file gitmem stages: look at it and delete it if it holds nothing you need"
BATCH_PREFIX = ".tmp-batch."
JOURNAL_ABOVE = 64 * 1024  # a write to one day file of more bytes is journaled too
JOURNAL_WRITING = ".tmp-batchw."  # a journal being written, renamed once whole


def staged_prefix(target: Path, event_id: str = "", day: str = "") -> str:
    """The name a staged file of `target` begins with (`tempfile.mkstemp` adds the
    rest): the event and its day file's date when the file comes with an event."""
    if event_id:
        return f"{PREFIX}{event_id}.{day}.{target.name}."
    return f"{PREFIX}{target.name}."


@dataclass(frozen=True)
class Finished:
    """What became of one staged file."""

    path: str      # the staged file, relative to the store
    target: str    # where it belongs ("" when its name does not say)
    action: str    # placed | removed | left | cut back
    reason: str

    def to_dict(self) -> dict[str, str]:
        """JSON form."""
        return {"path": self.path, "target": self.target, "action": self.action,
                "reason": self.reason}


def staged_files(store: Path) -> Iterator[Path]:
    """Every `.tmp-` file in the directories a write stages files in."""
    return walk_files(store, STAGING_DIRS, PREFIX)


def begin_batch(store: Path, files: Sequence[tuple[str, int, Sequence[str]]]) -> Path:
    """Journal a write (`append_batch`) before its first byte: each file's
    (path in the store, size before, the ids of the events it appends); the journal's
    path. Written whole under another name, then renamed: a journal is never seen
    half written."""
    data = json.dumps({"files": [{"path": rel, "size": size, "ids": list(ids)}
                                 for rel, size, ids in files]}).encode()
    fd, name = staging_file(store / "events", JOURNAL_WRITING)
    written = Path(name)
    journal = written.with_name(BATCH_PREFIX + written.name.removeprefix(JOURNAL_WRITING))
    try:  # locked until renamed: a half-made journal nobody holds is a dead writer's
        fcntl.flock(fd, fcntl.LOCK_EX)
        write_all(fd, data)
        os.fsync(fd)
        os.rename(written, journal)
        fsync_dir(journal.parent)
    except BaseException as exc:
        written.unlink(missing_ok=True)
        journal.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise StoreError(f"journaling a write in {store / 'events'} "
                             f"failed: {exc.strerror or exc}; nothing was written") from None
        raise
    finally:
        os.close(fd)
    return journal


def _half_made_and_dead(path: Path) -> bool:
    """Whether a journal being written is a dead writer's: no process holds its lock
    (a writer locks it from the moment it makes it, and a second for the lock's
    taking is left to it)."""
    try:
        if time.time() - path.stat().st_mtime < 1.0:
            return False
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False  # renamed or removed meanwhile
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # its writer is alive
    finally:
        os.close(fd)
    return True


def end_batch(journal: Path) -> None:
    """The journaled write is over (durable, or cut back): the journal goes, durably,
    before the write is answered."""
    journal.unlink(missing_ok=True)
    fsync_dir(journal.parent)


def batches_pending(store: Path) -> bool:
    """Whether a journal of a write is there (a write in flight, or
    one a crash cut short): one `scandir`, what every write pays (`settled`)."""
    try:
        with os.scandir(store / "events") as entries:
            return any(e.name.startswith((BATCH_PREFIX, JOURNAL_WRITING)) for e in entries)
    except (FileNotFoundError, NotADirectoryError):
        return False


@dataclass
class _Journal:
    path: Path
    rel: str
    files: list[tuple[str, int, frozenset[str]]]  # day file, its size before, the ids


def _journals(store: Path, out: list[Finished]) -> list[_Journal]:
    """The journals there, the newest first (a later batch's lines follow an earlier
    one's in any file both wrote to); one that does not read is reported in `out`. A
    journal being written (under its other name) that no writer holds locked is a dead
    writer's: nothing was appended before its journal was whole, so it goes, said."""
    if not batches_pending(store):
        return []
    events = store / "events"
    found: list[tuple[int, str, _Journal]] = []
    for path in events.glob(JOURNAL_WRITING + "*"):
        if _half_made_and_dead(path):
            path.unlink(missing_ok=True)
            out.append(Finished(path.relative_to(store).as_posix(), "", "removed",
                                "the journal of a write that a crash cut "
                                "short before its first line: nothing of it was written"))
    for path in events.glob(BATCH_PREFIX + "*"):
        rel = path.relative_to(store).as_posix()
        try:
            mtime = path.stat().st_mtime_ns
            files = [(str(f["path"]), int(f["size"]), frozenset(map(str, f["ids"])))
                     for f in json.loads(path.read_bytes())["files"]]
        except FileNotFoundError:
            continue  # its write finished meanwhile
        except (ValueError, KeyError, TypeError) as exc:
            out.append(Finished(rel, "", "left", f"not a journal gitmem can read ({exc}): "
                                "look at it and delete it"))
            continue
        bad = [f for f, _, _ in files if classify(f) != "events"]
        if bad:
            out.append(Finished(rel, "", "left", f"names {bad[0]!r}, not a day file: look "
                                "at it and delete it"))
            continue
        found.append((mtime, path.name, _Journal(path, rel, files)))
    return [journal for *_, journal in sorted(found, key=lambda f: f[:2], reverse=True)]


def undo_batches(store: Path) -> list[Finished]:
    """Cut back the day files of every journaled write that no writer finishes any more
    (see the module's docstring): a journal whose files a writer holds locked is its
    write in flight, and left to it."""
    out: list[Finished] = []
    for journal in _journals(store, out):
        try:
            with ExitStack() as locks:
                fds: dict[str, int] = {}
                for path, _, _ in journal.files:
                    with contextlib.suppress(FileNotFoundError):
                        fd = locks.enter_context(try_exclusive(store / path, os.O_RDWR))
                        if fd is None:  # its writer still holds it: in flight
                            break
                        fds[path] = fd
                else:
                    out.extend(_undo(journal, fds))
        except OSError as exc:  # one journal that cannot be seen to never stops the rest
            out.append(Finished(journal.rel, "", "left", f"could not be seen to: "
                                f"{exc.strerror or exc} ({exc.filename or journal.rel})"))
    return _logged(out)


@contextlib.contextmanager
def settled(store: Path, rels: Sequence[str]) -> Iterator[dict[str, int]]:
    """The writers' locks of day files `rels` (each opened to append, created if need
    be), held for the block, with every journaled write a crash cut short undone
    first: the journals' day files are locked too, in the one order every writer
    locks in (the path's), so a writer in flight is waited for and a dead one's lines
    are cut back before any line is written after them. {path: descriptor}."""
    for _ in range(3):  # a journal that appears meanwhile names more files: again
        out: list[Finished] = []
        journals = _journals(store, out)
        wanted = {*rels, *(f for j in journals for f, _, _ in j.files)}
        with ExitStack() as locks:
            fds: dict[str, int] = {}
            for path in sorted(wanted):
                if path in rels:
                    fds[path] = locks.enter_context(append_lock(store / path))
                else:  # a journal's file, not this write's: never made
                    with contextlib.suppress(FileNotFoundError):
                        fds[path] = locks.enter_context(exclusive(store / path, os.O_RDWR))
            now = _journals(store, [])
            if any(f not in wanted for j in now for f, _, _ in j.files):
                continue
            for journal in now:  # all of its files held: its writer is gone
                out.extend(_undo(journal, fds, keep=set(rels)))
            _logged(out)
            yield {path: fds[path] for path in rels}
            return
    raise StoreError(f"journals of writes keep appearing in "
                     f"{store / 'events'}: nothing was written; try again")


def append_batch(store: Path, lines: Mapping[str, list[bytes]],
                 ids: Mapping[str, Sequence[str]],
                 on_appending: Callable[[str, Announced | None], None] | None = None,
                 ) -> list[tuple[str, int, bytes, StatKey, StatKey]]:
    """Append each day file's lines (`lines`, by path in the store; `ids`: their
    events'), all or none, a crash included: every file stays locked until all are
    appended, so a failed one takes the others back out, and a write across files, or of
    more than `JOURNAL_ABOVE` bytes, is journaled (the module's docstring).
    `on_appending(path, (stat before, size after))` is told before each file's append,
    and `(path, None)` for each when the write fails. Per file, in path order: where its
    bytes begin, where its lines do, the lines, the stats before and after
    (`appends.append_locked`)."""
    announced: list[str] = []
    try:
        with settled(store, sorted(lines)) as held:
            files = sorted(held.items())
            journal = None if not _may_tear(lines, len(files)) else begin_batch(
                store, [(rel, os.fstat(fd).st_size, ids[rel]) for rel, fd in files])
            done: list[tuple[int, Path, int]] = []  # appended: fd, path, where it began
            written: list[tuple[str, int, bytes, StatKey, StatKey]] = []
            try:
                for rel, fd in files:
                    announce = (None if on_appending is None
                                else functools.partial(on_appending, rel))
                    announced.append(rel)
                    start, offset, data, before, stat = append_locked(
                        fd, store / rel, lines[rel], announce)
                    done.append((fd, store / rel, start))
                    written.append((rel, offset, data, before, stat))
                if journal is not None:
                    end_batch(journal)
                    journal = None
            except BaseException:
                for fd, path, start in done:
                    cut_back(fd, path, start)
                if journal is not None:
                    with contextlib.suppress(OSError):  # nothing of it left to cut
                        end_batch(journal)
                raise
            return written
    except BaseException:
        if on_appending is not None:
            for rel in announced:  # none of these writes is answered
                on_appending(rel, None)
        raise


def _may_tear(lines: Mapping[str, list[bytes]], files: int) -> bool:
    """Whether a write is journaled: it goes to several day files, or more than
    `JOURNAL_ABOVE` bytes to one (a crash could leave part of it)."""
    if files > 1:
        return True
    size = 0
    for data in lines.values():
        for line in data:
            size += len(line)
            if size > JOURNAL_ABOVE:
                return True
    return False


def settle(store: Path) -> None:
    """Undo every journaled write a crash cut short, waiting for writers in flight
    (`settled` for no day files of one's own): before a task update reads a task's
    file, before autocommit reads the day files."""
    with settled(store, []):
        pass


def _logged(out: list[Finished]) -> list[Finished]:
    for done in out:
        logger.warning("an interrupted write: %s %s (%s)", done.action,
                       done.target or done.path, done.reason)
    return out


def _undo(journal: _Journal, fds: dict[str, int],
          keep: AbstractSet[str] = frozenset()) -> list[Finished]:
    """All of a journaled write's lines cut back, or (where a file holds other lines
    after them) none: the journal then stays, for a person to see to. `fds`: its day
    files, locked; a file the write made is removed, but for those in `keep` (the
    caller's write goes on in them)."""
    if not journal.path.exists():
        return []  # the writer finished between the listing and the locks
    cuts: list[tuple[str, int, int, bytes]] = []
    for path, size, ids in journal.files:
        fd = fds.get(path)
        if fd is None:
            continue  # no such file: nothing of the write in it
        added = os.pread(fd, max(os.fstat(fd).st_size - size, 0), size)
        if not _only(added, ids):
            return [Finished(journal.rel, path, "left", f"holds other lines after the lines "
                             f"of a write that a crash cut short (from byte {size}): none of "
                             "its lines are cut back; take them out by hand (their ids are in "
                             f"{journal.rel}), then delete {journal.rel}")]
        cuts.append((path, fd, size, added))
    out: list[Finished] = []
    for path, fd, size, added in cuts:
        if added:
            os.ftruncate(fd, size)
            os.fsync(fd)
            out.append(Finished(journal.rel, path, "cut back",
                                f"{len(added)} bytes of a write that a crash cut short "
                                f"(from byte {size}), never answered"))
        if size == 0 and path not in keep:  # made by the write: not left empty
            (journal.path.parent.parent / path).unlink(missing_ok=True)
    end_batch(journal.path)
    return out


def _only(added: bytes, ids: frozenset[str]) -> bool:
    """Whether bytes appended to a day file are lines of these events only (the first
    maybe the newline that ended a torn line before them, and what follows the last
    newline the part of a line the crash cut short)."""
    *whole, _cut_short = added.removeprefix(b"\n").split(b"\n")
    for line in whole:
        try:
            obj = json.loads(line)
        except ValueError:
            return False
        if not isinstance(obj, dict) or obj.get("id") not in ids:
            return False
    return True


def finish(store: Path, *, grace: float = GRACE_S, now: float | None = None
           ) -> list[Finished]:
    """Finish or undo every interrupted write (see the module's docstring)."""
    clock = time.time() if now is None else now
    out: list[Finished] = undo_batches(store)
    touched: set[Path] = set()
    for staged in staged_files(store):
        try:
            st = staged.stat()
        except FileNotFoundError:
            continue  # its write finished meanwhile
        age = clock - st.st_mtime
        if age < grace:
            out.append(Finished(staged.relative_to(store).as_posix(), "", "left",
                                f"staged {max(age, 0):.0f} s ago: a write may still be "
                                f"finishing it; it is seen to once {grace:.0f} s old"))
            continue
        done = _seen_to(store, staged)
        out.append(done)
        if done.action != "left":
            touched.add(staged.parent)
    for directory in touched:
        fsync_dir(directory)
    return out


def finish_tasks(store: Path) -> list[Finished]:
    """Under the lock task updates hold (gitmem/recorder.py): every task file staged is a
    dead write's, or one whose renaming failed, whatever its age (a write stages and
    renames it holding that lock). Seen to before the next update reads the task, so
    that update builds on it rather than on the file before it."""
    out = [_seen_to(store, staged) for staged in (store / "tasks").glob(PREFIX + "*")]
    if any(done.action != "left" for done in out):
        fsync_dir(store / "tasks")
    return out


def _seen_to(store: Path, staged: Path) -> Finished:
    try:
        done = _finish_one(store, staged, staged.stat())
    except FileNotFoundError:
        return Finished(staged.relative_to(store).as_posix(), "", "left", "gone meanwhile")
    except OSError as exc:  # one file that cannot be moved never stops the rest
        return Finished(staged.relative_to(store).as_posix(), "", "left",
                        f"could not be seen to: {exc.strerror or exc}")
    if done.action != "left":
        logger.warning("an interrupted write: %s %s (%s)", done.action, done.path,
                       done.reason)
    return done


def _finish_one(store: Path, staged: Path, st: os.stat_result) -> Finished:
    rel = staged.relative_to(store).as_posix()
    with_event = _WITH_EVENT.fullmatch(staged.name)
    if with_event is None:
        alone = _ALONE.fullmatch(staged.name)
        if alone is None:
            return Finished(rel, "", "left", _NOT_OURS)
        staged.unlink(missing_ok=True)
        return Finished(rel, (staged.parent / alone.group(1)).relative_to(store).as_posix(),
                        "removed", "written alone, and its write was never answered")
    event_id, day, name = with_event.groups()
    target = staged.parent / name
    target_rel = target.relative_to(store).as_posix()
    if classify(target_rel) not in _WITH_EVENT_KINDS:
        return Finished(rel, "", "left", _NOT_OURS)
    day_file = store / "events" / day[:7] / f"{day}.jsonl"
    if not _holds_event(day_file, event_id):
        staged.unlink(missing_ok=True)
        return Finished(rel, target_rel, "removed",
                        f"its event {event_id} is not in {day_file.relative_to(store)}: "
                        "the write did not happen")
    try:
        current = target.stat()
    except FileNotFoundError:
        current = None
    if current is not None and not stat.S_ISREG(current.st_mode):
        return Finished(rel, target_rel, "left", f"{target_rel} is there, but not a file")
    if current is not None and (current.st_mtime_ns > st.st_mtime_ns
                                or not target_rel.startswith("tasks/")):
        # a task updated again since keeps its newer file; any other record is never
        # replaced, so the one in place stays
        staged.unlink(missing_ok=True)
        return Finished(rel, target_rel, "removed",
                        f"{target_rel} is in place already, written after it (its event "
                        f"{event_id} stays)" if current.st_mtime_ns > st.st_mtime_ns
                        else f"{target_rel} is in place already")
    os.replace(staged, target)
    return Finished(rel, target_rel, "placed", f"its event {event_id} is durable")


def _holds_event(day_file: Path, event_id: str) -> bool:
    """Whether a line of the day file is the event `event_id` (searched in a memory map:
    a day file may be large)."""
    try:
        with day_file.open("rb") as handle, \
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            needle = event_id.encode()
            start = data.find(needle)
            while start >= 0:
                begin = data.rfind(b"\n", 0, start) + 1
                end = data.find(b"\n", start)
                line = data[begin:] if end < 0 else data[begin:end]
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = None
                if isinstance(obj, dict) and obj.get("id") == event_id:
                    return True
                if end < 0:
                    break
                start = data.find(needle, end)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return False
    except ValueError:  # an empty file cannot be mapped
        return False
    return False


def torn_hint(line: bytes, start: int | None, path: str, *, last: bool,
              committed: bool | None = False) -> str:
    """How to take out a line of a day file that is not committed and stops mid-record
    (bytes `start`… of `path` as it is on disk; None: where is unknown, as when git made
    its line ends LF), as a write of gitmem's a crash cut short below `JOURNAL_ABOVE`
    leaves it (it begins as gitmem writes a line, and does not parse); "" for any other
    line. That write was never answered, and its line never indexed (it is no event):
    removing it loses nothing. `committed` None: not known (the index's parse, which
    reads no git), so the hint leaves it to `gitmem verify`."""
    if committed:
        return ""
    if not line.startswith(b'{"id":"evt_'):
        return ""
    try:
        json.loads(line.decode("utf-8", "ignore"))
        return ""
    except ValueError:
        pass
    where = "" if start is None else f" (bytes {start}-{start + len(line)})"
    how = (f"`truncate -s {start} {path}`" if last and start is not None else
           "delete that line, with no gitmem writer running")
    if committed is None:
        return (f"; it stops mid-record{where}, as a write a crash cut short leaves it "
                "(never answered, and no event: never indexed); if so, and it is not "
                f"committed (`gitmem verify` tells), removing it loses nothing: {how}")
    return (f"; it is not committed and stops mid-record{where}, as a write a crash cut "
            "short leaves it (never answered, and no event: never indexed); if so, removing "
            f"it loses nothing: {how}")
