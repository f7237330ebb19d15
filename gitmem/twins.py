"""A summary id in both scope folders (a twin): which of the two files the index holds.

A summary lives in `summaries/<scope>/<id>.md`, so one id has two places. Ids never
repeat, but a person's copy or a merge can put the same id under both: the index holds
the summary from one file, and names the other in its errors. Which one does not depend
on the order the files are read in: it is the file a reindex keeps, the first in path
order of those that hold the summary (`summaries/episode/` before `summaries/session/`).
A sync that reads that file after its twin was indexed rolls it back, forgets the twin
and reads it again after it (`indexer._settle`), as it does for an event's original
line (gitmem/copies.py); when the indexed file gives the summary up (deleted, or no
longer a valid summary), its twin is read again whole and takes the id. Decisions,
tasks and handoffs have one place per id, and a file not named by its id holds no
record: they have no twins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gitmem.errors import FormatError
from gitmem.rows import FileRows
from gitmem.store import record_paths

if TYPE_CHECKING:
    import psycopg

    from gitmem.db import Database, Row


READ_AGAIN = ("holds a summary id the other scope's file holds too, and which of the two "
              "the index holds it from changed (gitmem/twins.py)")


def twin_error(summary_id: str, path: str, twin: str) -> FormatError:
    """The problem of a summary file whose id the other scope's file (`twin`, indexed)
    holds too: one of them is indexed, not both."""
    return FormatError(f"summary {summary_id} is also {twin}, which is indexed: ids never "
                       "repeat; remove one of them", path=path, line=1)


def first_kept(rows: FileRows, path: str, seen: dict[str, str]) -> FileRows:
    """A reindex's rows of file `path`, read in path order: none when the other scope's
    file, read before, holds its summary (`seen`: id -> the file read first), and the
    problem named."""
    for summary in rows.tables["summaries"]:
        if seen.setdefault(summary[0], path) != path:  # ids clash
            return FileRows(errors=[*rows.errors, twin_error(summary[0], path,
                                                            seen[summary[0]])])
    return rows


def outranked_twins(db: Database, conn: psycopg.Connection[Row], path: str,
                    summaries: Sequence[tuple[Any, ...]]) -> tuple[list[str], list[FormatError]]:
    """Of summary file `path`'s rows, those the index holds from the other scope's file:
    the ids this file sorts before that file for (it takes them over: the caller rolls
    back and settles them), and the problems of the others (left out: named)."""
    taken: list[str] = []
    errors: list[FormatError] = []
    for found in db.fetchall("summaries_elsewhere", {
            "ids": [row[0] for row in summaries], "path": path}, conn):
        if path < found["path"]:
            taken.append(found["summary_id"])
        else:
            errors.append(twin_error(found["summary_id"], path, found["path"]))
    return sorted(taken), errors


def held(db: Database, conn: psycopg.Connection[Row], path: str) -> set[str]:
    """The summary ids the index holds from file `path`."""
    return {r["summary_id"] for r in db.fetchall("file_summaries", {"path": path}, conn)}


def given_up(db: Database, conn: psycopg.Connection[Row], path: str,
             before: set[str]) -> set[str]:
    """The other scope's files of the summary ids file `path` held (`before`) and holds
    no more: for the caller to read them again whole (one may hold the summary now)."""
    gone = before - held(db, conn, path)
    return {twin for summary_id in gone for twin in record_paths(summary_id) if twin != path}
