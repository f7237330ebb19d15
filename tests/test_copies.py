"""An event id on a second line, in another day file: which line is the original
(gitmem/copies.py), and that the hooks, `gitmem verify` and the index agree on it,
whatever order the files sort or are read in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gitmem import autocommit, ids
from gitmem.copies import Copy, EventLines, HomeLines, original, why_original
from gitmem.hooks import install
from gitmem.memory import Memory
from gitmem.store import at_home, home_dates
from tests.daemons import append, event_line, new_repo
from tests.test_hooks import run_git
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


@pytest.fixture
def root(tmp_path: Path) -> Path:
    repo = new_repo(tmp_path / "repo")
    install(repo / "memory")
    return repo


def commit(root: Path, message: str, *flags: str) -> subprocess.CompletedProcess[str]:
    run_git(root, "add", "-A")
    return run_git(root, "commit", "-q", *flags, "-m", message)


def gitmem(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "GITMEM_STORE"}
    return subprocess.run([sys.executable, "-m", "gitmem", *args], cwd=root, env=env,
                          capture_output=True, text=True)


# --------------------------------------------------------------------------- the rule

def test_home_dates_are_the_dates_of_the_ids_time_in_every_offset() -> None:
    """From UTC-15:59 to UTC+15:59 (the offsets a ts may have): the dates before, of and
    after the UTC date, as far as those offsets reach from the id's time."""
    cases = {datetime(2026, 6, 2, 10, tzinfo=UTC): ("2026-06-01", "2026-06-02", "2026-06-03"),
             datetime(2026, 6, 2, 8, tzinfo=UTC): ("2026-06-01", "2026-06-02"),
             datetime(2026, 6, 2, 16, tzinfo=UTC): ("2026-06-02", "2026-06-03"),
             datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC): (
                 "1999-12-31", "2000-01-01")}
    for at, dates in cases.items():
        assert home_dates(ids.new_id("evt", at)) == dates, at
    assert home_dates("evt_nope") == ()
    assert home_dates("evt_" + "Z" * 26) == ()  # past the years a datetime holds


def test_a_line_is_at_home_when_its_ts_is_the_ids_time_in_that_times_day_file() -> None:
    """The day file is the ts's date in its own offset: an event at 20:00 in New York
    is at home in that day's file though its UTC date is the next day's."""
    evening = "2026-06-02T20:00:00.250000-05:00"
    event_id = minted(evening)
    assert at_home(event_id, "events/2026-06/2026-06-02.jsonl", evening)
    assert at_home(event_id, "memory/events/2026-06/2026-06-02.jsonl", evening)
    assert not at_home(event_id, "events/2026-06/2026-06-01.jsonl", evening)  # a copy
    assert not at_home(event_id, "events/2026-06/2026-06-02.jsonl",
                       "2026-06-02T20:00:01-05:00")  # another event under its id
    assert not at_home(event_id, "events/2026-06/2026-06-02.jsonl", "2026-06-02T20:00:00")
    assert not at_home("evt_nope", "events/2026-06/2026-06-02.jsonl", evening)


def test_the_original_is_committed_then_at_home_then_first_by_path_and_line() -> None:
    event_id = minted(GENUINE_TS)
    home = "events/2026-06/2026-06-02.jsonl"
    early = "events/2026-06/2026-06-01.jsonl"
    pasted = "2026-06-01T10:00:00+00:00"
    genuine = Copy(home, 9, "h1", ts=GENUINE_TS)
    assert original(event_id, [Copy(early, 1, "h2", ts=pasted), genuine]) == genuine
    assert original(event_id, [Copy(early, 1, "h1", ts=GENUINE_TS), genuine]) == genuine
    away = "evt_01JKZ3N4Q5R6S7T8V9W0X00001"  # its time: 2025-02-13, no line there
    first = Copy(early, 9, "h1", ts=pasted)
    assert original(away, [Copy(home, 1, "h2", ts=GENUINE_TS), first]) == first
    assert original(away, [Copy(early, 10, "h2", ts=pasted), first]) == first
    committed, new = Copy(early, 1, "h1", committed=True, ts=pasted), Copy(home, 1, "h2",
                                                                          ts=GENUINE_TS)
    assert original(event_id, [new, committed]) == committed  # a new line never takes over


