"""PostgreSQL access: the only module that runs SQL.

SQL lives in `sql/*.sql` and is read once. `queries.sql` holds named
statements (`-- name: foo`) that other modules run through `Database` by name;
`schema.sql` and `indexes.sql` create the index in the store's own schema.
Without a DSN, gitmem/embedded.py starts a server under `.gitmem/pg`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.adapt import Dumper
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from gitmem.config import Config, redact_dsn
from gitmem.errors import DatabaseError

logger = logging.getLogger(__name__)

SCHEMA_VERSION = "15"
Row = dict[str, Any]
T = TypeVar("T")
DEADLOCK_ATTEMPTS = 3


def retry_deadlocks(run: Callable[[], T], what: str) -> T:
    """`run()`, run again (up to DEADLOCK_ATTEMPTS in all) when PostgreSQL ends it as a
    deadlock's victim. A reindex drops the old index's tables one by one while a reader
    may hold one and wait for another; PostgreSQL then rolls one of them back whole,
    so running it again is safe, and the other has gone on meanwhile."""
    for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
        try:
            return run()
        except DatabaseError as exc:
            if (attempt == DEADLOCK_ATTEMPTS
                    or not isinstance(exc.__cause__, psycopg.errors.DeadlockDetected)):
                raise
            logger.warning("%s was rolled back to end a deadlock (a reindex beside it); "
                           "running it again (attempt %d of %d)", what, attempt + 1,
                           DEADLOCK_ATTEMPTS)
    raise AssertionError("unreachable")


def sql_dir() -> Path:
    """`sql/` of a source checkout, else the copy packaged into the wheel."""
    source = Path(__file__).resolve().parent.parent / "sql"
    if (source / "schema.sql").is_file():
        return source
    return Path(str(resources.files("gitmem") / "_data" / "sql"))


@functools.cache
def sql_text(name: str) -> str:
    """The text of `sql/<name>`."""
    return (sql_dir() / name).read_text(encoding="utf-8")


@functools.cache
def named_queries() -> dict[str, str]:
    """Every `-- name: <name>` statement of the sql/*.sql files except the schema's,
    without its comment lines: they are for readers of the files, and a statement's
    text is parsed for placeholders at every execution where it is longer than psycopg
    caches the parse of (4,096 bytes; a lane statement with its comments: 36% of them
    at 1M events)."""
    queries: dict[str, str] = {}
    for path in sorted(sql_dir().glob("*.sql")):
        if path.name in ("schema.sql", "indexes.sql"):
            continue
        parts = re.split(r"^-- name: (\w+)\s*$", sql_text(path.name), flags=re.MULTILINE)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise ValueError(f"sql/{path.name}: query name {name!r} defined twice")
            code = "\n".join(line for line in body.splitlines()
                             if not line.lstrip().startswith("--"))
            queries[name] = code.strip().rstrip(";")
    return queries


def alter_system(dsn: str, wanted: Mapping[str, str]) -> list[str]:
    """Set the server settings of `wanted` that differ from it (ALTER SYSTEM); the names
    of those it set (they take effect once the server restarts)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        current = {name: value for name, value in conn.execute(
            "SELECT name, current_setting(name) FROM unnest(%s::text[]) AS name",
            (list(wanted),)).fetchall()}
        changed = sorted(k for k, v in wanted.items() if current.get(k) != v)
        for name in changed:
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(
                sql.Identifier(name), sql.Literal(wanted[name])))
    return changed


def _pool(dsn: str, schema: str, plans: str, min_size: int, max_size: int,
          timeout: float) -> ConnectionPool[psycopg.Connection[Row]]:
    """A pool of autocommit connections onto `schema`, rows as dicts, planning as `plans`
    says (plan_cache_mode). The index is read from memory, so random reads cost little
    more than sequential ones; no JIT compiling (it costs more than it saves on queries
    of a few milliseconds); no parallel workers (starting them costs ~5 ms, and with no
    statistics for an expression index the planner overrates a lookup enough to start
    them)."""
    return ConnectionPool(
        dsn, min_size=min_size, max_size=max_size, open=False, timeout=timeout,
        kwargs={"autocommit": True, "row_factory": dict_row,
                "options": f"-c search_path={schema} -c plan_cache_mode={plans}"
                           " -c random_page_cost=1.1 -c jit=off"
                           " -c max_parallel_workers_per_gather=0"},
        configure=_in_utc, name=f"gitmem-{schema}-{plans.split('_')[1]}")


def _in_utc(conn: psycopg.Connection[Row]) -> None:
    """A new connection works in UTC, whatever zone the server or the client's
    environment (PGTZ, which wins over startup options) sets: "a day" in SQL is then
    24 hours (a reply is a question's next turn within one; a day over a DST change
    elsewhere is 23 or 25), so the same request on the same files gives the same
    bundle on any server (P7), and times come back in UTC."""
    conn.execute("SET TimeZone TO 'UTC'")


class Database:
    """A connection pool onto one store's schema."""

    def __init__(self, dsn: str, schema: str, *, max_size: int = 4,
                 timeout: float = 30.0) -> None:
        self.dsn = dsn
        self.schema = schema
        self.max_size = max_size
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        # One direct attempt first: a wrong DSN, a refused connection or a bad password
        # fails now with the server's reason, not after the pool retried for `timeout`.
        try:
            psycopg.connect(dsn, connect_timeout=max(1, round(min(timeout, 10)))).close()
        except psycopg.Error as exc:
            reason = " ".join(str(exc).split())
            raise DatabaseError(
                f"cannot connect to PostgreSQL at {redact_dsn(dsn)}: {reason}; check that "
                "the server runs and the DSN (--dsn / GITMEM_DSN) is right") from exc
        # plans per query value (a common and a rare word need different plans); the
        # statements whose text fixes their plan (the lane statements, run_many's
        # `planned_once`) go to connections of their own that plan once for any values
        self._pool = _pool(dsn, schema, "force_custom_plan", 1, max_size, timeout)
        self._planned = _pool(dsn, schema, "force_generic_plan", 0, max_size, timeout)
        try:
            self._pool.open(wait=True, timeout=timeout)
            self._planned.open()
        except PoolTimeout as exc:
            self.close()
            raise DatabaseError(
                f"cannot connect to PostgreSQL at {redact_dsn(dsn)} within {timeout:.0f}s; "
                "check that the server runs and the DSN is right") from exc

    @classmethod
    def open(cls, config: Config, *, max_size: int = 4, timeout: float = 30.0,
             claim: bool = False) -> Database:
        """Connect as configured (DSN, else the embedded server), ensure the schema and
        check that it holds this store's index (`claim`: make it this store's)."""
        dsn = config.dsn
        if not dsn:
            from gitmem.embedded import embedded_dsn  # deferred: gitmem.embedded imports db

            dsn = embedded_dsn(config.state_dir)
        db = cls(dsn, config.schema, max_size=max_size, timeout=timeout)
        try:
            db.ensure_schema()
            # the embedded server lives in the store's own state directory: an index
            # there is this store's, wherever the store was moved or copied
            db.check_store(config.store, follow=config.dsn is None, claim=claim)
        except BaseException:
            db.close()
            raise
        return db

    def close(self) -> None:
        """Close every pooled connection."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self._pool.close()
        self._planned.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ connections

    @contextmanager
    def connection(self, *, planned_once: bool = False) -> Iterator[psycopg.Connection[Row]]:
        """A pooled connection (autocommit; use `transaction()` for units of work); with
        `planned_once`, one whose prepared statements are planned once for any values."""
        try:
            with (self._planned if planned_once else self._pool).connection() as conn:
                yield conn  # rows as dicts: dict_row is set in kwargs
        except PoolTimeout as exc:
            raise DatabaseError(f"no PostgreSQL connection available from "
                                f"{redact_dsn(self.dsn)}: {exc}") from exc
        except psycopg.OperationalError as exc:
            raise DatabaseError(f"PostgreSQL at {redact_dsn(self.dsn)} failed: {exc}") from exc
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as exc:
            # the schema was dropped (or emptied) under this process: unavailable, like a
            # server that went away; opening the index again (`open`) makes it anew
            reason = str(exc).splitlines()[0]
            raise DatabaseError(
                f"the index's tables are gone from schema {self.schema!r} of "
                f"{redact_dsn(self.dsn)} ({reason}; was the schema dropped?): gitmem builds "
                "them again from the files (a daemon within seconds, any other command as "
                "it starts); `gitmem reindex` does it at once") from exc

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Row]]:
        """A connection inside one transaction: all of it commits, or none."""
        with self.connection() as conn, conn.transaction():
            yield conn

    # ------------------------------------------------------------------ schema

    def schema_exists(self) -> bool:
        """Whether this store's schema holds an index of the current version."""
        with self.connection() as conn:
            return self._current(conn)

    def _current(self, conn: psycopg.Connection[Row]) -> bool:
        row = conn.execute(named_queries()["schema_version"],
                           {"schema": self.schema}).fetchone()
        if row is None or not row["has_meta"]:
            return False
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                               ).fetchone()
        return version is not None and version["value"] == SCHEMA_VERSION

    def ensure_schema(self) -> bool:
        """Create the schema when missing or outdated; True if it was (re)created."""
        if self.schema_exists():
            return False
        with self.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema,))
            if self._current(conn):  # another process made it while this one waited
                return False
            self._recreate(conn)
        return True

    def _recreate(self, conn: psycopg.Connection[Row], *, with_indexes: bool = True,
                  schema: str | None = None) -> None:
        ident = sql.Identifier(schema or self.schema)
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(ident))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
        conn.execute(sql_text("schema.sql").encode())
        if with_indexes:
            conn.execute(sql_text("indexes.sql").encode())
        conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', %s)",
                     (SCHEMA_VERSION,))

    def check_store(self, store: Path, *, follow: bool = False, claim: bool = False) -> None:
        """Raise unless the index is `store`'s (meta `store`, its absolute path): two
        stores on one schema would each read the other's rows until a sync. An index
        that names no store becomes `store`'s, and so does one that names another with
        `follow` (the store was moved); `claim` lets another store's index be opened
        (a reindex, which makes it `store`'s)."""
        mine = str(store.resolve())
        held = self.indexed_store()
        if held == mine or (claim and held is not None):
            return
        if held is not None and not follow:
            raise DatabaseError(
                f"schema {self.schema!r} of {redact_dsn(self.dsn)} holds the index of "
                f"{held}, not of {mine}: two stores cannot share an index; give this "
                "one a schema of its own (GITMEM_SCHEMA), or run `gitmem reindex` here "
                f"to make the index this store's (then {held} needs a schema of its own)")
        self.execute("meta_set", {"key": "store", "value": mine})

    def indexed_store(self) -> str | None:
        """The absolute path of the store the index holds, if it names one."""
        row = self.fetchone("meta_get", {"key": "store"})
        return None if row is None else str(row["value"])

    def drop_schema(self) -> None:
        """Drop the whole index of this store (the files stay the truth)."""
        with self.transaction() as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(self.schema)))

    @contextmanager
    def rebuild(self) -> Iterator[psycopg.Connection[Row]]:
        """One transaction that builds the index bare in a schema of its own (the
        connection's search path); indexes come on exit, and then it takes the old
        schema's place. Readers keep reading the old index meanwhile, never waiting for
        the build: only for the swap at its end (dropping a schema locks its tables)."""
        building = "gitmem_rebuild_" + hashlib.sha256(self.schema.encode()).hexdigest()[:16]
        with self.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema,))
            self._recreate(conn, with_indexes=False, schema=building)
            yield conn
            conn.execute(sql_text("indexes.sql").encode())
            # only this schema's tables: a bare ANALYZE takes every table of the
            # database, other stores' and the catalogs, and deadlocks with their rebuilds
            tables = [row["tablename"] for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename",
                (building,)).fetchall()]
            conn.execute(sql.SQL("ANALYZE {}").format(sql.SQL(", ").join(
                sql.Identifier(building, table) for table in tables)))
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(self.schema)))
            conn.execute(sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(
                sql.Identifier(building), sql.Identifier(self.schema)))
            conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(
                sql.Identifier(self.schema)))

    # ------------------------------------------------------------------ statements

    def fetchall(self, name: str, params: dict[str, Any] | Sequence[Any] | None = None,
                 conn: psycopg.Connection[Row] | None = None) -> list[Row]:
        """Rows of the named query."""
        if conn is not None:
            return conn.execute(named_queries()[name], params).fetchall()
        with self.connection() as own:
            return own.execute(named_queries()[name], params).fetchall()

    def fetchall_planned(self, name: str, params: dict[str, Any]) -> list[Row]:
        """Rows of a named query whose plan is the same for any values, planned once per
        connection (`run_many`'s `planned_once`) instead of at every call."""
        [rows] = self.run_many([(named_queries()[name], params)], planned_once=True,
                               row_factory=dict_row)
        return list(rows)

    def fetchone(self, name: str, params: dict[str, Any] | Sequence[Any] | None = None,
                 conn: psycopg.Connection[Row] | None = None) -> Row | None:
        """The first row of the named query, or None."""
        rows = self.fetchall(name, params, conn)
        return rows[0] if rows else None

    def fetch_many(self, statements: Sequence[tuple[str, dict[str, Any]]], *,
                   planned_once: bool = False) -> list[list[tuple[Any, ...]]]:
        """Several named queries in one round trip (pipeline mode); rows of each, in order,
        as plain tuples (cheaper than dicts where thousands of rows are scored).
        `planned_once` as for `run_many`."""
        queries = named_queries()
        return self.run_many([(queries[name], params) for name, params in statements],
                             planned_once=planned_once)

    def run_many(self, statements: Sequence[tuple[str, dict[str, Any]]], *,
                 planned_once: bool = False, row_factory: Any = tuple_row) -> list[list[Any]]:
        """`fetch_many` for statements given as SQL text (built from a named query).

        `planned_once`: statements whose plan does not depend on their parameters'
        values (their text fixes it). Each is prepared on a connection of the pool that
        plans once for any values (a generic plan), instead of parsed and planned again
        at every call: the lane statements of the 1M benchmark took 15% less time so
        (docs/performance-log.md, "Planned once"). That pool's sessions plan so from the
        start: no transaction and `SET LOCAL` around each call (0.17 ms a call).
        `row_factory`: rows as tuples, or (dict_row) as the named queries' dicts.

        Rows come in binary format: a number, a time or an array is copied, not parsed
        from its text (the lane statements' rows of the 1M benchmark: 1.5 us of the
        client's time each, 5% of their round). One statement is sent without a
        pipeline, whose closing Sync costs a round trip more."""
        if not statements:
            return []
        prepare = planned_once or None
        with self.connection(planned_once=planned_once) as conn:
            if len(statements) == 1:
                [(text, params)] = statements
                cur = conn.cursor(row_factory=row_factory, binary=True)
                return [cur.execute(text, params, prepare=prepare).fetchall()]
            with conn.pipeline():
                cursors = [conn.cursor(row_factory=row_factory, binary=True)
                           for _ in statements]
                for cur, (text, params) in zip(cursors, statements, strict=True):
                    cur.execute(text, params, prepare=prepare)
                return [cur.fetchall() for cur in cursors]

    def run_parallel(self, statements: Sequence[tuple[str, dict[str, Any]]],
                     costs: Sequence[float]) -> list[list[tuple[Any, ...]]]:
        """`run_many(planned_once=True)` on two connections at once, the statements
        shared out by their expected cost: the server runs a connection's statements
        one after another, and a second one keeps the other core busy. Rows of each
        statement, in order."""
        run = functools.partial(self.run_many, planned_once=True)
        if len(statements) < 2 or self.max_size < 2:
            return run(statements)
        parts: list[list[int]] = [[], []]
        load = [0.0, 0.0]
        for number in sorted(range(len(statements)), key=lambda n: -costs[n]):
            side = 0 if load[0] <= load[1] else 1
            parts[side].append(number)
            load[side] += costs[number] + 1.0
        if not parts[1]:
            return run(statements)
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=2,
                                                    thread_name_prefix="gitmem-lanes")
            executor = self._executor
        other = executor.submit(run, [statements[n] for n in parts[1]])
        results: dict[int, list[tuple[Any, ...]]] = dict(
            zip(parts[0], run([statements[n] for n in parts[0]]), strict=True))
        results.update(zip(parts[1], other.result(), strict=True))
        return [results[n] for n in range(len(statements))]

    def execute(self, name: str, params: dict[str, Any] | Sequence[Any] | None = None,
                conn: psycopg.Connection[Row] | None = None) -> int:
        """Run a named statement; the number of rows it touched."""
        if conn is not None:
            return conn.execute(named_queries()[name], params).rowcount
        with self.connection() as own:
            return own.execute(named_queries()[name], params).rowcount

    def executemany(self, name: str, params: Iterable[dict[str, Any] | Sequence[Any]],
                    conn: psycopg.Connection[Row]) -> None:
        """Run a named statement once per parameter set (pipelined)."""
        with conn.cursor() as cur:
            cur.executemany(named_queries()[name], list(params))

    def insert_rows(self, conn: psycopg.Connection[Row], table: str, columns: Sequence[str],
                    rows: Sequence[Sequence[Any]]) -> int:
        """Insert `rows` as the named statement `insert_<table>` would, one row at a time
        (`ON CONFLICT (key) DO NOTHING`: a row whose key the table holds, or an earlier
        row of `rows` has, is skipped), but with one COPY of the new ones: an INSERT
        per row costs the server an executor, the table's index openings and its index
        expressions' set-up every time (a sync of appended events spent 40% less time
        so, docs/performance-log.md, section 4). Should another session index one of these
        keys in between, the rows go in one by one after all. Up to FEW_ROWS rows (a task
        or decision file, a few appended events) go in as INSERTs in one pipeline: one
        round trip, where the key check, the savepoint and the COPY took four (a task
        file's sync: 8.3 -> 5.8 ms). Returns rows added."""
        statement = named_queries()[f"insert_{table}"]
        if len(rows) <= FEW_ROWS:
            with conn.cursor() as cur:
                cur.executemany(statement, list(rows))
                return max(cur.rowcount, 0)
        found = _CONFLICT_KEY.search(statement)
        if found is None:
            raise ValueError(f"insert_{table} has no ON CONFLICT (key) DO NOTHING")
        key = [columns.index(name.strip()) for name in found.group(1).split(",")]
        held = self._held_keys(conn, table, [columns[n] for n in key],
                               [[str(row[n]) for row in rows] for n in key])
        fresh = []
        for row in rows:
            this = tuple(str(row[n]) for n in key)
            if this not in held:
                held.add(this)
                fresh.append(row)
        if not fresh:
            return 0
        try:
            with conn.transaction():  # a savepoint: the file's transaction goes on
                return self.copy_rows(conn, table, columns, fresh)
        except psycopg.errors.UniqueViolation:
            self.executemany(f"insert_{table}", rows, conn)
            return len(fresh)

    @staticmethod
    def _held_keys(conn: psycopg.Connection[Row], table: str, key: Sequence[str],
                   values: Sequence[Sequence[str]]) -> set[tuple[str, ...]]:
        """Which of the keys (one list of values per key column) `table` holds."""
        # a join with the keys, not `= ANY (array)`: that is compared with every row
        # of a table the planner reads whole (a small one), 200 times over
        query = sql.SQL("SELECT {names} FROM {table} WHERE ({names}) IN "
                        "(SELECT * FROM unnest({arrays}))").format(
            names=sql.SQL(", ").join(map(sql.Identifier, key)), table=sql.Identifier(table),
            arrays=sql.SQL(", ").join([sql.SQL("%s::text[]")] * len(key)))
        with conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(query, [TextArray(v) for v in values])
            return {tuple(row) for row in cur.fetchall()}

    @staticmethod
    def copy_rows(conn: psycopg.Connection[Row], table: str, columns: Sequence[str],
                  rows: Iterable[Sequence[Any]], *, freeze: bool = False) -> int:
        """Bulk-load rows with COPY; returns how many. `freeze` (a table this transaction
        created: `rebuild`): the rows go in frozen, their pages marked all-visible, so
        the first reads neither set hint bits nor wait on autovacuum's first pass."""
        statement = sql.SQL("COPY {} ({}) FROM STDIN{}").format(
            sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)),
            sql.SQL(" WITH (FREEZE)" if freeze else ""))
        types = _copy_types(conn, table, columns)
        count = 0
        with conn.cursor() as cur:
            cur.adapters.register_dumper(None, _TextArrayDumper)
            with cur.copy(statement) as copy:
                copy.set_types(types)
                for row in rows:
                    copy.write_row(row)
                    count += 1
        return count


# How rows' Python values travel in COPY's text format, by column type. Declaring
# them once saves choosing a dumper for every value; the text sent is the same.
# Timestamps and JSON travel as the text the rows already hold (the server parses
# them), so a str is never re-encoded as a JSON string.
TEXT_ARRAY_OID = 1009  # text[] (a built-in type: the same oid on every server)
_COPY_TRANSPORT = {"int2": "int8", "int4": "int8", "int8": "int8", "float4": "float8",
                   "float8": "float8", "bool": "bool", "_text": "text[]"}


class _TextArrayDumper(Dumper):
    """A list of str as a text[] literal, without the generic list dumper's per-element
    dispatch (most tags and refs lists are empty). Every element is quoted, so the
    server reads the same values."""

    oid = TEXT_ARRAY_OID

    def dump(self, obj: Any) -> bytes:
        if not obj:
            return b"{}"
        return ("{" + ",".join("NULL" if item is None else
                               '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'
                               for item in obj) + "}").encode()


class TextArray(list[str]):
    """A list of str sent as one text[] parameter by `_TextArrayDumper`: for lists of
    hundreds of ids, psycopg's generic list dumper (a dumper chosen per element) took
    0.4 to 0.6 ms more of the caller's time per list of 200 (docs/performance-log.md,
    "Planned once")."""


psycopg.adapters.register_dumper(TextArray, _TextArrayDumper)


FEW_ROWS = 16  # rows that go in as pipelined INSERTs: fewer round trips than a key check and a COPY

_CONFLICT_KEY = re.compile(r"ON CONFLICT \(([^)]*)\) DO NOTHING")
_copy_type_cache: dict[tuple[str, tuple[str, ...]], list[str]] = {}


def _copy_types(conn: psycopg.Connection[Row], table: str, columns: Sequence[str]) -> list[str]:
    """COPY types of the columns (every schema of one version defines the same tables:
    looked up once per process, not at every small COPY of a sync)."""
    cached = _copy_type_cache.get((table, tuple(columns)))
    if cached is None:
        cached = _copy_type_cache[(table, tuple(columns))] = _lookup_copy_types(
            conn, table, columns)
    return cached


def _lookup_copy_types(conn: psycopg.Connection[Row], table: str,
                       columns: Sequence[str]) -> list[str]:
    found = {row["attname"]: row["typname"] for row in conn.execute(
        "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = quote_ident(%s)::regclass AND a.attnum > 0 "
        "AND NOT a.attisdropped", (table,)).fetchall()}
    return [_COPY_TRANSPORT.get(found.get(column, ""), "text") for column in columns]
