"""The index: reindex, incremental sync, status, bad input, torn lines, equivalence."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gitmem import lexicon
from gitmem.appends import append_lock, append_locked
from gitmem.config import Config
from gitmem.db import Database
from gitmem.errors import DatabaseError, RpcError, ValidationError
from gitmem.freshness import ANCHOR_BYTES, ReadFiles
from gitmem.indexer import index_digest
from gitmem.memory import Memory
from gitmem.records import content_hash
from gitmem.rows import Appended, split_known, tenant_tag
from gitmem.store import home_dates
from tests.conftest import Cli, git
from tests.daemons import append, cleanup_dir, event_line, items, new_repo, running, short_dir

DAY = "events/2026-02/2026-02-09.jsonl"
DAY2 = "events/2026-02/2026-02-10.jsonl"
EVT = "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"


def line(n: int, day: str = "2026-02-09", **changes: Any) -> str:
    """A valid, complete event line (with its newline) numbered n."""
    obj: dict[str, Any] = {
        "id": f"evt_01JKZ3N4Q5R6S7T8V9W0X{n:05d}", "ts": f"{day}T05:12:33+00:00",
        "tenant_id": "default", "session_id": "s1", "agent_id": "a1", "channel": "private",
        "actor": {"type": "human", "id": "alice"}, "kind": "message",
        "content": {"text": f"message number {n} about deployments"}, "refs": [], "tags": [],
        "sensitivity": "none"}
    obj.update(changes)
    obj["hash"] = content_hash(obj["kind"], obj["content"])
    return json.dumps(obj) + "\n"


def write(store: Path, rel: str, data: str | bytes, mode: str = "w") -> Path:
    path = store / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    with path.open(mode + "b") as handle:
        handle.write(raw)
    return path


def rows(dsn: str, schema: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}") as conn:
        cur = conn.execute(query, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description is not None else []


def assert_reindex_equal(memory: Memory, dsn: str, schema: str) -> None:
    """A reindex from the files, in a schema of its own, equals `memory`'s index."""
    fresh = replace(memory.config, schema=f"{schema}_r")
    with Memory(fresh) as rebuilt:
        rebuilt.reindex()
        try:
            assert index_digest(rebuilt.db) == index_digest(memory.db)
        finally:
            rows(dsn, schema, f'DROP SCHEMA "{schema}_r" CASCADE')


def event_ids(dsn: str, schema: str) -> list[str]:
    return [r[0] for r in rows(dsn, schema, "SELECT event_id FROM events ORDER BY event_id")]


def changed(report: Any) -> dict[str, str]:
    return {item["path"]: item["action"] for item in report.changed}


@pytest.fixture
def store(config: Config) -> Path:
    return config.store


# ----------------------------------------------------------------------------- reindex


def test_reindex_builds_every_table(memory: Memory, store: Path, dsn: str, schema: str) -> None:
    ref = memory.record({"content": {"text": "We deploy on Fridays"}, "tags": ["topic:deploy"],
                         "actor": {"type": "human", "id": "alice"}}).id
    memory.record({"kind": "tool_result",
                   "content": {"tool": "sh", "output": "out\n" * 5000}})
    memory.decide("Deploy on Fridays only", [ref], rationale=["fewer incidents"])
    memory.task("Write the runbook", owner="bob")
    memory.record({"kind": "summary", "refs": [ref], "content": {"text": "We talked deploys"}})
    memory.create_handoff("coder", "Write the runbook")
    report = memory.reindex()
    assert report.errors == [] and report.files == 9  # 4 views, a day file, dec, tsk, sum, hof
    counts = memory.status()["index"]
    assert counts["events"] == 5 and counts["decisions"] == 1 and counts["tasks"] == 1
    assert counts["summaries"] == 1 and counts["handoffs"] == 1 and counts["views"] == 4
    assert counts["artifacts"] == 1
    # chunks: 2 message-like events + decision + task + summary (their events are logs only)
    kinds = sorted(rows(dsn, schema, "SELECT DISTINCT source_type, source_id FROM chunks"))
    assert [k for k, _ in kinds] == ["decision", "event", "event", "summary", "task"]
    # the long tool output's excerpt is split into chunks of at most chunk_max_tokens
    parts = rows(dsn, schema, "SELECT chunk_id, token_est FROM chunks WHERE kind = 'tool_result'"
                 " ORDER BY chunk_id")
    assert len(parts) > 1 and all(n <= 600 for _, n in parts)
    assert parts[0][0].endswith("#1")
    # the actor's name and the tags are searchable along with the text
    for word in ("alice", "deploy", "fridays"):
        [term] = lexicon.qualify(lexicon.analyze(memory.db, word), "default")
        hit = rows(dsn, schema, "SELECT chunk_id FROM chunks WHERE tsv @@ %s::tsquery",
                   (term.query,))
        assert (ref,) in hit, word
    assert memory.status()["clean"]


def test_rows_made_by_another_version_of_gitmem_are_remade_blaming_no_policy_file(
        memory: Memory) -> None:
    """An index whose rows an older gitmem made (its `row_policies` without `rules`, as
    before 7) is made again at the next sync, and status says an upgrade did it, not an
    edit of privacy.yaml (its rules were hashed into the redaction's value)."""
    memory.record({"kind": "message", "content": {"text": "rows of another version"}})
    memory.sync()
    made = json.loads(memory.db.fetchone("meta_get", {"key": "row_policies"})["value"])
    del made["rules"]
    memory.db.execute("meta_set", {"key": "row_policies", "value": json.dumps(made)})
    stale = memory.status()["stale"]
    assert [(s["path"], s["action"]) for s in stale][:1] == [("index", "reindex")]
    assert "another version of gitmem (rules 6 or older -> " in stale[0]["reason"]
    assert "privacy" not in json.dumps(stale)
    report = memory.sync()
    assert report.rebuilt and memory.status()["stale"] == []