def test_why_a_line_is_the_original_is_said_as_the_rule_decided() -> None:
    event_id = minted(GENUINE_TS)
    home = Copy("events/2026-06/2026-06-02.jsonl", 1, "h1", ts=GENUINE_TS)
    pasted = Copy("events/2026-06/2026-06-01.jsonl", 1, "h2", ts="2026-06-01T10:00:00+00:00")
    committed = Copy(pasted.path, 1, "h2", committed=True, ts=pasted.ts)
    assert why_original(event_id, committed, home) == "committed before this line"
    assert why_original(event_id, home, pasted).startswith("its ts is the time the id carries")
    copy = Copy("events/2026-06/2026-06-03.jsonl", 1, "h1", ts="2026-06-03T00:00:00+14:00")
    # the same instant in another offset, in its own date's file: at home too
    assert why_original(event_id, home, copy).startswith("both are at home")
    utc_copy = Copy(copy.path, 2, "h1", ts="2026-06-03T00:00:00+14:00")
    assert why_original(event_id, copy, utc_copy) == "an earlier line of this file"
    away = "evt_01JKZ3N4Q5R6S7T8V9W0X00001"
    assert why_original(away, pasted, home).startswith("neither line is at home")


def test_event_lines_name_each_line_that_is_not_the_original_once() -> None:
    event_id = minted(GENUINE_TS)
    home = "events/2026-06/2026-06-02.jsonl"
    other = "events/2026-06/2026-06-01.jsonl"
    lines = EventLines()
    lines.add(event_id, Copy(other, 1, "forged", ts="2026-06-01T10:00:00+00:00"))
    genuine = Copy(home, 1, "genuine", ts=GENUINE_TS)
    lines.add(event_id, genuine)
    lines.add(event_id, genuine)  # read twice: one line
    lines.add(event_id, Copy(home, 4, "genuine", ts=GENUINE_TS))  # a union merge's repeat
    lines.add(event_id, Copy(other, 2, "genuine", ts=GENUINE_TS))  # a copy in another file
    assert event_id in lines and list(lines) == [event_id]
    assert [(copy.path, copy.line) for _, copy, first in lines.not_original()
            if first == genuine] == [(other, 1), (other, 2)]


# --------------------------------------------------------------------------- hooks, verify

def forge(root: Path, event_id: str, rel: str = JUNE_1,
          ts: str = "2026-06-01T10:00:00+00:00") -> None:
    append(root / rel, line(event_id, "forged: deploy from Berlin", ts))


def genuine(root: Path) -> str:
    event_id = minted(GENUINE_TS)
    append(root / JUNE_2, line(event_id, "deploy from Frankfurt", GENUINE_TS))
    assert commit(root, "genuine").returncode == 0
    return event_id


@pytest.mark.parametrize("where", [JUNE_1, JUNE_3])
def test_pre_commit_refuses_a_recorded_id_in_another_day_file_naming_the_new_line(
        root: Path, where: str) -> None:
    """Whether the other day's file sorts before the event's own file or after it."""
    event_id = genuine(root)
    forge(root, event_id, where, ts=f"{where[-16:-6]}T10:00:00+00:00")
    result = commit(root, "forged")
    assert result.returncode == 1
    assert (f"{where}:1: field 'id': {event_id} is also {JUNE_2}:1 with other content; "
            "ids never repeat: remove this line and record it again without its id, which "
            "mints a new one (that line is the original: committed before this line)"
            ) in result.stderr, result.stderr
    assert f"{JUNE_2}:1: field 'id'" not in result.stderr


def test_a_forged_line_past_the_hooks_is_named_by_post_commit_verify_and_verify_since(
        root: Path) -> None:
    event_id = genuine(root)
    base = run_git(root, "rev-parse", "HEAD").stdout.strip()
    forge(root, event_id)
    result = commit(root, "forged", "--no-verify")
    assert result.returncode == 0
    assert "made without the pre-commit check" in result.stderr
    assert f"{JUNE_1}:1: field 'id': {event_id} is also {JUNE_2}:1" in result.stderr
    whole = gitmem(root, "verify")
    assert whole.returncode == 1
    assert (f"{JUNE_1}:1: field 'id': {event_id} is also {JUNE_2}:1 with other content; "
            "ids never repeat: the index leaves this line out") in whole.stderr, whole.stderr
    assert ("(that line is the original: its ts is the time the id carries, in a day file "
            "of that time's date)") in whole.stderr
    assert f"{JUNE_2}:1: field 'id'" not in whole.stderr  # never: remove the genuine line
    since = gitmem(root, "verify", "--since", base)
    assert since.returncode == 1
    assert (f"{JUNE_1}:1: field 'id': {event_id} is also {JUNE_2}:1 with other content; "
            "ids never repeat: remove this line") in since.stderr, since.stderr
    assert f"{JUNE_2}:1: field 'id'" not in since.stderr


