"""The write path: ids, privacy before disk, excerpts, all-or-nothing writes, torn lines."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gitmem import ids
from gitmem.appends import append_lines
from gitmem.config import Config
from gitmem.derived import RecordFiles, cut_excerpt
from gitmem.documents import parse_decision, parse_task
from gitmem.errors import FormatError, NotFoundError, PrivacyError, StoreError, ValidationError
from gitmem.ids import ULID_ID
from gitmem.memory import Memory
from gitmem.policies import load_policies
from gitmem.recorder import Recorder
from gitmem.records import content_hash, parse_event_line
from gitmem.rpc import error_object
from gitmem.store import Placed, artifact_path, day_file
from tests.conftest import Cli, snapshot
from tests.daemons import append, event_line

NOW = datetime(2026, 2, 9, 5, 12, 33, tzinfo=UTC)
DAY = "events/2026-02/2026-02-09.jsonl"
EVT = "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
SECRET = "sk-" + "A1b2C3d4E5f6G7h8J9k0L1m2"  # matches the default `sk-...` pattern


@pytest.fixture
def store(repo: Path) -> Path:
    return repo / "memory"


@pytest.fixture
def recorder(store: Path) -> Recorder:
    return Recorder(store, load_policies(store), now=lambda: NOW)


def lines(store: Path, rel: str = DAY) -> list[bytes]:
    return (store / rel).read_bytes().split(b"\n")


def events_on_disk(store: Path, rel: str = DAY) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (store / rel).read_bytes().splitlines() if line]


def grep_tree(root: Path, needle: str) -> list[str]:
    """Files under root (including .git objects) whose bytes contain `needle`."""
    data = needle.encode()
    return [str(p) for p in root.rglob("*") if p.is_file() and data in p.read_bytes()]


# ----------------------------------------------------------------------------- basics


def test_record_assigns_id_ts_hash_and_defaults(recorder: Recorder, store: Path) -> None:
    event = recorder.record({"content": {"text": "We deploy on Fridays"}})
    assert ULID_ID.match(event.id) and event.id.startswith("evt_")
    assert event.ts == "2026-02-09T05:12:33+00:00"
    assert event.hash == content_hash("message", {"text": "We deploy on Fridays"})
    assert (event.tenant_id, event.session_id, event.channel, event.kind, event.sensitivity) == (
        "default", "default", "private", "message", "none")
    assert event.actor.type == "human"
    on_disk = events_on_disk(store)
    assert on_disk == [event.to_dict()]
    assert (store / DAY).read_bytes().endswith(b"\n")


def test_an_event_without_an_actor_is_by_whoever_made_it(recorder: Recorder,
                                                         store: Path) -> None:
    """A tool call is its agent's, a tool's result the tool's; an actor given is kept."""
    call = recorder.record({"kind": "tool_call", "agent_id": "planner",
                            "content": {"tool": "grep", "args": {"q": "x"}}})
    result = recorder.record({"kind": "tool_result", "refs": [call.id],
                              "content": {"tool": "grep", "output": "3 matches"}})
    given = recorder.record({"kind": "tool_result", "actor": "tool:rg",
                             "content": {"tool": "grep", "output": "3 matches"}})
    said = recorder.record({"content": {"text": "thanks"}})
    assert [(e.actor.type, e.actor.id) for e in (call, result, given, said)] == [
        ("agent", "planner"), ("tool", "grep"), ("tool", "rg"), ("human", "user")]
    assert [e["actor"] for e in events_on_disk(store)][:2] == [
        {"type": "agent", "id": "planner"}, {"type": "tool", "id": "grep"}]


def test_ids_are_unique_and_sorted_in_write_order(recorder: Recorder, store: Path) -> None:
    ids = [recorder.record({"content": {"text": f"m{i}"}}).id for i in range(50)]
    assert len(set(ids)) == 50 and ids == sorted(ids)
    assert [e["id"] for e in events_on_disk(store)] == ids


def test_given_id_ts_and_matching_hash_are_kept(recorder: Recorder, store: Path) -> None:
    content = {"text": "hello"}
    obj = {"id": "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3", "ts": "2026-03-01T10:00:00+09:00",
           "content": content, "hash": content_hash("message", content)}
    event = recorder.record(obj)
    assert (event.id, event.ts) == (obj["id"], obj["ts"])
    # the day file follows the event's own offset
    assert (store / "events/2026-03/2026-03-01.jsonl").is_file()


def test_given_hash_that_does_not_match_is_refused(recorder: Recorder, store: Path) -> None:
    before = snapshot(store)
    with pytest.raises(ValidationError) as caught:
        recorder.record({"content": {"text": "x"}, "hash": "sha256:" + "0" * 64})
    assert caught.value.field == "hash" and "does not match" in str(caught.value)
    assert snapshot(store) == before


def test_actor_shorthand(recorder: Recorder) -> None:
    event = recorder.record({"actor": "tool:shell", "kind": "tool_call",
                             "content": {"tool": "shell", "args": {"cmd": "ls"}}})
    assert (event.actor.type, event.actor.id) == ("tool", "shell")


# ----------------------------------------------------------------------------- privacy


def test_redaction_happens_before_anything_touches_disk(repo: Path, recorder: Recorder,
                                                        store: Path) -> None:
    big = ("line of harmless output\n" * 600) + f"export OPENAI_KEY={SECRET}\n"
    recorder.record({"content": {"text": f"my key is {SECRET}", "nested": [{"k": SECRET}]},
                     "tags": [f"leak:{SECRET}"]})
    recorder.record({"kind": "tool_result", "content": {"tool": "shell", "output": big}})
    recorder.record({"kind": "artifact", "content": {"name": "env", "data": f"KEY={SECRET}\n"}})
    recorder.decide(f"Rotate {SECRET} weekly", ["evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"],
                    rationale=[f"password: hunter2 and {SECRET}"])
    recorder.task(f"Revoke {SECRET}", details=f"token={SECRET}")
    recorder.record({"kind": "summary", "refs": ["evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"],
                     "content": {"text": f"We leaked {SECRET}"}})
    recorder.handoff("coder", f"Use {SECRET} to deploy")
    assert list((store / "artifacts").rglob("*"))  # an artifact was written
    assert grep_tree(repo, SECRET) == []
    assert grep_tree(repo, "hunter2") == []
    assert b"[REDACTED]" in (store / DAY).read_bytes()


def test_secret_sensitivity_is_refused_with_nothing_written(recorder: Recorder,
                                                            store: Path) -> None:
    recorder.record({"content": {"text": "before"}})
    before = snapshot(store.parent)
    with pytest.raises(PrivacyError) as caught:
        recorder.record({"content": {"text": "the vault code is 1234"}, "sensitivity": "secret"})
    assert "never stored" in str(caught.value) and "nothing was written" in str(caught.value)
    with pytest.raises(PrivacyError):
        recorder.record({"kind": "tool_result", "sensitivity": "secret",
                         "content": {"tool": "t", "output": "x" * 100_000}})
    assert snapshot(store.parent) == before
    assert grep_tree(store.parent, "1234") == []


def test_secret_never_reaches_the_index(memory: Memory, dsn: str, schema: str) -> None:
    memory.record({"content": {"text": f"key {SECRET}"}, "tags": [f"t:{SECRET}"]})
    memory.record({"kind": "tool_result",
                   "content": {"tool": "sh", "output": ("ok\n" * 5000) + SECRET}})
    memory.decide(f"Never paste {SECRET}", [memory.record({"content": {"text": "why"}}).id])
    memory.sync()
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,)).fetchall()]
        assert "events" in tables and "chunks" in tables
        for table in tables:
            hits = conn.execute(
                f'SELECT count(*) FROM "{schema}"."{table}" t WHERE t::text LIKE %s',
                (f"%{SECRET}%",)).fetchone()
            assert hits == (0,), table
        assert conn.execute(f'SELECT count(*) FROM "{schema}".events').fetchone() == (4,)


# ----------------------------------------------------------------------------- tool output


def test_large_tool_output_becomes_excerpt_plus_artifact(recorder: Recorder,
                                                         store: Path) -> None:
    limit = recorder.policies.budgets.max_excerpt_bytes
    output = "".join(f"{i:05d} some output line\n" for i in range(2000))
    assert len(output.encode()) > limit
    event = recorder.record({"kind": "tool_result",
                             "content": {"tool": "fs.read_file", "path": "big.log",
                                         "output": output}})
    content = event.content
    assert content["truncated"] is True and "output" not in content
    excerpt = content["excerpt_text"].encode()
    assert 0 < len(excerpt) <= limit
    head_text, rest = content["excerpt_text"].split("[… ", 1)
    marker, tail = rest.split("\n", 1)
    assert output.startswith(head_text) and output.endswith(tail)  # cut at line ends
    first, last = content["line_range"][1] + 1, content["tail_range"][0] - 1
    assert content["line_range"][0] == 1 and content["tail_range"][1] == 2000
    assert marker == (f"{last - first + 1} lines cut (lines {first}-{last} of 2000); the whole "
                      f"output is artifact {content['artifact_id']} …]")
    assert head_text.count("\n") == content["line_range"][1]
    assert tail.count("\n") == 2000 - content["tail_range"][0] + 1
    assert len(tail) >= limit // 4  # the end, where an error is, is kept
    import hashlib

    digest = hashlib.sha256(output.encode()).hexdigest()
    assert content["artifact_id"] == f"art_{digest}"
    path = artifact_path(store, content["artifact_id"])
    assert path.relative_to(store).parts == ("artifacts", digest[:2], digest)
    assert path.read_bytes() == output.encode()
    assert content["bytes"] == len(output.encode()) and content["total_lines"] == 2000
    # the same output again reuses the artifact
    again = recorder.record({"kind": "tool_result",
                             "content": {"tool": "fs.read_file", "output": output}})
    assert again.content["artifact_id"] == content["artifact_id"]
    assert len([p for p in (store / "artifacts").rglob("*") if p.is_file()
                and p.name != ".gitkeep"]) == 1
    assert not list((store / "artifacts").rglob(".tmp-*"))


def test_small_tool_output_stays_inline(recorder: Recorder, store: Path) -> None:
    event = recorder.record({"kind": "tool_result",
                             "content": {"tool": "sh", "output": "a\nb\n"}})
    assert event.content["excerpt_text"] == "a\nb\n" and event.content["truncated"] is False
    assert "artifact_id" not in event.content
    assert [p.name for p in (store / "artifacts").rglob("*")] == [".gitkeep"]


