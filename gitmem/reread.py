"""An events file read again: the lines at its start that are as the index made them.

A checkout of an older commit cuts lines from a day file's end; one of another
branch, or an edit in place, changes it from some line on. Rather than read such a
file again whole, the indexer keeps the rows of its first lines that are unchanged
(each event compared field by field with its row; a line that failed, or repeated an
id, named as it was) and makes again only those of the lines after them.
"""

from __future__ import annotations

from dataclasses import replace

import psycopg

from gitmem.db import Database, Row
from gitmem.errors import FormatError
from gitmem.freshness import Assessment
from gitmem.privacy import Privacy
from gitmem.records import Event, iter_events, parse_ts
from gitmem.rows import repeated_id, stored_event
from gitmem.store import at_home


def kept_prefix(db: Database, conn: psycopg.Connection[Row], found: Assessment,
                 state: Row, privacy: Privacy) -> Assessment:
    """`found` (an events file to read again whole) read again only from its first line
    that is not what the index made of it: the lines before it, each event compared
    field by field with its row (content included; a line that failed or was a repeat,
    as it was), keep their rows, and only those of the lines after it are made again.
    A checkout of an older commit cuts lines from a day file's end ("truncate": no line
    to read); one of another branch, or an edit in place, changes it from some line on.
    Reading the 1M corpus's last day file (7,651 lines) again whole took 2.1-3.7 s."""
    if found.kind != "events" or not state["line_count"]:
        return found
    last = state["line_count"]
    rows = {r["line"]: r for r in db.fetchall(
        "file_event_rows", {"path": found.path, "to_line": last}, conn)}
    # where the index holds a row of an id this file repeats: (path, line, hash)
    held = {r["event_id"]: (r["path"], r["line"], r["hash"])
            for r in db.fetchall("file_copies", {"path": found.path}, conn)}
    failed = {int(e["line"]): e for e in state["errors"] if e.get("line")}
    ids: dict[str, int] = {}  # the events of the lines kept: their first line
    kept = 0
    for number, event in iter_events(found.data, found.path):
        if number > last:
            break
        if isinstance(event, FormatError):
            if failed.pop(number, None) != event.to_dict():  # failing as it did
                break
        else:
            row = rows.pop(number, None)
            if row is None:  # a repeat, indexed from another line of this file or another
                first = held.get(event.id)
                if first is None:
                    break
                named = failed.pop(number, None)  # named if its content differs, as it was
                if named != (None if first[2] == event.hash else repeated_id(
                        event.id, first[0], first[1], found.path, number).to_dict()):
                    break
            elif not same_event(event, row, found.path, privacy):
                break
            else:
                held.setdefault(event.id, (found.path, number, row["hash"]))
            ids.setdefault(event.id, number)
        kept = number
    # a line left blank that held an event, or a failure, before
    kept = min([kept, *(n - 1 for n in [*rows, *failed] if n <= kept)])
    if kept == 0:
        return found
    at = 0
    for _ in range(kept):
        at = found.data.index(b"\n", at) + 1
    rest = found.data[at:]
    new_state = dict(found.state)
    new_state["errors"] = [e for e in state["errors"] if int(e.get("line") or 0) <= kept]
    if rest.strip():
        action, reason = "rewrite", (f"lines from {kept + 1} on changed (checkout or edit); "
                                     f"the {kept} before them as indexed")
    else:
        action, reason = "truncate", "lines cut from its end (the rest as indexed)"
    return replace(found, action=action, reason=reason, data=rest, start_line=kept + 1,
                   state=new_state, kept_lines=kept,
                   kept=tuple(i for i, n in ids.items() if n <= kept))


def same_event(event: Event, row: Row, path: str, privacy: Privacy) -> bool:
    """Whether an events row is what `event_rows` makes of `event`, read from `path`
    (content included, in its stored form: a line whose secret was redacted by hand as
    the index redacts it keeps its rows; and whether the line is at home: the ts's text
    says, not only its instant)."""
    event = stored_event(event, privacy)
    return bool(event.id == row["event_id"] and event.tenant_id == row["tenant_id"]
            and at_home(event.id, path, event.ts) == row["home"]
            and parse_ts(event.ts) == row["ts"] and event.session_id == row["session_id"]
            and event.agent_id == row["agent_id"] and event.channel == row["channel"]
            and event.actor.type == row["actor_type"] and event.actor.id == row["actor_id"]
            and event.kind == row["kind"] and event.sensitivity == row["sensitivity"]
            and list(event.tags) == row["tags"] and list(event.refs) == row["refs"]
            and event.hash == row["hash"] and event.content == row["content"])
