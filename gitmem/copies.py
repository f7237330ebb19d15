"""An event id on more than one line: which line is the event's original.

Ids never repeat, but a hand edit, a paste or a bad merge can put one on a second
line: the same event again (a union merge repeats a line in its file: harmless), a
copy in another day file, or another event under a known id. The index keeps one
line's rows per id, and `gitmem verify` and the hooks name the others; both pick the
original by one rule, so that neither depends on the order files are read in:

1. a committed line before one that is not (verify and the hooks only: the index
   cannot see git history); a new line never takes a recorded id over;
2. a line in the day file of the id's own time before one elsewhere: every id gitmem
   mints carries its event's time (gitmem/ids.py), and an event lives in the day file
   of its ts, so a line pasted into another day's file under a known id loses to the
   event, whichever file sorts first;
3. then the line whose file sorts first, then the first line of a file.

Where 1 decides, the index may hold a new line that verify names: the commit of that
line is refused, and the index follows once it is taken out.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem.errors import FormatError
from gitmem.records import find_event
from gitmem.rows import EVENT_COLUMNS, FileRows, repeated_id
from gitmem.store import day_file_rel

if TYPE_CHECKING:
    import psycopg

    from gitmem.db import Database, Row

_DAY_MS = 86_400_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford's base32, in ASCII order
# its digits as `int(_, 32)` reads them
_CROCKFORD = str.maketrans(_ALPHABET, "0123456789abcdefghijklmnopqrstuv")


def home_file(event_id: str) -> str | None:
    """The day file of the time an event id's ULID carries (`ids.time_of`); None when the
    id carries none. A reindex asks for every event: the time is decoded directly, not
    through a ULID object, and the path is made once per day."""
    body = event_id.partition("_")[2]
    if len(body) != 26:
        return None
    try:
        return _day_path(int(body[:10].translate(_CROCKFORD), 32) // _DAY_MS)
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def _day_path(day: int) -> str | None:
    try:
        return day_file_rel(_EPOCH + timedelta(days=day))
    except OverflowError:
        return None


def rank(event_id: str, path: str, line: int) -> tuple[int, str, int]:
    """Where a line of `event_id` stands among its lines, the original lowest: rules 2 and
    3 of the module's docstring (the index's whole rule)."""
    return (0 if path == home_file(event_id) else 1, path, line)


@dataclass(frozen=True)
class Copy:
    """One line holding an event id: its store-relative path, line number, the event's
    hash, and whether the line is committed (in the version the check compares with)."""

    path: str
    line: int
    hash: str
    committed: bool = False


def original(event_id: str, copies: Iterable[Copy]) -> Copy:
    """The original among the lines of `event_id` (rules 1-3)."""
    return min(copies, key=lambda c: (not c.committed, *rank(event_id, c.path, c.line)))


def why_original(event_id: str, first: Copy, other: Copy) -> str:
    """Why `first` is the original and `other` not, as a message says it."""
    if first.committed and not other.committed:
        return "committed before this line"
    if first.path == other.path:
        return "an earlier line of this file"
    if first.path == home_file(event_id):
        return "in the day file of the id's own time"
    return "neither line is in the day file of the id's own time, and its file sorts first"


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
    each id: whether an event's own day file, read later, holds it (then a file read
    now leaves the id to that one). Only an id read away from its own day file asks,
    and the few day files asked about are read once each."""

    def __init__(self, store: Path, paths: Iterable[str]) -> None:
        self.store = store
        self.paths = set(paths)
        self._read: dict[str, bytes] = {}

    def hold_later(self, event_id: str, rel: str) -> bool:
        """Whether the day file of `event_id`'s time sorts after `rel` and holds it."""
        first, after = _day_prefixes(rel)
        if first <= event_id[4:14] < after:  # `rel` is its own day file: most are
            return False
        home = home_file(event_id)
        if home is None or home <= rel or home not in self.paths:
            return False
        if home not in self._read:
            if len(self._read) >= 8:  # a reindex moves on through the days
                self._read.pop(next(iter(self._read)))
            try:
                self._read[home] = (self.store / home).read_bytes()
            except OSError:
                self._read[home] = b""
        return find_event(self._read[home], event_id, home) is not None


@functools.lru_cache(maxsize=64)
def _day_prefixes(rel: str) -> tuple[str, str]:
    """The time parts (an id's first 10 ULID characters) of the first millisecond of day
    file `rel`'s day and of the next day's: a ULID's characters sort as its time."""
    day = (datetime.fromisoformat(rel[-16:-6]).replace(tzinfo=UTC) - _EPOCH).days
    return _time_part(day * _DAY_MS), _time_part((day + 1) * _DAY_MS)


def _time_part(ms: int) -> str:
    return "".join(_ALPHABET[(ms >> shift) & 31] for shift in range(45, -5, -5))


def drop_seen(rows: FileRows, seen: set[str], rel: str,
              homes: HomeLines) -> list[tuple[Any, ...]]:
    """Keep an id's original line across the files of a reindex, read in path order: the
    first occurrence, unless the id's own day file, read later, holds it. The event rows
    dropped (copies, for `event_copies`)."""
    events = rows.tables["events"]
    if not events:
        return []
    dupes = {row[0] for row in events if row[0] in seen or homes.hold_later(row[0], rel)}
    seen.update(row[0] for row in events if row[0] not in dupes)
    if not dupes:
        return []
    rows.tables["events"] = [r for r in events if r[0] not in dupes]
    rows.tables["chunks"] = [r for r in rows.tables["chunks"] if r[3] not in dupes]
    rows.tables["artifacts"] = [r for r in rows.tables["artifacts"] if r[1] not in dupes]
    return [r for r in events if r[0] in dupes]


_EVENT_LINE, _EVENT_HASH = EVENT_COLUMNS.index("line"), EVENT_COLUMNS.index("hash")


def outranked(db: Database, conn: psycopg.Connection[Row], path: str,
              events: Sequence[tuple[Any, ...]]) -> list[str]:
    """The ids of these event rows of file `path` that the index holds from another
    file's line that is not the original: this file's is (rank)."""
    ours = {row[0]: row[_EVENT_LINE] for row in events}
    return sorted(r["event_id"] for r in db.fetchall(
        "events_elsewhere", {"ids": list(ours), "path": path}, conn)
        if rank(r["event_id"], path, ours[r["event_id"]])
        < rank(r["event_id"], r["path"], r["line"]))


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
                     held: Sequence[Row]) -> set[str]:
    """The files (other than `rel`) holding another copy of an event whose rows `rel`
    held and no longer does. The index keeps one copy of an event; when a line moves
    to another file (to its own day's, or away from it), the file it left may give its
    rows up after the other file's copy was skipped as a repeat: `event_copies` lists
    that copy, and the caller reads its file again, whole."""
    gone = {r["event_id"] for r in held} - {r["event_id"] for r in db.fetchall(
        "events_present", {"ids": [r["event_id"] for r in held]}, conn)}
    if not gone:
        return set()
    return {r["path"] for r in db.fetchall("event_copies_of", {"ids": sorted(gone),
                                                               "path": rel}, conn)}