def test_one_huge_line_keeps_its_head_only(recorder: Recorder) -> None:
    """No line start near the end: the excerpt is the head (never half a line)."""
    output = "é" * 20_000
    content = recorder.record({"kind": "tool_result",
                               "content": {"tool": "sh", "output": output}}).content
    assert output.startswith(content["excerpt_text"]) and "tail_range" not in content
    assert content["truncated"] is True and content["line_range"] == [1, 1]


def test_a_cut_that_leaves_what_a_pattern_matches_is_redacted(recorder: Recorder,
                                                               store: Path) -> None:
    """The whole output holds `AKIA` and 26 capitals, which no pattern matches (20 would);
    the head cut at a line end keeps 20 of them: redacted there, so the line written is
    one `gitmem verify` and the pre-commit hook accept."""
    limit = recorder.policies.budgets.max_excerpt_bytes
    run = "AKIAABCDEFGHIJKLMNOPQRSTUVWXYZ"
    pad = limit * 2 // 3 - 21
    output = "x" * pad + " " + run + " " + "y" * limit  # one long line: the head is cut in it
    privacy = recorder.policies.privacy
    assert privacy.find_secret(output) is None
    assert privacy.find_secret(output[:pad + 21]) is not None  # the cut alone makes one
    content = recorder.record({"kind": "tool_result",
                               "content": {"tool": "sh", "output": output}}).content
    assert content["truncated"] is True and privacy.find_secret(content["excerpt_text"]) is None
    assert "[REDACTED]" in content["excerpt_text"]
    assert artifact_path(store, content["artifact_id"]).read_bytes() == output.encode()
    day = next(store.glob("events/*/*.jsonl"))
    assert privacy.find_secret(day.read_text()) is None


def test_cut_excerpt_never_splits_a_utf8_character() -> None:
    data = ("é" * 1000).encode()
    cut = cut_excerpt(data, 301)
    assert len(cut) <= 301 and cut.decode("utf-8") == "é" * 150
    assert cut_excerpt(b"short", 100) == b"short"


def test_tool_output_of_wrong_type(recorder: Recorder, store: Path) -> None:
    before = snapshot(store)
    with pytest.raises(ValidationError) as caught:
        recorder.record({"kind": "tool_result", "content": {"tool": "sh", "output": 5}})
    assert caught.value.field == "content.output"
    assert snapshot(store) == before


# ----------------------------------------------------------------------------- rejected writes


@pytest.mark.parametrize(("obj", "field"), [
    ({"kind": "gossip", "content": {"text": "x"}}, "kind"),
    ({"content": {"text": "x"}, "tags": 5}, "tags"),
    ({"content": {"text": "x"}, "colour": "red"}, "colour"),
    ({"content": {"text": "x"}, "ts": "2026-02-09T05:12:33"}, "ts"),
    ({"content": {"text": "x"}, "id": "evt_nope"}, "id"),
    ({"content": {"text": "x"}, "refs": ["nope"]}, "refs"),
    ({"content": {"text": 5}}, "content.text"),
    ({"content": "just text"}, "content"),
    ({"content": {"text": "x", "score": float("nan")}}, "content"),
    ({"content": {"text": "a\u0000b"}}, "content.text"),
    ({"kind": "decision", "content": {"text": "x"}}, "refs"),
    ({"kind": "summary", "content": {"text": "x"}}, "refs"),
    ({"kind": "tool_result", "content": {"tool": "sh", "output": "x" * 50_000},
      "channel": "radio"}, "channel"),
    ({"kind": "artifact", "content": {"data": "payload"}, "sensitivity": "classified"},
     "sensitivity"),
    ({"kind": "decision", "refs": [EVT], "content": {"text": "x", "supersedes": 5}},
     "content.supersedes"),
    ({"kind": "decision", "refs": [EVT], "content": {"text": "x", "rationale": [1]}},
     "content.rationale"),
    ({"kind": "decision", "refs": [EVT], "content": {"text": "x", "confidence": "high"}},
     "content.confidence"),
    ({"kind": "summary", "refs": [EVT], "content": {"text": "x", "summary_id": "../x"}},
     "content.summary_id"),
    ({"kind": "task_update", "content": {"title": "x", "owner": 5}}, "content.owner"),
    ({"kind": "task_update", "content": {"title": "x", "task_id": "../x"}}, "content.task_id"),
    ({"kind": "task_update", "content": {"status": "open"}}, "content.title"),
])
def test_rejected_write_leaves_every_file_byte_identical(
        recorder: Recorder, repo: Path, obj: dict[str, Any], field: str) -> None:
    recorder.record({"content": {"text": "already here"}})
    recorder.task("Existing task")
    before = snapshot(repo)
    with pytest.raises(ValidationError) as caught:
        recorder.record(obj)
    assert caught.value.field == field, caught.value
    assert snapshot(repo) == before


def test_batch_with_one_bad_line_writes_nothing(recorder: Recorder, repo: Path) -> None:
    recorder.record({"content": {"text": "already here"}})
    before = snapshot(repo)
    batch = [{"content": {"text": "one"}},
             {"kind": "tool_result", "content": {"tool": "sh", "output": "y" * 50_000}},
             {"kind": "decision", "refs": ["evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"],
              "content": {"text": "d"}},
             {"content": {"text": "four"}, "tags": 5},
             {"content": {"text": "five"}}]
    with pytest.raises(FormatError) as caught:
        recorder.record_many(batch, "events.jsonl", [1, 3, 4, 7, 9])
    assert (caught.value.path, caught.value.line, caught.value.field) == (
        "events.jsonl", 7, "tags")
    assert str(caught.value).startswith("events.jsonl:7: field 'tags'")
    assert snapshot(repo) == before


def test_batch_with_a_secret_names_its_position(recorder: Recorder, repo: Path) -> None:
    before = snapshot(repo)
    with pytest.raises(PrivacyError) as caught:
        recorder.record_many([{"content": {"text": "a"}},
                              {"content": {"text": "b"}, "sensitivity": "secret"}], "<stdin>")
    assert str(caught.value).startswith("<stdin>:2: ")
    assert snapshot(repo) == before


def test_batch_writes_all_lines_in_order(recorder: Recorder, store: Path) -> None:
    events = recorder.record_many([{"content": {"text": f"n{i}"}} for i in range(20)])
    assert [e["id"] for e in events_on_disk(store)] == [e.id for e in events]


# ----------------------------------------------------------------------------- torn lines


def test_torn_last_line_stays_its_own_line(recorder: Recorder, store: Path) -> None:
    first = recorder.record({"content": {"text": "first"}})
    fragment = b'{"id":"evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3","ts":"2026-02-09T0'
    with (store / DAY).open("ab") as handle:
        handle.write(fragment)  # a writer crashed mid-line
    second = recorder.record({"content": {"text": "second"}})
    raw = lines(store)
    assert raw[-1] == b""  # the file ends with a newline
    assert raw[:-1] == [first.to_line().rstrip("\n").encode(), fragment,
                        second.to_line().rstrip("\n").encode()]
    assert parse_event_line(raw[2], path=DAY, line=3) == second
    with pytest.raises(FormatError) as caught:
        parse_event_line(raw[1], path=DAY, line=2)
    assert caught.value.line == 2 and "malformed JSON" in str(caught.value)


def test_append_lines_creates_the_day_file(tmp_path: Path) -> None:
    target = tmp_path / "events" / "2026-02" / "2026-02-09.jsonl"
    append_lines(target, [b"a\n", b"b\n"])
    append_lines(target, [b"c\n"])
    assert target.read_bytes() == b"a\nb\nc\n"


def test_day_file_uses_the_events_own_offset(store: Path) -> None:
    ts = datetime.fromisoformat("2026-02-09T23:30:00-05:00")
    assert day_file(store, ts) == store / "events/2026-02/2026-02-09.jsonl"


# ----------------------------------------------------------------------------- decisions, tasks


def test_decision_writes_its_file_and_event(recorder: Recorder, store: Path) -> None:
    ref = recorder.record({"content": {"text": "FTS is enough"}}).id
    event = recorder.decide("Use PostgreSQL FTS", [ref], rationale=["no new service"],
                            title="Retrieval", alternatives=["a vector DB"], confidence=0.9)
    dec_id = event.content["decision_id"]
    rel = f"decisions/{dec_id}.md"
    decision = parse_decision((store / rel).read_text(), rel, "default")
    assert (decision.text, decision.refs, decision.rationale, decision.title) == (
        "Use PostgreSQL FTS", (ref,), ("no new service",), "Retrieval")
    assert decision.confidence == 0.9 and decision.status == "active"
    assert event.kind == "decision" and event.refs == (ref,)
    # a later decision supersedes it: the old file is never rewritten
    old_bytes = (store / rel).read_bytes()
    newer = recorder.decide("Use PostgreSQL FTS with bounded pools", [ref],
                            supersedes=[dec_id])
    new_rel = f"decisions/{newer.content['decision_id']}.md"
    assert parse_decision((store / new_rel).read_text(), new_rel, "default").supersedes == (
        dec_id,)
    assert (store / rel).read_bytes() == old_bytes


def test_decision_with_dangling_supersedes_is_refused(recorder: Recorder, repo: Path) -> None:
    ref = recorder.record({"content": {"text": "x"}}).id
    before = snapshot(repo)
    with pytest.raises(ValidationError) as caught:
        recorder.decide("Replace it", [ref], supersedes=["dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"])
    assert caught.value.field == "content.supersedes"
    assert "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3" in str(caught.value)
    assert snapshot(repo) == before


def test_a_decision_naming_one_it_supersedes_twice_is_refused(recorder: Recorder,
                                                               repo: Path) -> None:
    """`--supersedes A --supersedes A` was written as given, and verify then read the new
    decision as a fork of A with itself."""
    ref = recorder.record({"content": {"text": "x"}}).id
    old = recorder.decide("Use Redis", [ref]).content["decision_id"]
    before = snapshot(repo)
    with pytest.raises(ValidationError, match=f"decision {old} is named twice in supersedes; "
                       "name it once") as caught:
        recorder.decide("Use Valkey", [ref], supersedes=[old, old])
    assert caught.value.field == "content.supersedes"
    assert snapshot(repo) == before


