"""The database layer: named queries, embedded server settings."""

from __future__ import annotations

from gitmem.db import embedded_settings, named_queries, redact_dsn


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
