"""The record formats: good records parse; every kind of bad input names path:line and field."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from ulid import ULID

from gitmem import ids
from gitmem.documents import (
    decision_to_text,
    handoff_to_text,
    parse_decision,
    parse_handoff,
    parse_summary,
    parse_task,
    parse_view,
    split_frontmatter,
    summary_to_text,
    task_to_text,
)
from gitmem.errors import FormatError, ValidationError
from gitmem.ids import new_id
from gitmem.memory import Memory
from gitmem.records import (
    Event,
    compact_json,
    content_hash,
    iter_lines,
    parse_event,
    parse_event_line,
    parse_ts,
)
from gitmem.rows import search_keys, time_keys
from gitmem.store import day_file_rel
from tests.conftest import Cli, snapshot

EVT = "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
EVT2 = "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z4"
DEC = "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
DEC2 = "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z4"
TSK = "tsk_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
SUM = "sum_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
HOF = "hof_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
EVENTS = "events/2026-02/2026-02-09.jsonl"


def event_obj(**changes: Any) -> dict[str, Any]:
    """A complete, valid event line object with `changes` applied."""
    obj: dict[str, Any] = {
        "id": EVT, "ts": "2026-02-09T05:12:33+09:00", "tenant_id": "acme",
        "session_id": "s1", "agent_id": "planner", "channel": "private",
        "actor": {"type": "human", "id": "alice"}, "kind": "message",
        "content": {"text": "We deploy on Fridays"}, "refs": [], "tags": ["topic:deploy"],
        "sensitivity": "none",
    }
    obj["hash"] = content_hash(obj["kind"], obj["content"])
    obj.update(changes)
    return obj


def line_error(raw: bytes, line: int = 7) -> FormatError:
    with pytest.raises(FormatError) as caught:
        parse_event_line(raw, path=EVENTS, line=line)
    return caught.value


def obj_line(**changes: Any) -> bytes:
    return json.dumps(event_obj(**changes)).encode()


# ----------------------------------------------------------------------------- events


def test_good_event_line_parses_every_field() -> None:
    event = parse_event_line(obj_line(refs=[DEC]), path=EVENTS, line=1)
    assert isinstance(event, Event)
    assert (event.id, event.tenant_id, event.session_id, event.agent_id) == (
        EVT, "acme", "s1", "planner")
    assert event.actor.type == "human" and event.actor.id == "alice"
    assert event.refs == (DEC,) and event.tags == ("topic:deploy",)
    assert event.when.utcoffset() is not None
    assert event.hash == content_hash("message", {"text": "We deploy on Fridays"})


def test_event_round_trips_through_its_line() -> None:
    event = parse_event(event_obj(content={"text": "naïve café ✓"}))
    line = event.to_line()
    assert line.endswith("\n") and line.count("\n") == 1
    assert "naïve café ✓" in line  # UTF-8 kept, not \u-escaped
    assert parse_event_line(line[:-1].encode(), path=EVENTS, line=1) == event


def test_content_hash_ignores_key_order_and_depends_on_kind() -> None:
    a = content_hash("message", {"text": "x", "extra": [1, 2]})
    b = content_hash("message", {"extra": [1, 2], "text": "x"})
    assert a == b and a.startswith("sha256:") and len(a) == 7 + 64
    assert content_hash("summary", {"text": "x", "extra": [1, 2]}) != a


def test_ts_with_z_suffix_is_accepted() -> None:
    assert parse_event(event_obj(ts="2026-02-09T05:12:33Z")).when.utcoffset() is not None


def test_tool_result_content_is_validated() -> None:
    good = {"tool": "fs.read", "excerpt_text": "abc", "truncated": False, "line_range": [1, 1]}
    assert parse_event(event_obj(kind="tool_result", content=good)).kind == "tool_result"
    with pytest.raises(ValidationError) as caught:
        parse_event(event_obj(kind="tool_result", content={**good, "line_range": [1]}))
    assert caught.value.field == "content.line_range"
    with pytest.raises(ValidationError) as caught:
        parse_event(event_obj(kind="tool_result", content={**good, "artifact_id": "art_x"}))
    assert caught.value.field == "content.artifact_id"


def test_task_update_needs_a_task_id() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_event(event_obj(kind="task_update", content={"title": "x"}))
    assert caught.value.field == "content.task_id"


def test_malformed_json_line_names_path_line() -> None:
    err = line_error(b'{"id": "evt_01', line=12)
    assert (err.path, err.line) == (EVENTS, 12)
    assert str(err).startswith(f"{EVENTS}:12: ")
    assert str(err) == f"{EVENTS}:12: malformed JSON: Unterminated string starting at column 8"


@pytest.mark.parametrize(("raw", "detail"), [
    (b'{"id": 1 "x": 2}', "Expecting ',' delimiter at column 10"),
    (b'{"id": "a\tb"}', "Invalid control character at column 10"),
    (b'', "Expecting value at column 1"),
    (b'{} {}', "Extra data at column 4"),
])
def test_malformed_json_names_what_is_wrong_at_which_column(raw: bytes, detail: str) -> None:
    assert line_error(raw, line=1).detail == f"malformed JSON: {detail}"


def test_non_utf8_byte_names_path_line_and_byte() -> None:
    raw = obj_line().replace(b"Fridays", b"Fri\xffdays")
    err = line_error(raw, line=3)
    assert (err.path, err.line) == (EVENTS, 3)
    assert "UTF-8" in str(err) and "0xff" in str(err)


def test_unknown_kind_names_field_and_choices() -> None:
    err = line_error(obj_line(kind="gossip"), line=4)
    assert isinstance(err, ValidationError)
    assert (err.path, err.line, err.field) == (EVENTS, 4, "kind")
    assert "'gossip'" in str(err) and "message|tool_call" in str(err)


def test_wrong_type_tags_names_field_and_value() -> None:
    err = line_error(obj_line(tags=5), line=2)
    assert (err.path, err.line, err.field) == (EVENTS, 2, "tags")
    assert "expected a list of strings" in str(err) and "got 5" in str(err)
    assert f"{EVENTS}:2: field 'tags'" in str(err)


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("content", ["x"], "expected an object"),
    ("refs", ["not-an-id"], "expected ids like"),
    ("channel", "radio", "private|public|team|agent"),
    ("sensitivity", "classified", "none|low|high|secret"),
    ("actor", "alice", '"type"'),
    ("hash", "md5:abc", "sha256:<64 hex>"),
    ("session_id", "has space", "expected a name"),
    ("tenant_id", 7, "expected a string"),
])
def test_wrong_values_name_their_field(field: str, value: Any, expected: str) -> None:
    err = line_error(obj_line(**{field: value}), line=9)
    assert (err.line, err.field) == (9, field)
    assert expected in err.detail


def test_content_text_of_wrong_type() -> None:
    err = line_error(obj_line(content={"text": 5}))
    assert err.field == "content.text" and "expected a string, got number" in str(err)


def test_unknown_field_is_refused_and_named() -> None:
    err = line_error(obj_line(colour="red"), line=5)
    assert (err.line, err.field) == (5, "colour")
    assert "unknown field" in str(err) and "expected only id, ts" in str(err)


def test_missing_field_is_named() -> None:
    obj = event_obj()
    del obj["session_id"]
    err = line_error(json.dumps(obj).encode(), line=6)
    assert (err.line, err.field) == (6, "session_id") and "missing" in str(err)


@pytest.mark.parametrize("bad_id", [
    "evt_123", "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3", "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2ZU",
    "evt_01jkz3n4q5r6s7t8v9w0x1y2z3", 42,
])
def test_bad_ids_are_refused(bad_id: Any) -> None:
    err = line_error(obj_line(id=bad_id))
    assert err.field == "id"


def test_ts_without_offset_is_refused() -> None:
    err = line_error(obj_line(ts="2026-02-09T05:12:33"), line=8)
    assert (err.line, err.field) == (8, "ts")
    assert "no UTC offset" in str(err)


def test_ts_that_is_not_a_date_is_refused() -> None:
    err = line_error(obj_line(ts="last tuesday"))
    assert err.field == "ts" and "RFC 3339" in str(err) and "'last tuesday'" in str(err)


def test_json_array_line_is_refused() -> None:
    err = line_error(b"[1, 2]", line=2)
    assert err.line == 2 and "expected a JSON object" in str(err)


def test_nan_is_not_json() -> None:
    raw = obj_line().replace(b'on Fridays"}', b'on Fridays", "x": NaN}')
    assert b"NaN" in raw
    err = line_error(raw, line=3)
    assert err.line == 3 and "NaN" in str(err)
    with pytest.raises(ValidationError) as caught:
        content_hash("message", {"text": "x", "score": float("inf")})
    assert caught.value.field == "content"


def test_a_number_beyond_a_floats_range_is_refused_not_read_as_infinity() -> None:
    raw = obj_line().replace(b'on Fridays"}', b'on Fridays", "score": 1e999}')
    err = line_error(raw, line=3)
    assert err.line == 3 and "1e999 is beyond a float's range" in str(err)
    digits = obj_line().replace(b'on Fridays"}', b'on Fridays", "n": ' + b"7" * 5000 + b"}")
    err = line_error(digits, line=4)
    assert err.line == 4 and "more than 4,300 digits" in str(err)
    assert "set_int_max_str_digits" not in str(err)


@pytest.mark.parametrize(("twice", "key"), [
    (b'"channel": "private", "channel": "public"', "channel"),
    (b'"content": {"text": "a", "text": "b"}', "text")])
def test_a_key_given_twice_is_refused(twice: bytes, key: str) -> None:
    """A reader of the line sees the first value, a JSON parser keeps the last: an event
    that reads as private would be served as public."""
    raw = b'{"id": "evt_x", ' + twice + b"}"
    err = line_error(raw, line=5)
    assert err.line == 5 and f"key {key!r} is given twice" in str(err)


def test_a_byte_order_mark_is_named_as_such() -> None:
    err = line_error("\ufeff".encode() + obj_line(), line=1)
    assert err.line == 1 and "begins with a byte order mark" in str(err)


def test_nul_character_is_refused() -> None:
    err = line_error(obj_line(content={"text": "a\u0000b"}), line=4)
    assert (err.line, err.field) == (4, "content.text")
    assert "NUL" in str(err)


def test_iter_lines_yields_only_complete_lines() -> None:
    assert list(iter_lines(b"a\nbb\n\ncc")) == [(1, b"a"), (2, b"bb"), (3, b"")]
    assert list(iter_lines(b"")) == []


# ----------------------------------------------------------------------------- decisions


def decision_text(**meta: Any) -> str:
    fields: dict[str, Any] = {"id": DEC, "ts": "2026-02-09T05:12:33+09:00", "scope": "project",
                              "status": "active", "refs": [EVT],
                              "rationale": ["one service less"]}
    fields.update(meta)
    head = "".join(f"{k}: {json.dumps(v)}\n" for k, v in fields.items() if v is not None)
    return f"---\n{head}---\nUse PostgreSQL full-text search.\n"


DEC_PATH = f"decisions/{DEC}.md"


def decision_error(text: str, path: str = DEC_PATH) -> FormatError:
    with pytest.raises(FormatError) as caught:
        parse_decision(text, path, "default")
    return caught.value


def test_good_decision_parses() -> None:
    d = parse_decision(decision_text(supersedes=[DEC2], confidence=0.8), DEC_PATH, "acme")
    assert d.id == DEC and d.refs == (EVT,) and d.supersedes == (DEC2,)
    assert d.text == "Use PostgreSQL full-text search."
    assert d.tenant_id == "acme" and d.confidence == 0.8
    assert d.rationale == ("one service less",)


def test_decision_round_trips_through_its_file() -> None:
    d = parse_decision(decision_text(title="FTS", tags=["db"]), DEC_PATH, "default")
    assert parse_decision(decision_to_text(d), DEC_PATH, "default") == d


def test_decision_yaml_timestamp_is_kept_as_iso_text() -> None:
    text = decision_text().replace('"2026-02-09T05:12:33+09:00"', "2026-02-09T05:12:33+09:00")
    assert parse_decision(text, DEC_PATH, "default").ts == "2026-02-09T05:12:33+09:00"


def test_decision_without_refs_is_refused() -> None:
    err = decision_error(decision_text(refs=[]))
    assert (err.path, err.line, err.field) == (DEC_PATH, 6, "refs")
    assert "at least one source id" in str(err)


def test_a_line_missing_fields_names_them_all() -> None:
    """A line written by hand named one missing field a run: tenant_id, then agent_id,
    then hash..."""
    from gitmem.records import parse_event

    with pytest.raises(ValidationError) as caught:
        parse_event({"id": "evt_01KHBYB0000000000000000001", "ts": "2026-03-01T10:00:00Z",
                     "kind": "message", "content": {"text": "x"}})
    assert caught.value.field == "tenant_id"
    assert "(also missing: session_id, agent_id, channel, actor," in str(caught.value)


def test_decision_with_refs_key_missing_still_names_a_line() -> None:
    err = decision_error(decision_text(refs=None))
    assert (err.path, err.line, err.field) == (DEC_PATH, 1, "refs")
    assert str(err).startswith(f"{DEC_PATH}:1: ")


@pytest.mark.parametrize(("text", "said"), [
    ("", "the file is empty"), ("\n  \n", "the file is empty"),
    ("id: dec_x\n", "line 1 is not '---'")])
def test_a_record_file_without_frontmatter_says_what_it_holds(text: str, said: str) -> None:
    """An empty decision was said to have a line 1 that is not '---'."""
    with pytest.raises(FormatError) as caught:
        parse_decision(text, DEC_PATH, "default")
    assert (caught.value.line, caught.value.path) == (1, DEC_PATH)
    assert str(caught.value).endswith(said)


def test_broken_frontmatter_names_the_line() -> None:
    text = decision_text().replace('"scope": ', "").replace('scope: "project"', "scope: [project")
    err = decision_error(text)
    assert err.path == DEC_PATH and err.line in (4, 5)
    assert "broken YAML frontmatter" in str(err) and "line 4" in str(err)


def test_a_field_given_twice_in_frontmatter_is_refused_not_silently_replaced() -> None:
    text = decision_text().replace('status: "active"\n',
                                   'status: "active"\nstatus: "superseded"\n')
    err = decision_error(text)
    assert (err.path, err.line) == (DEC_PATH, 6)
    assert "the key 'status' is given twice (first on line 5)" in str(err)


@pytest.mark.parametrize(("line", "field", "what"), [
    ("confidence: !!float high", "confidence", "'high' is not a valid YAML float"),
    ("confidence: 0x_", "confidence", "'0x_' is not a valid YAML int"),
    ("tags: [a, !!bool maybe]", "tags", "'maybe' is not a valid YAML bool"),
])
def test_a_value_yaml_cannot_build_names_line_and_field(line: str, field: str,
                                                        what: str) -> None:
    err = decision_error(decision_text().replace("---\nUse", f"{line}\n---\nUse"))
    assert isinstance(err, ValidationError)
    assert (err.path, err.line, err.field) == (DEC_PATH, 8, field)
    assert what in err.detail and "quote it" in err.detail


def test_what_yaml_would_read_as_a_date_is_kept_as_the_text_written() -> None:
    text = decision_text().replace("---\nUse", "tags: [2026-13-01, 2026-02-09]\n---\nUse")
    assert parse_decision(text, DEC_PATH, "d").tags == ("2026-13-01", "2026-02-09")


def test_an_unhashable_key_in_frontmatter_is_a_format_error() -> None:
    err = decision_error(decision_text().replace("---\nUse", "? [a, b]\n: c\n---\nUse"))
    assert (err.path, err.line) == (DEC_PATH, 8) and "unhashable" in err.detail


def test_unclosed_frontmatter_is_refused() -> None:
    text = decision_text().replace("---\nUse", "Use")
    err = decision_error(text)
    assert err.line == 1 and "never closed" in str(err)


def test_decision_without_frontmatter_is_refused() -> None:
    err = decision_error("Use PostgreSQL.\n")
    assert err.line == 1 and "frontmatter" in str(err)


def test_frontmatter_that_is_a_list_is_refused() -> None:
    err = decision_error("---\n- id\n- ts\n---\nbody\n")
    assert err.line == 2 and "field: value" in str(err)


def test_decision_wrong_type_names_field_line_and_value() -> None:
    err = decision_error(decision_text(tags=5))
    assert (err.line, err.field) == (8, "tags") and "got 5" in str(err)


def test_decision_unknown_field_is_refused() -> None:
    err = decision_error(decision_text(colour="red"))
    assert (err.line, err.field) == (8, "colour") and "unknown field" in str(err)


def test_decision_bad_id() -> None:
    err = decision_error(decision_text(id="dec_42"))
    assert (err.line, err.field) == (2, "id") and "dec_ + a 26-character ULID" in str(err)


def test_decision_ts_without_offset() -> None:
    err = decision_error(decision_text(ts="2026-02-09T05:12:33"))
    assert (err.line, err.field) == (3, "ts") and "no UTC offset" in str(err)


def test_decision_file_name_must_match_its_id() -> None:
    err = decision_error(decision_text(), path=f"decisions/{DEC2}.md")
    assert err.field == "id" and f"decisions/{DEC}.md" in str(err)
    # named beside the file's other problems (one round of hand edits), as a summary's is
    err = decision_error(decision_text(scope="planet"), path=f"decisions/{DEC2}.md")
    assert sorted(p.field or "" for p in err.problems) == ["id", "scope"]


def test_decision_without_body_points_at_the_body() -> None:
    text = decision_text().replace("Use PostgreSQL full-text search.\n", "\n")
    err = decision_error(text)
    assert err.field == "body" and err.line == text.count("\n", 0, text.rindex("---")) + 2


@pytest.mark.parametrize(("meta", "field"), [
    ({"status": "maybe"}, "status"),
    ({"scope": "galaxy"}, "scope"),
    ({"confidence": 2}, "confidence"),
    ({"supersedes": [EVT]}, "supersedes"),
    ({"sensitivity": "classified"}, "sensitivity"),
    ({"rationale": "because"}, None),  # a single string is a one-item list
])
def test_decision_field_values(meta: dict[str, Any], field: str | None) -> None:
    if field is None:
        assert parse_decision(decision_text(**meta), DEC_PATH, "d").rationale == ("because",)
        return
    assert decision_error(decision_text(**meta)).field == field


# ----------------------------------------------------------------------------- tasks, summaries


TASK_PATH = f"tasks/{TSK}.md"


def task_text(**meta: Any) -> str:
    fields: dict[str, Any] = {"id": TSK, "ts": "2026-02-09T05:12:33Z", "title": "Ship it",
                              "status": "doing"}
    fields.update(meta)
    head = "".join(f"{k}: {json.dumps(v)}\n" for k, v in fields.items() if v is not None)
    return f"---\n{head}---\nThe details.\n"


def test_good_task_parses_and_round_trips() -> None:
    t = parse_task(task_text(owner="alice", refs=[EVT]), TASK_PATH, "acme")
    assert (t.id, t.status, t.title, t.details, t.owner, t.refs) == (
        TSK, "doing", "Ship it", "The details.", "alice", (EVT,))
    assert parse_task(task_to_text(t), TASK_PATH, "acme") == t


def test_task_errors() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_task(task_text(status="later"), TASK_PATH, "d")
    assert (caught.value.line, caught.value.field) == (5, "status")
    with pytest.raises(ValidationError) as caught:
        parse_task(task_text(title=None), TASK_PATH, "d")
    assert (caught.value.line, caught.value.field) == (1, "title")
    assert "missing" in str(caught.value)
    with pytest.raises(ValidationError) as caught:
        parse_task(task_text(), "tasks/tsk_01JKZ3N4Q5R6S7T8V9W0X1Y2ZZ.md", "d")
    assert caught.value.field == "id" and "file name" in str(caught.value)


def test_an_unquoted_task_ts_with_a_space_for_the_t_is_refused_as_a_quoted_one_is() -> None:
    """YAML reads `2026-11-27 15:27:48Z` as a timestamp; the records keep it as text, so
    the one ts check applies whether it is quoted or not."""
    text = task_text().replace('"2026-02-09T05:12:33Z"', "2026-11-27 15:27:48Z")
    with pytest.raises(ValidationError) as caught:
        parse_task(text, TASK_PATH, "d")
    assert (caught.value.path, caught.value.line, caught.value.field) == (TASK_PATH, 3, "ts")
    assert "'2026-11-27 15:27:48Z'" in caught.value.detail and "RFC 3339" in caught.value.detail
    written = task_text().replace('"2026-02-09T05:12:33Z"', "2026-02-09T05:12:33Z")
    assert parse_task(written, TASK_PATH, "d").ts == "2026-02-09T05:12:33Z"  # as written


SUM_PATH = f"summaries/episode/{SUM}.md"


def summary_text(**meta: Any) -> str:
    fields: dict[str, Any] = {"id": SUM, "ts": "2026-02-09T05:12:33Z", "scope": "episode",
                              "refs": [EVT, EVT2]}
    fields.update(meta)
    head = "".join(f"{k}: {json.dumps(v)}\n" for k, v in fields.items() if v is not None)
    return f"---\n{head}---\nWe chose FTS.\n"


def test_good_summary_parses_and_round_trips() -> None:
    s = parse_summary(summary_text(decisions=[DEC]), SUM_PATH, "d")
    assert (s.scope, s.refs, s.decisions, s.text) == ("episode", (EVT, EVT2), (DEC,),
                                                      "We chose FTS.")
    assert parse_summary(summary_to_text(s), SUM_PATH, "d") == s


def test_summary_errors() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_summary(summary_text(refs=None), SUM_PATH, "d")
    assert (caught.value.line, caught.value.field) == (1, "refs")
    with pytest.raises(ValidationError) as caught:
        parse_summary(summary_text(scope="week"), SUM_PATH, "d")
    assert caught.value.field == "scope"
    with pytest.raises(ValidationError) as caught:
        parse_summary(summary_text(), f"summaries/session/{SUM}.md", "d")
    assert caught.value.field == "id" and SUM_PATH in str(caught.value)


# ----------------------------------------------------------------------------- handoffs


HOF_PATH = f"handoffs/{HOF}.yaml"


def handoff_text(**meta: Any) -> str:
    fields: dict[str, Any] = {"id": HOF, "ts": "2026-02-09T05:12:33Z", "to_agent": "coder",
                              "task": "Fix the flaky test", "decisions": [DEC]}
    fields.update(meta)
    return "".join(f"{k}: {json.dumps(v)}\n" for k, v in fields.items() if v is not None)


def test_good_handoff_parses_and_round_trips() -> None:
    h = parse_handoff(handoff_text(open_questions=["why?"]), HOF_PATH, "d")
    assert (h.to_agent, h.task, h.decisions, h.open_questions) == (
        "coder", "Fix the flaky test", (DEC,), ("why?",))
    assert parse_handoff(handoff_to_text(h), HOF_PATH, "d") == h


def test_handoff_errors() -> None:
    with pytest.raises(FormatError) as caught:
        parse_handoff(handoff_text().replace('"coder"', "[coder"), HOF_PATH, "d")
    assert caught.value.line is not None and "broken YAML" in str(caught.value)
    with pytest.raises(ValidationError) as caught:
        parse_handoff(handoff_text(to_agent=None), HOF_PATH, "d")
    assert (caught.value.line, caught.value.field) == (1, "to_agent")
    with pytest.raises(ValidationError) as caught:
        parse_handoff(handoff_text(decisions=[EVT]), HOF_PATH, "d")
    assert caught.value.field == "decisions" and caught.value.line == 5
    with pytest.raises(FormatError) as caught:
        parse_handoff("- a\n- b\n", HOF_PATH, "d")
    assert caught.value.line == 1 and "mapping" in str(caught.value)


# ----------------------------------------------------------------------------- views


VIEW = """---
section: rules
pinned: true
channels: [private, team]
---
# Rules