def test_decision_without_refs_is_refused(recorder: Recorder, repo: Path) -> None:
    before = snapshot(repo)
    with pytest.raises(ValidationError) as caught:
        recorder.decide("Unfounded", [])
    assert caught.value.field == "refs" and "at least one source id" in str(caught.value)
    assert snapshot(repo) == before


def test_task_create_and_update(recorder: Recorder, store: Path) -> None:
    created = recorder.task("Write the onboarding guide", owner="alice", details="Outline")
    task_id = created.content["task_id"]
    rel = f"tasks/{task_id}.md"
    task = parse_task((store / rel).read_text(), rel, "default")
    assert (task.title, task.status, task.owner, task.details) == (
        "Write the onboarding guide", "open", "alice", "Outline")
    assert task.refs == (created.id,)  # the creating event, as each update's (FORMATS.md)
    updated = recorder.task("Write the onboarding guide", task_id=task_id, status="done")
    assert updated.content["task_id"] == task_id and updated.kind == "task_update"
    task = parse_task((store / rel).read_text(), rel, "default")
    assert (task.status, task.owner, task.details, task.ts) == ("done", "alice", "Outline",
                                                                created.ts)
    assert task.refs == (created.id, updated.id)
    assert [e["kind"] for e in events_on_disk(store)] == ["task_update", "task_update"]
    assert len(list((store / "tasks").glob("tsk_*.md"))) == 1


def test_a_task_update_changes_only_the_lines_of_what_changed(recorder: Recorder,
                                                              store: Path) -> None:
    """A reviewer's comment on a field and the details' blank lines stay: the pull
    request shows the status line and the new ref, nothing else."""
    created = recorder.task("Rotate the certificates", owner="alice", details="Step one")
    task_id = created.content["task_id"]
    path = store / f"tasks/{task_id}.md"
    edited = path.read_text().replace("owner: alice", "owner: alice  # lead until May")
    edited = edited.replace("Step one\n", "Step one.\n\n\nStep two, after a pause.\n")
    path.write_text(edited)
    updated = recorder.task("Rotate the certificates", task_id=task_id, status="doing")
    after = path.read_text()
    removed = [line for line in edited.splitlines() if line not in after.splitlines()]
    added = [line for line in after.splitlines() if line not in edited.splitlines()]
    assert removed == ["status: open"]
    assert added == ["status: doing", f"- {updated.id}"]  # its ref, after the creating one
    task = parse_task(after, f"tasks/{task_id}.md", "default")
    assert (task.status, task.owner) == ("doing", "alice")
    recorder.task("Rotate the certificates", task_id=task_id, owner="bob", details="All done")
    task = parse_task(path.read_text(), f"tasks/{task_id}.md", "default")
    assert (task.owner, task.details) == ("bob", "All done")
    assert "owner: bob  # lead until May" in path.read_text()


def test_a_task_update_makes_it_more_sensitive_never_less_and_adds_its_tags(
        recorder: Recorder, store: Path) -> None:
    """`gitmem task --id T --sensitivity high` was written to the update's event only:
    the task file, which task_state shows, stayed `none`, and public bundles showed it."""
    task_id = recorder.task("Rotate the payroll database password").content["task_id"]
    rel = f"tasks/{task_id}.md"
    recorder.task(task_id=task_id, sensitivity="high", tags=["topic:payroll"])
    task = parse_task((store / rel).read_text(), rel, "default")
    assert (task.sensitivity, task.tags) == ("high", ("topic:payroll",))
    recorder.task(task_id=task_id, status="doing")  # says nothing of it: `none`
    task = parse_task((store / rel).read_text(), rel, "default")
    assert (task.status, task.sensitivity, task.tags) == ("doing", "high", ("topic:payroll",))


def test_retitling_a_task_whose_title_holds_a_hash_leaves_nothing_of_it(
        recorder: Recorder, store: Path) -> None:
    """` #` inside the quoted title is not a comment: the edit must not keep it."""
    task_id = recorder.task("Fix issue #123 in deploy").content["task_id"]
    rel = f"tasks/{task_id}.md"
    recorder.task("Fix the login bug", task_id=task_id)
    text = (store / rel).read_text()
    assert parse_task(text, rel, "default").title == "Fix the login bug"
    assert "#123" not in text


def test_task_update_with_bad_status_changes_nothing(recorder: Recorder, repo: Path) -> None:
    task_id = recorder.task("A task").content["task_id"]
    before = snapshot(repo)
    with pytest.raises(ValidationError) as caught:
        recorder.task("A task", task_id=task_id, status="later")
    assert caught.value.field == "status"
    assert snapshot(repo) == before


def test_handoff_with_unknown_decision_is_refused(recorder: Recorder, repo: Path) -> None:
    before = snapshot(repo)
    with pytest.raises(ValidationError) as caught:
        recorder.handoff("coder", "Fix it", decisions=["dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"])
    assert caught.value.field == "decisions"
    assert snapshot(repo) == before
    packet = recorder.handoff("coder", "Fix it")
    assert (repo / "memory" / "handoffs" / f"{packet.id}.yaml").is_file()


def test_a_handoff_citing_what_is_not_there_or_another_tenants_is_refused(
        memory: Memory) -> None:
    """Its refs were not checked on write: verify and the pre-commit hook refused the
    file afterwards, and the daemon's commits left it out for good."""
    own = memory.record({"content": {"text": "ours"}}).id
    theirs = memory.record({"content": {"text": "theirs"}, "tenant_id": "globex"}).id
    handoffs = memory.store / "handoffs"
    before = sorted(p.name for p in handoffs.iterdir())
    for refs, said in (([own, "evt_01M8G91Z3MS2KFWX37FW5QXZZ0"], "is not in the store"),
                       (["dec_01AAAAAAAAAAAAAAAAAAAAAAAA"], "is not in the store"),
                       ([theirs], "is not in the store")):  # another's: as none
        with pytest.raises(ValidationError) as caught:
            memory.create_handoff("coder", "Fix it", refs=refs)
        assert caught.value.field == "refs" and said in str(caught.value)
    assert sorted(p.name for p in handoffs.iterdir()) == before
    packet = memory.create_handoff("coder", "Fix it", refs=[own])
    assert packet.refs == (own,)


def test_another_tenants_task_or_decision_is_never_written_through(
        recorder: Recorder, repo: Path) -> None:
    """A tenant cannot update another tenant's task, supersede its decision or hand it
    over: each is refused with nothing written, naming the field."""
    ref = recorder.record({"content": {"text": "x"}, "tenant_id": "acme"}).id
    task_id = recorder.task("Rotate acme's keys", tenant_id="acme").content["task_id"]
    dec_id = recorder.decide("Use NATS", [ref], tenant_id="acme").content["decision_id"]
    mine = recorder.record({"content": {"text": "y"}, "tenant_id": "evil"}).id
    before = snapshot(repo)
    with pytest.raises(NotFoundError, match=f"no task {task_id} to update"):
        recorder.task("Done, says another tenant", task_id=task_id, status="done",
                      tenant_id="evil")
    with pytest.raises(ValidationError) as caught:
        recorder.decide("Use Kafka", [mine], supersedes=[dec_id], tenant_id="evil")
    assert caught.value.field == "content.supersedes" and f"no decision {dec_id}" in str(
        caught.value)
    with pytest.raises(ValidationError) as caught:
        recorder.handoff("coder", "Carry on", decisions=[dec_id], tenant_id="evil")
    assert caught.value.field == "decisions"
    assert snapshot(repo) == before
    # the tenant's own are fine
    recorder.task("Done", task_id=task_id, status="done", tenant_id="acme")
    recorder.decide("Use Kafka", [ref], supersedes=[dec_id], tenant_id="acme")


def test_a_task_id_named_without_a_title_is_not_found_alike_for_another_tenants(
        recorder: Recorder, repo: Path, store: Path) -> None:
    """Another tenant's task id and an unknown one give one answer to an update. (With a
    title, an unknown id makes a new task, as the corpus generator's chosen ids need,
    and another tenant's is refused: that tells only that an id the caller already
    knew exists; a minted id has 80 random bits.)"""
    theirs = recorder.task("B secret task", tenant_id="bob").content["task_id"]
    unknown = ids.new_id("tsk", datetime.now(UTC))
    before = snapshot(repo)
    said = []
    for task_id in (theirs, unknown):
        with pytest.raises(NotFoundError) as caught:
            recorder.record({"kind": "task_update", "tenant_id": "alice",
                             "content": {"task_id": task_id, "status": "done"}})
        said.append(str(caught.value).replace(task_id, "<id>"))
    assert said[0] == said[1] and "no task <id> to update" in said[0]
    assert snapshot(repo) == before


def test_a_record_whose_tenant_cannot_be_read_is_said_so_to_every_tenant(
        recorder: Recorder, repo: Path, store: Path) -> None:
    """A decision or task file whose `tenant_id` is no string was named to every tenant,
    its owner included, as one that does not exist: now each is told it cannot be read
    (the file's content unquoted), alike."""
    said: dict[str, list[str]] = {}
    refs = {t: recorder.record({"content": {"text": "x"}, "tenant_id": t}).id
            for t in ("alice", "bob")}
    dec = recorder.decide("Use X", [refs["alice"]], tenant_id="alice").content["decision_id"]
    task = recorder.task("Secret 42", tenant_id="alice").content["task_id"]
    for rel in (f"decisions/{dec}.md", f"tasks/{task}.md"):
        path = store / rel
        path.write_text(path.read_text().replace("tenant_id: alice", "tenant_id: 7"))
    before = snapshot(repo)
    for tenant in ("alice", "bob"):
        writes = [
            lambda t: recorder.decide("Use Y", [refs[t]], supersedes=[dec], tenant_id=t),
            lambda t: recorder.record({"content": {"text": "y"}, "refs": [dec, task],
                                       "tenant_id": t}),
            lambda t: recorder.task(task_id=task, status="done", tenant_id=t)]
        for write in writes:
            with pytest.raises(ValidationError) as caught:
                write(tenant)
            said.setdefault(tenant, []).append(str(caught.value))
    assert said["alice"] == said["bob"]
    assert all("cannot be read" in m and "no decision" not in m and "42" not in m
               for m in said["alice"]), said
    assert snapshot(repo) == before


