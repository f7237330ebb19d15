"""An event id on a second line, in another day file: which line is the original
(gitmem/copies.py), and that the index keeps it whatever order the files sort or are
read in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gitmem import ids
from gitmem.copies import HomeLines, home_file, rank
from gitmem.memory import Memory
from gitmem.store import day_file_rel
from tests.daemons import event_line
from tests.test_indexer import assert_reindex_equal, rows, write

JUNE_2 = "memory/events/2026-06/2026-06-02.jsonl"
JUNE_1 = "memory/events/2026-06/2026-06-01.jsonl"
JUNE_3 = "memory/events/2026-06/2026-06-03.jsonl"
GENUINE_TS = "2026-06-02T10:00:00+00:00"


def minted(ts: str) -> str:
    """An id as gitmem mints it for an event of time `ts`."""
    return ids.new_id("evt", datetime.fromisoformat(ts))


def line(event_id: str, text: str, ts: str) -> str:
    return event_line("s", text, ts=ts, id=event_id)[1]


# --------------------------------------------------------------------------- the rule

def test_home_file_is_the_day_file_of_the_time_the_id_carries() -> None:
    for at in (datetime(2026, 6, 2, 10, tzinfo=UTC), datetime(2026, 6, 2, tzinfo=UTC),
               datetime(2026, 6, 2, tzinfo=UTC) - timedelta(milliseconds=1),
               datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC)):
        event_id = ids.new_id("evt", at)
        assert home_file(event_id) == day_file_rel(at)
        time = ids.time_of(event_id)
        assert time is not None and home_file(event_id) == day_file_rel(time)
    assert home_file("evt_nope") is None
    assert home_file("evt_" + "Z" * 26) is None  # past the years a datetime holds


def test_the_original_is_at_home_then_first_by_path_and_line() -> None:
    at_home = minted(GENUINE_TS)
    home = "events/2026-06/2026-06-02.jsonl"
    early = "events/2026-06/2026-06-01.jsonl"
    assert rank(at_home, home, 9) < rank(at_home, early, 1)  # home beats a file sorting first
    away = "evt_01JKZ3N4Q5R6S7T8V9W0X00001"  # its time: 2025-02-13, no line there
    assert rank(away, early, 9) < rank(away, home, 1)
    assert rank(away, early, 1) < rank(away, early, 2)


# --------------------------------------------------------------------------- the index

STORE_JUNE_1, STORE_JUNE_2, STORE_JUNE_3 = (rel.removeprefix("memory/")
                                            for rel in (JUNE_1, JUNE_2, JUNE_3))


def held(dsn: str, schema: str, event_id: str) -> list[tuple[Any, ...]]:
    return rows(dsn, schema, "SELECT path, line, content->>'text' FROM events "
                "WHERE event_id = %s", (event_id,))


def id_errors(memory: Memory) -> list[tuple[str, int, str]]:
    return [(e["path"], e["line"], e["message"]) for e in memory.status()["errors"]
            if e["field"] == "id"]


@pytest.mark.parametrize("forged_at", [STORE_JUNE_1, STORE_JUNE_3])
@pytest.mark.parametrize("genuine_first", [True, False])
def test_the_index_keeps_the_original_whichever_file_it_reads_first(
        memory: Memory, dsn: str, schema: str, forged_at: str, genuine_first: bool) -> None:
    """A line under a recorded id pasted into another day's file: whether that file sorts
    before the event's own or after it, and whichever of the two a sync reads first, the
    index holds the event's own line and names the other; a reindex agrees."""
    event_id = minted(GENUINE_TS)
    store = memory.store
    memory.sync()  # the store's views
    first, second = ((STORE_JUNE_2, forged_at) if genuine_first else (forged_at, STORE_JUNE_2))
    for rel in (first, second):
        if rel == STORE_JUNE_2:
            write(store, rel, line(event_id, "deploy from Frankfurt", GENUINE_TS))
        else:
            write(store, rel, line(event_id, "forged: deploy from Berlin",
                                   f"{rel[-16:-6]}T10:00:00+00:00"))
        memory.sync([rel])
    assert held(dsn, schema, event_id) == [(STORE_JUNE_2, 1, "deploy from Frankfurt")]
    assert id_errors(memory) == [(forged_at, 1, f"{event_id} is also {STORE_JUNE_2}:1 with "
                                  "other content; ids never repeat (this line is not indexed); "
                                  "remove it and record it again without its id, which mints "
                                  "a new one")]
    assert memory.status()["clean"]
    assert_reindex_equal(memory, dsn, schema)
    write(store, forged_at, "")  # the forged line taken out: nothing left to name
    memory.sync()
    assert held(dsn, schema, event_id) == [(STORE_JUNE_2, 1, "deploy from Frankfurt")]
    assert id_errors(memory) == []
    assert_reindex_equal(memory, dsn, schema)


def test_a_takeover_renames_every_other_copy_after_the_original(
        memory: Memory, dsn: str, schema: str) -> None:
    """Two lines away from the id's own day file were read first; the event's own line
    then takes the id over: both others are named after it, as a reindex names them, and
    each file's other events stay indexed."""
    event_id = minted(GENUINE_TS)
    store = memory.store
    others = [minted(f"2026-06-0{day}T08:00:00+00:00") for day in (1, 3)]
    for rel, other, day in ((STORE_JUNE_1, others[0], "01"), (STORE_JUNE_3, others[1], "03")):
        write(store, rel, line(other, f"fine on the {day}th", f"2026-06-{day}T08:00:00+00:00")
              + line(event_id, f"pasted on the {day}th", f"2026-06-{day}T10:00:00+00:00"))
    memory.sync()
    assert held(dsn, schema, event_id) == [(STORE_JUNE_1, 2, "pasted on the 01th")]
    write(store, STORE_JUNE_2, line(event_id, "deploy from Frankfurt", GENUINE_TS))
    report = memory.sync([STORE_JUNE_2])
    assert {c["path"]: c["action"] for c in report.changed} == {
        STORE_JUNE_2: "new", STORE_JUNE_1: "rewrite", STORE_JUNE_3: "rewrite"}
    assert held(dsn, schema, event_id) == [(STORE_JUNE_2, 1, "deploy from Frankfurt")]
    assert [(path, number) for path, number, message in id_errors(memory)
            if f"is also {STORE_JUNE_2}:1 with other content" in message] == [
        (STORE_JUNE_1, 2), (STORE_JUNE_3, 2)]
    assert all(held(dsn, schema, other) for other in others)
    assert memory.status()["clean"]
    assert_reindex_equal(memory, dsn, schema)


def test_home_lines_see_the_own_day_file_at_its_first_and_last_millisecond(
        tmp_path: Path) -> None:
    """A reindex asks whether an id's own day file, read later, holds it: ids minted at
    a day's edges are at home in that day's file only."""
    day = datetime(2026, 6, 2, tzinfo=UTC)
    edges = [ids.new_id("evt", day + offset) for offset in (
        timedelta(0), timedelta(days=1) - timedelta(milliseconds=1))]
    outside = ids.new_id("evt", day + timedelta(days=1))
    write(tmp_path, STORE_JUNE_2, "".join(line(i, "x", GENUINE_TS) for i in edges))
    homes = HomeLines(tmp_path, [STORE_JUNE_1, STORE_JUNE_2])
    assert all(homes.hold_later(i, STORE_JUNE_1) for i in edges)
    assert not any(homes.hold_later(i, STORE_JUNE_2) for i in edges)  # already there
    assert not homes.hold_later(outside, STORE_JUNE_1)  # its day file is not in the store