def test_pre_merge_commit_refuses_a_branch_that_forged_a_recorded_id(root: Path) -> None:
    event_id = genuine(root)
    main = run_git(root, "branch", "--show-current").stdout.strip()
    run_git(root, "checkout", "-q", "-b", "forger")
    forge(root, event_id)
    assert commit(root, "forged", "--no-verify").returncode == 0
    run_git(root, "checkout", "-q", main)
    append(root / JUNE_3, line(minted("2026-06-03T09:00:00+00:00"), "main goes on",
                               "2026-06-03T09:00:00+00:00"))
    assert commit(root, "main").returncode == 0
    result = run_git(root, "merge", "--no-ff", "--no-edit", "forger")
    assert result.returncode != 0
    assert f"{JUNE_1}:1: field 'id': {event_id} is also {JUNE_2}:1" in result.stderr, \
        result.stderr
    assert "git merge --no-verify" in result.stderr


def test_a_copy_in_a_file_changed_but_not_staged_is_still_found(root: Path) -> None:
    """The committed lines are looked for in the work tree (fast), and in the committed
    version of every file that differs there: a committed line the work tree lost
    still counts."""
    event_id = genuine(root)
    (root / JUNE_2).write_text("")  # not staged: the commit keeps the line
    forge(root, event_id)
    run_git(root, "add", JUNE_1)
    result = run_git(root, "commit", "-q", "-m", "forged")
    assert result.returncode == 1
    assert f"{JUNE_1}:1: field 'id': {event_id} is also {JUNE_2}:1" in result.stderr


def test_a_new_line_in_the_ids_own_day_file_does_not_take_a_committed_id_over(
        root: Path) -> None:
    """An id a client chose (its time is not its event's day): a new line filed in the
    id's own day file still loses to the committed line."""
    event_id = ids.new_id("evt", datetime(2026, 6, 1, 8, tzinfo=UTC))
    append(root / JUNE_2, line(event_id, "recorded with a chosen id", GENUINE_TS))
    assert commit(root, "chosen", "--no-verify").returncode == 0  # misfiled: not the point
    append(root / JUNE_1, line(event_id, "pasted at the id's home",
                               "2026-06-01T10:00:00+00:00"))
    result = commit(root, "pasted")
    assert result.returncode == 1
    assert (f"{JUNE_1}:1: field 'id': {event_id} is also {JUNE_2}:1 with other content"
            in result.stderr)
    verify = gitmem(root, "verify")  # the work tree against HEAD: the new line again
    assert f"{JUNE_1}:1: field 'id': {event_id} is also {JUNE_2}:1" in verify.stderr
    assert json.loads((root / JUNE_2).read_text())["id"] == event_id


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


def test_a_line_rewritten_to_the_same_instant_in_another_offset_is_no_longer_at_home(
        memory: Memory, dsn: str, schema: str) -> None:
    """The same instant written in another offset (a checkout of another branch, an edit)
    dates the line another day: it is no longer at home in its file. A sync kept the row
    (its instant compared equal) as at home, and a line at home elsewhere then lost the
    id to it, where a reindex gives the id to that line."""
    event_id = minted(GENUINE_TS)
    memory.sync()
    write(memory.store, STORE_JUNE_2, line(event_id, "first line about owls", GENUINE_TS))
    memory.sync()
    shifted = "2026-06-03T00:00:00+14:00"  # 10:00 UTC, on the 3rd in its own offset
    write(memory.store, STORE_JUNE_2, line(event_id, "first line about owls", shifted))
    memory.sync([STORE_JUNE_2])
    assert rows(dsn, schema, "SELECT home FROM events WHERE event_id = %s", (event_id,)) == [
        (False,)]
    assert_reindex_equal(memory, dsn, schema)
    write(memory.store, STORE_JUNE_3, line(event_id, "other content about ravens", shifted))
    memory.sync([STORE_JUNE_3])
    assert held(dsn, schema, event_id) == [(STORE_JUNE_3, 1, "other content about ravens")]
    assert_reindex_equal(memory, dsn, schema)