@pytest.mark.parametrize("breaking", ["\x85", "\u2028", "\u2029"])
def test_a_line_break_yaml_knows_and_json_does_not_is_kept_in_a_record_file(
        recorder: Recorder, store: Path, breaking: str) -> None:
    """NEL was written as itself in a quoted scalar, and read back as a space: the file
    and the index said one title, the decision's event line another."""
    ref = recorder.record({"content": {"text": "why"}}).id
    title, reason = f"T nel{breaking}x", f"r nel{breaking}y"
    event = recorder.decide("Use it", [ref], title=title, rationale=[reason])
    rel = f"decisions/{event.content['decision_id']}.md"
    decision = parse_decision((store / rel).read_text(), rel, "default")
    assert (decision.title, decision.rationale) == (title, (reason,))
    task = recorder.task(f"nel{breaking}title", details="d").content["task_id"]
    recorder.task(None, task_id=task, owner=f"o{breaking}wner")  # an edit of the file
    parsed = parse_task((store / f"tasks/{task}.md").read_text(), f"tasks/{task}.md", "default")
    assert (parsed.title, parsed.owner) == (f"nel{breaking}title", f"o{breaking}wner")


def test_a_decision_never_supersedes_a_newer_one(recorder: Recorder, store: Path) -> None:
    """Accepted, it made a chain verify blamed on the write path's own entry once the
    other decision named it back."""
    ref = recorder.record({"content": {"text": "why"}}).id
    newer = recorder.decide("alpha", [ref], ts="2026-04-10T12:00:00Z").content["decision_id"]
    before = sorted(p.name for p in (store / "decisions").iterdir())
    with pytest.raises(ValidationError, match=f"decision {newer} is dated 2026-04-10T12:00:00Z"
                       r", after this one \(2026-04-05T12:00:00Z\): a decision "
                       "supersedes older ones") as caught:
        recorder.decide("beta", [ref], supersedes=[newer], ts="2026-04-05T12:00:00Z")
    assert caught.value.field == "content.supersedes"
    assert sorted(p.name for p in (store / "decisions").iterdir()) == before
    same = recorder.decide("gamma", [ref], supersedes=[newer], ts="2026-04-10T12:00:00Z")
    assert same.content["supersedes"] == [newer]  # the same instant: a coarse clock's


def test_superseding_a_decision_whose_file_does_not_parse_is_refused(
        recorder: Recorder, repo: Path, store: Path) -> None:
    """A superseded decision's file must be read for its tenant: one that does not parse
    refuses the write, naming the decision, the file and what is wrong."""
    ref = recorder.record({"content": {"text": "x"}}).id
    dec_id = recorder.decide("Use NATS", [ref]).content["decision_id"]
    path = store / "decisions" / f"{dec_id}.md"
    path.write_text("---\nid: [unclosed\n---\nbroken by hand\n")
    before = snapshot(repo)
    with pytest.raises(ValidationError) as caught:
        recorder.decide("Use Kafka", [ref], supersedes=[dec_id])
    assert caught.value.field == "content.supersedes"
    assert f"decision {dec_id} cannot be read" in str(caught.value)
    assert f"decisions/{dec_id}.md" in str(caught.value)
    assert snapshot(repo) == before


def test_a_single_string_in_content_becomes_a_one_item_list(recorder: Recorder,
                                                            store: Path) -> None:
    event = recorder.record({"kind": "decision", "refs": [EVT], "tags": ["urgent"],
                             "content": {"text": "x", "rationale": "because"}})
    assert event.tags == ("urgent",) and event.refs == (EVT,)
    assert event.content["rationale"] == ["because"]
    rel = f"decisions/{event.content['decision_id']}.md"
    assert parse_decision((store / rel).read_text(), rel, "default").rationale == ("because",)


def test_an_existing_decision_is_never_rewritten(recorder: Recorder, repo: Path) -> None:
    dec = recorder.decide("First", [EVT]).content["decision_id"]
    before = snapshot(repo)
    with pytest.raises(ValidationError) as caught:
        recorder.record({"kind": "decision", "refs": [EVT],
                         "content": {"text": "Second", "decision_id": dec}})
    assert caught.value.field == "content.decision_id" and "supersedes" in str(caught.value)
    assert snapshot(repo) == before


def test_concurrent_task_updates_lose_nothing(memory: Memory) -> None:
    import threading

    task_id = memory.task("Shared task").content["task_id"]
    updates: list[str] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        for k in range(10):
            event = memory.task("Shared task", task_id=task_id, details=f"update {n}.{k}")
            with lock:
                updates.append(event.id)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    text = (memory.store / "tasks" / f"{task_id}.md").read_text()
    assert all(event_id in text for event_id in updates)  # every update kept its ref


def test_an_event_id_already_recorded_is_refused(memory: Memory) -> None:
    first = memory.record({"tenant_id": "a", "ts": "2026-06-02T10:00:00+00:00",
                           "content": {"text": "A's note: the budget is 5M"}})
    before = snapshot(memory.store)
    for other in ({"tenant_id": "b", "ts": "2026-06-01T10:00:00+00:00"},   # backdated
                  {"tenant_id": "a", "ts": first.ts, "content": {"text": "changed"}}):
        with pytest.raises(ValidationError, match="already recorded") as caught:
            memory.record({"content": {"text": "B's text"}, **other, "id": first.id})
        assert caught.value.field == "id"
    assert snapshot(memory.store) == before
    acb = memory.build_acb({"tenant_id": "a", "now": "2026-06-03T00:00:00+00:00"})
    assert first.id in json.dumps(acb["sections"])


def test_the_same_event_again_is_written_once(memory: Memory) -> None:
    obj = {"id": EVT, "ts": "2026-03-01T10:00:00+00:00", "content": {"text": "retried"}}
    first = memory.record(obj)
    again = memory.record_many([obj, {"content": {"text": "new"}, "ts": obj["ts"]}])
    assert again[0].id == first.id and again[0].hash == first.hash
    assert [e["content"]["text"] for e in events_on_disk(
        memory.store, "events/2026-03/2026-03-01.jsonl")] == ["retried", "new"]
    with pytest.raises(ValidationError, match=f"{EVT} is already recorded at another time "
                       r"\(2026-03-01T10:00:00\+00:00\); event ids never repeat"):
        memory.record({**obj, "ts": "2026-03-01T10:00:01+00:00"})  # it said "other content"
    with pytest.raises(ValidationError, match="already recorded with other content"):
        memory.record({**obj, "content": {"text": "another"}})
    retried = memory.record({k: v for k, v in obj.items() if k != "ts"})  # no time given
    assert retried.id == EVT and retried.when == first.when  # as recorded, not now
    offset = {"id": "evt_01HZ0000000000000000000000", "ts": "2024-05-01T12:00:00+02:00",
              "content": {"text": "hi"}}
    assert memory.record(offset).ts == memory.record(offset).ts == offset["ts"]  # as given


def test_the_same_decision_or_summary_event_again_is_written_once(memory: Memory) -> None:
    """A retried write of a decision or summary event (its line as written: the same id,
    tenant, time and content) is not refused as a record that exists."""
    ts = {"ts": "2026-02-09T10:00:00+00:00"}
    cited = memory.record({"content": {"text": "the pangolin is hungry"}, **ts}).id
    decision = memory.decide("Keep the pangolin fed", [cited], **ts)
    summary = memory.record({"kind": "summary", "refs": [cited],
                             "content": {"text": "a hungry pangolin"}, **ts})
    lines = {e["id"]: e for e in events_on_disk(memory.store)}
    before = snapshot(memory.store)
    assert memory.record(lines[decision.id]).id == decision.id
    again = memory.record_many([lines[summary.id], lines[decision.id]])
    assert [e.id for e in again] == [summary.id, decision.id]
    assert snapshot(memory.store) == before
    changed = {**lines[decision.id], "content": {**lines[decision.id]["content"],
                                                 "text": "Starve the pangolin"}}
    del changed["hash"]
    with pytest.raises(ValidationError, match="never rewritten"):  # not the same event
        memory.record(changed)
    assert snapshot(memory.store) == before


def test_an_event_citing_no_recorded_event_is_refused(memory: Memory) -> None:
    """A line is never rewritten: a mistyped ref would dangle for good (and keep its
    day file out of the daemon's commits)."""
    before = snapshot(memory.store)
    ghost = "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
    with pytest.raises(ValidationError, match="dangling reference") as caught:
        memory.record({"content": {"text": "see that"}, "refs": [ghost]})
    assert caught.value.field == "refs" and ghost in str(caught.value)
    with pytest.raises(ValidationError, match="dangling reference"):
        memory.decide("Rest on nothing", [ghost])
    assert snapshot(memory.store) == before
    first = memory.record({"content": {"text": "the reason"}})
    named = ids.new_id("evt")
    batch = memory.record_many([{"id": named, "content": {"text": "earlier in the write"}},
                                {"content": {"text": "cites it"}, "refs": [named, first.id]}])
    assert batch[1].refs == (named, first.id)
    assert memory.decide("Rest on both", [first.id, named]).refs == (first.id, named)
    theirs = memory.record({"content": {"text": "another tenant's"}, "tenant_id": "other"})
    before = snapshot(memory.store)
    for write in (lambda: memory.record({"content": {"text": "x"}, "refs": [theirs.id]}),
                  lambda: memory.decide("Rest on theirs", [theirs.id]),
                  lambda: memory.record_many([
                      {"id": (mine := ids.new_id("evt")), "content": {"text": "mine"},
                       "tenant_id": "other"},
                      {"content": {"text": "cites it"}, "refs": [mine]}])):
        with pytest.raises(ValidationError, match="dangling reference"):  # as none at all
            write()
    assert snapshot(memory.store) == before


