"""The database layer: named queries, embedded server settings."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from gitmem.config import redact_dsn
from gitmem.db import (
    FEW_ROWS,
    Database,
    TextArray,
    named_queries,
)
from gitmem.embedded import embedded_settings
from gitmem.errors import DatabaseError
from gitmem.memory import Memory


def test_embedded_settings_scale_with_memory_and_read_as_postgresql_shows_them() -> None:
    big = embedded_settings(24 * 1024**3)
    assert big["shared_buffers"] == "2GB"           # capped
    small = embedded_settings(1 * 1024**3)
    assert small["shared_buffers"] == "256MB"       # a quarter
    assert embedded_settings(256 * 1024**2)["shared_buffers"] == "128MB"  # a floor
    assert big["wal_level"] == "minimal" and big["max_wal_senders"] == "0"
    assert big["synchronous_commit"] == "off" and big["jit"] == "off"


def test_every_named_query_is_unique_and_non_empty() -> None:
    queries = named_queries()
    assert {"retrieval_lane", "tenant_days", "lexemes_count_path", "upsert_file_state"} <= set(
        queries)
    assert all(body.strip() for body in queries.values())


def test_dsn_passwords_never_reach_messages() -> None:
    assert redact_dsn("postgresql://bob:hunter2@db/x") == "postgresql://bob:***@db/x"
    assert "hunter2" not in redact_dsn("host=db password=hunter2 user=bob")
    for dsn in ("host=db password = hunter2 dbname=x", "host=db password='hunter2 top' user=b",
                "host=db password='hun\\'ter2' user=b", "postgresql://db/x?password=hunter2&a=b"):
        shown = redact_dsn(dsn)
        assert "hunter2" not in shown and "top" not in shown and "***" in shown, shown


def test_statements_planned_once_return_the_same_rows_and_leave_the_setting(
        dsn: str, schema: str) -> None:
    with Database(dsn, schema, max_size=2) as db:
        statements = [("SELECT g, %(word)s::text FROM generate_series(1, %(n)s) g "
                       "ORDER BY g DESC LIMIT %(cap)s", {"word": w, "n": n, "cap": 3})
                      for w, n in (("rare", 2), ("common", 500), ("rare", 1))]
        for _ in range(3):  # prepared on first use, then reused
            assert db.run_parallel(statements, [1.0, 9.0, 1.0]) == db.run_many(statements) == [
                [(2, "rare"), (1, "rare")], [(500, "common"), (499, "common"), (498, "common")],
                [(1, "rare")]]
        # the generic plans are for those statements only, even when one of them fails
        with pytest.raises(psycopg.Error):
            db.run_many([("SELECT 1 / %(zero)s::int", {"zero": 0})], planned_once=True)
        for _ in range(2):
            with db.connection() as conn:
                row = conn.execute("SHOW plan_cache_mode").fetchone()
                assert row == {"plan_cache_mode": "force_custom_plan"}


def test_text_arrays_reach_the_server_as_the_same_strings(dsn: str, schema: str) -> None:
    values = ['plain', 'with "quotes"', 'back\\slash', 'comma, space', '{braces}', 'NULL', '']
    with Database(dsn, schema, max_size=1) as db, db.connection() as conn:
        row = conn.execute("SELECT %(a)s::text[] AS a, cardinality(%(e)s::text[]) AS e",
                           {"a": TextArray(values), "e": TextArray()}).fetchone()
        assert row == {"a": values, "e": 0}
        tids = conn.execute("SELECT %(t)s::tid[] AS t", {"t": TextArray(["(1,2)", "(30,4)"])}
                            ).fetchone()
        assert tids is not None and [str(t) for t in tids["t"]] == ["(1,2)", "(30,4)"]


ARTIFACT = ("artifact_id", "event_id", "tenant_id", "bytes", "path")


def _artifacts(conn: psycopg.Connection[dict[str, object]]) -> list[tuple[object, ...]]:
    rows = conn.execute("SELECT artifact_id, event_id, bytes FROM artifacts "
                        "WHERE artifact_id NOT LIKE 'art_filler%' "
                        "ORDER BY artifact_id, event_id").fetchall()
    return [tuple(row.values()) for row in rows]


def _filler(count: int, batch: str) -> list[tuple[object, ...]]:
    """Rows of keys of their own: with them a batch is too large for pipelined INSERTs
    (FEW_ROWS) and goes in by COPY."""
    return [(f"art_filler_{batch}_{n}", "evt_f", "t", n, "p") for n in range(count)]


def test_an_index_whose_schema_was_dropped_is_unavailable_until_opened_again(
        dsn: str, schema: str) -> None:
    """A schema dropped under an open index (by hand, `drop schema ... cascade`) is a
    DatabaseError naming the schema and what happens next, as a server gone away is
    (the daemon then waits and opens the index again), not psycopg's UndefinedTable."""
    with Database(dsn, schema, max_size=1) as db:
        db.ensure_schema()
        db.execute("meta_set", {"key": "store", "value": "/somewhere"})
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
        with pytest.raises(DatabaseError) as caught:
            db.indexed_store()
        message = str(caught.value)
        assert f"the index's tables are gone from schema {schema!r}" in message
        assert 'relation "meta" does not exist' in message and "gitmem reindex" in message
        assert db.ensure_schema()  # opening it again makes it anew, empty
        assert db.indexed_store() is None