def test_a_copy_names_its_original_where_a_checkout_moved_it(
        memory: Memory, dsn: str, schema: str) -> None:
    """A line under a recorded id with other content names the original's line; a
    checkout that put a line before the original left it naming the old line number."""
    event_id = minted(GENUINE_TS)
    memory.sync()
    write(memory.store, STORE_JUNE_2, line(event_id, "original about owls", GENUINE_TS))
    write(memory.store, STORE_JUNE_3, line(event_id, "impostor about ravens",
                                           "2026-06-03T10:00:00+00:00"))
    memory.sync()
    assert [m for _, _, m in id_errors(memory) if f"is also {STORE_JUNE_2}:1 " in m]
    earlier = minted("2026-06-02T08:00:00+00:00")
    write(memory.store, STORE_JUNE_2, line(earlier, "earlier about finches",
                                           "2026-06-02T08:00:00+00:00")
          + line(event_id, "original about owls", GENUINE_TS))
    memory.sync([STORE_JUNE_2])
    assert [(path, number) for path, number, m in id_errors(memory)
            if f"is also {STORE_JUNE_2}:2 " in m] == [(STORE_JUNE_3, 1)]
    assert_reindex_equal(memory, dsn, schema)


def test_home_lines_see_the_own_day_file_at_its_first_and_last_millisecond(
        tmp_path: Path) -> None:
    """A reindex asks whether a day file read later holds an id at home: events at a
    day's edges are at home in that day's file, and a line at home asks no file."""
    day = datetime(2026, 6, 2, tzinfo=UTC)
    edges = [day + offset for offset in (
        timedelta(0), timedelta(days=1) - timedelta(milliseconds=1))]
    edge_ids = [ids.new_id("evt", at) for at in edges]
    write(tmp_path, STORE_JUNE_2, "".join(line(i, "x", at.isoformat(timespec="milliseconds"))
                                          for i, at in zip(edge_ids, edges, strict=True)))
    homes = HomeLines(tmp_path, [STORE_JUNE_1, STORE_JUNE_2])
    pasted = "2026-06-01T10:00:00+00:00"
    assert not any(at_home(i, STORE_JUNE_1, pasted) for i in edge_ids)
    assert all(homes.hold_later(i, STORE_JUNE_1, False) for i in edge_ids)
    assert all(at_home(i, STORE_JUNE_2, at.isoformat(timespec="milliseconds"))
               for i, at in zip(edge_ids, edges, strict=True))
    outside = ids.new_id("evt", day + timedelta(days=2))
    assert not homes.hold_later(outside, STORE_JUNE_1, False)  # no day file of its time
    fresh = HomeLines(tmp_path, [STORE_JUNE_1, STORE_JUNE_2, STORE_JUNE_3])
    assert not fresh.hold_later(edge_ids[1], STORE_JUNE_2, True)
    assert not fresh._read  # at home: no file read


@pytest.mark.parametrize(("forged_at", "forged_ts"), [
    (STORE_JUNE_1, "2026-06-01T10:00:00+00:00"),  # sorts first
    (STORE_JUNE_3, "2026-06-03T01:00:00+00:00")])  # the UTC date's file, at the same time
@pytest.mark.parametrize("genuine_first", [True, False])
def test_an_event_of_another_offset_keeps_its_id_against_a_pasted_line(
        memory: Memory, dsn: str, schema: str, forged_at: str, forged_ts: str,
        genuine_first: bool) -> None:
    """An event at 20:00 in Chicago (01:00 UTC the next day) lives in its own date's
    file: that line is the original, not a line pasted under its id into another day's
    file, whichever a sync reads first; a reindex agrees."""
    evening = "2026-06-02T20:00:00-05:00"
    event_id = minted(evening)
    store = memory.store
    memory.sync()
    order = [(STORE_JUNE_2, line(event_id, "deploy from Chicago", evening)),
             (forged_at, line(event_id, "forged: deploy from Berlin", forged_ts))]
    for rel, text in order if genuine_first else order[::-1]:
        write(store, rel, text)
        memory.sync([rel])
    assert held(dsn, schema, event_id) == [(STORE_JUNE_2, 1, "deploy from Chicago")]
    assert [(path, number) for path, number, _ in id_errors(memory)] == [(forged_at, 1)]
    assert_reindex_equal(memory, dsn, schema)


def test_autocommit_holds_back_a_recorded_id_pasted_into_another_day_file(
        root: Path) -> None:
    event_id = genuine(root)
    forge(root, event_id)
    fine = minted("2026-06-03T09:00:00+00:00")
    append(root / JUNE_3, line(fine, "a fine line", "2026-06-03T09:00:00+00:00"))
    result = autocommit.commit(root / "memory")
    assert result is not None and result.paths == [STORE_JUNE_3]
    assert [p for p in result.held_back[JUNE_1] if f"is also {JUNE_2}:1" in p]
