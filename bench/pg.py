"""The benchmark's PostgreSQL: which server, its `bench_*` schemas, raw COPY, sizes.

The benchmark never touches a schema it did not create: every schema is named
`bench_<pid>_<label>` and dropped at the end of the run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from bench import CACHE_ROOT
from gitmem.db import sql_text
from gitmem.embedded import embedded_dsn

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
EMBEDDED_STATE = CACHE_ROOT / "embedded"
COPY_CHUNK = 1 << 20
Conn = psycopg.Connection[dict[str, Any]]


def resolve_dsn(option: str | None) -> str:
    """`--dsn`, else GITMEM_BENCH_DSN, else the local test server; `embedded` starts pgserver."""
    value = option or os.environ.get("GITMEM_BENCH_DSN") or DEFAULT_DSN
    return embedded_dsn(EMBEDDED_STATE) if value == "embedded" else value


@contextmanager
def connect(dsn: str) -> Iterator[Conn]:
    """An autocommit connection returning rows as dicts."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        yield conn


class Schemas:
    """The `bench_<pid>_*` schemas of this run, dropped together at the end."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.prefix = f"bench_{os.getpid()}"
        self.made: list[str] = []

    def name(self, label: str) -> str:
        """A schema name of this run for `label` (created by whoever uses it)."""
        name = f"{self.prefix}_{label}"
        if name not in self.made:
            self.made.append(name)
        return name

    def drop_all(self) -> None:
        """Drop every schema this run named."""
        with connect(self.dsn) as conn:
            for name in self.made:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(name)))
        self.made.clear()


def server_info(dsn: str) -> dict[str, str]:
    """The server version and the settings that decide bulk-load speed."""
    names = ("shared_buffers", "maintenance_work_mem", "work_mem", "max_wal_size",
             "synchronous_commit", "fsync", "wal_level", "max_parallel_maintenance_workers")
    with connect(dsn) as conn:
        row = conn.execute("SELECT version() AS v").fetchone()
        info = {"version": str(row["v"]) if row else "?"}
        # current_setting's text, with its unit ("2GB"): setting and unit side by side
        # read "2621448kB" for 262144 pages of 8kB
        for row in conn.execute("SELECT name, current_setting(name) AS value FROM pg_settings "
                                "WHERE name = ANY(%s)", (list(names),)):
            info[row["name"]] = str(row["value"])
    return info


def tables(conn: Conn, schema: str) -> dict[str, list[str]]:
    """Each base table of `schema` with its stored (not generated) columns, in order."""
    rows = conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = %s AND is_generated = 'NEVER' "
        "ORDER BY table_name, ordinal_position", (schema,)).fetchall()
    out: dict[str, list[str]] = {}
    for row in rows:
        out.setdefault(row["table_name"], []).append(row["column_name"])
    return out


def _copy_out(schema: str, table: str, columns: list[str], order: bool = False) -> sql.Composed:
    cols = sql.SQL(", ").join(map(sql.Identifier, columns))
    query = sql.SQL("SELECT {} FROM {}.{}").format(cols, sql.Identifier(schema),
                                                   sql.Identifier(table))
    if order:
        query = sql.SQL("{} ORDER BY 1, 2").format(query)
    return sql.SQL("COPY ({}) TO STDOUT").format(query)


def dump_tables(conn: Conn, schema: str, directory: Path) -> dict[str, tuple[list[str], Path]]:
    """Every table's rows as COPY text files in `directory`: table -> (columns, file)."""
    directory.mkdir(parents=True, exist_ok=True)
    dumps: dict[str, tuple[list[str], Path]] = {}
    for table, columns in tables(conn, schema).items():
        path = directory / f"{table}.copy"
        with path.open("wb") as out, conn.cursor() as cur, \
                cur.copy(_copy_out(schema, table, columns)) as copy:
            for data in copy:
                out.write(data)
        dumps[table] = (columns, path)
    return dumps