@pytest.mark.parametrize("filler", [0, FEW_ROWS + 1], ids=["inserts", "copy"])
def test_insert_rows_skips_keys_held_or_repeated_as_on_conflict_do_nothing(
        dsn: str, schema: str, filler: int) -> None:
    with Database(dsn, schema, max_size=1) as db:
        db.ensure_schema()
        with db.transaction() as conn:
            copied = db.insert_rows(conn, "artifacts", ARTIFACT, [
                ("art_a", "evt_1", "t", 10, "p"), ("art_a", "evt_2", "t", 20, "p"),
                *_filler(filler, "a")])
            assert copied == 2 + filler
        with db.transaction() as conn:
            # the composite key (artifact_id, event_id) decides: one held, one repeated
            copied = db.insert_rows(conn, "artifacts", ARTIFACT, [
                ("art_a", "evt_1", "t", 99, "p"), ("art_b", "evt_1", "t", 30, "p"),
                ("art_b", "evt_1", "t", 98, "p"), ("art_a", "evt_3", "t", 40, "p"),
                *_filler(filler, "b")])
            assert copied == 2 + filler
            assert _artifacts(conn) == [("art_a", "evt_1", 10), ("art_a", "evt_2", 20),
                                        ("art_a", "evt_3", 40), ("art_b", "evt_1", 30)]


@pytest.mark.parametrize("filler", [0, FEW_ROWS + 1], ids=["inserts", "copy"])
def test_insert_rows_falls_back_to_one_by_one_when_another_session_inserts_a_key(
        dsn: str, schema: str, filler: int) -> None:
    with Database(dsn, schema, max_size=2) as db:
        db.ensure_schema()
        with db.connection() as other, db.transaction() as conn:
            other.execute("INSERT INTO artifacts VALUES ('art_x', 'evt_1', 't', 1, 'p')")
            # not committed yet: the lookup cannot see it; the COPY waits on its key
            done = threading.Timer(0.3, other.commit)
            done.start()
            db.insert_rows(conn, "artifacts", ARTIFACT, [
                ("art_x", "evt_1", "t", 2, "p"), ("art_y", "evt_1", "t", 3, "p"),
                *_filler(filler, "x")])
            done.join()
            assert _artifacts(conn) == [("art_x", "evt_1", 1), ("art_y", "evt_1", 3)]


def test_a_reindex_chosen_as_a_deadlocks_victim_is_run_again(
        memory: Memory, dsn: str, schema: str, caplog: pytest.LogCaptureFixture) -> None:
    """A reader holding one table of the index and asking for another, while a reindex
    drops them one by one, deadlocks with it. The reindex is rolled back whole and runs
    again once the reader has gone on; the reader gets its rows."""
    memory.record({"content": {"text": "the pangolin sleeps"}})
    memory.decide("Keep the pangolin fed", [memory.record({"content": {"text": "fed"}}).id])
    memory.sync()
    tables = {row[0] for row in psycopg.connect(dsn, autocommit=True).execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()}
    with psycopg.connect(dsn) as reader:
        reader.execute("SET deadlock_timeout = '60s'")  # the reindex finds the deadlock
        reader.execute(sql.SQL("SELECT count(*) FROM {}").format(
            sql.Identifier(schema, "decisions"))).fetchone()
        done: list[Any] = []
        rebuild = threading.Thread(target=lambda: done.append(memory.reindex()))
        rebuild.start()
        held: set[str] = set()
        with psycopg.connect(dsn, autocommit=True) as watch:
            for _ in range(500):  # until the reindex's DROP waits for the decisions table
                held = {row[0] for row in watch.execute(
                    "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
                    "AND l.mode = 'AccessExclusiveLock' AND l.granted "
                    "AND l.pid <> pg_backend_pid()", (schema,)).fetchall()}
                waiting = watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE 'DROP SCHEMA%%'").fetchone()
                if held & tables and waiting and waiting[0]:
                    break
                time.sleep(0.01)
        taken = sorted(held & tables - {"decisions"})
        assert taken, "the reindex's DROP SCHEMA took no table before waiting"
        with caplog.at_level(logging.WARNING, logger="gitmem.db"):
            rows = reader.execute(sql.SQL("SELECT count(*) FROM {}").format(
                sql.Identifier(schema, taken[0]))).fetchone()  # waits: the deadlock
            reader.commit()
            rebuild.join(timeout=60)
    assert rows is not None and not rebuild.is_alive()
    [report] = done
    assert report.errors == [] and report.rows > 0
    assert "rolled back to end a deadlock" in caplog.text
    assert memory.build_acb({"query_text": "pangolin"})["provenance"]["retrieved"] >= 1


def test_reads_go_on_from_the_old_index_while_a_rebuild_makes_the_new(
        dsn: str, schema: str) -> None:
    """The rebuild works in a schema of its own and takes the old one's place as it
    commits: a read meanwhile is answered from the old index at once (it waited for the
    whole rebuild when the rebuild began by dropping the old schema)."""
    with Database(dsn, schema, max_size=2) as db:
        db.ensure_schema()
        db.execute("meta_set", {"key": "store", "value": "/old"})
        with db.rebuild() as conn:
            conn.execute("INSERT INTO meta (key, value) VALUES ('store', '/new')")
            with psycopg.connect(dsn, autocommit=True, options=(
                    f"-c search_path={schema} -c lock_timeout=2000")) as reader:
                row = reader.execute("SELECT value FROM meta WHERE key = 'store'").fetchone()
                assert row is not None and row[0] == "/old"
        assert db.indexed_store() == "/new" and db.schema_exists()
    with psycopg.connect(dsn, autocommit=True) as conn:  # the building schema is renamed
        assert conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE "
                            "'gitmem\\_rebuild\\_%'").fetchall() == []