def test_an_event_written_a_moment_ago_elsewhere_is_found_in_its_day_file(
        memory: Memory) -> None:
    """The daemon's index may not hold an event another process just appended: the day
    files around the time its id carries are read."""
    when = datetime(2026, 3, 1, 23, 30, tzinfo=UTC)
    late = ids.new_id("evt", when)  # 23:30 UTC: 2026-03-02 at +02:00, its own date
    _, line = event_line("s", "appended by hand", id=late, ts="2026-03-02T01:30:00+02:00")
    append(memory.store / "events/2026-03/2026-03-02.jsonl", line)
    files = RecordFiles(memory.store, memory.policies)
    assert files.event_tenant(late) == "default"
    ghost = ids.new_id("evt", when)
    cites = event_line("s", "cites a ghost", refs=[ghost], number=7)[1]
    append(memory.store / "events/2026-03/2026-03-02.jsonl", cites)
    assert files.event_tenant(ghost) is None  # only cited there, no event's id
    assert files.event_tenant("evt_not-a-ulid") is None


def test_a_write_repeating_an_id_names_the_line(recorder: Recorder, repo: Path) -> None:
    before = snapshot(repo)
    objs = [{"id": EVT, "content": {"text": "one"}}, {"content": {"text": "two"}},
            {"id": EVT, "content": {"text": "three"}}]
    with pytest.raises(ValidationError, match="also event 1 of this write") as caught:
        recorder.record_many(objs, "batch.jsonl", [4, 5, 6])
    assert (caught.value.path, caught.value.line, caught.value.field) == ("batch.jsonl", 6, "id")
    assert snapshot(repo) == before


def test_records_of_one_write_build_on_each_other(recorder: Recorder, store: Path) -> None:
    dec = "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z5"  # a task is created under a minted id only
    task_id = recorder.task("Ship it", owner="alice", details="the details").content["task_id"]
    placed: list[Placed] = []
    recorder.on_place = placed.extend
    events = recorder.record_many([
        {"kind": "task_update", "content": {"task_id": task_id, "status": "open"}},
        {"kind": "task_update", "content": {"task_id": task_id, "status": "blocked"}},
        {"kind": "task_update", "content": {"task_id": task_id, "owner": "bob"}},
        {"kind": "decision", "refs": [EVT], "content": {"decision_id": dec, "text": "One"}},
        {"kind": "decision", "refs": [EVT], "content": {"text": "Two", "supersedes": [dec]}},
    ])
    rel = f"tasks/{task_id}.md"
    task = parse_task((store / rel).read_text(), rel, "default")
    assert (task.title, task.status, task.owner, task.details) == (
        "Ship it", "blocked", "bob", "the details")
    assert {e.id for e in events[1:3]} <= set(task.refs)  # every update kept
    # the task is staged and put in place once, as the last update leaves it
    assert sorted(p.rel for p in placed) == sorted(
        [rel, f"decisions/{dec}.md", f"decisions/{events[4].content['decision_id']}.md"])
    assert not list(store.rglob(".tmp-*"))
    second = events[4].content["decision_id"]
    assert parse_decision((store / f"decisions/{second}.md").read_text(),
                          f"decisions/{second}.md", "default").supersedes == (dec,)


def test_a_record_id_twice_in_one_write_is_refused(recorder: Recorder, repo: Path) -> None:
    before = snapshot(repo)
    dec = "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z5"
    with pytest.raises(ValidationError, match="already exists") as caught:
        recorder.record_many([
            {"kind": "decision", "refs": [EVT], "content": {"decision_id": dec, "text": "One"}},
            {"kind": "decision", "refs": [EVT], "content": {"decision_id": dec, "text": "Two"}},
        ], "d.jsonl")
    assert (caught.value.line, caught.value.field) == (2, "content.decision_id")
    summary = {"kind": "summary", "refs": [EVT],
               "content": {"summary_id": "sum_01JKZ3N4Q5R6S7T8V9W0X1Y2Z6", "text": "S"}}
    with pytest.raises(ValidationError, match="already exists") as caught:
        recorder.record_many([summary, summary], "s.jsonl")
    assert (caught.value.line, caught.value.field) == (2, "content.summary_id")
    assert snapshot(repo) == before
    recorder.record(summary)
    with pytest.raises(ValidationError, match="never rewritten"):  # not a clash to retry
        recorder.record(summary)


# ----------------------------------------------------------------------------- all or nothing


def test_a_batch_with_a_value_utf8_cannot_encode_writes_nothing(recorder: Recorder,
                                                                repo: Path) -> None:
    recorder.record({"ts": "2026-01-01T09:00:00+00:00", "content": {"text": "already here"}})
    before = snapshot(repo)
    for bad, field in (({"tags": ["a\ud800b"]}, "tags"),
                       ({"session_id": "lone \udc00 surrogate"}, "session_id")):
        batch = [{"ts": "2026-01-01T10:00:00+00:00", "content": {"text": "first, day one"}},
                 {"ts": "2026-01-02T10:00:00+00:00", "content": {"text": "second"}, **bad}]
        with pytest.raises(ValidationError) as caught:
            recorder.record_many(batch, "batch.jsonl")
        assert caught.value.field == field and "surrogate" in str(caught.value)
        assert snapshot(repo) == before  # not even the first day's line