def load_raw(conn: Conn, schema: str, dumps: dict[str, tuple[list[str], Path]],
             clock: dict[str, float]) -> None:
    """In one transaction: a bare schema from schema.sql, COPY every dump in (FREEZE, as
    the reindex loads: the tables are new in this transaction), then indexes.sql and
    ANALYZE (seconds of each phase into `clock`)."""
    ident = sql.Identifier(schema)
    with conn.transaction():
        start = time.perf_counter_ns()
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(ident))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
        conn.execute(sql_text("schema.sql").encode())
        mark = time.perf_counter_ns()
        clock["create_s"] = (mark - start) / 1e9
        for table, (columns, path) in dumps.items():
            statement = sql.SQL("COPY {} ({}) FROM STDIN WITH (FREEZE)").format(
                sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)))
            with path.open("rb") as source, conn.cursor() as cur, cur.copy(statement) as copy:
                while data := source.read(COPY_CHUNK):
                    copy.write(data)
        now = time.perf_counter_ns()
        clock["copy_s"], mark = (now - mark) / 1e9, now
        conn.execute(sql_text("indexes.sql").encode())
        now = time.perf_counter_ns()
        clock["indexes_s"], mark = (now - mark) / 1e9, now
        # like Database.rebuild: only this schema's tables, not the whole database
        names = [row["tablename"] for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename",
            (schema,)).fetchall()]
        conn.execute(sql.SQL("ANALYZE {}").format(sql.SQL(", ").join(
            sql.Identifier(schema, name) for name in names)))
        clock["analyze_s"] = (time.perf_counter_ns() - mark) / 1e9
    clock["total_s"] = (time.perf_counter_ns() - start) / 1e9


def relation_sizes(conn: Conn, schema: str) -> list[dict[str, Any]]:
    """Per table: rows (estimate after ANALYZE), heap, index and total bytes."""
    return conn.execute(
        "SELECT c.relname AS table, c.reltuples::bigint AS rows, "
        "pg_table_size(c.oid) AS table_bytes, pg_indexes_size(c.oid) AS index_bytes, "
        "pg_total_relation_size(c.oid) AS total_bytes "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' ORDER BY total_bytes DESC",
        (schema,)).fetchall()


def index_sizes(conn: Conn, schema: str) -> dict[str, int]:
    """Bytes of each index of `schema`."""
    rows = conn.execute(
        "SELECT c.relname AS name, pg_relation_size(c.oid) AS bytes "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'i' ORDER BY bytes DESC", (schema,)).fetchall()
    return {row["name"]: int(row["bytes"]) for row in rows}


def count_rows(conn: Conn, schema: str, table: str) -> int:
    """Exact row count of one table."""
    row = conn.execute(sql.SQL("SELECT count(*) AS n FROM {}.{}").format(
        sql.Identifier(schema), sql.Identifier(table))).fetchone()
    return int(row["n"]) if row else 0


def tenant_lexemes(conn: Conn, schema: str, tenant: str,
                   suppressed: list[str]) -> Iterator[tuple[str, str, int, str]]:
    """(chunk_id, source_id, token_est, english tsvector text) of a tenant's loadable
    chunks, in chunk_id order, streamed."""
    query = sql.SQL(
        "SELECT chunk_id, source_id, token_est, to_tsvector('english', text)::text AS lex "
        "FROM {}.chunks WHERE tenant_id = %s AND NOT (sensitivity = ANY(%s)) "
        "ORDER BY chunk_id").format(sql.Identifier(schema))
    with conn.transaction(), conn.cursor(name=f"lex_{os.getpid()}") as cur:
        cur.itersize = 5000
        cur.execute(query, (tenant, suppressed))
        for row in cur:
            yield row["chunk_id"], row["source_id"], int(row["token_est"]), row["lex"]


def query_lexemes(conn: Conn, text: str) -> str:
    """The english tsvector text of a query (the lexemes PostgreSQL would search)."""
    row = conn.execute("SELECT to_tsvector('english', %s)::text AS lex", (text,)).fetchone()
    return str(row["lex"]) if row else ""


def chunk_texts(conn: Conn, schema: str, chunk_ids: list[str]) -> dict[str, str]:
    """The text of each of `chunk_ids`."""
    query = sql.SQL("SELECT chunk_id, text FROM {}.chunks WHERE chunk_id = ANY(%s)").format(
        sql.Identifier(schema))
    return {row["chunk_id"]: row["text"] for row in conn.execute(query, (chunk_ids,))}


def tenant_chunks(conn: Conn, schema: str) -> dict[str, int]:
    """Chunks per tenant, largest first."""
    query = sql.SQL("SELECT tenant_id, count(*) AS n FROM {}.chunks GROUP BY tenant_id "
                    "ORDER BY n DESC, tenant_id").format(sql.Identifier(schema))
    return {row["tenant_id"]: int(row["n"]) for row in conn.execute(query)}


def sample_sessions(conn: Conn, schema: str, count: int) -> list[dict[str, Any]]:
    """`count` sessions picked by a hash of their id (the same on every run): tenant,
    session, and the agent and channel of their latest event."""
    query = sql.SQL(
        "SELECT DISTINCT ON (tenant_id, session_id) tenant_id, session_id, agent_id, channel "
        "FROM {}.events ORDER BY tenant_id, session_id, ts DESC").format(sql.Identifier(schema))
    query = sql.SQL("SELECT * FROM ({}) s ORDER BY md5(tenant_id || '/' || session_id) "
                    "LIMIT %s").format(query)
    return list(conn.execute(query, (count,)).fetchall())
