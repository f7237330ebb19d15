"""The database layer: named queries, embedded server settings."""

from __future__ import annotations

import psycopg
import pytest

from gitmem.db import Database, TextArray, embedded_settings, named_queries, redact_dsn


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
    assert {"retrieval_lane", "tenant_days", "lexemes_add_path", "upsert_file_state"} <= set(
        queries)
    assert all(body.strip() for body in queries.values())


def test_dsn_passwords_never_reach_messages() -> None:
    assert redact_dsn("postgresql://bob:hunter2@db/x") == "postgresql://bob:***@db/x"
    assert "hunter2" not in redact_dsn("host=db password=hunter2 user=bob")


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