@contextmanager
def file_size_limit(nbytes: int) -> Iterator[None]:
    """A real limit on file sizes (RLIMIT_FSIZE, as `ulimit -f`): a write past `nbytes`
    fails with EFBIG, as on a full disk; SIGXFSZ ignored, as Python does."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_failed_append_leaves_the_file_byte_identical(tmp_path: Path) -> None:
    target = tmp_path / "events" / "2026-02" / "2026-02-09.jsonl"
    append_lines(target, [b'{"a": 1}\n'])
    with target.open("ab") as handle:
        handle.write(b'{"torn')  # a writer crashed mid-line
    before = target.read_bytes()
    lines = [b'{"n": "' + b"x" * 990 + b'"}\n' for _ in range(10)]
    with file_size_limit(len(before) + 3000), pytest.raises(StoreError) as caught:
        append_lines(target, lines)  # 3,000 bytes go in, then EFBIG
    assert str(target) in str(caught.value) and "File too large" in str(caught.value)
    assert target.read_bytes() == before  # no partial lines, not even the newline
    offset, _, _ = append_lines(target, lines[:1])
    assert target.read_bytes() == before + b"\n" + lines[0]  # the fragment stays its own
    assert offset == len(before) + 1


def test_a_batch_over_two_day_files_is_written_to_both_or_neither(recorder: Recorder,
                                                                 repo: Path) -> None:
    day2 = "events/2026-01/2026-01-02.jsonl"
    recorder.record({"ts": "2026-01-01T09:00:00+00:00", "content": {"text": "day one"}})
    recorder.record_many([{"ts": "2026-01-02T09:00:00+00:00", "content": {"text": "y" * 2000}}
                          for _ in range(20)])
    before = snapshot(repo)
    batch = [{"ts": "2026-01-01T10:00:00+00:00", "content": {"text": "fits on day one"}},
             {"ts": "2026-01-02T10:00:00+00:00", "content": {"text": "z" * 2000}}]
    with file_size_limit((repo / "memory" / day2).stat().st_size + 500), \
            pytest.raises(StoreError) as caught:
        recorder.record_many(batch)
    assert day2 in str(caught.value) and "nothing was written" in str(caught.value)
    assert snapshot(repo) == before  # day one's line, appended first, was taken out
    assert len(recorder.record_many(batch)) == 2  # once there is room, the same batch goes in


@pytest.mark.parametrize("kind", ["decision", "task", "artifact", "handoff"])
def test_a_record_file_the_disk_refuses_is_a_store_error_and_leaves_nothing(
        recorder: Recorder, repo: Path, kind: str) -> None:
    """A record file is staged before its event line is written. When the disk refuses
    it (a real file-size limit: EFBIG, as ENOSPC on a full disk), the write is a
    StoreError naming the file, not an OSError, and the staged file it began (left
    empty, for `gitmem verify` to name) is removed with the rest."""
    cited = recorder.record({"content": {"text": "why"}})
    writes = {"decision": lambda: recorder.decide("Use FTS", [cited.id]),
              "task": lambda: recorder.task("Write the guide"),
              "artifact": lambda: recorder.record({"kind": "artifact",
                                                   "content": {"data": "x" * 500}}),
              "handoff": lambda: recorder.handoff("coder", "Ship it")}
    before = snapshot(repo)
    with file_size_limit(64), pytest.raises(StoreError) as caught:
        writes[kind]()
    folder = {"decision": "decisions", "task": "tasks", "artifact": "artifacts",
              "handoff": "handoffs"}[kind]
    message = str(caught.value)
    assert f"writing {repo / 'memory' / folder}/" in message
    assert "File too large; nothing was written" in message
    assert snapshot(repo) == before  # no line, no record file, no .tmp- file
    writes[kind]()  # once there is room, the same write goes in
    assert len(snapshot(repo)) > len(before)


def test_an_artifact_id_is_never_the_callers(recorder: Recorder, store: Path) -> None:
    """An artifact is named by the output the write stores: an id a caller names (maybe
    another tenant's, whose events cite it) is refused, whatever the output."""
    output = "".join(f"row {n}: {'x' * 60}\n" for n in range(400))
    stored = recorder.record({"kind": "tool_result", "tenant_id": "b",
                              "content": {"tool": "cat", "output": output}})
    art = stored.content["artifact_id"]
    before = snapshot(store)
    for content in ({"tool": "cat", "excerpt_text": "short", "artifact_id": art},
                    {"tool": "cat", "output": "short", "artifact_id": art},
                    {"tool": "cat", "output": output + "more\n", "artifact_id": art}):
        with pytest.raises(ValidationError) as caught:
            recorder.record({"kind": "tool_result", "tenant_id": "a", "content": content})
        assert caught.value.field == "content.artifact_id"
    with pytest.raises(ValidationError):
        recorder.record({"kind": "artifact", "content": {"data": "other", "artifact_id": art}})
    assert snapshot(store) == before
    same = recorder.record({"kind": "tool_result", "tenant_id": "a",
                            "content": {"tool": "cat", "output": output, "artifact_id": art}})
    assert same.content["artifact_id"] == art  # the id of what it stores: allowed


def test_a_record_cited_must_be_in_the_store(recorder: Recorder, repo: Path) -> None:
    """An event line is never rewritten: a ref to a record that does not exist would
    dangle for good, so it is refused (events cited are checked by `gitmem verify`)."""
    before = snapshot(repo)
    for ref in ("dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z9", "tsk_01JKZ3N4Q5R6S7T8V9W0X1Y2Z9",
                "sum_01JKZ3N4Q5R6S7T8V9W0X1Y2Z9", "art_" + "0" * 64):
        with pytest.raises(ValidationError, match="dangling") as caught:
            recorder.record({"content": {"text": "see"}, "refs": [ref]})
        assert caught.value.field == "refs" and ref in str(caught.value)
    assert snapshot(repo) == before
    dec = "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z5"
    recorder.record_many([  # a record made earlier in the same write counts
        {"kind": "decision", "refs": [EVT], "content": {"decision_id": dec, "text": "One"}},
        {"content": {"text": "as decided"}, "refs": [dec]}])
    recorder.record({"content": {"text": "and again"}, "refs": [dec, EVT]})


def test_record_files_get_the_mode_any_new_file_gets(memory: Memory) -> None:
    """Staged through mkstemp, they were 0o600 beside day files others could read."""
    cited = memory.record({"content": {"text": "why"}})
    decision = memory.decide("Keep the door open", [cited.id]).content["decision_id"]
    mask = os.umask(0o022)
    os.umask(mask)
    expected = 0o666 & ~mask
    for path in (memory.store / "decisions" / f"{decision}.md", memory.store / "manifest.json",
                 day_file(memory.store, cited.when)):
        assert stat.S_IMODE(path.stat().st_mode) == expected, path


@pytest.mark.parametrize("fields", [
    {"session_id": SECRET}, {"agent_id": SECRET}, {"tenant_id": SECRET},
    {"actor": {"type": "human", "id": SECRET}}])
def test_a_secret_in_a_name_is_refused_never_stored(memory: Memory,
                                                     fields: dict[str, Any]) -> None:
    """A name is never redacted (two sessions would become one): a secret there is
    refused, naming the field, never echoing the value."""
    before = snapshot(memory.store)
    with pytest.raises(PrivacyError) as caught:
        memory.record({"content": {"text": "hello"}, **fields})
    name = "actor.id" if "actor" in fields else next(iter(fields))
    assert f"field '{name}' matches the redaction pattern" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert snapshot(memory.store) == before


def test_a_handoff_between_secret_names_is_refused(memory: Memory) -> None:
    for names in ({"to_agent": SECRET, "from_agent": "lead"},
                  {"to_agent": "coder", "from_agent": SECRET}):
        with pytest.raises(PrivacyError, match="matches the redaction pattern"):
            memory.create_handoff(task="Ship it", **names)
    assert not list((memory.store / "handoffs").glob("*.yaml"))


def test_what_is_served_of_a_stored_output_or_a_bad_line_follows_the_patterns_now(
        memory: Memory) -> None:
    """An artifact and the errors `gitmem status` quotes are served to agents through
    the redaction patterns as they are when served, not as they were when stored."""
    output = "build log\n" + "step ok\n" * 4000 + "Frobnitzcode 778899\n"
    event = memory.record({"kind": "tool_result", "content": {"tool": "make", "output": output}})
    artifact = event.content["artifact_id"]
    secret = "sk-" + "W" * 30
    append(memory.store / "events/2026-03/2026-03-01.jsonl",
           event_line("s", "x", number=9, sensitivity=secret)[1])
    privacy = memory.store / "policies" / "privacy.yaml"
    privacy.write_text(privacy.read_text().replace(
        "  redact_patterns:\n", "  redact_patterns:\n    - 'Frobnitzcode [0-9]+'\n"))
    memory.reload_policies()
    memory.sync()
    served = memory.get_artifact(artifact, tenant_id="default", channel="private")
    assert b"Frobnitzcode" not in served and b"[REDACTED]" in served
    assert b"Frobnitzcode 778899" in memory.get_artifact(artifact)  # a person's own tools
    errors = json.dumps(memory.status()["errors"])
    assert '"field": "sensitivity"' in errors and "[REDACTED]" in errors
    assert secret not in errors


def test_a_string_given_for_a_list_is_one_item_never_its_characters(memory: Memory) -> None:
    """`rationale="because"` was stored as [b, e, c, a, u, s, e]."""
    evt = memory.record({"content": {"text": "we need a reason"}}).id
    dec = memory.decide("Use X", [evt], rationale="because", constraints="no Y")
    rel = f"decisions/{dec.content['decision_id']}.md"
    decision = parse_decision((memory.store / rel).read_text(), rel, "default")
    assert decision.rationale == ("because",) and decision.constraints == ("no Y",)
    packet = memory.create_handoff("coder", "do it", open_questions="what about Z?",
                                   required_files="ci.yml")
    assert packet.open_questions == ("what about Z?",) and packet.required_files == ("ci.yml",)
    with pytest.raises(ValidationError, match="expected a list of strings") as caught:
        memory.decide("Use Y", [evt], constraints=[1])
    assert caught.value.field == "constraints"


@pytest.mark.parametrize(("call", "field", "message"), [
    (lambda m: m.build_acb(None), None, "a request is an object of fields, got null"),
    (lambda m: m.build_acb([]), None, "a request is an object of fields, got list"),
    (lambda m: m.query_decisions(query_text=None), "query_text", "expected a string, got null"),
    (lambda m: m.query_decisions(query_text=5), "query_text", "expected a string, got number"),
    (lambda m: m.record_many(None), None, "expected a list of event objects, got null"),
    (lambda m: m.record_many({"content": {}}), None, "expected a list of event objects"),
    (lambda m: m.create_handoff("c", "t", bogus=1), "bogus", "unknown field; expected only"),
    (lambda m: m.create_handoff("c", 5), "task", "expected a string, got number"),
])
def test_bad_api_input_is_a_gitmem_error_naming_the_field(
        memory: Memory, call: Any, field: str | None, message: str) -> None:
    """Each of these raised TypeError or AttributeError from deep inside."""
    with pytest.raises(ValidationError, match=message) as caught:
        call(memory)
    assert caught.value.field == field


def test_a_ref_to_another_tenants_record_is_refused(memory: Memory) -> None:
    """An event ref to another tenant's event was refused; one to its decision or task
    was taken, storing a foreign id (and telling that it exists)."""
    beta = memory.record({"content": {"text": "beta turn"}, "tenant_id": "beta"}).id
    dec = memory.decide("beta decision", [beta], tenant_id="beta").content["decision_id"]
    task = memory.task("beta task", tenant_id="beta").content["task_id"]
    for ref in (dec, task):  # as one that is not there: tenants never see each other's ids
        with pytest.raises(ValidationError, match=f"{ref} is not in the store"):
            memory.record({"content": {"text": "x"}, "tenant_id": "alpha", "refs": [ref]})
        with pytest.raises(ValidationError, match=f"{ref} is not in the store"):
            memory.create_handoff("coder", "t", tenant_id="alpha", refs=[ref])
    mine = memory.record({"content": {"text": "y"}, "tenant_id": "beta", "refs": [dec, task]})
    assert mine.refs == (dec, task)


def test_an_update_asking_a_lower_sensitivity_says_it_kept_the_higher(
        memory: Memory, caplog: pytest.LogCaptureFixture) -> None:
    """It was kept high without a word, while the update's event line said low."""
    task = memory.task("Rotate the keys", sensitivity="high").content["task_id"]
    with caplog.at_level("WARNING", logger="gitmem.derived"):
        memory.task(task_id=task, sensitivity="low")
    text = (memory.store / "tasks" / f"{task}.md").read_text()
    assert "sensitivity: high" in text
    assert f"task {task} keeps sensitivity high: an update never lowers it (asked low)" in (
        caplog.text)


@pytest.mark.parametrize(("options", "field"), [
    ({"to_agent": "bad agent"}, "to_agent"),
    ({"decisions": ["dec_nope"]}, "decisions"),
    ({"refs": ["nope"]}, "refs"),
])
def test_a_refused_handoff_names_its_field_not_a_file_never_written(
        memory: Memory, options: dict[str, Any], field: str) -> None:
    """It named `handoffs/hof_....yaml:4`, the packet's file as it would have been, and
    the socket's error data carried that path and line: no such file exists."""
    before = snapshot(memory.store)
    with pytest.raises(ValidationError) as caught:
        memory.create_handoff(**{"to_agent": "coder", "task": "Fix it", **options})
    assert (caught.value.field, caught.value.path, caught.value.line) == (field, "", None)
    assert str(caught.value).startswith(f"field '{field}': ")
    data = error_object(caught.value)["data"]
    assert (data["field"], data["path"], data["line"]) == (field, "", None)
    assert snapshot(memory.store) == before


def refused_changing_nothing(memory: Memory, write: Callable[[], object], field: str,
                             said: str) -> None:
    """`write` is refused naming `field` (its message matching `said`), and the store's
    files are as they were."""
    before = snapshot(memory.store)
    with pytest.raises(ValidationError, match=said) as caught:
        write()
    assert caught.value.field == field
    assert snapshot(memory.store) == before


@pytest.mark.parametrize(("call", "field", "said"), [
    (lambda m, e: m.record({"content": {"text": "x"}, "tags": ["ok", ""]}), "tags",
     "got '' as item 2"),
    (lambda m, e: m.decide("x", [e], title=""), "title", "expected a non-empty string"),
    (lambda m, e: m.decide("x", [e], rationale=[""]), "rationale", "got '' as item 1"),
    (lambda m, e: m.decide("x", [e], constraints=["a", " "]), "constraints",
     "got ' ' as item 2"),
    (lambda m, e: m.create_handoff("coder", "t", from_agent="bad from!"), "from_agent",
     "expected a name of letters"),
    (lambda m, e: m.create_handoff("coder", "t", from_agent=""), "from_agent",
     "expected a non-empty string"),
    (lambda m, e: m.create_handoff("coder", "t", required_files=[""]), "required_files",
     "got '' as item 1"),
    (lambda m, e: m.create_handoff("coder", "t", open_questions=["why?", ""]),
     "open_questions", "got '' as item 2"),
    (lambda m, e: m.create_handoff("coder", "t", ts=""), "ts", "got ''"),
    (lambda m, e: m.task("t", task_id=""), "content.task_id", "got ''"),
])
def test_an_empty_string_a_write_is_given_is_refused_never_stored_or_dropped(
        memory: Memory, call: Any, field: str, said: str) -> None:
    """`--tag ""` stored an empty tag, `--rationale ""` a `- ''` line; `--title ""` and
    `--from ""` were dropped without a word, and `--from "bad from!"` was taken."""
    evt = memory.record({"content": {"text": "the reason"}}).id
    refused_changing_nothing(memory, lambda: call(memory, evt), field, said)


def test_an_empty_title_or_from_on_the_command_line_is_refused(cli: Cli) -> None:
    """The CLI's own defaults were "", so an empty --title could not be told from none."""
    evt = cli("record", "the reason").stdout.strip()
    for args, field in ((["decide", "x", "--ref", evt, "--title", ""], "title"),
                        (["handoff", "coder", "t", "--from", ""], "from_agent")):
        result = cli(*args, ok=False)
        assert result.exit_code == 1 and f"field '{field}'" in result.stderr
    assert cli("decide", "x", "--ref", evt).stdout.startswith("dec_")  # none given: none
    assert cli("handoff", "coder", "t").stdout.startswith("hof_")


def test_an_empty_tag_a_person_wrote_in_a_day_file_is_read_as_written() -> None:
    """The rule is for what a write is given: a line on disk is read as it is."""
    line = json.dumps({"id": EVT, "ts": "2026-02-09T05:12:33Z", "tenant_id": "default",
                       "session_id": "s", "agent_id": "a", "channel": "private",
                       "actor": {"type": "human", "id": "u"}, "kind": "message",
                       "content": {"text": "x"}, "refs": [], "tags": [""],
                       "sensitivity": "none",
                       "hash": content_hash("message", {"text": "x"})}).encode()
    assert parse_event_line(line, path=DAY, line=1).tags == ("",)


@pytest.mark.parametrize("field", ["refs", "tags"])
def test_a_string_for_an_events_refs_or_tags_is_refused_as_decide_and_task_refuse_it(
        recorder: Recorder, repo: Path, field: str) -> None:
    """`record_event` and `record --json` took `"tags": "a,b"` as one tag, where decide,
    task and create_handoff answer "expected a list of strings, got a string"."""
    value = EVT if field == "refs" else "a,b"
    before = snapshot(repo)
    with pytest.raises(ValidationError, match="expected a list of strings, got a string"
                       ) as caught:
        recorder.record({"content": {"text": "x"}, field: value})
    assert caught.value.field == field
    with pytest.raises(ValidationError) as caught:
        recorder.record_many([{"content": {"text": "x"}, field: value}], "in.jsonl", [3])
    assert (caught.value.location, caught.value.field) == ("in.jsonl:3", field)
    assert snapshot(repo) == before


@pytest.mark.parametrize("empty", [{}, {"refs": [], "tags": []}, {"session_id": "s2"}])
def test_a_task_update_that_changes_nothing_is_refused(memory: Memory,
                                                       empty: dict[str, Any]) -> None:
    """`gitmem task --id TSK` alone appended a task_update event that set nothing, and
    added it to the task's refs."""
    task_id = memory.task("Rotate the keys").content["task_id"]
    before = snapshot(memory.store)
    with pytest.raises(ValidationError, match=f"nothing to change in task {task_id}; "
                       "give one of title, status, details, owner, refs, tags or "
                       "sensitivity"):
        memory.task(task_id=task_id, **empty)
    assert snapshot(memory.store) == before
    memory.task(task_id=task_id, tags=["security"])  # anything given is a change
    assert "- security" in (memory.store / "tasks" / f"{task_id}.md").read_text()


@pytest.mark.parametrize(("call", "field", "said"), [
    (lambda m, t: m.task(""), "title", "expected a non-empty string"),
    (lambda m, t: m.task(5), "title", "expected a string, got number"),
    (lambda m, t: m.task(status="open"), "title", "a new task needs a title"),
    (lambda m, t: m.task(task_id=t, title=" "), "title", "expected a non-empty string"),
    (lambda m, t: m.task("t", details=5), "details", "expected a string, got number"),
])
def test_a_task_write_names_the_callers_fields_not_its_events(
        memory: Memory, call: Any, field: str, said: str) -> None:
    """`gitmem task ""` and the socket's `task {}` named 'content.title', where
    `task {"title": 5}` named 'title'."""
    task_id = memory.task("Rotate the keys").content["task_id"]
    refused_changing_nothing(memory, lambda: call(memory, task_id), field, said)


def test_a_task_named_by_an_empty_title_on_the_command_line_names_title(cli: Cli) -> None:
    result = cli("task", "", ok=False)
    assert result.exit_code == 1 and "field 'title': expected a non-empty string" in (
        result.stderr)


def test_record_json_reads_a_stream_that_begins_with_a_byte_order_mark(cli: Cli,
                                                                      tmp_path: Path) -> None:
    """Some editors begin a file with U+FEFF: `record --json` called its first line
    malformed JSON at column 1, where manifest.json and record files are read past it."""
    stream = tmp_path / "bom.jsonl"
    stream.write_bytes(b'\xef\xbb\xbf{"content": {"text": "first"}}\n'
                       b'{"content": {"text": "second"}}\n')
    ids_ = cli("record", "--json", str(stream)).stdout.split()
    assert len(ids_) == 2 and all(i.startswith("evt_") for i in ids_)
    texts = [e["content"]["text"] for e in lines_of_store(cli.config.store)]
    assert texts == ["first", "second"]
    mid = tmp_path / "mid.jsonl"  # only the stream's start may hold one
    mid.write_bytes(b'{"content": {"text": "a"}}\n\xef\xbb\xbf{"content": {"text": "b"}}\n')
    result = cli("record", "--json", str(mid), ok=False)
    assert result.exit_code == 1 and "mid.jsonl:2: malformed JSON" in result.stderr


def lines_of_store(store: Path) -> list[dict[str, Any]]:
    """Every event line of the store's day files, in file order."""
    return [json.loads(line) for path in sorted((store / "events").rglob("*.jsonl"))
            for line in path.read_bytes().splitlines() if line]


# ----------------------------------------------------------------------------- no regular file


def run_gitmem(config: Config, *args: str) -> subprocess.CompletedProcess[str]:
    """`gitmem ARGS` as a process of its own, failing the test (not hanging it) should it
    block on a FIFO."""
    env = {**os.environ, "GITMEM_STORE": str(config.store), "GITMEM_DSN": config.dsn or "",
           "GITMEM_SCHEMA": config.schema}
    return subprocess.run([sys.executable, "-m", "gitmem", *args], env=env,
                          capture_output=True, text=True, timeout=30, cwd=config.root)


@contextmanager
def fifo_at(path: Path) -> Iterator[int]:
    """A FIFO at `path`, and a reader of it that never waits (what was put in it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        yield reader
    finally:
        os.close(reader)
        path.unlink()


def test_a_day_file_that_is_a_fifo_or_a_directory_is_refused_before_any_byte(
        config: Config) -> None:
    """A FIFO took the bytes, then the write failed ("Illegal seek"); past 64 KB it
    blocked for good under the day file's lock."""
    day = config.store / "events" / "2026-01" / "2026-01-06.jsonl"
    big = config.root / "big.jsonl"
    big.write_text("".join(json.dumps({"ts": "2026-01-06T10:00:00Z",
                                       "content": {"text": f"{n} " + "word " * 200}}) + "\n"
                           for n in range(100)))
    with fifo_at(day) as reader:
        for args in (("x", "--ts", "2026-01-06T10:00:00Z"), ("--json", str(big))):
            result = run_gitmem(config, "record", *args)
            assert result.returncode == 1, result.stderr
            assert (f"{day}: it is a FIFO (named pipe), not a regular file; nothing was "
                    "written") in result.stderr
            assert "Traceback" not in result.stderr
            with contextlib.suppress(BlockingIOError):
                assert os.read(reader, 1 << 20) == b""  # not a byte put in
    day.mkdir()
    result = run_gitmem(config, "record", "x", "--ts", "2026-01-06T10:00:00Z")
    assert result.returncode == 1
    assert f"{day}: it is a directory, not a file; nothing was written" in result.stderr


@pytest.mark.parametrize("what", ["fifo", "directory", "loop"])
def test_an_event_ref_whose_day_file_is_no_file_is_refused_naming_it(
        config: Config, what: str) -> None:
    """Looking for the cited event in its day file hung on a FIFO, and was a traceback
    on a directory (IsADirectoryError) or a loop of links (ELOOP)."""
    day = config.store / "events" / "2026-01" / "2026-01-06.jsonl"
    ref = ids.new_id("evt", datetime(2026, 1, 6, 10, tzinfo=UTC))
    said = {"fifo": "a FIFO (named pipe), not a regular file",
            "directory": "a directory, not a file", "loop": "a loop of symbolic links"}[what]
    with contextlib.ExitStack() as made:
        if what == "fifo":
            made.enter_context(fifo_at(day))
        elif what == "directory":
            day.mkdir(parents=True)
        else:
            day.parent.mkdir(parents=True)
            day.symlink_to(day.name)
        result = run_gitmem(config, "record", "c", "--ref", ref)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"{ref} cannot be looked for: {day}: cannot be read: {said}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_record_ref_whose_file_is_a_fifo_is_refused_naming_it(config: Config) -> None:
    """Reading the cited decision's file for its tenant hung (RecordFiles.current)."""
    dec = ids.new_id("dec")
    path = config.store / "decisions" / f"{dec}.md"
    with fifo_at(path) as reader:
        result = run_gitmem(config, "record", "c", "--ref", dec)
        with contextlib.suppress(BlockingIOError):
            assert os.read(reader, 1) == b""
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert (f"{dec} cannot be cited: {path}: cannot be read: a FIFO (named pipe), not a "
            "regular file") in result.stderr


@pytest.mark.parametrize("what", ["dangling", "loop", "directory"])
def test_a_record_ref_whose_file_is_a_link_to_nothing_is_refused_naming_it(
        config: Config, what: str) -> None:
    """A link to nothing (or a loop of links) at a cited record's path was called `not in
    the store (a dangling reference)`, naming neither the file nor the link; a directory
    there was taken for the record (the write went ahead, verify refused it later)."""
    dec = ids.new_id("dec")
    path = config.store / "decisions" / f"{dec}.md"
    gone = config.root / "elsewhere.md"
    said = {"dangling": f"a symbolic link to nothing ({gone})",
            "loop": "a loop of symbolic links", "directory": "a directory, not a file"}[what]
    if what == "dangling":
        path.symlink_to(gone)
    elif what == "loop":
        path.symlink_to(path.name)
    else:
        path.mkdir()
    before = snapshot(config.store)
    for command in (("record", "c", "--ref", dec), ("decide", "d", "--ref", dec),
                    ("handoff", "bob", "t", "--ref", dec)):
        result = run_gitmem(config, *command)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert (f"field 'refs': {dec} cannot be cited: {path}: cannot be read: {said}; "
                "mend the file") in result.stderr, command
        assert "dangling reference" not in result.stderr
    assert snapshot(config.store) == before and not gone.exists()


def test_a_task_update_whose_file_is_a_link_to_nothing_names_it(config: Config) -> None:
    """`task --id` said the task `is not in` the store where its file is a link to nothing."""
    task = ids.new_id("tsk")
    path = config.store / "tasks" / f"{task}.md"
    path.symlink_to(config.root / "gone.md")
    result = run_gitmem(config, "task", "--id", task, "--status", "done")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert (f"{path}: cannot be read: a symbolic link to nothing ({config.root / 'gone.md'})"
            in result.stderr)
    assert "is not in" not in result.stderr


def test_a_day_file_that_is_a_link_to_nothing_is_refused_nothing_written_anywhere(
        config: Config, tmp_path: Path) -> None:
    """The write followed the link and made its target, outside the repository (git
    committed only the link; sync calls that path a link to nothing)."""
    outside = tmp_path / "outside" / "day.jsonl"
    outside.parent.mkdir()
    day = config.store / "events" / "2026-01" / "2026-01-07.jsonl"
    day.parent.mkdir(parents=True)
    day.symlink_to(outside)
    result = run_gitmem(config, "record", "through link", "--ts", "2026-01-07T10:00:00Z")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert (f"cannot append to {day}: it is a symbolic link to nothing ({outside}); "
            "nothing was written") in result.stderr
    assert not outside.exists() and day.is_symlink()
    assert list(outside.parent.iterdir()) == []


@pytest.mark.parametrize("linked", ["events", "events/2026-01"])
def test_a_write_into_a_linked_events_folder_is_refused_naming_the_link(
        config: Config, tmp_path: Path, linked: str) -> None:
    """With events/ (or a month's folder) a symbolic link to a folder outside the
    repository, the write followed it: the day file was made there, where git keeps only
    the link and no sync reads it (every reader treats such a link as never entered)."""
    store = config.store
    outside = tmp_path / "outside"
    if (store / linked).exists():
        (store / linked).rename(outside)
    else:
        outside.mkdir()
    (store / linked).symlink_to(outside, target_is_directory=True)
    before = sorted(p.relative_to(outside).as_posix() for p in outside.rglob("*"))
    result = run_gitmem(config, "record", "through the link", "--ts", "2026-01-07T10:00:00Z")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    link = store / linked
    assert (f"cannot write {store / 'events/2026-01/2026-01-07.jsonl'}: {link} is a symbolic "
            f"link (to {outside}), which gitmem never writes, reads nor indexes through (git "
            "keeps only the link): nothing was written; move the files into the store "
            f"(`rm {link} && mv {outside} {link}`), or remove the link") in result.stderr
    assert sorted(p.relative_to(outside).as_posix() for p in outside.rglob("*")) == before


@pytest.mark.parametrize("top", ["decisions", "tasks", "artifacts"])
def test_a_record_file_into_a_linked_record_folder_is_refused_nothing_written(
        memory: Memory, config: Config, tmp_path: Path, top: str) -> None:
    """A decision, a task or an artifact was put in place through the link: outside
    the repository, never indexed, and its event line was written in the store."""
    store = config.store
    outside = tmp_path / "outside"
    (store / top).rename(outside)
    (store / top).symlink_to(outside, target_is_directory=True)
    cited = memory.record({"content": {"text": "why"}}).id
    files = snapshot(config.root)
    with pytest.raises(StoreError, match=f"{store / top} is a symbolic link"):
        if top == "decisions":
            memory.decide("Use files", [cited])
        elif top == "tasks":
            memory.task("Review", refs=[cited])
        else:
            memory.record({"kind": "tool_result",
                           "content": {"tool": "t", "output": "z" * 10000}})
    assert snapshot(config.root) == files
    assert [p.name for p in outside.rglob("*")] == [".gitkeep"]


def test_another_tenants_id_is_refused_as_one_nobody_holds(memory: Memory, cli: Cli) -> None:
    """Each write naming another tenant's id was refused otherwise than one naming an id
    nobody holds ("task … is not a task of tenant 'a'" against "no task … to update",
    "is not a record of tenant 'a'", "is not an event of tenant 'a'", "is not a
    decision of tenant 'a'" against a dangling reference or "no decision"): which ids
    another tenant holds could be told apart. A summary's `decisions` were not checked
    at all (another tenant's, or a made-up id, were written)."""
    b_evt = memory.record({"content": {"text": "b's"}, "tenant_id": "b"}).id
    b_dec = memory.decide("b's decision", [b_evt], tenant_id="b").content["decision_id"]
    b_tsk = memory.task("b's task", tenant_id="b").content["task_id"]
    b_hof = memory.create_handoff("coder", "b's work", tenant_id="b").id
    b_sum = memory.record({"kind": "summary", "content": {"text": "b's summary"},
                           "refs": [b_evt], "tenant_id": "b"}).content["summary_id"]
    a_evt = memory.record({"content": {"text": "a's"}, "tenant_id": "a"}).id
    before = snapshot(memory.store)

    def same_refusal(write: Callable[[str], object], theirs: str) -> None:
        nobodys = ids.new_id(theirs[:3])
        refused = []
        for target in (theirs, nobodys):
            with pytest.raises((ValidationError, NotFoundError)) as caught:
                write(target)
            refused.append((type(caught.value), getattr(caught.value, "field", None),
                            str(caught.value).replace(target, "<id>")))
        assert refused[0] == refused[1]

    def on_cli(*args: str) -> Callable[[str], object]:
        def run(target: str) -> None:
            result = cli(*[target if a == "<id>" else a for a in args], ok=False)
            assert result.exit_code == 1
            raise NotFoundError(result.stderr)  # compared as the others are
        return run

    for theirs in (b_evt, b_dec, b_tsk, b_hof, b_sum):
        same_refusal(lambda t: memory.record(
            {"content": {"text": "x"}, "tenant_id": "a", "refs": [t]}), theirs)
        same_refusal(lambda t: memory.create_handoff("coder", "x", tenant_id="a", refs=[t]),
                     theirs)
        same_refusal(on_cli("record", "x", "--tenant", "a", "--ref", "<id>"), theirs)
    same_refusal(lambda t: memory.decide("a's", [a_evt], supersedes=[t], tenant_id="a"), b_dec)
    same_refusal(lambda t: memory.create_handoff("coder", "x", decisions=[t], tenant_id="a"),
                 b_dec)
    same_refusal(lambda t: memory.record({"kind": "summary", "refs": [a_evt], "tenant_id": "a",
                                          "content": {"text": "s", "decisions": [t]}}), b_dec)
    same_refusal(on_cli("decide", "x", "--ref", a_evt, "--supersedes", "<id>", "--tenant",
                        "a"), b_dec)
    same_refusal(on_cli("handoff", "coder", "x", "--decision", "<id>", "--tenant", "a"), b_dec)
    same_refusal(lambda t: memory.task(None, task_id=t, status="done", tenant_id="a"), b_tsk)
    same_refusal(lambda t: memory.record_many([{"kind": "task_update", "tenant_id": "a",
                                                "content": {"task_id": t, "status": "done"}}]),
                 b_tsk)
    same_refusal(on_cli("task", "--id", "<id>", "--status", "done", "--tenant", "a"), b_tsk)
    same_refusal(on_cli("task", "Mine now", "--id", "<id>", "--tenant", "a"), b_tsk)
    assert snapshot(memory.store) == before
    with pytest.raises(NotFoundError, match=r"^<input>:2: no task"):  # located in a batch
        memory.record_many([{"content": {"text": "x"}, "tenant_id": "a"}, {
            "kind": "task_update", "tenant_id": "a", "content": {"task_id": b_tsk}}])


def test_another_tenants_broken_file_is_never_quoted(memory: Memory) -> None:
    """Another tenant's record file was parsed before its tenant was compared: a broken
    one answered with its path and what is wrong with it, field values included."""
    b_evt = memory.record({"content": {"text": "b's"}, "tenant_id": "b"}).id
    b_dec = memory.decide("b's decision", [b_evt], tenant_id="b").content["decision_id"]
    b_tsk = memory.task("b's task", tenant_id="b").content["task_id"]
    a_evt = memory.record({"content": {"text": "a's"}, "tenant_id": "a"}).id
    path = memory.store / "decisions" / f"{b_dec}.md"  # its fields do not load
    path.write_text(path.read_text().replace("---\n", "---\nplan: [b's secret plan\n", 1))
    path = memory.store / "tasks" / f"{b_tsk}.md"  # a value the parse refuses, quoted
    path.write_text(path.read_text().replace("status: open", "status: secret plan"))
    for write, said in (
            (lambda: memory.decide("x", [a_evt], supersedes=[b_dec], tenant_id="a"),
             f"no decision {b_dec} in"),
            (lambda: memory.create_handoff("c", "x", decisions=[b_dec], tenant_id="a"),
             f"no decision {b_dec} in"),
            (lambda: memory.record({"content": {"text": "x"}, "tenant_id": "a",
                                    "refs": [b_dec]}), "dangling reference"),
            (lambda: memory.record({"content": {"text": "x"}, "tenant_id": "a",
                                    "refs": [b_tsk]}), "dangling reference"),
            (lambda: memory.task(None, task_id=b_tsk, status="done", tenant_id="a"),
             f"no task {b_tsk} to update")):
        with pytest.raises((ValidationError, NotFoundError), match=said) as caught:
            write()
        assert "secret plan" not in str(caught.value) and ".md:" not in str(caught.value)
    with pytest.raises(ValidationError, match=f"decision {b_dec} cannot be read"):  # its own
        memory.decide("x", [b_evt], supersedes=[b_dec], tenant_id="b")
    with pytest.raises(FormatError, match="secret plan"):
        memory.task(None, task_id=b_tsk, status="done", tenant_id="b")