def test_reindex_loads_rows_frozen_and_every_page_all_visible(memory: Memory, store: Path,
                                                              dsn: str, schema: str) -> None:
    """The first reads after a reindex (CI's path) find every page all-visible: they set
    no hint bits, and autovacuum's first pass has nothing to do."""
    write(store, DAY, "".join(line(i) for i in range(400)))
    memory.reindex()
    found = dict(rows(dsn, schema, "SELECT c.relname, c.relallvisible::float8 / c.relpages "
                      "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                      "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relpages > 0", (schema,)))
    assert {"chunks", "events", "source_files"} <= set(found)
    assert all(found[t] == 1.0 for t in ("chunks", "events", "source_files")), found
    memory.record({"content": {"text": "after the reindex"}})  # the tables stay writable
    assert memory.sync().changed and memory.status()["clean"]


def test_reindex_reports_progress(memory: Memory, store: Path) -> None:
    write(store, DAY, "".join(line(i) for i in range(20)) + '{"torn')
    seen: list[int] = []
    memory.reindex(seen.append)
    total = sum(p.stat().st_size for p in store.rglob("*")
                if p.is_file() and p.suffix in (".md", ".jsonl", ".yaml")
                and "policies" not in p.parts)
    assert sum(seen) == total


def test_reindex_of_an_empty_store(memory: Memory) -> None:
    report = memory.reindex()
    assert report.rows > 0 and report.errors == []  # the template views
    assert memory.status()["index"]["events"] == 0


# ----------------------------------------------------------------------------- sync


def test_a_sync_writes_nothing_to_an_index_another_store_took_over(memory: Memory,
                                                                   store: Path) -> None:
    """Between a take-over and a process's next sync, its open index names another
    store: the sync raises, naming both, and leaves the other store's rows alone (a
    reshaping sync would otherwise rebuild the index from this store's files)."""
    write(store, DAY, line(1))
    memory.sync()
    memory.db.execute("meta_set", {"key": "store", "value": "/elsewhere/memory"})
    write(store, DAY, line(2), mode="a")
    with pytest.raises(DatabaseError) as caught:
        memory.sync()
    assert f"holds the index of /elsewhere/memory, not of {store.resolve()}" in str(caught.value)
    assert memory.db.fetchone("meta_get", {"key": "store"}) == {"value": "/elsewhere/memory"}
    assert memory.status()["index"]["events"] == 1  # line 2 was not indexed


def test_a_full_sync_of_an_empty_index_loads_in_bulk(memory: Memory, store: Path, dsn: str,
                                                     schema: str) -> None:
    write(store, DAY, line(1) + line(2))
    write(store, DAY2, line(3, day="2026-02-10") + "{not json\n")
    first = memory.sync()
    assert first.rebuilt  # nothing was indexed: the reindex path (COPY), not file by file
    assert changed(first) == {DAY: "new", DAY2: "new", "views/glossary.md": "new",
                              "views/identity.md": "new", "views/preferences.md": "new",
                              "views/rules.project.md": "new"}
    assert [(e["path"], e["line"]) for e in first.errors] == [(DAY2, 2)]
    assert event_ids(dsn, schema) == sorted(json.loads(line(i))["id"] for i in (1, 2, 3))
    bulk = index_digest(memory.db)
    write(store, DAY2, line(4, day="2026-02-10"), mode="a")
    later = memory.sync()  # the index holds files now: incremental again
    assert not later.rebuilt and changed(later) == {DAY2: "append"}
    assert index_digest(memory.db) != bulk
    memory.reindex()
    rebuilt = index_digest(memory.db)
    rows(dsn, schema, "DELETE FROM source_files")  # as if emptied: bulk again, same index
    assert memory.sync().rebuilt and index_digest(memory.db) == rebuilt


def test_sync_appends_only_new_lines(memory: Memory, store: Path, dsn: str,
                                     schema: str) -> None:
    write(store, DAY, line(1) + line(2) + line(3))
    assert changed(memory.sync()) == {
        DAY: "new", "views/glossary.md": "new", "views/identity.md": "new",
        "views/preferences.md": "new", "views/rules.project.md": "new"}
    # mark an indexed row: an append must not touch rows already indexed
    rows(dsn, schema, "UPDATE events SET session_id = 'marker' WHERE line = 1")
    write(store, DAY, line(4) + line(5), mode="a")
    report = memory.sync()
    assert changed(report) == {DAY: "append"}
    assert event_ids(dsn, schema) == sorted(json.loads(line(i))["id"] for i in range(1, 6))
    assert rows(dsn, schema, "SELECT session_id FROM events WHERE line = 1") == [("marker",)]
    assert rows(dsn, schema, "SELECT line FROM events ORDER BY line") == [(i,) for i in range(1, 6)]
    assert rows(dsn, schema, "SELECT line_count, byte_offset FROM source_files WHERE path = %s",
                (DAY,)) == [(5, (store / DAY).stat().st_size)]
    assert changed(memory.sync()) == {}


def test_sync_reparses_an_edited_markdown_file(memory: Memory, store: Path, dsn: str,
                                               schema: str) -> None:
    memory.sync()
    view = store / "views" / "glossary.md"
    view.write_text("---\nsection: rules\n---\n# Glossary\n\n- **FTS**: full-text search\n\n"
                    "## More\n\nmore words\n")
    assert changed(memory.sync()) == {"views/glossary.md": "changed"}
    assert rows(dsn, schema, "SELECT anchor, line FROM view_chunks WHERE path = %s ORDER BY ord",
                ("views/glossary.md",)) == [("glossary", 4), ("more", 8)]
    ts = "2026-02-09T05:00:00+00:00"
    ref = memory.record({"content": {"text": "x"}, "ts": ts}).id
    task_id = memory.task("Ship it", ts=ts).content["task_id"]
    memory.sync()
    memory.task("Ship it", task_id=task_id, status="done", refs=[ref], ts=ts)
    assert changed(memory.sync()) == {f"tasks/{task_id}.md": "changed", DAY: "append"}
    assert rows(dsn, schema, "SELECT status FROM tasks") == [("done",)]


def test_a_view_whose_headings_slugify_alike_is_indexed_whole(memory: Memory, store: Path,
                                                                dsn: str, schema: str) -> None:
    """Headings `Notes`, `Notes` and `Notes 1` made two anchors notes-1: a reindex failed
    on the key, and a sync kept two of the three chunks."""
    memory.sync()
    write(store, "views/notes.md", "---\nsection: rules\npinned: true\n---\n# Notes\n\n"
          "first\n\n## Notes\n\nsecond\n\n## Notes 1\n\nthird\n")
    memory.sync()
    assert rows(dsn, schema, "SELECT anchor FROM view_chunks WHERE path = %s ORDER BY ord",
                ("views/notes.md",)) == [("notes",), ("notes-1",), ("notes-1-1",)]
    assert_reindex_equal(memory, dsn, schema)


def test_sync_removes_rows_of_deleted_files(memory: Memory, store: Path, dsn: str,
                                            schema: str) -> None:
    write(store, DAY, line(1))
    write(store, DAY2, line(2, day="2026-02-10"))
    ref = memory.record({"content": {"text": "x"}, "ts": "2026-02-09T06:00:00+00:00"}).id
    dec = memory.decide("Keep it", [ref], ts="2026-02-09T07:00:00+00:00").content["decision_id"]
    memory.sync()
    assert len(event_ids(dsn, schema)) == 4
    (store / DAY).unlink()
    (store / "decisions" / f"{dec}.md").unlink()
    (store / "views" / "glossary.md").unlink()
    report = memory.sync()
    assert changed(report) == {DAY: "deleted", f"decisions/{dec}.md": "deleted",
                               "views/glossary.md": "deleted"}
    assert event_ids(dsn, schema) == [json.loads(line(2))["id"]]
    assert rows(dsn, schema, "SELECT count(*) FROM decisions") == [(0,)]
    assert rows(dsn, schema, "SELECT count(*) FROM chunks WHERE path <> %s", (DAY2,)) == [(0,)]
    assert rows(dsn, schema, "SELECT count(*) FROM view_chunks WHERE path = %s",
                ("views/glossary.md",)) == [(0,)]
    assert rows(dsn, schema, "SELECT count(*) FROM source_files WHERE path = %s",
                (DAY,)) == [(0,)]
    assert memory.status()["clean"]


def row_versions(dsn: str, schema: str) -> dict[str, Any]:
    """Each event row's xmin: the transaction that wrote it (kept unless rewritten)."""
    return dict(rows(dsn, schema, "SELECT event_id, xmin::text FROM events"))


def test_lines_cut_from_the_end_of_a_day_file_lose_only_their_rows(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    """A checkout of an older commit cuts a day file's last lines: their rows (events,
    chunks, artifacts, counted lexemes) go, and the lines left keep theirs untouched."""
    long_text = " ".join(f"paragraph {n} of the deployment notes" for n in range(400))
    tail = (line(3, content={"text": long_text})
            + line(4, kind="tool_result", actor={"type": "tool", "id": "sh"},
                   content={"tool": "sh", "excerpt_text": "ok", "truncated": True,
                            "artifact_id": "art_" + "0" * 64, "bytes": 99}))
    write(store, DAY, line(1) + line(2) + tail)
    memory.sync()
    assert rows(dsn, schema, "SELECT count(*) FROM chunks WHERE line = 3")[0][0] > 1
    assert rows(dsn, schema, "SELECT count(*) FROM artifacts") == [(1,)]
    before = row_versions(dsn, schema)
    write(store, DAY, line(1) + line(2))
    report = memory.sync()
    assert changed(report) == {DAY: "truncate"}
    assert report.offsets[DAY] == len(line(1) + line(2))
    kept = [json.loads(line(n))["id"] for n in (1, 2)]
    assert event_ids(dsn, schema) == kept
    assert row_versions(dsn, schema) == {k: before[k] for k in kept}  # not written again
    assert rows(dsn, schema, "SELECT count(*) FROM chunks WHERE path = %s", (DAY,)) == [(2,)]
    assert rows(dsn, schema, "SELECT count(*) FROM artifacts") == [(0,)]
    assert memory.status()["clean"]
    assert_reindex_equal(memory, dsn, schema)  # lexeme counts and file state included
    write(store, DAY, line(3), mode="a")  # and it grows again from there
    assert changed(memory.sync()) == {DAY: "append"}
    assert_reindex_equal(memory, dsn, schema)


@pytest.mark.parametrize(("now", "action", "kept"), [
    pytest.param(line(1, tags=["edited"]) + line(2), "rewrite", 0,
                 id="a field of the first line changed"),
    pytest.param(line(2) + line(1), "rewrite", 0, id="the lines in another order"),
    pytest.param(line(1, content={"text": "edited"}).replace(
        content_hash("message", {"text": "edited"}),
        content_hash("message", {"text": "message number 1 about deployments"})) + line(2),
        "rewrite", 0, id="content edited, its hash kept"),
    pytest.param(line(1) + line(2, tags=["edited"]) + line(3), "rewrite", 1,
                 id="a line in the middle edited"),
    pytest.param(line(1) + line(2) + line(7) + line(8), "rewrite", 2,
                 id="another branch's lines after the first two"),
    pytest.param(line(1) + "not json\n" + line(3), "rewrite", 1,
                 id="a line that no longer parses"),
    pytest.param(line(1) + "\n" + line(3), "rewrite", 1, id="a line left blank"),
    pytest.param(line(1) + "\n", "truncate", 1, id="cut, and a blank line left"),
    pytest.param(json.dumps(json.loads(line(1)), indent=None, separators=(",", ":")) + "\n"
                 + line(2), "truncate", 2, id="the same events spelled differently"),
])
def test_a_day_file_changed_from_some_line_on_is_read_again_from_there(
        memory: Memory, store: Path, dsn: str, schema: str, now: str, action: str,
        kept: int) -> None:
    """A day file whose lines differ from what the index made of them from some line on
    (another branch, an edit in place, a cut) keeps the rows of the lines before it, and
    its index equals a reindex's."""
    write(store, DAY, line(1) + line(2) + line(3))
    memory.sync()
    before = rows(dsn, schema, "SELECT line, event_id, xmin::text FROM events ORDER BY line")
    write(store, DAY, now)
    report = memory.sync()
    assert changed(report) == {DAY: action}
    after = rows(dsn, schema, "SELECT line, event_id, xmin::text FROM events ORDER BY line")
    untouched = [r for r in after if r in before]
    assert untouched == before[:kept]  # the rows of the lines kept, not written again
    if kept and action == "rewrite":
        assert report.changed[0]["reason"].startswith(f"lines from {kept + 1} on changed")
    assert memory.status()["clean"]
    assert_reindex_equal(memory, dsn, schema)


def _holding(dsn: str, schema: str, text: str) -> list[str]:
    """The tables of the index with a row whose text holds `text`."""
    tables = [r[0] for r in rows(dsn, schema, "SELECT table_name FROM information_schema.tables"
                                 " WHERE table_schema = %s", (schema,))]
    return [t for t in tables if rows(dsn, schema, f'SELECT count(*) FROM "{t}" r'
                                      " WHERE r::text LIKE %s", (f"%{text}%",)) != [(0,)]]


def test_no_row_holds_a_secret_of_a_line_written_by_hand(memory: Memory, store: Path,
                                                         dsn: str, schema: str) -> None:
    """A line gitmem did not write (by hand, a merge, an older pattern set) may hold a
    secret in its content, under a key naming one, in a tag or a name: what the index
    keeps of it is redacted as the write path would have, every row of every table, and
    the line still reads as indexed when a later one changes (`reread.same_event`)."""
    key = "sk-" + "Z" * 30
    secret = line(1, content={"text": f"deploy with {key} today"}, tags=[f"k:{key}"],
                  session_id=key, agent_id=key, actor={"type": "human", "id": key})
    pin = line(2, kind="tool_call", content={"tool": "unlock", "args": {"password": 98765432}})
    write(store, DAY, secret + pin + line(3))
    assert memory.sync().errors == []
    assert _holding(dsn, schema, key) == [] and _holding(dsn, schema, "98765432") == []
    assert rows(dsn, schema, "SELECT content->>'text', tags, session_id, actor_id FROM events"
                " WHERE line = 1") == [("deploy with [REDACTED] today", ["k:[REDACTED]"],
                                         "[REDACTED]", "[REDACTED]")]
    [(tags, text)] = rows(dsn, schema, "SELECT tags, text FROM chunks WHERE line = 1")
    assert tags == ["k:[REDACTED]"] and text == "[REDACTED]: deploy with [REDACTED] today"
    before = rows(dsn, schema, "SELECT line, xmin::text FROM events ORDER BY line")
    write(store, DAY, secret + pin + line(3, tags=["edited"]))
    report = memory.sync()
    assert report.changed[0]["reason"].startswith("lines from 3 on changed")
    assert rows(dsn, schema, "SELECT line, xmin::text FROM events ORDER BY line")[:2] == before[:2]
    assert _holding(dsn, schema, key) == []
    assert_reindex_equal(memory, dsn, schema)


def test_ids_gitmem_mints_are_never_redacted_and_a_line_reads_as_it_was_written(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    """A pattern of long hex matched an artifact's id in rows made from the file (not in
    those the write path made), in the content and in the text of an artifact without a
    name, so the ACB lost its link to the output; and a redaction
    a key pattern names (`[secret]`) redacted a value again on the second reading."""
    privacy = store / "policies" / "privacy.yaml"
    privacy.write_text(privacy.read_text().replace(
        "  redact_patterns:\n", "  redact_patterns:\n    - '[0-9a-f]{40,}'\n").replace(
        'redaction: "[REDACTED]"', 'redaction: "[secret]"'))
    memory.invalidate(["policies/privacy.yaml"])
    output = "".join(f"line {n}: nothing to see\n" for n in range(3000))
    result = memory.record({"kind": "tool_result", "content": {"tool": "sh", "output": output}})
    keyed = memory.record({"kind": "tool_call", "content": {
        "tool": "vault", "args": {"sk-abcdefghijklmnopqrstuvwxyz12": "plain value"}}})
    named = memory.record({"kind": "artifact", "content": {"data": "raw bytes"}})  # no name
    memory.sync()
    artifact = result.content["artifact_id"]
    assert rows(dsn, schema, "SELECT artifact_id FROM artifacts ORDER BY bytes DESC") == [
        (artifact,), (named.content["artifact_id"],)]
    [(text,)] = rows(dsn, schema, "SELECT text FROM chunks WHERE source_id = %s", (named.id,))
    assert text.endswith(named.content["artifact_id"])  # what the ACB shows of it
    [(args,)] = rows(dsn, schema, "SELECT content->'args' FROM events WHERE event_id = %s",
                     (keyed.id,))
    assert args == {"[secret]": "[secret]"}
    assert_reindex_equal(memory, dsn, schema)


def test_cut_lines_keep_the_errors_and_repeats_of_the_lines_left(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    write(store, DAY, line(1) + "not json\n" + line(1) + line(2) + "{bad\n" + line(3))
    memory.sync()
    assert [e["line"] for e in memory.status()["errors"]] == [2, 5]
    write(store, DAY, line(1) + "not json\n" + line(1) + line(2))
    assert changed(memory.sync()) == {DAY: "truncate"}
    assert [e["line"] for e in memory.status()["errors"]] == [2]
    assert event_ids(dsn, schema) == sorted(json.loads(line(n))["id"] for n in (1, 2))
    assert_reindex_equal(memory, dsn, schema)
    before = memory.status()["errors"][0]["message"]
    write(store, DAY, line(1) + "[1, 2]\n" + line(1) + line(2))  # bad another way
    report = memory.sync()
    assert report.changed[0]["reason"].startswith("lines from 2 on changed")
    [error] = memory.status()["errors"]
    assert error["line"] == 2 and error["message"] != before
    assert_reindex_equal(memory, dsn, schema)


def test_rewritten_jsonl_prefix_is_reindexed_whole(memory: Memory, store: Path, dsn: str,
                                                   schema: str) -> None:
    write(store, DAY, line(1) + line(2))
    memory.sync()
    # another branch: same length, different first line, then more lines
    write(store, DAY, line(7) + line(2) + line(3))
    assert len(line(7)) == len(line(1))
    report = memory.sync()
    assert changed(report) == {DAY: "rewrite"}
    assert event_ids(dsn, schema) == sorted(json.loads(line(i))["id"] for i in (2, 3, 7))
    assert rows(dsn, schema, "SELECT line FROM events ORDER BY line") == [(1,), (2,), (3,)]


def test_sync_of_selected_paths(memory: Memory, store: Path, dsn: str, schema: str) -> None:
    write(store, DAY, line(1))
    write(store, DAY2, line(2, day="2026-02-10"))
    report = memory.sync([DAY, "policies/budgets.yaml", "not/a/store/file.txt"])
    assert changed(report) == {DAY: "new"}
    assert event_ids(dsn, schema) == [json.loads(line(1))["id"]]
    assert not memory.status()["clean"]


def assert_glossary_edit_indexed(memory: Memory, dsn: str, schema: str) -> None:
    """views/glossary.md, its "ACB" turned "XYZ" in place: stale, then synced as changed."""
    assert [s["path"] for s in memory.status()["stale"]] == ["views/glossary.md"]
    assert changed(memory.sync()) == {"views/glossary.md": "changed"}
    texts = rows(dsn, schema, "SELECT text FROM view_chunks WHERE path = %s",
                 ("views/glossary.md",))
    assert any("XYZ" in t for (t,) in texts)


def test_same_size_edit_within_the_same_mtime_is_seen(memory: Memory, store: Path, dsn: str,
                                                      schema: str) -> None:
    view = store / "views" / "glossary.md"
    memory.sync()
    st = view.stat()
    text = view.read_text()
    edited = text.replace("ACB", "XYZ")
    assert edited != text and len(edited) == len(text)
    with view.open("r+") as handle:  # in place: same inode, same size
        handle.write(edited)
    os.utime(view, ns=(st.st_atime_ns, st.st_mtime_ns))  # a coarse clock: same mtime
    assert view.stat().st_ino == st.st_ino
    assert_glossary_edit_indexed(memory, dsn, schema)


def test_same_size_edit_in_the_middle_of_a_day_file_is_seen(memory: Memory, store: Path,
                                                            dsn: str, schema: str) -> None:
    """Past the anchors (the first and last 4 KiB), a redaction of the same length: the
    whole prefix's CRC tells."""
    lines = [line(n, content={"text": f"note {n}: the cluster lives in Frankfurt"})
             for n in range(1, 121)]
    path = write(store, DAY, "".join(lines))
    assert path.stat().st_size > 3 * 4096
    memory.sync()
    data = path.read_bytes()
    middle = data.index(b"note 60: the cluster lives in Frankfurt")
    with path.open("r+b") as handle:  # in place: same inode, same size
        handle.seek(middle)
        handle.write(data[middle:middle + 39].replace(b"Frankfurt", b"Amsterdam"))
    assert path.stat().st_size == len(data)
    assert [s["path"] for s in memory.status()["stale"]] == [DAY]
    assert changed(memory.sync()) == {DAY: "rewrite"}
    found = rows(dsn, schema, "SELECT content ->> 'text' FROM events WHERE line = 60")
    assert found == [("note 60: the cluster lives in Amsterdam",)]
    assert memory.status()["clean"] and not memory.sync().changed
    with path.open("ab") as handle:  # a torn tail, indexed as pending ...
        handle.write(b'{"torn": ')
    memory.sync()
    data = path.read_bytes()
    middle = data.index(b"note 61: the cluster lives in Frankfurt")
    path.write_bytes(data[:middle] + data[middle:].replace(b"Frankfurt", b"Amsterdam", 1)
                     [:len(data) - middle - len(b'{"torn": ')])  # ... gone with the edit
    assert changed(memory.sync()) == {DAY: "rewrite"}
    found = rows(dsn, schema, "SELECT content ->> 'text' FROM events WHERE line = 61")
    assert found == [("note 61: the cluster lives in Amsterdam",)]


def _scrub_line(path: Path, text: bytes, scrubbed: bytes) -> None:
    """`text` turned into `scrubbed` (as long) in place, past the anchors' reach."""
    data = path.read_bytes()
    where = data.index(text)
    assert len(text) == len(scrubbed) and ANCHOR_BYTES < where < len(data) - ANCHOR_BYTES
    with path.open("r+b") as handle:  # same inode, same size
        handle.seek(where)
        handle.write(scrubbed)


def _notes(n: int) -> str:
    return "".join(line(k, content={"text": f"note {k}: the cluster lives in Frankfurt"})
                   for k in range(1, n + 1))


def test_same_size_edit_in_the_middle_then_lines_appended_is_seen(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    """A word scrubbed by hand, then a line appended: the file grew, its anchors are
    as indexed, and only the whole prefix's CRC tells (the index would go on serving
    the scrubbed word, and status say clean)."""
    path = write(store, DAY, _notes(120))
    memory.sync()
    _scrub_line(path, b"note 60: the cluster lives in Frankfurt",
                b"note 60: the cluster lives in XXXXXXXXX")
    write(store, DAY, line(121), mode="a")
    assert [(s["path"], s["reason"]) for s in memory.status()["stale"]] == [
        (DAY, "indexed prefix changed in place")]
    assert changed(memory.sync()) == {DAY: "rewrite"}
    found = rows(dsn, schema, "SELECT content ->> 'text' FROM events WHERE line IN (60, 121) "
                              "ORDER BY line")
    assert found == [("note 60: the cluster lives in XXXXXXXXX",),
                     ("message number 121 about deployments",)]
    assert not rows(dsn, schema, "SELECT 1 FROM chunks WHERE text LIKE %s",
                    ("note 60:%Frankfurt",))
    assert memory.status()["clean"]
    assert_reindex_equal(memory, dsn, schema)


def _unnamed(n: int) -> dict[str, Any]:
    """An event to record with no id (no catch-up first: nothing to look up)."""
    return {"session_id": "s1", "ts": "2026-02-09T06:00:00+00:00",
            "content": {"text": f"appended note {n}"}}


def test_own_appends_after_a_hand_edit_do_not_hide_it(memory: Memory, store: Path, dsn: str,
                                                      schema: str) -> None:
    """The daemon's case: this process appends right after someone scrubbed a word in
    place. Its appends are known, but they began from a stat the sync never read: the
    prefix is checked, and the file read again whole."""
    path = write(store, DAY, _notes(120))
    memory.sync()
    got: list[Appended] = []
    memory.on_append = lambda rel, appended: got.append(appended)
    memory.record(_unnamed(200))  # read after the sync: the chain starts here ...
    assert changed(memory.sync([DAY], {DAY: got})) == {DAY: "append"}
    _scrub_line(path, b"note 60: the cluster lives in Frankfurt",
                b"note 60: the cluster lives in XXXXXXXXX")
    got.clear()
    memory.record(_unnamed(201))  # ... and breaks here: another stat than read
    assert len(got) == 1 and got[0].before is not None
    assert changed(memory.sync([DAY], {DAY: got})) == {DAY: "rewrite"}
    found = rows(dsn, schema, "SELECT content ->> 'text' FROM events WHERE line = 60")
    assert found == [("note 60: the cluster lives in XXXXXXXXX",)]
    assert_reindex_equal(memory, dsn, schema)


def test_own_appends_chain_from_the_stat_last_read(tmp_path: Path) -> None:
    """`ReadFiles.grown_by`: a file grown by this process's appends alone, each from the
    stat the one before left, is what was read plus them; a change by anyone else in
    between, before, after or instead, is not."""
    path = tmp_path / "day.jsonl"
    path.write_bytes(b'{"n": 1}\n' * 2000)
    read = ReadFiles()
    crc = zlib.crc32(path.read_bytes())
    state = {"byte_offset": path.stat().st_size, "prefix_crc": crc}
    read.note(path, path.stat(), state["byte_offset"], crc)

    def own(lines: int) -> Appended:
        with append_lock(path) as fd:
            _, offset, data, before, after = append_locked(fd, path, [b'{"n": 2}\n'] * lines,
                                                           None)
        return Appended(offset, data, (), after, before)

    mine = [own(1), own(3)]
    assert read.grown_by(path, state, path.stat(), mine)
    assert not read.grown_by(path, state, path.stat(), mine[1:])  # one of them unknown
    assert not read.grown_by(path, state, path.stat(), [])
    assert not read.grown_by(path, {**state, "prefix_crc": crc + 1}, path.stat(), mine)
    with path.open("r+b") as handle:  # a same-length edit after them
        handle.write(b'{"n": 9}')
    assert not read.grown_by(path, state, path.stat(), mine)
    read.note(path, path.stat(), path.stat().st_size, zlib.crc32(path.read_bytes()))
    state = {"byte_offset": path.stat().st_size, "prefix_crc": zlib.crc32(path.read_bytes())}
    with path.open("r+b") as handle:  # ... and before one
        handle.write(b'{"n": 8}')
    assert not read.grown_by(path, state, path.stat(), [own(1)])
    assert not ReadFiles().grown_by(path, state, path.stat(), [own(1)])  # never read


def test_a_rewrite_that_sets_the_mtime_back_is_seen(memory: Memory, store: Path, dsn: str,
                                                    schema: str) -> None:
    """`touch -r`, `cp -p`, `rsync -t`: the same size and mtime, but another ctime."""
    import time

    view = store / "views" / "glossary.md"
    text = view.read_text()
    time.sleep(2.1)  # past the racy window: the index trusts the stat it keeps
    memory.sync()
    st = view.stat()
    view.write_text(text.replace("ACB", "XYZ"))
    os.utime(view, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = view.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        st.st_size, st.st_mtime_ns, st.st_ino)
    assert_glossary_edit_indexed(memory, dsn, schema)


def test_rows_made_under_other_policies_are_made_again(memory: Memory, store: Path,
                                                       dsn: str, schema: str) -> None:
    long_text = "\n\n".join(f"paragraph {n}: " + "word " * 80 for n in range(6))
    write(store, DAY, line(1, content={"text": long_text}))
    memory.sync()
    before = rows(dsn, schema, "SELECT count(*) FROM chunks WHERE source_id = %s",
                  (json.loads(line(1))["id"],))[0][0]
    budgets = store / "policies" / "budgets.yaml"
    budgets.write_text(budgets.read_text().replace("chunk_max_tokens: 600",
                                                   "chunk_max_tokens: 100"))
    stale = memory.status()["stale"]
    assert [(s["path"], s["action"]) for s in stale] == [("policies/budgets.yaml", "reindex")]
    assert "chunk_max_tokens 600 -> 100" in stale[0]["reason"]
    report = memory.sync()
    assert report.rebuilt and changed(report)[DAY] == "rewrite"
    after = rows(dsn, schema, "SELECT count(*) FROM chunks WHERE source_id = %s",
                 (json.loads(line(1))["id"],))[0][0]
    assert after > before
    assert memory.status()["clean"] and not memory.sync().changed


# ----------------------------------------------------------------------------- status


def test_status_names_stale_files_and_reasons(memory: Memory, store: Path) -> None:
    write(store, DAY, line(1) + line(2))
    write(store, DAY2, line(3, day="2026-02-10"))
    memory.sync()
    assert memory.status()["clean"]
    write(store, DAY, line(4), mode="a")
    write(store, DAY2, line(3, day="2026-02-10")[:-30] + "\n")  # shorter
    (store / "views" / "preferences.md").unlink()
    (store / "views" / "glossary.md").write_text("# Glossary\n\nnew words\n")
    write(store, "events/2026-02/2026-02-11.jsonl", line(5, day="2026-02-11"))
    status = memory.status()
    assert not status["clean"]
    stale = {s["path"]: (s["action"], s["reason"]) for s in status["stale"]}
    assert stale == {
        DAY: ("append", "lines appended since the index"),
        DAY2: ("rewrite", "shorter than the indexed prefix (checkout or rewrite)"),
        "events/2026-02/2026-02-11.jsonl": ("new", "not indexed yet"),
        "views/glossary.md": ("changed", "content hash differs from the index"),
        "views/preferences.md": ("deleted", "indexed but no longer on disk"),
    }
    memory.sync()
    assert memory.status()["clean"] and memory.status()["stale"] == []


def test_status_of_an_unsynced_store_is_not_clean(memory: Memory, store: Path) -> None:
    status = memory.status()
    assert not status["clean"] and len(status["stale"]) == 4
    assert status["index"]["events"] == 0 and status["files_indexed"] == 0


def test_status_reports_git_heads(memory: Memory, store: Path, repo: Path) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    head = git(repo, "rev-parse", "HEAD").strip()
    status = memory.status()
    assert status["git"] == {"head": head, "indexed_head": None}
    memory.sync()
    assert memory.status()["git"] == {"head": head, "indexed_head": head}


# ----------------------------------------------------------------------------- bad input


BAD_LINES = [
    (b'{"id": "evt_01', "malformed JSON"),
    (line(90).encode().replace(b"deployments", b"deploy\xffments")[:-1], "UTF-8"),
    (line(91, kind="gossip").encode()[:-1], "got 'gossip'"),
    (line(92, tags=5).encode()[:-1], "expected a list of strings"),
    (line(93, ts="2026-02-09T05:12:33").encode()[:-1], "no UTC offset"),
    (line(94, content={"text": "a\u0000b"}).encode()[:-1], "NUL"),
    (line(95, content={"text": "x", "artifact_id": "art_" + "0" * 64, "bytes": "many"})
     .encode()[:-1], "byte count"),
    (b'{"text": NaN}', "NaN"),
    (b'{"text": 1e999}', "beyond a float's range"),
    (line(96).encode()[:-1].replace(b'"channel": "private"',
                                    b'"channel": "private", "channel": "public"'),
     "'channel' is given twice"),
]


def bad_store(store: Path) -> dict[str, int]:
    """A store with good records between bad ones; path -> expected bad line."""
    data = line(1).encode()
    expected_lines = []
    for number, (raw, _) in enumerate(BAD_LINES, start=2):
        data += raw + b"\n" + line(100 + number).encode()
        expected_lines.append(2 * number - 2)
    write(store, DAY, data)
    good_ref = json.loads(line(1))["id"]
    dec_ok = "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
    dec_bad = "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z4"
    write(store, f"decisions/{dec_ok}.md",
          f"---\nid: {dec_ok}\nts: 2026-02-09T05:12:33Z\nrefs: [{good_ref}]\n---\nGood.\n")
    write(store, f"decisions/{dec_bad}.md",
          f"---\nid: {dec_bad}\nts: 2026-02-09T05:12:33Z\nrefs: []\n---\nNo refs.\n")
    write(store, "views/broken.md", "---\nsection: [rules\n---\n# Broken\n")
    write(store, "views/nul.md", "# Nul\n\nline two\nbad \x00 here\n")
    write(store, "tasks/tsk_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3.md",
          "---\nid: tsk_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3\nts: 2026-02-09T05:12:33Z\n"
          "title: Fine\n---\n")
    return {DAY: len(expected_lines)}


def check_bad_store_index(errors: list[dict[str, Any]], dsn: str, schema: str) -> None:
    where = sorted((e["path"], e["line"]) for e in errors)
    bad_lines = [(DAY, 2 * n - 2) for n in range(2, len(BAD_LINES) + 2)]
    assert where == sorted([*bad_lines, ("decisions/dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z4.md", 4),
                            ("views/broken.md", 3), ("views/nul.md", 4)])
    messages = {(e["path"], e["line"]): e["message"] for e in errors}
    for (raw, needle), key in zip(BAD_LINES, bad_lines, strict=True):
        assert needle in messages[key], (raw, messages[key])
    assert all(e["line"] for e in errors)
    refs_error = next(e for e in errors if e["path"].startswith("decisions/"))
    assert refs_error["field"] == "refs"
    # everything else is indexed
    good = {json.loads(line(1))["id"]} | {json.loads(line(100 + n))["id"]
                                          for n in range(2, len(BAD_LINES) + 2)}
    assert set(event_ids(dsn, schema)) == good
    assert rows(dsn, schema, "SELECT decision_id FROM decisions") == [
        ("dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3",)]
    assert rows(dsn, schema, "SELECT count(*) FROM tasks") == [(1,)]
    assert rows(dsn, schema, "SELECT count(*) FROM views") == [(4,)]


def test_bad_input_is_reported_and_everything_else_indexed_by_sync(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    bad_store(store)
    report = memory.sync()
    check_bad_store_index(report.errors, dsn, schema)
    status = memory.status()
    check_bad_store_index(status["errors"], dsn, schema)
    assert status["clean"]  # reported, not stale: the index reflects the files


def test_bad_input_is_reported_and_everything_else_indexed_by_reindex(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    bad_store(store)
    report = memory.reindex()
    check_bad_store_index(report.errors, dsn, schema)
    check_bad_store_index(memory.status()["errors"], dsn, schema)


def test_errors_of_appended_lines_accumulate_and_clear(memory: Memory, store: Path) -> None:
    write(store, DAY, line(1) + "not json\n")
    memory.sync()
    write(store, DAY, line(2) + "{also bad\n", mode="a")
    memory.sync()
    errors = memory.status()["errors"]
    assert [(e["path"], e["line"]) for e in errors] == [(DAY, 2), (DAY, 4)]
    write(store, DAY, line(1) + line(2))  # fixed by hand (a rewrite)
    memory.sync()
    assert memory.status()["errors"] == []


# ----------------------------------------------------------------------------- torn lines


def test_torn_last_line_waits_until_complete(memory: Memory, store: Path, dsn: str,
                                             schema: str) -> None:
    whole = line(2)
    write(store, DAY, line(1) + whole[:40])
    memory.sync()
    assert event_ids(dsn, schema) == [json.loads(line(1))["id"]]
    status = memory.status()
    assert status["clean"] and status["errors"] == []
    assert status["pending"] == [{"path": DAY, "bytes": 40,
                                  "reason": "last line has no newline yet (torn or being written)"}]
    write(store, DAY, whole[40:-1], mode="a")  # the rest, still without its newline
    memory.sync()
    assert len(event_ids(dsn, schema)) == 1
    write(store, DAY, "\n", mode="a")
    report = memory.sync()
    assert changed(report) == {DAY: "append"}
    assert event_ids(dsn, schema) == sorted(json.loads(line(i))["id"] for i in (1, 2))
    assert memory.status()["pending"] == [] and memory.status()["errors"] == []


def test_torn_line_then_recorder_append(memory: Memory, store: Path, dsn: str,
                                        schema: str) -> None:
    write(store, DAY, line(1) + line(2)[:30])
    memory.sync()
    event = memory.record({"content": {"text": "after the crash"},
                           "ts": "2026-02-09T09:00:00+00:00"})
    report = memory.sync()
    assert [(e["path"], e["line"]) for e in report.errors] == [(DAY, 2)]
    assert event.id in event_ids(dsn, schema) and len(event_ids(dsn, schema)) == 2
    assert rows(dsn, schema, "SELECT line FROM events WHERE event_id = %s",
                (event.id,)) == [(3,)]


def test_union_merge_duplicates_are_indexed_once(memory: Memory, store: Path, dsn: str,
                                                 schema: str) -> None:
    write(store, DAY, line(1) + line(2) + line(1))
    memory.sync()
    assert len(event_ids(dsn, schema)) == 2
    assert rows(dsn, schema, "SELECT line FROM events ORDER BY line") == [(1,), (2,)]
    incremental = index_digest(memory.db)
    memory.reindex()
    assert index_digest(memory.db) == incremental


# ----------------------------------------------------------------------------- equivalence


def test_digest_covers_every_table(memory: Memory, dsn: str, schema: str) -> None:
    memory.sync()
    tables = {r[0] for r in rows(dsn, schema, "SELECT tablename FROM pg_tables "
                                 "WHERE schemaname = %s", (schema,))}
    digest = index_digest(memory.db)
    assert set(digest) == tables
    assert all(len(v) == 64 for v in digest.values())


def test_digest_sees_a_one_row_difference(memory: Memory, store: Path, dsn: str,
                                          schema: str) -> None:
    write(store, DAY, line(1) + line(2))
    memory.sync()
    before = index_digest(memory.db)
    rows(dsn, schema, "UPDATE events SET tags = '{x}' WHERE line = 2")
    after = index_digest(memory.db)
    assert {k for k in before if before[k] != after[k]} == {"events"}
    os.utime(store / DAY)  # stat columns are not content
    memory.sync()
    rows(dsn, schema, "UPDATE events SET tags = '{}' WHERE line = 2")
    assert index_digest(memory.db) == before


@pytest.fixture
def other_schema(dsn: str) -> Iterator[str]:
    name = f"t_clone_{os.getpid()}_{id(object()) % 100000}"
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def test_incremental_index_equals_reindex_of_a_fresh_clone(
        memory: Memory, repo: Path, store: Path, dsn: str, other_schema: str,
        tmp_path: Path) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    memory.sync()
    refs: list[str] = []
    for round_number in range(6):
        for i in range(15):
            event = memory.record({
                "content": {"text": f"round {round_number} note {i}: deploy windows"},
                "session_id": f"s{round_number % 2}", "tags": [f"round:{round_number}"],
                "ts": f"2026-02-{9 + round_number % 3:02d}T{i:02d}:00:00+00:00"})
            refs.append(event.id)
        memory.record({"kind": "tool_result", "ts": f"2026-02-{9 + round_number % 3:02d}"
                       "T20:00:00+00:00",
                       "content": {"tool": "sh", "output": f"r{round_number}\n" * 4000}})
        memory.decide(f"Decision {round_number}", refs[-3:],
                      ts=f"2026-02-{9 + round_number % 3:02d}T21:00:00+00:00")
        task = memory.task(f"Task {round_number}").content["task_id"]
        if round_number % 2:
            memory.task(f"Task {round_number}", task_id=task, status="done")
        # a torn line at the end of a day file, completed in a later round
        if round_number == 2:
            write(store, "events/2026-02/2026-02-20.jsonl",
                  line(500, day="2026-02-20")[:25])
        if round_number == 4:
            write(store, "events/2026-02/2026-02-20.jsonl",
                  line(500, day="2026-02-20")[25:], mode="a")
        if round_number == 3:  # bad input, reported the same way by both paths
            write(store, "events/2026-02/2026-02-21.jsonl",
                  line(600, day="2026-02-21") + "{broken\n")
            write(store, "views/broken.md", "---\nsection: [rules\n---\n# Broken\n")
        glossary = store / "views" / "glossary.md"
        glossary.write_text(glossary.read_text() + f"\n## Term {round_number}\n\nmeaning\n")
        memory.sync()
        if round_number % 2:
            git(repo, "add", "-A")
            git(repo, "commit", "-qm", f"round {round_number}")
    (store / "views" / "preferences.md").unlink()
    memory.sync()
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "final")
    memory.sync()
    status = memory.status()
    assert status["clean"] and status["pending"] == []
    assert sorted((e["path"], e["line"]) for e in status["errors"]) == [
        ("events/2026-02/2026-02-21.jsonl", 2), ("views/broken.md", 3)]
    incremental = index_digest(memory.db)
    counts = status["index"]

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    clone_config = Config(store=clone / "memory", dsn=dsn, schema=other_schema)
    with Memory(clone_config) as fresh:
        report = fresh.reindex()
        assert len(report.errors) == 2
        assert fresh.status()["index"] == counts
        assert fresh.status()["git"]["indexed_head"] == status["git"]["head"]
        rebuilt = index_digest(fresh.db)
    assert rebuilt == incremental
    assert counts["events"] > 100 and counts["decisions"] == 6 and counts["artifacts"] == 6


def test_dropped_schema_rebuilds_to_the_same_index(memory: Memory, store: Path,
                                                   config: Config) -> None:
    write(store, DAY, line(1) + line(2))
    memory.record({"content": {"text": "x"}})
    memory.sync()
    before = index_digest(memory.db)
    memory.db.drop_schema()
    with Memory(config) as again:
        again.sync()
        assert index_digest(again.db) == before


def test_database_of_another_version_is_recreated(config: Config, dsn: str,
                                                  schema: str) -> None:
    with Database.open(config) as db:
        rows(dsn, schema, "UPDATE meta SET value = '0' WHERE key = 'schema_version'")
        assert not db.schema_exists()
        assert db.ensure_schema()
        assert db.schema_exists()


def test_store_copy_to_another_path_indexes_equally(memory: Memory, repo: Path, store: Path,
                                                    dsn: str, other_schema: str,
                                                    tmp_path: Path) -> None:
    memory.record({"content": {"text": "copied"}})
    memory.sync()
    shutil.copytree(repo, tmp_path / "copy")
    with Memory(Config(store=tmp_path / "copy" / "memory", dsn=dsn,
                       schema=other_schema)) as copy:
        copy.reindex()
        assert index_digest(copy.db) == index_digest(memory.db)


def test_one_huge_record_does_not_fail_the_sync(memory: Memory, store: Path, dsn: str,
                                                schema: str) -> None:
    # a tsvector holds at most 1 MB: thousands of tags or a pasted log used to make
    # PostgreSQL refuse the row and with it the whole sync
    tags = [f"t{i:06d}x{i * 7919 % 100003:06d}" for i in range(60_000)]
    write(store, DAY, line(1, tags=tags) + line(2))
    dec = "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
    body = " ".join(f"k{i * 104729 % 999983:06d}q{i}" for i in range(120_000))
    write(store, f"decisions/{dec}.md",
          f"---\nid: {dec}\nts: 2026-02-09T05:12:33Z\nrefs: [{EVT}]\n---\n{body}\n")
    report = memory.sync()
    assert report.errors == []
    assert len(event_ids(dsn, schema)) == 2
    assert rows(dsn, schema, "SELECT count(*) FROM decisions") == [(1,)]
    assert rows(dsn, schema, "SELECT count(*) FROM chunks WHERE tsv @@ %s::tsquery",
                (f"'{tenant_tag('default')}{tags[0]}'",)) == [(1,)]
    memory.reindex()
    assert len(event_ids(dsn, schema)) == 2


def test_status_names_files_ignored_for_their_name(memory: Memory, store: Path) -> None:
    write(store, "decisions/use-fts.md", "---\nrefs: []\n---\nUse FTS.\n")
    write(store, "views/My Notes.md", "# Notes\n")
    write(store, "events/2026-02/today.jsonl", line(1))
    write(store, "events/2026-02/2026-02-30.jsonl", line(2))  # no such day: no record's
    write(store, "views/.rules.md.swp", "editor state")
    memory.sync()
    status = memory.status()
    assert status["clean"]  # nothing indexable is stale; these are reported apart
    day = ("ignored: not named events/YYYY-MM/YYYY-MM-DD.jsonl, of a day that exists, in "
           "its month's folder")
    assert status["unrecognized"] == [
        {"path": "events/2026-02/2026-02-30.jsonl", "reason": day},
        {"path": "events/2026-02/today.jsonl", "reason": day},
        {"path": "decisions/use-fts.md", "reason": "ignored: not named decisions/dec_<ULID>.md"},
        {"path": "views/My Notes.md",
         "reason": "ignored: not named views/<name>.md (letters, digits and ._-)"},
    ]


# ----------------------------------------------------------------------------- own appends


def _collect(memory: Memory) -> dict[str, list[Appended]]:
    collected: dict[str, list[Appended]] = {}
    memory.on_append = lambda rel, appended: collected.setdefault(rel, []).append(appended)
    return collected


def test_split_known_finds_the_appended_lines_among_others() -> None:
    first, second = Appended(10, b"a\n", ()), Appended(12, b"bc\n", ())
    both = [first, second]
    assert split_known(both, 10, b"a\nbc\n") == [(b"a\n", ()), (b"bc\n", ())]
    assert split_known(both, 12, b"bc\n") == [(b"bc\n", ())]   # the first indexed already
    assert split_known(both, 10, b"a\nbc\nd\n") == [(b"a\n", ()), (b"bc\n", ()),
                                                      (b"d\n", None)]   # someone else's line
    assert split_known(both, 8, b"x\na\nbc\n") == [(b"x\n", None), (b"a\n", ()),
                                                    (b"bc\n", ())]
    assert split_known(both, 10, b"a\nXY\n") == [(b"a\n", ()), (b"XY\n", None)]  # other bytes
    assert split_known(both, 9, b"\na\nbc\n") == [(b"\n", None), (b"a\n", ()), (b"bc\n", ())]
    assert split_known([Appended(11, b"a\n", ())], 10, b"xa\n") == [(b"xa\n", None)]
    assert split_known([], 10, b"a\n") == [(b"a\n", None)]


def test_own_appends_index_like_a_reindex(memory: Memory) -> None:
    collected = _collect(memory)
    memory.record_many([{"content": {"text": f"note {n} on the backups"},
                         "ts": f"2026-02-{9 + n % 2:02d}T0{n}:00:00+00:00"} for n in range(6)])
    result = memory.record({"kind": "tool_result", "ts": "2026-02-09T09:30:00+00:00",
                            "content": {"tool": "shell", "output": "x" * 20000}})
    memory.record({"kind": "decision", "content": {"text": "Back up nightly"},
                   "refs": [result.id], "ts": "2026-02-09T09:40:00+00:00"})
    assert sorted(collected) == [DAY, DAY2] and len(collected[DAY]) == 3
    report = memory.sync(None, collected)
    assert not report.errors and len(report.changed) >= 3
    incremental = index_digest(memory.db)
    memory.reindex()
    assert index_digest(memory.db) == incremental


def test_own_appends_come_from_their_events_and_every_other_byte_is_parsed(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    collected = _collect(memory)
    write(store, DAY, line(1) + '{"id": "evt_torn', mode="w")   # a writer died mid-line
    memory.sync()
    event = memory.record({"content": {"text": "from the file"},
                           "ts": "2026-02-09T09:00:00+00:00"})
    write(store, DAY, line(2), mode="a")                          # and a hand append after it
    [appended] = collected[DAY]
    assert not appended.data.startswith(b"\n")  # the torn line's newline is not one of ours
    stand_in = replace(event, content={"text": "from the writer's memory"})
    report = memory.sync([DAY], {DAY: [replace(appended, events=(stand_in,))]})
    assert report.known_lines == 1
    assert [(e["path"], e["line"]) for e in report.errors] == [(DAY, 2)]
    texts = [r[0] for r in rows(dsn, schema, "SELECT text FROM chunks ORDER BY line")]
    assert len(texts) == 3 and "message number 1" in texts[0]
    assert texts[1].endswith("from the writer's memory") and "message number 2" in texts[2]


def test_a_failing_hand_off_never_fails_the_write(memory: Memory, dsn: str, schema: str) -> None:
    def broken(rel: str, appended: Appended) -> None:
        raise RuntimeError("the indexer went away")

    memory.on_append = broken
    event = memory.record({"content": {"text": "still durable"},
                           "ts": "2026-02-09T08:00:00+00:00"})
    assert event.id in (memory.store / DAY).read_text()
    memory.sync()
    assert event.id in event_ids(dsn, schema)


# ----------------------------------------------------------------------------- unholdable lines

# Timestamps earlier versions wrote (Python's fromisoformat reads them) that PostgreSQL
# refuses, or that the time keys or the conversion to UTC cannot handle.
UNHOLDABLE_TS = ["2026-02-09T10+00:00", "2026-02-09T10:00:00,5+00:00",
                 "2026-W07-1T10:00:00+00:00", "2026-02-09T10:00:00-23:59",
                 "20260209T100000+0000", "2026-02-09T10:00:00+05:30:15",
                 "9999-12-31T23:59:59-12:00", "1969-12-31T23:59:59+00:00"]


def test_a_line_whose_ts_the_index_cannot_hold_is_reported_and_skipped(
        memory: Memory, store: Path, dsn: str, schema: str, cli: Cli) -> None:
    data = line(1, content={"text": "otters before the odd lines"})
    for n, ts in enumerate(UNHOLDABLE_TS, start=2):
        data += line(n, ts=ts)
    data += line(99, content={"text": "beavers after the odd lines"})
    write(store, DAY, data)
    bad = [(DAY, n) for n in range(2, len(UNHOLDABLE_TS) + 2)]
    report = memory.sync()
    assert sorted((e["path"], e["line"]) for e in report.errors) == bad
    assert all(e["field"] == "ts" for e in report.errors)
    assert set(event_ids(dsn, schema)) == {json.loads(line(n))["id"] for n in (1, 99)}
    acb = memory.build_acb({"session_id": "s1", "query_text": "otters beavers",
                            "now": "2026-02-10T00:00:00+00:00"})
    sources = {item["source"] for section in acb["sections"] for item in section["items"]}
    assert {f"{DAY}:1", f"{DAY}:{len(UNHOLDABLE_TS) + 2}"} <= sources
    status = memory.status()
    assert status["clean"] and sorted((e["path"], e["line"]) for e in status["errors"]) == bad
    shown = cli("status").output
    assert f"{DAY}:2: " in shown and "'2026-02-09T10+00:00'" in shown
    memory.reindex()  # the same from scratch
    assert len(event_ids(dsn, schema)) == 2


def test_a_line_with_a_lone_surrogate_or_deep_nesting_is_reported_and_skipped(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    surrogate = line(2).replace("message number 2", "\\ud800 lone")
    deep = line(3, content={"text": "x", "args": "DEEP"}).replace(
        '"DEEP"', "[" * 5000 + "]" * 5000)
    write(store, DAY, line(1) + surrogate + deep + line(4))
    report = memory.sync()
    assert [(e["line"], e["field"]) for e in report.errors] == [(2, "content.text"), (3, None)]
    assert "lone surrogate" in report.errors[0]["message"]
    assert "more than 64 deep" in report.errors[1]["message"]
    assert set(event_ids(dsn, schema)) == {json.loads(line(n))["id"] for n in (1, 4)}


def test_a_yaml_escape_of_a_nul_is_reported_at_its_line_and_skipped(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    ref = memory.record({"content": {"text": "a source"}}).id
    good, bad = "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3", "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z4"
    for dec, title in ((good, "fine"), (bad, '"nul \\0 here"')):
        write(store, f"decisions/{dec}.md",
              f"---\nid: {dec}\nts: 2026-02-09T05:12:33Z\nrefs: [{ref}]\ntitle: {title}\n"
              "---\nBody.\n")
    report = memory.sync()
    assert [(e["path"], e["line"], e["field"]) for e in report.errors] == [
        (f"decisions/{bad}.md", 5, "title")]
    assert "NUL" in report.errors[0]["message"]
    assert rows(dsn, schema, "SELECT decision_id FROM decisions") == [(good,)]
    assert ref in event_ids(dsn, schema)


def test_a_daemon_indexes_the_lines_after_one_whose_ts_it_cannot_hold(dsn: str,
                                                                       schema: str) -> None:
    root = short_dir()
    try:
        new_repo(root)
        config = Config(store=root / "memory", dsn=dsn, schema=schema)
        day = config.store / "events/2026-03/2026-03-01.jsonl"
        with running(config) as daemon:
            first, good = event_line("s1", "first event about otters", number=1)
            append(day, good)
            _, odd = event_line("s1", "odd", number=2, ts="2026-03-01T10+00:00")
            append(day, odd)
            later, good = event_line("s1", "later event about beavers", number=3,
                                     ts="2026-03-01T11:00:00+00:00")
            append(day, good)
            acb = daemon.call("build_acb", {"session_id": "s1", "query_text": "beavers otters"})
            texts = [i["text"] for i in items(acb) if i["source"].startswith("events/")]
            assert any("beavers" in t for t in texts) and any("otters" in t for t in texts)
            status = daemon.call("status")
            assert status["clean"]
            assert [(e["path"], e["line"], e["field"]) for e in status["errors"]] == [
                ("events/2026-03/2026-03-01.jsonl", 2, "ts")]
            assert daemon.call("daemon_status")["watcher"]["last_error"] is None
            with pytest.raises(RpcError) as caught:  # and the socket refuses such a ts
                daemon.call("record_event", {"content": {"text": "x"},
                                             "ts": "2026-03-01T10+00:00"})
            assert "field 'ts'" in str(caught.value)
            ids = [json.loads(x)["id"] for x in day.read_text().splitlines()]
            assert len(ids) == 3 and ids[0] == first and ids[2] == later  # nothing written
    finally:
        cleanup_dir(root)


def test_a_line_moved_to_its_own_days_file_stays_indexed(memory: Memory, store: Path,
                                                         dsn: str, schema: str) -> None:
    """A line filed under another day (verify refuses it) moved home by a person: the
    index keeps one copy of an event. The file the line went to sorts first, so its line
    is the original (gitmem/copies.py): it takes the id over, and the file the line left
    is read again whole."""
    keep = line(1, day="2026-02-10")
    moved = line(2, day="2026-02-09", content={"text": "refiled to its own day"})
    write(store, DAY2, keep + moved)  # misfiled under the 10th
    write(store, DAY, line(3))
    memory.sync()
    write(store, DAY2, keep)                       # cut ...
    write(store, DAY, moved, mode="a")              # ... and pasted home, at the end
    report = memory.sync()
    assert changed(report) == {DAY2: "rewrite", DAY: "append"}
    moved_id = json.loads(moved)["id"]
    assert rows(dsn, schema, "SELECT path, line FROM events WHERE event_id = %s",
                (moved_id,)) == [(DAY, 2)]
    assert_reindex_equal(memory, dsn, schema)


FAR = "events/2026-02/2026-02-01.jsonl"  # a week before DAY: sorts, and syncs, first


@pytest.mark.parametrize("home_first", [False, True])
def test_a_line_moved_out_of_its_own_days_file_stays_indexed(memory: Memory, store: Path,
                                                             dsn: str, schema: str,
                                                             home_first: bool) -> None:
    """A person cuts a line from its own day's file and pastes it into a file a week
    earlier (verify refuses the tree, but the index must not lose the event meanwhile):
    the file that sorts first takes the line as a repeat of the one still indexed, then
    the line's own file gives its rows up. Whichever file is synced first, the event
    stays indexed, at its one copy."""
    write(store, FAR, line(1, day="2026-02-01"))
    moved = line(2, content={"text": "the line a person refiled a week early"})
    write(store, DAY, line(3) + moved)
    memory.sync()
    write(store, DAY, line(3))         # cut from its own day's file ...
    write(store, FAR, moved, mode="a")  # ... and pasted a week earlier
    if home_first:
        memory.sync([DAY])
        memory.sync([FAR])
    else:
        memory.sync([FAR])
        memory.sync([DAY])
    moved_id = json.loads(moved)["id"]
    assert rows(dsn, schema, "SELECT path, line FROM events WHERE event_id = %s",
                (moved_id,)) == [(FAR, 2)]
    assert rows(dsn, schema, "SELECT count(*) FROM chunks WHERE source_id = %s",
                (moved_id,)) == [(1,)]
    assert memory.status()["clean"]
    assert_reindex_equal(memory, dsn, schema)


def test_a_copy_a_reindex_skipped_is_indexed_when_the_first_gives_its_line_up(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    """The same line in two day files (a copy a person pasted): a reindex keeps the
    first file's and lists the other as a copy; when the first file loses the line, the
    next sync indexes the copy, and nothing is left listed."""
    copied = line(2, content={"text": "a line that lives in two files"})
    write(store, FAR, line(1, day="2026-02-01") + copied)
    write(store, DAY, line(3) + copied)
    memory.reindex()
    copied_id = json.loads(copied)["id"]
    assert rows(dsn, schema, "SELECT path FROM events WHERE event_id = %s",
                (copied_id,)) == [(FAR,)]
    assert rows(dsn, schema, "SELECT path, event_id FROM event_copies") == [(DAY, copied_id)]
    write(store, FAR, line(1, day="2026-02-01"))  # the first copy goes
    report = memory.sync()
    assert changed(report) == {FAR: "truncate", DAY: "rewrite"}
    assert rows(dsn, schema, "SELECT path, line FROM events WHERE event_id = %s",
                (copied_id,)) == [(DAY, 2)]
    assert rows(dsn, schema, "SELECT count(*) FROM event_copies") == [(0,)]
    assert memory.status()["clean"]


def test_lines_moved_copied_and_cut_across_day_files_never_lose_an_event(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    """Random edits a person could make to day files (append, move a line to another
    file, paste a copy, cut a line), each followed by syncs of the files it touched in
    a random order: every event some file holds is indexed, once, at a line holding it,
    and status is clean (seeded: the same 60 edits every run)."""
    rng = random.Random(7)
    days = [f"events/2026-02/2026-02-{d:02d}.jsonl" for d in (1, 5, 9, 12)]
    files: dict[str, list[str]] = {rel: [] for rel in days}
    number = 0

    def save(rel: str) -> None:
        write(store, rel, "".join(files[rel]))

    memory.sync()  # the store's views
    for _ in range(60):
        op = rng.choice(["append", "append", "move", "copy", "cut"])
        held = [rel for rel in days if files[rel]]
        if op == "append" or not held:
            number += 1
            rel = rng.choice(days)
            files[rel].append(line(number, day=rel[-16:-6]))
            touched = [rel]
        else:
            source = rng.choice(held)
            picked = files[source][rng.randrange(len(files[source]))]
            target = rng.choice([rel for rel in days if rel != source])
            if op != "cut":
                files[target].append(picked)
            if op != "copy":
                files[source].remove(picked)
            touched = [source] if op == "cut" else [source, target]
        for rel in touched:
            save(rel)
        rng.shuffle(touched)
        for rel in touched:
            memory.sync([rel])
        on_disk = {json.loads(text)["id"] for rel in days for text in files[rel]}
        indexed = rows(dsn, schema, "SELECT event_id, path, line FROM events")
        assert {r[0] for r in indexed} == on_disk, op
        for event_id, path, number_in_file in indexed:
            assert json.loads(files[path][number_in_file - 1])["id"] == event_id
        assert rows(dsn, schema, "SELECT count(*) FROM chunks WHERE source_type = 'event'"
                    ) == [(len(on_disk),)]
        assert memory.status()["clean"], op


def test_a_line_repeating_an_id_with_other_content_is_named_not_silently_left_out(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    """The index keeps an id's first line; a later one with other content (a hand edit,
    a bad merge) is not indexed, and status names it with the first one's place, as
    `gitmem verify` does, whether it came in a whole read, an append, or another file."""
    write(store, FAR, line(100, day="2026-02-01"))
    write(store, DAY, line(1) + line(2) + line(1, content={"text": "other words"}))
    memory.sync()

    def repeats() -> list[tuple[str, int, str]]:
        return [(e["path"], e["line"], e["message"]) for e in memory.status()["errors"]
                if e["field"] == "id"]

    first = f"evt_01JKZ3N4Q5R6S7T8V9W0X00001 is also {DAY}:1 with other content"
    assert repeats() == [(DAY, 3, f"{first}; ids never repeat (this line is not indexed); "
                          "remove it and record it again without its id, which mints a new one")]
    write(store, DAY, line(2, content={"text": "later words"})
          + line(100, day="2026-02-01", content={"text": "copied words"}), mode="a")
    memory.sync()  # an append: the first lines are in the index, not in this read
    assert [(path, number) for path, number, _ in repeats()] == [(DAY, 3), (DAY, 4), (DAY, 5)]
    assert f"is also {FAR}:1 with other content" in repeats()[2][2]
    status = memory.status()
    assert status["clean"] and "evt_01JKZ3N4Q5R6S7T8V9W0X00001" in event_ids(dsn, schema)
    assert rows(dsn, schema, "SELECT content->>'text' FROM events WHERE event_id = %s",
                ("evt_01JKZ3N4Q5R6S7T8V9W0X00001",)) == [("message number 1 about deployments",)]
    assert_reindex_equal(memory, dsn, schema)
    write(store, DAY, line(4), mode="a")  # the lines before are kept, errors and all
    report = memory.sync()
    assert [item["action"] for item in report.changed] == ["append"]
    assert len(repeats()) == 3
    assert_reindex_equal(memory, dsn, schema)


def test_random_edits_of_a_day_file_index_like_a_reindex(memory: Memory, store: Path,
                                                         dsn: str, schema: str) -> None:
    """A day file edited at random (lines cut from the end, appended, changed, inserted,
    removed or repeated in the middle, made blank or bad; a copy of one in another file),
    synced after each edit, some repeating an id with other content: its index, and the
    errors naming those repeats, equal a reindex's every time (seeded: the same 60 edits
    every run)."""
    rng = random.Random(11)
    lines = [line(n) for n in range(1, 9)]
    write(store, FAR, line(100, day="2026-02-01"))  # sorts first: its copy's row stays
    number = 8
    memory.sync()
    seen: set[str] = set()
    for step in range(60):
        op = rng.choice(["cut", "append", "change", "insert", "remove", "repeat", "blank",
                         "bad", "copy", "clash", "clash_copy"])
        at = rng.randrange(len(lines)) if lines else 0
        if op == "cut":
            del lines[rng.randrange(len(lines) + 1):]
        elif op == "append" or not lines:
            number += 1
            lines.append(line(number))
        elif op == "change":
            lines[at] = line(int(json.loads(lines[at])["id"][-5:]), tags=[f"t{step}"]) \
                if lines[at].startswith("{\"id\"") else line(number)
        elif op == "insert":
            number += 1
            lines.insert(at, line(number))
        elif op == "remove":
            del lines[at]
        elif op == "repeat":
            lines.append(lines[at])
        elif op == "blank":
            lines[at] = "\n"
        elif op == "bad":
            lines[at] = "{not json\n"
        elif op == "clash":  # an id of this file again, with other content
            lines.insert(at, line(rng.randint(1, number), content={"text": f"clash {step}"}))
        elif op == "clash_copy":  # the other file's id, with other content
            lines.insert(at, line(100, day="2026-02-01", content={"text": f"clash {step}"}))
        else:
            lines.insert(at, line(100, day="2026-02-01"))
        write(store, DAY, "".join(lines))
        report = memory.sync()
        assert memory.status()["clean"], (step, op)
        assert_reindex_equal(memory, dsn, schema)
        seen.update(item["reason"].split(" (")[0] if item["action"] == "rewrite"
                    else item["action"] for item in report.changed)
    # the edits went every way: cut, appended, read again from a line on, and whole
    assert {"truncate", "append", "indexed prefix changed"} <= seen
    assert any(reason.startswith("lines from") for reason in seen)


def test_a_summary_id_in_both_scopes_is_refused_on_write_and_named_not_crashing_a_rebuild(
        memory: Memory, cli: Cli) -> None:
    """Files are named by id, but a summary has two directories: the same id under both
    made the bulk load fail on the chunks' key (every rebuild, until a file was removed)
    and a sync drop the second file with the status clean."""
    evt = memory.record({"content": {"text": "We ship on Thursdays"}}).id
    first = memory.record({"kind": "summary", "refs": [evt],
                           "content": {"text": "shipping day", "scope": "session"}})
    summary_id = first.content["summary_id"]
    with pytest.raises(ValidationError) as caught:
        memory.record({"kind": "summary", "refs": [evt], "content": {
            "text": "zebras", "scope": "episode", "summary_id": summary_id}})
    assert caught.value.field == "content.summary_id"
    source = memory.store / "summaries" / "session" / f"{summary_id}.md"
    twin = memory.store / "summaries" / "episode" / f"{summary_id}.md"
    twin.parent.mkdir(parents=True, exist_ok=True)
    twin.write_text(source.read_text().replace("shipping day", "zebras in the episode")
                    .replace("scope: session", "scope: episode"))
    where = f"summaries/session/{summary_id}.md"  # the episode's is read first
    message = (f"summary {summary_id} is also summaries/episode/{summary_id}.md, which is "
               "indexed: ids never repeat; remove one of them")
    memory.sync()
    [error] = [e for e in memory.status()["errors"] if "summaries/" in e["path"]]
    assert error["path"] == where and message in error["message"]
    report = memory.reindex()
    assert any(e["path"] == where and message in e["message"] for e in report.errors)
    acb = memory.build_acb({"query_text": "zebras episode shipping"})
    assert summary_id in json.dumps(acb["sections"])
    out = cli("verify", ok=False).output
    assert (f"memory/{where}: memory/summaries/episode/{summary_id}.md has this summary's id "
            "too") in out


def _summary_in(memory: Memory, scope: str) -> tuple[str, Path]:
    """A summary recorded in `scope`'s folder, indexed: its id and file."""
    evt = memory.record({"content": {"text": "We ship on Thursdays"}}).id
    made = memory.record({"kind": "summary", "refs": [evt],
                          "content": {"text": "shipping day", "scope": scope}})
    summary_id = made.content["summary_id"]
    memory.sync()
    return summary_id, memory.store / "summaries" / scope / f"{summary_id}.md"


def _twin_of(path: Path) -> Path:
    """The same summary id written by hand in the other scope's folder, saying more."""
    scope = path.parent.name
    other = "episode" if scope == "session" else "session"
    twin = path.parent.parent / other / path.name
    twin.parent.mkdir(parents=True, exist_ok=True)
    twin.write_text(path.read_text().replace(f"scope: {scope}", f"scope: {other}")
                    .replace("shipping day", f"shipping day as the {other} tells it"))
    return twin


def _summary_paths(dsn: str, schema: str) -> list[str]:
    return [r[0] for r in rows(dsn, schema, "SELECT path FROM summaries")]


def _summary_problems(memory: Memory) -> dict[str, str]:
    return {e["path"]: e["message"] for e in memory.status()["errors"]
            if e["path"].startswith("summaries/")}


@pytest.mark.parametrize("watched", [False, True])
@pytest.mark.parametrize("recorded", ["session", "episode"])
def test_a_summary_in_both_scopes_is_indexed_from_the_file_a_reindex_keeps(
        memory: Memory, dsn: str, schema: str, recorded: str, watched: bool) -> None:
    """The same summary id under both scopes (a twin): a reindex keeps the file that
    sorts first (episode/) and names the other; a sync kept whichever it read first, so
    the summary's row, its chunk's text and the lexeme counts depended on the order the
    files came in. Whichever is there first, by a full sync or one of the path the
    watcher saw, the index is the reindex's."""
    summary_id, first = _summary_in(memory, recorded)
    twin = _twin_of(first)
    rel = str(twin.relative_to(memory.store))
    memory.sync([rel] if watched else None)
    episode = f"summaries/episode/{summary_id}.md"
    session = f"summaries/session/{summary_id}.md"
    assert _summary_paths(dsn, schema) == [episode]
    assert _summary_problems(memory) == {session: (
        f"summary {summary_id} is also {episode}, which is indexed: ids never repeat; "
        "remove one of them")}
    assert memory.status()["clean"]
    assert_reindex_equal(memory, dsn, schema)


@pytest.mark.parametrize("how", ["deleted", "invalid"])
def test_the_other_scopes_summary_is_indexed_when_the_indexed_one_gives_it_up(
        memory: Memory, dsn: str, schema: str, how: str) -> None:
    """The indexed file of a twin pair deleted (or no longer a valid summary: a scope its
    folder is not): the other file, never read again, left the summary out of the index
    while status said clean and named a problem of a file that no longer exists."""
    summary_id, indexed = _summary_in(memory, "episode")
    _twin_of(indexed)
    memory.sync()
    assert _summary_paths(dsn, schema) == [f"summaries/episode/{summary_id}.md"]
    if how == "deleted":
        indexed.unlink()
    else:
        indexed.write_text(indexed.read_text().replace("scope: episode", "scope: session"))
    report = memory.sync([str(indexed.relative_to(memory.store))])  # as the watcher does
    session = f"summaries/session/{summary_id}.md"
    assert changed(report)[session] == "rewrite"
    assert _summary_paths(dsn, schema) == [session]
    assert session not in _summary_problems(memory)
    [(text,)] = rows(dsn, schema, "SELECT text FROM chunks WHERE source_id = %s",
                     (summary_id,))
    assert text.startswith("Summary (session): ") and "as the session tells it" in text
    assert memory.status()["clean"]
    assert_reindex_equal(memory, dsn, schema)


def test_deleting_the_twin_left_out_clears_its_problem_and_keeps_the_summary(
        memory: Memory, dsn: str, schema: str) -> None:
    """A summary recorded in session/, then its id written in episode/ too: episode's is
    indexed (it sorts first) and session's named. Deleting session's leaves the summary
    indexed from episode's, and no problem named."""
    summary_id, first = _summary_in(memory, "session")
    _twin_of(first)
    memory.sync()
    first.unlink()
    memory.sync()
    assert _summary_paths(dsn, schema) == [f"summaries/episode/{summary_id}.md"]
    assert _summary_problems(memory) == {}
    assert memory.status()["clean"]
    assert_reindex_equal(memory, dsn, schema)


# ----------------------------------------------------------------------------- no regular file


def _release(fifo: Path) -> None:
    """Let a reader blocked opening `fifo` go (a writer's open), then remove it."""
    with contextlib.suppress(OSError):  # no reader waits
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    fifo.unlink(missing_ok=True)


def _unblocked(fifos: list[Path], call: Any, timeout: float = 20.0) -> Any:
    """`call()`, failing the test (not hanging it) should it block on one of `fifos`."""
    pool = ThreadPoolExecutor(1)
    future = pool.submit(call)
    try:
        return future.result(timeout)
    except FutureTimeout:
        for fifo in fifos:
            _release(fifo)
        pytest.fail(f"blocked opening a FIFO ({', '.join(map(str, fifos))})")
    finally:
        pool.shutdown(wait=True)


def _problems(errors: list[dict[str, Any]]) -> dict[str, str]:
    return {e["path"]: e["message"] for e in errors}


def test_a_fifo_is_named_and_skipped_and_everything_else_indexed(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    """A FIFO's open waited for a writer for good: sync, status and reindex hung."""
    write(store, DAY, line(1))
    memory.sync()
    day2, view = store / DAY2, store / "views" / "glossary.md"
    view.unlink()
    os.mkfifo(view)  # indexed, now a FIFO: its rows go
    os.mkfifo(day2)
    fifos = [view, day2]
    try:
        write(store, DAY, line(2), mode="a")
        report = _unblocked(fifos, memory.sync)
        assert changed(report) == {DAY: "append", DAY2: "unreadable",
                                   "views/glossary.md": "unreadable"}
        said = "cannot be read: a FIFO (named pipe), not a regular file"
        assert {p: m.split(";")[0] for p, m in _problems(report.errors).items()} == {
            DAY2: said, "views/glossary.md": said}
        assert len(event_ids(dsn, schema)) == 2
        assert rows(dsn, schema, "SELECT count(*) FROM views WHERE path = %s",
                    ("views/glossary.md",)) == [(0,)]
        status = _unblocked(fifos, memory.status)
        assert status["clean"] and set(_problems(status["errors"])) == {DAY2,
                                                                        "views/glossary.md"}
        assert changed(_unblocked(fifos, memory.sync)) == {}
        _unblocked(fifos, lambda: assert_reindex_equal(memory, dsn, schema))
    finally:
        for fifo in fifos:
            _release(fifo)
    assert changed(memory.sync()) == {DAY2: "deleted", "views/glossary.md": "deleted"}
    assert memory.status()["errors"] == []


def test_a_loop_of_links_and_a_link_to_nothing_are_named_and_skipped(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    """A loop of links crashed sync, status and reindex (ELOOP); a link to nothing was
    passed over in silence."""
    write(store, DAY, line(1))
    views = store / "views"
    (views / "l1.md").symlink_to("l2.md")
    (views / "l2.md").symlink_to("l1.md")
    (views / "dangling.md").symlink_to("/nonexistent/x.md")
    status = memory.status()
    assert {s["path"]: s["reason"] for s in status["stale"]
            if s["path"].startswith("views/")} == {
        "views/dangling.md": "not read: a symbolic link to nothing (/nonexistent/x.md)",
        "views/l1.md": "not read: a loop of symbolic links",
        "views/l2.md": "not read: a loop of symbolic links",
        **{f"views/{name}.md": "not indexed yet"
           for name in ("glossary", "identity", "preferences", "rules.project")}}
    report = memory.sync()  # the bulk load of an empty index
    assert sorted(_problems(report.errors)) == ["views/dangling.md", "views/l1.md",
                                                "views/l2.md"]
    assert event_ids(dsn, schema) == [json.loads(line(1))["id"]]
    write(store, DAY, line(2), mode="a")
    assert changed(memory.sync()) == {DAY: "append"}
    status = memory.status()
    assert status["clean"] and sorted(_problems(status["errors"])) == [
        "views/dangling.md", "views/l1.md", "views/l2.md"]
    assert_reindex_equal(memory, dsn, schema)
    (views / "dangling.md").unlink()
    (views / "dangling.md").write_text("# Dangling\n\nnow a file\n")
    assert changed(memory.sync()) == {"views/dangling.md": "changed"}
    assert sorted(_problems(memory.status()["errors"])) == ["views/l1.md", "views/l2.md"]


def test_an_indexed_file_replaced_by_a_directory_is_gone(memory: Memory, store: Path,
                                                         dsn: str, schema: str) -> None:
    """Status and sync crashed (IsADirectoryError), and the old file's rows stayed."""
    write(store, DAY, line(1))
    write(store, DAY2, line(2, day="2026-02-10"))
    memory.sync()
    (store / DAY).unlink()
    (store / DAY).mkdir()
    (store / "views" / "glossary.md").unlink()
    (store / "views" / "glossary.md").mkdir()
    reason = "indexed, now a directory, not a file: its rows are removed"
    assert {s["path"]: s["reason"] for s in memory.status()["stale"]} == {
        DAY: reason, "views/glossary.md": reason}
    report = memory.sync()
    assert {c["path"]: (c["action"], c["reason"]) for c in report.changed} == {
        DAY: ("deleted", reason), "views/glossary.md": ("deleted", reason)}
    assert event_ids(dsn, schema) == [json.loads(line(2))["id"]]
    assert rows(dsn, schema, "SELECT count(*) FROM views WHERE path = %s",
                ("views/glossary.md",)) == [(0,)]
    assert memory.status()["clean"] and changed(memory.sync()) == {}
    assert_reindex_equal(memory, dsn, schema)


def test_sync_counts_the_rows_it_writes(memory: Memory, store: Path, dsn: str,
                                        schema: str) -> None:
    """An incremental sync said `"rows": 0` whatever it indexed."""
    write(store, DAY, line(1))
    first = memory.sync()  # the bulk load
    assert first.rebuilt and first.rows == sum(
        count for (count,) in rows(dsn, schema, "SELECT count(*) FROM events UNION ALL "
                                   "SELECT count(*) FROM chunks UNION ALL "
                                   "SELECT count(*) FROM views UNION ALL "
                                   "SELECT count(*) FROM view_chunks"))
    write(store, DAY, line(2), mode="a")
    write(store, "views/notes.md", "# Notes\n\nfirst\n\n## More\n\nsecond\n")
    report = memory.sync()
    assert changed(report) == {DAY: "append", "views/notes.md": "new"}
    # the event and its chunk, the view and its two chunks
    assert report.rows == 2 + 3 and report.to_dict()["rows"] == 5
    assert memory.sync().rows == 0


def test_a_file_an_older_index_read_under_a_name_no_more_read_loses_its_rows(
        memory: Memory, store: Path, dsn: str, schema: str) -> None:
    """A day file in another month's folder was indexed before names had to be a real
    day's in its month's folder: a sync then kept its rows ("unchanged"), the ACB served
    them, and status said clean while listing the file as ignored. The index is made
    as the older rules made it: the file indexed, then its rows moved to the name."""
    write(store, DAY, line(1))
    memory.sync()
    misplaced = "events/2026-03/2026-02-09.jsonl"
    (store / misplaced).parent.mkdir(parents=True)
    os.replace(store / DAY, store / misplaced)
    for (table,) in rows(dsn, schema, "SELECT table_name FROM information_schema.columns "
                         "WHERE table_schema = %s AND column_name = 'path'", (schema,)):
        rows(dsn, schema, f'UPDATE "{table}" SET path = %s WHERE path = %s', (misplaced, DAY))
    assert event_ids(dsn, schema) == [json.loads(line(1))["id"]]
    assert misplaced in [item["path"] for item in memory.status()["stale"]]
    assert changed(memory.sync()) == {misplaced: "deleted"}
    assert event_ids(dsn, schema) == []
    assert_reindex_equal(memory, dsn, schema)


# ------------------------------------------------------------ event lines a tool took out


def ids_of(*numbers: int) -> list[str]:
    return [json.loads(line(n))["id"] for n in numbers]


def test_a_rewrite_without_indexed_uncommitted_lines_names_them(
        memory: Memory, store: Path) -> None:
    """An editor's save racing the writer, or a `git stash`, takes lines out of a day file:
    the index follows the file, and the sync names the file, how many left it and how to
    have them again (never committed: the stash, the editor's backup)."""
    write(store, DAY, line(1) + line(2) + line(3) + line(4))
    assert memory.sync().left == []
    write(store, DAY, line(1) + line(3) + line(5))  # 2 and 4 gone, 5 new
    report = memory.sync()
    assert changed(report) == {DAY: "rewrite"}
    [found] = report.left
    assert found["path"] == DAY and found["ids"] == ids_of(2, 4) and found["committed"] == []
    said = found["message"]
    assert said.startswith(f"event lines gone from {DAY}: 2 event(s)")
    assert all(i in said for i in ids_of(2, 4)) and "git stash list" in said
    assert "git diff HEAD" not in said and "on purpose, nothing to do" in said
    assert memory.sync().left == []  # said once: the next sync has nothing new to say


def test_a_line_moved_to_another_day_file_is_not_named(memory: Memory, store: Path) -> None:
    """A line moved (to its own day's file, or out of it), or left in its file but no
    longer parsing (named as skipped), is not gone: nothing is named."""
    write(store, DAY, line(1) + line(2) + line(3))
    memory.sync()
    write(store, DAY2, line(2))
    write(store, DAY, line(1) + line(3))
    report = memory.sync()
    assert changed(report) == {DAY: "rewrite", DAY2: "new"} and report.left == []
    write(store, DAY, line(1) + line(3)[:-3] + "\n")  # broken in place
    report = memory.sync()
    assert report.errors and report.left == []
    # moved before the other file is synced: found in the day file of the date it carries
    write(store, DAY, line(1) + line(4) + line(5))
    memory.sync([DAY])
    date = home_dates(ids_of(5)[0])[1]
    write(store, f"events/{date[:7]}/{date}.jsonl", line(5, day=date))
    write(store, DAY, line(1) + line(4))
    assert memory.sync([DAY]).left == []


def test_a_removal_of_committed_lines_says_git_diff_head(
        memory: Memory, store: Path, repo: Path) -> None:
    write(store, DAY, line(1) + line(2) + line(3))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    write(store, DAY, line(1) + line(2) + line(3) + line(4))
    memory.sync()
    write(store, DAY, line(1))  # 2, 3 committed, 4 not
    report = memory.sync()
    assert changed(report) == {DAY: "truncate"}
    [found] = report.left
    assert found["ids"] == ids_of(2, 3, 4) and found["committed"] == ids_of(2, 3)
    said = found["message"]
    assert f"`git diff HEAD -- memory/{DAY}` shows them" in said
    assert "(committed): 2" in said and "never committed, or only in a commit HEAD has left): 1"\
        in said and f"git log --all -S {ids_of(4)[0]}" in said


def commit_all(repo: Path, subject: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", subject)


def test_lines_a_checkout_or_reset_took_out_that_git_holds_are_not_named(
        memory: Memory, store: Path, repo: Path) -> None:
    """A checkout of another branch, or a reset, takes out of a day file lines a local
    branch's tip or the previous HEAD (`HEAD@{1}`) holds: git has them, nothing is named."""
    write(store, DAY, line(1))
    commit_all(repo, "base")
    memory.sync()
    git(repo, "checkout", "-qb", "feature")
    write(store, DAY, line(1) + line(2))
    commit_all(repo, "feature")
    memory.sync()
    git(repo, "checkout", "-q", "-")  # back to the first branch: line 2 is on `feature`
    report = memory.sync()
    assert changed(report) == {DAY: "truncate"} and report.left == []
    git(repo, "checkout", "-q", "feature")
    write(store, DAY, line(1) + line(2) + line(3))
    commit_all(repo, "three")
    memory.sync()
    git(repo, "reset", "-q", "--hard", "HEAD~1")  # line 3: only in HEAD@{1}
    report = memory.sync()
    assert changed(report) == {DAY: "truncate"} and report.left == []


def test_lines_a_stash_took_out_are_still_named(
        memory: Memory, store: Path, repo: Path) -> None:
    """A `git stash` is no branch: the lines it took out of a day file are named, with
    the stash to look in."""
    write(store, DAY, line(1))
    commit_all(repo, "base")
    git(repo, "branch", "other")
    write(store, DAY, line(1) + line(2))
    memory.sync()
    git(repo, "stash", "-q")
    report = memory.sync()
    [found] = report.left
    assert found["ids"] == ids_of(2) and found["committed"] == []
    assert "git stash list" in found["message"]


def test_the_ids_a_day_file_gives_are_told_from_those_it_cites() -> None:
    """lost_lines looks for each wanted id by itself (a set of every id of a large day
    file, made at each rewrite, stayed in the daemon's memory): an id a line gives counts,
    one it only cites, or one that is a prefix of another's, does not."""
    from gitmem.lost_lines import given

    data = (b'{"id":"evt_A","refs":["evt_B"]}\n{ "id" : "evt_C" }\n'
            b'{"id":"evt_AB"}\n{"id":"evt_D\n')
    assert given(data, ["evt_A", "evt_B", "evt_C", "evt_AB", "evt_X", "evt_D"]) == {
        "evt_A", "evt_C", "evt_AB"}