Intro line.

## Style

Use black.

```
# not a heading
```

## Style

Again.
"""


def test_view_chunks_at_headings_with_their_lines() -> None:
    view = parse_view(VIEW, "views/rules.md", "rules")
    assert (view.section, view.pinned, view.channels) == ("rules", True, ("private", "team"))
    assert [(c.anchor, c.line) for c in view.chunks] == [
        ("rules", 6), ("style", 10), ("style-1", 18)]
    lines = VIEW.split("\n")
    for chunk in view.chunks:
        assert lines[chunk.line - 1].lstrip("# ") == chunk.heading
    assert "# not a heading" in view.chunks[1].text


def test_code_fences_of_tildes_and_longer_runs_hold_no_heading() -> None:
    body = ("---\nsection: rules\n---\n# Rules\n\n~~~python\n# a comment\n~~~\n\n"
            "````md\n```\n# an example heading\n```\n````\n\n  ```\n# indented fence\n  ```\n"
            "\n## After\n\nText.\n")
    view = parse_view(body, "views/rules.md", "rules")
    assert [c.anchor for c in view.chunks] == ["rules", "after"]
    assert "# a comment" in view.chunks[0].text and "# an example heading" in view.chunks[0].text


def test_setext_headings_chunk_a_view_as_atx_headings_do() -> None:
    """`Title` over `=====` and a paragraph over `---` are headings as CommonMark (and
    GitHub's diff view) shows them: the view was one chunk, its anchors unknown."""
    body = ("Deploys\n=======\n\nOn Fridays.\n\nRollback   \n"
            "    plan\n---\nKeep the last build.\n")
    view = parse_view(body, "views/rules.md", "rules")
    assert [(c.anchor, c.heading, c.line) for c in view.chunks] == [
        ("deploys", "Deploys", 1), ("rollback-plan", "Rollback plan", 6)]
    assert view.chunks[1].text == "Rollback   \n    plan\n---\nKeep the last build."


@pytest.mark.parametrize("above", [
    "", "- a list item", "> a quote", "    indented code", "1. step", "***", "# Heading",
    "| a | b |\n| - | - |", "```\ncode"])
def test_a_rule_under_what_is_no_paragraph_is_no_heading(above: str) -> None:
    body = f"# Top\n\n{above}\n---\ntext\n"
    view = parse_view(body, "views/rules.md", "rules")
    heading = ["Heading"] if above == "# Heading" else []
    assert [c.heading for c in view.chunks] == ["Top", *heading]


# Each case's headings as markdown-it-py's commonmark mode reads them (top level only).
@pytest.mark.parametrize(("text", "headings"), [
    ("- a long item that wraps\nonto the next line\n---\nafter", []),  # a lazy line
    ("> a quote that wraps\nonto the next line\n---\nafter", []),
    ("- item\n\n  its second paragraph\nlazy\n---", []),
    ("- item\n\nnot the item's\n---", ["not the item's"]),
    ("- item\n  ```\n  code\n  ```\nafter the list\n---", ["after the list"]),
    ("> ```\nafter the quote\n---", ["after the quote"]),
    ("Para\n2. not a list\n---", ["Para 2. not a list"]),  # only 1. interrupts a paragraph
    ("Para\n-\n---", ["Para"]),                            # nor does an empty item
    ("Para\n1. a list\n---", []),
    ("#hashtag\n---", ["#hashtag"]),                        # no space: no ATX heading
    ("Text\n<span>x</span>\n===", ["Text <span>x</span>"]),  # inline HTML continues it
    ("Para\n<div>\n---", []),                              # a block of HTML interrupts it
    ("<div>\nin the HTML block\n---", []),
    ("<!-- a comment -->\nafter it\n---", ["after it"]),
    ("- - -\nafter a rule\n===", ["after a rule"]),
    ("- item\n-\nNotes\n---", ["Notes"]),         # any list item ends a lazy paragraph
    ("> quote\n-\nNotes\n---", ["Notes"]),
    ("- item\n2.\nNotes\n---", ["Notes"]),         # an empty item from 2 too
    ("-\n\n  Notes\n---", ["Notes"]),              # a blank line ends an empty item
    ("* item\n   ===\n===\n---", ["==="]),          # the underline ends the item's paragraph
    ("1. x\n    ---\nNotes\n===", ["Notes"]),
    ("> - c\n>     more\nlazy\n---", []),          # the quoted item's line, then a lazy one
    ("> q\n> ===\nNotes\n---", ["Notes"]),         # the quote's own underline
    ("> q\n>     more\nlazy\n---", []),            # the quote's paragraph goes on
    ("- item\n  ```\nNotes\n---", ["Notes"]),      # a fence in an item ends with it
    ("- item\n  ```\n# Code\n", ["Code"]),
    ("- item\n  ```\n```\n# in a fence\n", []),
    ("-   item\n     # heading in it\nlazy\n---", ["lazy"]),  # it ends the paragraph
    ("- a\n  - b\n    c\n    ---", []),          # a heading in the nested item
    ("- a\n  - b\n  c\n  ---", []),              # b's lazy line, then a rule in a
    ("| a | b |\n---", ["| a | b |"]),           # no table: one delimiter cell for two
    ("[r]: /u\n---", []),                        # a link definition is no paragraph
    ("[r]: /u\nNotes\n---", ["Notes"]),
])
def test_setext_headings_are_commonmark_s(text: str, headings: list[str]) -> None:
    """A line after a list item's or a quote's was taken for a paragraph (`---` under it
    a heading), and an ordered list from 2, `#tag` or an HTML tag line for no paragraph;
    a list item after a lazy line, an underline in a list item or a quote, and a fence
    in a list item were read as they are not."""
    view = parse_view(f"# Top\n\n{text}\n", "views/rules.md", "rules")
    assert [c.heading for c in view.chunks] == ["Top", *headings]


def test_a_table_s_rows_run_to_a_blank_line_and_hold_no_heading() -> None:
    """A line after a GFM table's rows is one more row (GitHub shows it as a cell), and
    `---` under it a rule: it was taken for a paragraph underlined, a heading."""
    body = "# Top\n\n| a | b |\n| - | - |\n| 1 | 2 |\nNotes\n---\ntext\n"
    view = parse_view(body, "views/rules.md", "rules")
    assert [c.heading for c in view.chunks] == ["Top"]
    assert view.chunks[0].text.endswith("Notes\n---\ntext")


def test_atx_headings_are_commonmark_s() -> None:
    """An ATX heading indented up to 3 spaces is one (GitHub shows it so), `#` alone is
    an empty one, and a `#` not after a space is the heading's text, not its closing."""
    body = "# Top\n\n  ## Indented ##\ntext\n#\nempty\n# Foo#\n"
    view = parse_view(body, "views/rules.md", "rules")
    assert [(c.anchor, c.heading, c.line) for c in view.chunks] == [
        ("top", "Top", 1), ("indented", "Indented", 3), ("section", "", 5), ("foo", "Foo#", 7)]
    assert view.chunks[1].text == "## Indented ##\ntext"


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_a_views_chunk_lines_count_every_line_ending(end: str) -> None:
    """CommonMark ends a line at a lone CR too: a chunk's line counts it as the cut does
    (a view saved with CR endings had every chunk at its first line)."""
    body = end.join(["# A", "text", "", "# B", "more", ""])
    assert [(c.anchor, c.line) for c in parse_view(body, "views/x.md", "rules").chunks] == [
        ("a", 1), ("b", 4)]


def test_every_heading_of_a_view_gets_an_anchor_of_its_own() -> None:
    """`Notes` twice gives notes and notes-1, and a heading `Notes 1` slugifies to
    notes-1 too: each anchor is a chunk's key in the index (a clash failed every
    reindex, or dropped the chunk from an incremental sync)."""
    body = "# Notes\n\na\n\n## Notes\n\nb\n\n## Notes 1\n\nc\n## Notes\nd\n## notes-2\ne\n"
    anchors = [c.anchor for c in parse_view(body, "views/x.md", "rules").chunks]
    assert anchors == ["notes", "notes-1", "notes-1-1", "notes-2", "notes-2-1"]


def test_view_body_line_is_exact_when_body_text_repeats_frontmatter() -> None:
    text = "---\ntitle: Rules\n---\n\n# Rules\n\ntext\n"
    meta, body, line = split_frontmatter(text, "views/x.md")
    assert meta == {"title": "Rules"} and line == 4 and body.startswith("\n# Rules")
    assert parse_view(text, "views/x.md", "rules").chunks[0].line == 5


def test_view_without_frontmatter_uses_defaults() -> None:
    view = parse_view("# Glossary\n\n- ACB: bundle\n", "views/glossary.md", "rules")
    assert (view.section, view.pinned, view.title) == ("rules", False, "glossary")
    assert view.chunks[0].anchor == "glossary" and view.chunks[0].line == 1


@pytest.mark.parametrize(("meta", "field"), [
    ("section: nope", "section"),
    ("channels: [radio]", "channels"),
    ("max_tokens: -1", "max_tokens"),
    ("pinned: yes please", "pinned"),
    ("colour: red", "colour"),
])
def test_view_bad_values(meta: str, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_view(f"---\n{meta}\n---\n# Hi\n", "views/x.md", "rules")
    assert (caught.value.path, caught.value.line, caught.value.field) == ("views/x.md", 2, field)


def test_view_broken_frontmatter() -> None:
    with pytest.raises(FormatError) as caught:
        parse_view("---\nsection: [rules\n---\n# Hi\n", "views/x.md", "rules")
    assert caught.value.path == "views/x.md" and caught.value.line in (2, 3)
    assert "broken YAML frontmatter" in str(caught.value)


def test_crlf_and_byte_order_mark_files_parse() -> None:
    crlf = decision_text().replace("\n", "\r\n")
    assert parse_decision(crlf, DEC_PATH, "d").text == "Use PostgreSQL full-text search."
    bom = "\ufeff" + decision_text(tags=5)
    err = decision_error(bom)
    assert (err.line, err.field) == (8, "tags")  # located as without the mark
    view = parse_view("\ufeff---\nsection: identity\n---\n# Hi\n", "views/x.md", "rules")
    assert view.section == "identity" and [c.line for c in view.chunks] == [4]
    assert not any("\ufeff" in c.text for c in view.chunks)


@pytest.mark.parametrize("value", [
    {"text": "plain", "n": 3, "f": [0.1, 1e-7, 1e16, -0.0], "none": None, "ok": True},
    {"text": "é 漢 😀 \u2028 \x00 \x1f \"quoted\" back\\slash", "tags": ["a", "b"]},
    {"big": 2 ** 70},                       # past orjson's 64 bits: the stdlib writes it
    {"lone": "\ud800"},                     # a lone surrogate: the stdlib writes it too
])
def test_compact_json_parses_back_to_the_same_value(value: dict[str, object]) -> None:
    text = compact_json(value)
    assert json.loads(text) == value
    ordered = compact_json(value, sort_keys=True)
    assert json.loads(ordered) == value and list(json.loads(ordered)) == sorted(value)
    assert "\n" not in text and ", " not in text.replace('", "', "")


# ----------------------------------------------------------------------------- timestamps

# Forms Python's datetime.fromisoformat reads that the index cannot hold: PostgreSQL
# refuses the first ones, the hour keys and the conversion to UTC fail on the others.
BAD_TS = [
    ("2026-05-01T10+00:00", "RFC 3339"),                 # hours only
    ("2026-05-01T10:00+00:00", "RFC 3339"),              # no seconds
    ("2026-05-01T10:00:00,5+00:00", "RFC 3339"),         # a comma before the fraction
    ("2026-W18-5T10:00:00+00:00", "RFC 3339"),           # a week date
    ("2026-121T10:00:00+00:00", "RFC 3339"),             # an ordinal date
    ("20260501T100000+0000", "RFC 3339"),                # the basic form
    ("2026-05-01T10:00:00+0000", "RFC 3339"),            # an offset without its colon
    ("2026-05-01T10:00:00+05:30:15", "RFC 3339"),        # an offset with seconds
    ("2026-05-01 10:00:00+00:00", "RFC 3339"),           # a space for the T
    ("2026-05-01t10:00:00z", "RFC 3339"),
    ("2026-05-01T10:00:00.1234567+00:00", "RFC 3339"),   # past microseconds
    ("٢٠٢٦-05-01T10:00:00+00:00", "RFC 3339"),           # digits that are not ASCII
    ("2026-05-01T10:00:00+00:00\n", "RFC 3339"),
    ("2026-05-01", "RFC 3339"),
    ("2026-05-01T10:00:00", "no UTC offset"),
    ("2026-02-30T10:00:00+00:00", "not a date"),
    ("2026-05-01T24:00:00+00:00", "not a date"),
    ("2026-05-01T10:00:00-23:59", "±15:59"),            # PostgreSQL refuses offsets past it
    ("2026-05-01T10:00:00+16:00", "±15:59"),
    ("9999-12-31T23:59:59-12:00", "outside 1970"),       # past year 9999 in UTC
    ("9999-01-01T00:00:00+00:00", "outside 1970"),
    ("1969-12-31T23:59:59+00:00", "outside 1970"),       # before the time of ids
    ("1970-01-01T00:30:00+01:00", "outside 1970"),       # 1969 in UTC
    ("0001-01-01T00:00:00+00:00", "outside 1970"),
]
GOOD_TS = [
    "2026-05-01T10:00:00Z", "2026-05-01T10:00:00+00:00", "2026-05-01T10:00:00-00:00",
    "2026-05-01T10:00:00.5+09:00", "2026-05-01T23:59:59.999999-15:59",
    "2026-05-01T00:00:00+15:59", "1970-01-01T00:00:00Z", "1969-12-31T19:00:00-05:00",
    "9998-12-31T23:59:59.999999Z", "9999-01-01T10:00:00+14:00",
]


@pytest.mark.parametrize(("ts", "needle"), BAD_TS)
def test_a_ts_the_index_cannot_hold_is_refused_naming_field_and_value(ts: str,
                                                                       needle: str) -> None:
    err = line_error(obj_line(ts=ts), line=5)
    assert isinstance(err, ValidationError)
    assert (err.path, err.line, err.field) == (EVENTS, 5, "ts")
    assert needle in err.detail and repr(ts) in err.detail
    with pytest.raises(ValidationError) as caught:
        parse_ts(ts, "now")
    assert caught.value.field == "now"


def test_every_ts_accepted_is_read_alike_by_postgresql_and_keyed_by_the_index(
        dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for ts in GOOD_TS:
            event = parse_event(event_obj(ts=ts))
            [(instant,)] = conn.execute("SELECT %s::text::timestamptz", (ts,)).fetchall()
            assert instant == event.when, ts
            assert search_keys("acme", event.ts)[1:] == time_keys(event.when), ts
            assert day_file_rel(event.when).endswith(f"/{ts[:10]}.jsonl")
            assert new_id("evt", event.when).startswith("evt_")


def test_ids_at_the_first_instant_of_1970_are_random_and_keep_their_time() -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    minted = [new_id("evt", epoch) for _ in range(3)]
    assert all(i.startswith("evt_0000000000") for i in minted)  # the time part: zero
    assert len(set(minted)) == 3 and minted == sorted(minted)
    # each process mints its first id afresh: two processes must not share it
    first = [subprocess.run([sys.executable, "-c", "from datetime import UTC, datetime; "
                             "from gitmem.ids import new_id; "
                             "print(new_id('evt', datetime(1970, 1, 1, tzinfo=UTC)))"],
                            capture_output=True, text=True, check=True).stdout.strip()
             for _ in range(2)]
    assert all(i.startswith("evt_0000000000") for i in first)
    assert first[0] != first[1]
    assert new_id("dec", datetime(2026, 2, 9, 5, 12, 33, 1000, tzinfo=UTC))[4:14] == \
        str(ULID.from_datetime(datetime(2026, 2, 9, 5, 12, 33, 1000, tzinfo=UTC)))[:10]


def test_the_time_an_id_carries_is_its_ulids_and_a_bad_ulid_carries_none() -> None:
    at = datetime(2026, 4, 6, 18, 30, 14, 981000, tzinfo=UTC)
    minted = new_id("evt", at)
    assert ids.time_of(minted) == at == ULID.from_str(minted[4:]).datetime
    assert ids.millis_of(minted) == 1775500214981
    assert ids.time_of(minted.lower()) == at  # as python-ulid reads a lower-case one
    assert ids.millis_of("evt_" + "7" + "Z" * 25) == 2 ** 48 - 1  # the last ULID time
    assert ids.time_of("evt_" + "7" + "Z" * 25) is None  # past datetime's year 9999
    body = minted[4:]
    for bad in ("8" + body[1:],          # over 128 bits
                body[:-1] + "U", body[:-1] + "I",  # not Crockford letters
                body[:-1], body + "0", ""):
        assert ids.millis_of("evt_" + bad) is None and ids.time_of("evt_" + bad) is None, bad
    assert ids.time_of(body) is None  # no prefix


def test_a_markdown_record_with_a_ts_the_index_cannot_hold_names_its_line() -> None:
    err = decision_error(decision_text(ts="2026-02-09T05+09:00"))
    assert (err.path, err.line, err.field) == (DEC_PATH, 3, "ts") and "RFC 3339" in err.detail
    for ts in ("1960-01-01T00:00:00Z", "2026-02-09 05:12:33"):  # YAML timestamps, unquoted
        err = decision_error(decision_text().replace('"2026-02-09T05:12:33+09:00"', ts))
        assert (err.line, err.field) == (3, "ts")


# ----------------------------------------------------------------------------- the write path


def refused(memory: Memory, write: Callable[[], object]) -> ValidationError:
    """The field error a write raises, having changed no file."""
    before = snapshot(memory.store)
    with pytest.raises(ValidationError) as caught:
        write()
    assert snapshot(memory.store) == before
    return caught.value


@pytest.mark.parametrize("ts", [ts for ts, _ in BAD_TS])
def test_every_write_refuses_a_ts_the_index_cannot_hold(memory: Memory, ts: str) -> None:
    source = memory.record({"content": {"text": "a source"}}).id
    writes: dict[str, Callable[[], object]] = {
        "record": lambda: memory.record({"content": {"text": "x"}, "ts": ts}),
        "record_many": lambda: memory.record_many([{"content": {"text": "x"}},
                                                   {"content": {"text": "y"}, "ts": ts}]),
        "decide": lambda: memory.decide("x", [source], ts=ts),
        "task": lambda: memory.task("x", ts=ts),
        "summary": lambda: memory.record({"kind": "summary", "content": {"text": "x"},
                                          "refs": [source], "ts": ts}),
        "handoff": lambda: memory.create_handoff("reviewer", "x", ts=ts),
    }
    for name, write in writes.items():
        err = refused(memory, write)
        assert err.field == "ts" and repr(ts) in err.detail, name
    with pytest.raises(ValidationError) as caught:
        memory.build_acb({"now": ts})
    assert caught.value.field == "now"


def test_the_cli_refuses_a_ts_the_index_cannot_hold_with_a_field_error(cli: Cli) -> None:
    source = cli("record", "a source").output.strip()
    for ts in ("2026-05-01T10+00:00", "1969-12-31T23:59:59+00:00", "9999-12-31T23:59:59-12:00"):
        for args, where in ((("record", "x", "--ts", ts), ""),
                            (("decide", "x", "--ref", source, "--ts", ts), ""),
                            (("record", "--json", "-"), "<stdin>:1: ")):
            result = cli(*args, ok=False, input=json.dumps({"content": {"text": "x"},
                                                            "ts": ts}) + "\n")
            assert result.exit_code == 1, result.output
            assert f"Error: {where}field 'ts': " in result.output and repr(ts) in result.output
    assert len(list(cli.config.store.glob("events/*/*.jsonl"))) == 1


def nested(depth: int) -> list[Any]:
    """`depth` arrays, one inside the other."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(("change", "field", "needle"), [
    ({"content": {"text": "a\ud800b"}}, "content.text", "lone surrogate (\\ud800)"),
    ({"content": {"text": "x", "k\udfffey": 1}}, "content", "lone surrogate (\\udfff)"),
    ({"tags": ["ok", "a\ud800b"]}, "tags", "lone surrogate"),
    ({"content": {"text": "x", "args": nested(64)}}, "content", "more than 64 deep"),
    ({"tags": nested(65)}, "tags", "more than 64 deep"),
])
def test_what_the_index_cannot_store_is_refused_in_a_line_and_in_a_write(
        memory: Memory, change: dict[str, Any], field: str, needle: str) -> None:
    err = line_error(json.dumps(event_obj(**change)).encode(), line=3)
    assert (err.line, err.field) == (3, field) and needle in err.detail
    err = refused(memory, lambda: memory.record(dict(change)))
    assert err.field == field and needle in err.detail


def test_content_nested_64_deep_is_kept_and_deeper_is_refused(memory: Memory) -> None:
    deepest = {"text": "x", "args": nested(63)}  # the content object is the 64th level
    event = memory.record({"content": deepest})
    assert parse_event_line(event.to_line().encode()[:-1], path=EVENTS, line=1) == event
    for depth in (64, 900, 5000):  # past the interpreter's recursion limit too
        content = {"text": "x", "args": nested(depth)}
        err = refused(memory, functools.partial(memory.record, {"content": content}))
        assert err.field == "content" and "more than 64 deep" in err.detail
    err = line_error(b'{"content": {"args": ' + b"[" * 5000 + b"]" * 5000 + b"}}", line=2)
    assert err.line == 2 and "more than 64 deep" in err.detail


def test_a_batch_with_a_lone_surrogate_on_its_second_day_writes_nothing(cli: Cli) -> None:
    batch = (json.dumps({"ts": "2026-01-01T10:00:00+00:00", "content": {"text": "day one"}})
             + "\n" + json.dumps({"ts": "2026-01-02T10:00:00+00:00",
                                  "content": {"text": "second"}, "tags": ["a\ud800b"]}) + "\n")
    result = cli("record", "--json", "-", input=batch, ok=False)
    assert result.exit_code == 1
    assert "Error: <stdin>:2: field 'tags': contains a lone surrogate" in result.output
    assert not list(cli.config.store.glob("events/*/*.jsonl"))


@pytest.mark.parametrize(("field", "value"), [
    ("kind", ["message"]), ("kind", {"message": 1}), ("sensitivity", ["none"]),
    ("sensitivity", 0), ("tenant_id", False), ("session_id", 0), ("channel", ""),
    ("kind", 0), ("kind", ""), ("actor", []), ("actor", ""), ("agent_id", {}), ("id", ""),
    ("id", 0), ("ts", ""), ("ts", 0), ("content", []), ("content", ""), ("hash", ""),
    ("tags", 0), ("tags", {}), ("refs", False),
])
def test_a_present_value_of_a_wrong_type_is_refused_never_defaulted(
        memory: Memory, field: str, value: Any) -> None:
    obj = {"content": {"text": "typed wrong"}, field: value}
    err = refused(memory, lambda: memory.record(obj))
    assert err.field is not None and err.field.split(".")[0] == field


def test_a_falsy_content_id_is_refused_not_replaced_by_a_new_one(memory: Memory) -> None:
    for field, kind in (("task_id", "task_update"), ("decision_id", "decision"),
                        ("summary_id", "summary")):
        for value in ("", 0, False, []):
            obj = {"kind": kind, "refs": [EVT], "content": {"text": "x", "title": "x",
                                                            field: value}}
            err = refused(memory, functools.partial(memory.record, obj))
            assert err.field == f"content.{field}", (kind, value)


def test_a_missing_or_null_field_takes_its_default(memory: Memory) -> None:
    defaults = {"tenant_id": "default", "session_id": "default", "agent_id": "agent",
                "channel": "private", "actor": {"type": "human", "id": "user"},
                "kind": "message", "sensitivity": "none", "refs": [], "tags": []}
    nulls = dict.fromkeys([*defaults, "id", "ts", "hash"])
    for obj in ({"content": {"text": "left out"}}, {**nulls, "content": {"text": "null"}}):
        event = memory.record(obj)
        assert {k: v for k, v in event.to_dict().items() if k in defaults} == defaults
        assert event.id.startswith("evt_") and parse_ts(event.ts)
    event = memory.record({"kind": "task_update", "content": {"title": "t", "task_id": None}})
    assert event.content["task_id"].startswith("tsk_")
