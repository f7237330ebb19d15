"""An event id on more than one line: which line is the event's original.

Ids never repeat, but a hand edit, a paste or a bad merge can put one on a second
line: the same event again (a union merge repeats a line in its file: harmless), a
copy in another day file, or another event under a known id. The index keeps one
line's rows per id, and `gitmem verify` and the hooks name the others; both pick the
original by one rule, so that neither depends on the order files are read in:

1. a committed line before one that is not (verify and the hooks only: the index
   cannot see git history); a new line never takes a recorded id over;
2. a line at home before one that is not (`store.at_home`): every id gitmem mints
   carries its event's time (gitmem/ids.py), and an event lives in the day file of its
   ts's date in the ts's own offset (gitmem/store.py), so a line is at home when its ts
   is the time its id carries, to the millisecond, and its file is that ts's day file.
   Another event pasted under a known id, or a copy pasted into another day's file,
   loses to the event, whichever file sorts first. The index notes whether each row's
   line is at home (`events.home`), as the line's offset is not kept;
3. then the line whose file sorts first, then the first line of a file.

Where 1 decides, the index may hold a new line that verify names: the commit of that
line is refused, and the index follows once it is taken out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem.errors import FormatError, UnreadableFileError
from gitmem.ids import ANY_EVENT_ID
from gitmem.records import find_event
from gitmem.rows import EVENT_COLUMNS, FileRows, repeated_id
from gitmem.store import at_home, home_dates, read_regular

if TYPE_CHECKING:
    import psycopg

    from gitmem.db import Database, Row

def rank(home: bool, path: str, line: int) -> tuple[int, str, int]:
    """Where a line of an id stands among its lines, the original lowest: rules 2 and 3
    of the module's docstring (the index's whole rule); `home`: the line is at home."""
    return (0 if home else 1, path, line)


@dataclass(frozen=True)
class Copy:
    """One line holding an event id: its store-relative path, line number, the event's
    hash, and whether the line is committed (in the version the check compares with)."""

    path: str
    line: int
    hash: str
    committed: bool = False
    ts: str = ""  # the line's ts, as it writes it

    def at_home(self, event_id: str) -> bool:
        return at_home(event_id, self.path, self.ts)

    def rank(self, event_id: str) -> tuple[int, str, int]:
        return rank(self.at_home(event_id), self.path, self.line)


def original(event_id: str, copies: Iterable[Copy]) -> Copy:
    """The original among the lines of `event_id` (rules 1-3)."""
    return min(copies, key=lambda c: (not c.committed, *c.rank(event_id)))


def why_original(event_id: str, first: Copy, other: Copy) -> str:
    """Why `first` is the original and `other` not, as a message says it."""
    if first.committed and not other.committed:
        return "committed before this line"
    if first.path == other.path:
        return "an earlier line of this file"
    home = "its ts is the time the id carries, in a day file of that time's date"
    if first.at_home(event_id):
        return home if not other.at_home(event_id) else f"both are at home ({home}), and " \
            "its file sorts first"
    return "neither line is at home (its ts the time the id carries, in that ts's day " \
        "file), and its file sorts first"


class EventLines:
    """The lines of every event id a check read: the first one of each id, and all of
    those of an id read more than once (few: a map of every line would cost a whole
    store's walk too much)."""

    def __init__(self) -> None:
        self.first: dict[str, Copy] = {}
        self.repeated: dict[str, list[Copy]] = {}

    def __contains__(self, event_id: object) -> bool:
        return event_id in self.first

    def __iter__(self) -> Iterator[str]:
        return iter(self.first)

    def add(self, event_id: str, copy: Copy) -> None:
        """Note a line of `event_id` (the same line noted twice counts once)."""
        first = self.first.setdefault(event_id, copy)
        if first == copy:
            return
        lines = self.repeated.setdefault(event_id, [first])
        if copy not in lines:
            lines.append(copy)

    def not_original(self) -> Iterator[tuple[str, Copy, Copy]]:
        """(id, a line that is not the original, the original) for each line that repeats
        an id, but for the same event again in the original's own file (a union merge
        repeats a line: harmless, indexed once)."""
        for event_id, copies in sorted(self.repeated.items()):
            first = original(event_id, copies)
            for copy in copies:
                if copy != first and (copy.path, copy.hash) != (first.path, first.hash):
                    yield event_id, copy, first


# --------------------------------------------------------------------------- the index

class HomeLines:
    """For a reindex, which reads the files in path order and keeps the first line of
    each id: whether a file read later holds the id at home (then a line read now that
    is not at home leaves the id to that one). Only a line not at home asks (few: a
    reindex of a million events asks none), and each day file asked about is read once,
    with the ids it mentions."""

    def __init__(self, store: Path, paths: Iterable[str]) -> None:
        self.store = store
        self.paths = {path[-16:-6]: path for path in paths}
        self._read: dict[str, tuple[bytes, set[bytes]]] = {}

    def hold_later(self, event_id: str, rel: str, home: bool) -> bool:
        """Whether a day file sorting after `rel` holds `event_id` at home, when `rel`'s
        line of it is not (`home`: it is, as its row says)."""
        if home:  # most are
            return False
        for date in home_dates(event_id):
            later = self.paths.get(date)
            if later is None or later <= rel:
                continue
            data, mentioned = self._file(later)
            if event_id.encode() not in mentioned:
                continue
            found = find_event(data, event_id, later)
            if found is not None and at_home(event_id, later, found[1].ts):
                return True
        return False

    def _file(self, rel: str) -> tuple[bytes, set[bytes]]:
        if rel not in self._read:
            if len(self._read) >= 8:  # a reindex moves on through the days
                self._read.pop(next(iter(self._read)))
            try:
                data = read_regular(self.store / rel)
            except (OSError, UnreadableFileError):  # gone, or no file: holds no line
                data = b""
            self._read[rel] = (data, set(ANY_EVENT_ID.findall(data)))
        return self._read[rel]


_EVENT_LINE, _EVENT_HASH = EVENT_COLUMNS.index("line"), EVENT_COLUMNS.index("hash")
_EVENT_HOME = EVENT_COLUMNS.index("home")


def drop_seen(rows: FileRows, seen: set[str], rel: str,
              homes: HomeLines) -> list[tuple[Any, ...]]:
    """Keep an id's original line across the files of a reindex, read in path order: the
    first occurrence, unless a day file read later holds it at home. The event rows
    dropped (copies, for `event_copies`)."""
    events = rows.tables["events"]
    if not events:
        return []
    dupes = {row[0] for row in events
             if row[0] in seen or homes.hold_later(row[0], rel, row[_EVENT_HOME])}
    seen.update(row[0] for row in events if row[0] not in dupes)
    if not dupes:
        return []
    rows.tables["events"] = [r for r in events if r[0] not in dupes]
    rows.tables["chunks"] = [r for r in rows.tables["chunks"] if r[3] not in dupes]
    rows.tables["artifacts"] = [r for r in rows.tables["artifacts"] if r[1] not in dupes]
    return [r for r in events if r[0] in dupes]




def outranked(db: Database, conn: psycopg.Connection[Row], path: str,
              events: Sequence[tuple[Any, ...]]) -> list[str]:
    """The ids of these event rows of file `path` that the index holds from another
    file's line that is not the original: this file's is (rank)."""
    ours = {row[0]: row for row in events}
    return sorted(r["event_id"] for r in db.fetchall(
        "events_elsewhere", {"ids": list(ours), "path": path}, conn)
        if rank(ours[r["event_id"]][_EVENT_HOME], path, ours[r["event_id"]][_EVENT_LINE])
        < rank(r["home"], r["path"], r["line"]))


def repeated_otherwise(db: Database, conn: psycopg.Connection[Row], path: str,
                       events: Sequence[tuple[Any, ...]]) -> list[FormatError]:
    """The errors of those of a file's event rows whose id the index holds from another
    line with other content (left out, as that line is the original: named, not silent)."""
    found = db.fetchall("events_repeated_otherwise", {
        "path": path, "ids": [row[0] for row in events],
        "lines": [row[_EVENT_LINE] for row in events],
        "hashes": [row[_EVENT_HASH] for row in events]}, conn)
    return [repeated_id(r["event_id"], r["first_path"], r["first_line"], path, r["line"])
            for r in found]


def copies_elsewhere(db: Database, conn: psycopg.Connection[Row], rel: str,
                     held: Sequence[Row], left: set[str] | None = None) -> set[str]:
    """The files (other than `rel`) holding another copy of an event whose rows `rel`
    held and no longer does, or holds from another line now. The index keeps one copy
    of an event; when a line moves to another file (to its own day's, or away from it),
    the file it left may give its rows up after the other file's copy was skipped as a
    repeat: `event_copies` lists that copy, and the caller reads its file again, whole.
    A copy with other content names its original's line (`repeated_id`): where a
    checkout moved that line within `rel`, its file is read again too. `left` (a rewrite
    or truncation of `rel`) gets the ids the index holds from no line now
    (gitmem/lost_lines.py names those no file gives back)."""
    now = {r["event_id"]: (r["path"], r["line"]) for r in db.fetchall(
        "events_present", {"ids": [r["event_id"] for r in held]}, conn)}
    if left is not None:
        left.update(r["event_id"] for r in held if r["event_id"] not in now)
    changed = sorted({r["event_id"] for r in held if now.get(r["event_id"]) != (rel, r["line"])})
    if not changed:
        return set()
    return {r["path"] for r in db.fetchall("event_copies_of", {"ids": changed,
                                                               "path": rel}, conn)}
