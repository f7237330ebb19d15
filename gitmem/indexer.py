"""Keep the PostgreSQL index in step with the files: reindex, sync, status.

Per source file the index records what it reflects (`source_files`): for
Markdown/YAML the content hash, for JSONL the byte offset of the complete
lines indexed plus hashes of the first and last 4 KiB of that prefix and a
CRC-32 of all of it. A file whose stat is unchanged is unchanged; otherwise its
content decides (gitmem/freshness.py):

- JSONL grown with the same prefix anchors: only the new complete lines are
  indexed (a torn last line waits for its newline);
- JSONL shrunk, with different anchors, or not grown and another prefix CRC
  (checkout, rewrite, an edit in place): reindexed from its first line that is not
  what the index made of it (gitmem/reread.py; a checkout of an older commit that cut
  lines from its end reads none);
- Markdown/YAML with a new content hash: re-parsed;
- gone from disk: its rows are deleted.

Each file's rows and its state commit in one transaction under a per-file
advisory lock, so a crash or a concurrent sync never double-indexes or skips.
"""

from __future__ import annotations

import gc
import json
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg

from gitmem import gitops, lost_lines, twins
from gitmem.copies import HomeLines, copies_elsewhere, drop_seen, outranked, repeated_otherwise
from gitmem.db import Database, Row, named_queries
from gitmem.errors import FormatError
from gitmem.freshness import Assessment, FileStat, assess, candidates, unread_rows
from gitmem.policies import Policies
from gitmem.readers import read_all
from gitmem.reread import kept_prefix
from gitmem.row_rules import reshaping, row_policies
from gitmem.rows import (
    CHUNK_COLUMNS,
    SHORT_TOKENS,
    TABLE_COLUMNS,
    Appended,
    FileRows,
    parse_file,
)
from gitmem.store import (
    TENANT_FILE_KINDS,
    classify,
    iter_store_files,
    unrecognized_files,
)

logger = logging.getLogger(__name__)

COPY_BATCH_ROWS = 20000
Progress = Callable[[int], None]


@dataclass
class SyncReport:
    """What one sync or reindex did."""

    files: int = 0
    changed: list[dict[str, str]] = field(default_factory=list)
    rows: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    head: str | None = None
    known_lines: int = 0   # lines indexed from the events their writer handed over
    rebuilt: bool = False  # a sync of an empty index, done the bulk way (`reindex`)
    # the events files it looked at: the byte offset the index now reflects
    offsets: dict[str, int] = field(default_factory=dict)
    # writes a crash interrupted, finished or undone first (`recovery.Finished.to_dict`)
    finished: list[dict[str, str]] = field(default_factory=list)
    left: list[dict[str, Any]] = field(default_factory=list)  # lines gone: lost_lines.named

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"files": self.files, "changed": self.changed, "rows": self.rows,
                "errors": self.errors, "head": self.head, "known_lines": self.known_lines,
                "rebuilt": self.rebuilt, "finished": self.finished, "left": self.left}


def _errors_json(errors: Iterable[FormatError]) -> list[dict[str, Any]]:
    """A file's errors as its state keeps them: in line order (a sync that appends and a
    reindex find them in different orders)."""
    return [e.to_dict() for e in sorted(errors, key=lambda e: e.line or 0)]


def load_states(db: Database) -> dict[str, Row]:
    """The indexed state of every source file."""
    return {row["path"]: row for row in db.fetchall("file_states")}


def load_stats(db: Database) -> dict[str, FileStat]:
    """The indexed stat of every source file (plain tuples: a reconcile reads 20,000)."""
    return {path: (kind, size, ctime_ns, inode) for path, kind, size, ctime_ns, inode
            in db.fetch_many([("file_stats", {})])[0]}


def _stats_of(states: Mapping[str, Row]) -> dict[str, FileStat]:
    return {rel: (s["kind"], s["size"], s["ctime_ns"], s["inode"]) for rel, s in states.items()}


class _Outranked(Exception):
    """A file's lines outrank the ones some ids are indexed from (gitmem/copies.py), or
    its summary the other scope's file (gitmem/twins.py): its transaction rolls back, and
    `sync` settles those ids (`_settle`)."""

    def __init__(self, event_ids: list[str], summary_ids: list[str] | None = None) -> None:
        self.event_ids, self.summary_ids = event_ids, summary_ids or []
        super().__init__(", ".join([*event_ids, *self.summary_ids]))


def _insert(db: Database, conn: psycopg.Connection[Row], path: str, rows: FileRows) -> int:
    """Insert a file's rows; how many went in (a row whose key is indexed already does
    not)."""
    written = 0
    for table, values in rows.tables.items():
        if values:
            added = db.insert_rows(conn, table, TABLE_COLUMNS[table], values)
            written += added
            if table == "summaries" and added < len(values):  # the other scope's file
                taken, twin_errors = twins.outranked_twins(db, conn, path, values)
                if taken:
                    raise _Outranked([], taken)
                rows.errors += twin_errors
            if table == "events" and added < len(values):  # some are indexed already
                taken = outranked(db, conn, path, values)
                if taken:
                    raise _Outranked(taken)
                db.execute("event_copies_note", {"path": path,
                                                 "ids": [row[0] for row in values]}, conn)
                rows.repeats += values
    if rows.repeats:
        rows.errors += repeated_otherwise(db, conn, path, rows.repeats)
    return written


def apply(db: Database, conn: psycopg.Connection[Row], a: Assessment,
          policies: Policies, appended: Sequence[Appended] = ()) -> tuple[FileRows, int]:
    """Bring one file's rows and state in step (inside the caller's transaction); the
    rows made, and how many of them it wrote.

    `appended`: lines this process wrote to the file; those among the new bytes
    are indexed from their events, without decoding them again.
    """
    if a.action == "deleted":
        _delete_rows(db, conn, a.path)
        db.execute("delete_file_state", {"path": a.path}, conn)
        return FileRows(), 0
    rows, written = FileRows(), 0
    if a.action == "unreadable":  # no regular file: no rows, its problem in its state
        _delete_rows(db, conn, a.path)
        rows = unread_rows(a)
    elif a.action in ("new", "rewrite", "truncate", "changed", "append"):
        if a.kept_lines:  # an events file's first lines are as indexed
            _delete_rows(db, conn, a.path, a.kept_lines + 1, a.kept)
        elif a.action != "append":
            _delete_rows(db, conn, a.path)
        rows = parse_file(a.path, a.kind, a.data, policies, start_line=a.start_line,
                          offset=a.state["byte_offset"] - len(a.data), appended=appended)
        written = _insert(db, conn, a.path, rows)
    state = dict(a.state)
    state["errors"] = json.dumps(list(state.get("errors", [])) + _errors_json(rows.errors))
    with conn.pipeline():  # one round trip for both
        if rows.tables["chunks"]:
            db.execute("lexemes_count_path",
                       {"path": a.path, "from_line": a.start_line, "sign": 1}, conn)
        db.execute("upsert_file_state", state, conn)
    return rows, written


def _delete_rows(db: Database, conn: psycopg.Connection[Row], path: str, from_line: int = 1,
                 kept: Sequence[str] | None = None) -> None:
    """Remove a file's rows, uncounting its chunks' lexemes first (one round trip); with
    `kept` (the ids of the events file's lines that stay), those of its lines from
    `from_line` on only."""
    where = {"path": path, "from_line": from_line}
    with conn.pipeline():
        db.execute("lexemes_count_path", {**where, "sign": -1}, conn)
        db.execute("lexemes_prune_path", where, conn)
        if kept is None:
            db.execute("delete_file_rows", {"path": path}, conn)
        else:
            db.execute("delete_file_tail", {**where, "kept": list(kept)}, conn)


def _sync_file(db: Database, store: Path, rel: str, kind: str, policies: Policies,
               appended: Sequence[Appended] = (), *, force: bool = False,
               homes: lost_lines.Homes | None = None
               ) -> tuple[Assessment, FileRows, int, int | None]:
    """Sync one file; what was found, the rows made, how many were written, and the byte
    offset the index reflects afterwards (None: not indexed). `force`: read it whole, as if
    never indexed. `homes`: notes what this file's rows gave up (lost_lines.Homes)."""
    with db.transaction() as conn:
        with conn.pipeline():  # the lock, then the state it guards: one round trip
            db.execute("lock_sync_shared", {"path": rel}, conn)
            cursor = conn.execute(named_queries()["file_state"], {"path": rel})
        state = cursor.fetchone()
        found = assess(store, rel, kind, None if force else state, policies, appended)
        if found.action == "rewrite" and state is not None:
            found = kept_prefix(db, conn, found, state, policies.privacy)
        if not force and (found.action == "unchanged" or (
                found.action == "touched" and state is not None
                and all(found.state[k] == state[k] for k in ("size", "ctime_ns", "inode")))):
            # nothing new to record (a recent file stays racy)
            return found, FileRows(), 0, state["byte_offset"] if state else None
        if found.action == "unchanged":  # forced, and gone
            return found, FileRows(), 0, None
        held = (db.fetchall("file_events", {"path": rel}, conn)
                if homes is not None and kind == "events" and state is not None
                and found.action in ("rewrite", "truncate", "deleted", "unreadable") else [])
        summaries = (twins.held(db, conn, rel) if homes is not None and kind == "summary"
                     and found.action in ("changed", "deleted", "unreadable") else set())
        rows, written = apply(db, conn, found, policies, appended)
        if held and homes is not None:
            homes.update(copies_elsewhere(db, conn, rel, held,
                                          homes.taken_from(rel, found.action)))
        if summaries and homes is not None:
            homes.update(twins.given_up(db, conn, rel, summaries))
    indexed = found.action not in ("deleted", "unreadable")
    return found, rows, written, found.state["byte_offset"] if indexed else None


def sync(db: Database, store: Path, policies: Policies,
         paths: Iterable[str] | None = None,
         appended: Mapping[str, Sequence[Appended]] | None = None) -> SyncReport:
    """Catch the index up with the files (all of them, or just `paths`).

    `appended`: lines this process wrote, by file (see `apply`). An index that another
    store's `gitmem reindex` took over meanwhile is not written to (DatabaseError):
    a daemon that opened it earlier stops answering from it at its next sync.
    """
    db.check_store(store)
    if paths is None:
        stats = load_stats(db)
        reshaped = reshaping(db, policies) if stats else None
        if reshaped:
            # rows made under other policies (chunk sizes, the default tenant)
            report = reindex(db, store, policies)
            report.changed = [{"path": rel, "action": "rewrite", "reason": reshaped[1]}
                              for rel in sorted({*stats, *(r for r, _ in iter_store_files(store))})]
            report.rebuilt = True
            return report
        todo = candidates(store, stats)
        if not stats and todo:
            # Nothing indexed yet (a new index, or one recreated for a new schema
            # version): COPY the files in as `reindex` does. File by file, the 1M-event
            # benchmark corpus took 12.5 minutes; in bulk, 2.
            report = reindex(db, store, policies)
            report.changed = [{"path": rel, "action": "new", "reason": "not indexed yet"}
                              for rel, _ in todo]
            report.rebuilt = True
            return report
    else:
        todo = sorted({(p, classify(p) or "") for p in paths})
        todo = [(p, k) for p, k in todo if k in ("events", "decision", "task", "summary",
                                                  "handoff", "view")]
    report = SyncReport(files=len(todo))
    homes = lost_lines.Homes()  # what files gave up: to read again, or gone (its doc)
    # (path, kind, why it is read again whole: None, or _GAVE_UP / _OUTRANKED)
    queue: list[tuple[str, str, str | None]] = [(rel, kind, None) for rel, kind in todo]
    while queue:
        rel, kind, again = queue.pop(0)
        force = again is not None
        try:
            found, rows, written, offset = _sync_file(
                db, store, rel, kind, policies, appended.get(rel, ()) if appended else (),
                force=force, homes=None if force else homes)
        except _Outranked as exc:  # this file first, then the others, whole
            queue[:0] = [(rel, kind, again), *_again(
                _settle(db, rel, exc.event_ids, exc.summary_ids), _OUTRANKED)]
            continue
        if not queue and homes:  # read those again, whole, once the rest is done
            queue = _again(sorted(homes), _GAVE_UP)
            homes.clear()
        if kind == "events" and offset is not None:
            report.offsets[rel] = offset
        report.errors.extend(_errors_json(rows.errors))
        report.rows += written
        report.known_lines += rows.known
        if again is not None and found.stale and found.action != "unreadable":
            found = replace(found, action="rewrite", reason=again)
        if found.stale:
            change: dict[str, Any] = {"path": rel, "action": found.action,
                                      "reason": found.reason}
            if kind == "events" and (force or found.action in ("new", "append")):
                # who the new lines belong to, so caches can forget just those
                events = rows.tables["events"]
                change["sessions"] = sorted({(row[1], row[3]) for row in events})
                change["pinned"] = any("pinned" in row[10] for row in events)
            elif kind in TENANT_FILE_KINDS:
                # whose rows the file holds now (what a read of another tenant can skip)
                change["tenants"] = sorted({row[1] for row in rows.tables["chunks"]})
            report.changed.append(change)
    report.head, report.left = gitops.head(store), lost_lines.named(db, store, homes.left)
    if paths is None:
        db.execute("meta_set", {"key": "git_head", "value": report.head or ""})
    return report


_GAVE_UP = ("holds a copy of an event another file gave up or moved (a line moved to "
            "another day's file, or within its own)")
_OUTRANKED = ("holds a line of an event id that another file's line, its original, is now "
              "indexed from (gitmem/copies.py)")


def _again(paths: Iterable[str], reason: str) -> list[tuple[str, str, str | None]]:
    """Queue entries reading `paths` again whole: day files for `reason`, summary files
    for their twin's."""
    return [(path, "events", reason) if classify(path) in ("events", None)
            else (path, "summary", twins.READ_AGAIN) for path in paths]


def _settle(db: Database, rel: str, event_ids: list[str], summary_ids: list[str]) -> list[str]:
    """Forget the files other than `rel` that hold a line of these event ids, or these
    summaries (their rows and state), for the caller to read them again whole after
    `rel`: the index then holds each event from its original line and each summary from
    the file that sorts first, and names the others, as a reindex does. Under the lock
    each file's sync shares, taken exclusively: no sync writes those files' rows
    meanwhile. A crash before they are read again leaves them unindexed, which the next
    sync of the store reads as new files."""
    with db.transaction() as conn:
        db.execute("lock_sync_exclusive", None, conn)
        holders = db.fetchall("event_holders", {"ids": event_ids}, conn) + db.fetchall(
            "summaries_elsewhere", {"ids": summary_ids, "path": rel}, conn)
        paths = sorted({r["path"] for r in holders} - {rel})
        for path in paths:
            _delete_rows(db, conn, path)
            db.execute("delete_file_state", {"path": path}, conn)
    return paths


def reindex(db: Database, store: Path, policies: Policies,
            progress: Progress | None = None, workers: int | None = None) -> SyncReport:
    """Drop the index and rebuild it from the files with COPY, in one transaction.
    `workers`: the processes that derive the rows (`readers.read_all`)."""
    files = list(iter_store_files(store))
    report = SyncReport(files=len(files))
    seen_events: set[str] = set()
    seen_summaries: dict[str, str] = {}  # id -> the file indexed (one of two scopes')
    homes = HomeLines(store, (rel for rel, kind in files if kind == "events"))
    totals: dict[str, list[int]] = {}  # tenant -> chunks, short chunks, tokens, short tokens
    with db.rebuild() as conn:
        batch = FileRows()
        states: list[tuple[Any, ...]] = []
        copies: list[tuple[str, str]] = []  # (path, event id) of every repeat skipped
        # files with repeats of an id another file holds: (state's index, path, its
        # errors, the rows left out)
        repeats: list[tuple[int, str, list[FormatError], list[tuple[Any, ...]]]] = []
        with _gc_paused(), _CopyBehind(db, conn) as loader:
            for read in read_all(store, files, policies, workers):
                rel, rows = read.rel, read.rows
                rows = twins.first_kept(rows, rel, seen_summaries)
                dropped = drop_seen(rows, seen_events, rel, homes)
                copies += sorted({(rel, row[0]) for row in dropped})
                if dropped or rows.repeats:  # named once every file is in, if they differ
                    repeats.append((len(states), rel, rows.errors, dropped + rows.repeats))
                for chunk in rows.tables["chunks"]:
                    _count_chunk(totals, chunk[1], chunk[_TOKEN_EST])
                batch.extend(rows)
                state = dict(read.state)
                state["errors"] = json.dumps(_errors_json(rows.errors))
                states.append(tuple(state[c] for c in _STATE_COLUMNS))
                report.errors.extend(_errors_json(rows.errors))
                if progress is not None:
                    progress(read.size)
                if batch.count() >= COPY_BATCH_ROWS:
                    loader.put(batch)
                    batch = FileRows()
            loader.put(batch)
        for at, rel, errors, dropped in repeats:
            found_too = repeated_otherwise(db, conn, rel, dropped)
            if found_too:
                patched = list(states[at])
                patched[_STATE_COLUMNS.index("errors")] = json.dumps(
                    _errors_json([*errors, *found_too]))
                states[at] = tuple(patched)
                report.errors.extend(_errors_json(found_too))
        report.rows += loader.rows
        db.execute("lexemes_count_all", None, conn)
        db.execute("lexemes_rebuild", None, conn)
        db.executemany("lexemes_set_totals", [(tenant, n, short, tenant, tokens_, short_tokens)
                                              for tenant, (n, short, tokens_, short_tokens)
                                              in sorted(totals.items())], conn)
        db.copy_rows(conn, "source_files", _STATE_COLUMNS, states, freeze=True)
        db.copy_rows(conn, "event_copies", ("path", "event_id"), copies, freeze=True)
        report.head = gitops.head(store)
        db.execute("meta_set", {"key": "git_head", "value": report.head or ""}, conn)
        db.execute("meta_set", {"key": "row_policies", "value": row_policies(policies)}, conn)
        db.execute("meta_set", {"key": "store", "value": str(store.resolve())}, conn)
    return report


_TOKEN_EST = CHUNK_COLUMNS.index("token_est")


def _count_chunk(totals: dict[str, list[int]], tenant: str, token_est: int) -> None:
    """Add a chunk to its tenant's totals (lexeme_df's '' and '#' rows)."""
    found = totals.setdefault(tenant, [0, 0, 0, 0])
    short = token_est <= SHORT_TOKENS
    found[0] += 1
    found[1] += short
    found[2] += token_est
    found[3] += token_est if short else 0


_STATE_COLUMNS = ("path", "kind", "content_hash", "byte_offset", "line_count", "head_hash",
                  "prefix_crc", "errors", "size", "ctime_ns", "inode")


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while rows are derived: they are millions of
    acyclic tuples, and each full collection walks every live object (10% of a
    1M-event reindex). Reference counting still frees them; cycles wait until after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _CopyBehind:
    """COPYs batches of rows in a thread while the caller parses the next files.

    Parsing is Python and COPY is mostly the server's work, so on two cores the
    two overlap. The tables are the transaction's own (`Database.rebuild`), so
    the rows go in frozen. The connection belongs to the thread between `__enter__` and
    `__exit__`; the caller uses it again only after the thread has joined. A
    COPY error stops the parsing at the next `put`; an error while parsing
    drops the batches still queued.
    """

    def __init__(self, db: Database, conn: psycopg.Connection[Row]) -> None:
        self._db = db
        self._conn = conn
        self._queue: queue.Queue[FileRows | None] = queue.Queue(maxsize=2)
        self._thread = threading.Thread(target=self._run, name="gitmem-reindex-copy",
                                        daemon=True)
        self._error: BaseException | None = None
        self._abort = False
        self.rows = 0

    def __enter__(self) -> _CopyBehind:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        self._abort = exc_type is not None
        self._queue.put(None)
        self._thread.join()
        if exc_type is None and self._error is not None:
            raise self._error

    def _run(self) -> None:
        while (batch := self._queue.get()) is not None:
            if self._error is None and not self._abort:
                try:
                    self.rows += _copy(self._db, self._conn, batch, freeze=True)
                except BaseException as exc:  # handed to the parsing thread
                    self._error = exc

    def put(self, batch: FileRows) -> None:
        """Queue a batch for COPY (waits while two are queued)."""
        if self._error is not None:
            raise self._error
        self._queue.put(batch)


def _copy(db: Database, conn: psycopg.Connection[Row], batch: FileRows, *,
          freeze: bool = False) -> int:
    total = 0
    for table, values in batch.tables.items():
        if values:
            total += db.copy_rows(conn, table, TABLE_COLUMNS[table], values, freeze=freeze)
    return total


def status(db: Database, store: Path, policies: Policies) -> dict[str, Any]:
    """Index versus files: what is stale and why, parse problems, the git HEAD."""
    states = load_states(db)
    stale: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    reshaped = reshaping(db, policies) if states else None
    if reshaped:
        stale.append({"path": reshaped[0], "action": "reindex", "reason": reshaped[1]})
    for rel, kind in candidates(store, _stats_of(states)):
        found = assess(store, rel, kind, states.get(rel), policies)
        if found.stale:
            stale.append({"path": rel, "action": found.action, "reason": found.reason})
    listed = {s["path"] for s in stale}
    for rel, state in states.items():
        if state["kind"] != "events" or rel in listed:
            continue
        size = (store / rel).stat().st_size if (store / rel).exists() else 0
        if size > state["byte_offset"]:
            pending.append({"path": rel, "bytes": size - state["byte_offset"],
                            "reason": "last line has no newline yet (torn or being written)"})
    errors = [dict(e, path=e.get("path") or rel) for rel, s in states.items()
              for e in s["errors"]]
    counts = db.fetchone("index_counts") or {}
    indexed_head = db.fetchone("meta_get", {"key": "git_head"})
    head = gitops.head(store)
    return {
        "store": str(store), "schema": db.schema, "clean": not stale,
        "stale": stale, "pending": pending, "errors": errors,
        "git": {"head": head, "indexed_head": indexed_head["value"] if indexed_head else None},
        "index": {k: int(v) for k, v in counts.items()},
        "files_indexed": len(states),
        "unrecognized": unrecognized_files(store),
    }


# index_digest's tables, each with its key (the order its rows are hashed in)
_DIGEST_KEYS = {
    "meta": ("key",), "source_files": ("path",), "events": ("event_id",),
    "event_copies": ("path", "event_id"), "chunks": ("chunk_id",),
    "decisions": ("decision_id",), "tasks": ("task_id",), "summaries": ("summary_id",),
    "handoffs": ("handoff_id",), "views": ("path",), "view_chunks": ("path", "anchor"),
    "artifacts": ("artifact_id", "event_id"), "lexeme_df": ("tenant_id", "lexeme"),
}
# source_files without its stat columns (size, ctime_ns, inode): they differ between
# checkouts of the same commit
# and meta without the store's path (another checkout's index is the same index)
_DIGEST_ROWS = {"source_files": "(t.path, t.kind, t.content_hash, t.byte_offset, "
                                "t.line_count, t.head_hash, t.prefix_crc, t.errors)",
                "meta": "(CASE WHEN t.key <> 'store' THEN t END)"}


def index_digest(db: Database) -> dict[str, str]:
    """A sha256 per index table over its rows in key order: equal dicts, equal indexes.
    Text forms are fixed (UTC, ISO dates)."""
    part = named_queries()["index_digest_table"]
    text = "\nUNION ALL\n".join(
        part.format(table=table, row=_DIGEST_ROWS.get(table, "t"),
                    order=", ".join(f'{column} COLLATE "C"' for column in key))
        for table, key in _DIGEST_KEYS.items())
    with db.transaction() as conn:
        db.execute("digest_settings", None, conn)
        return {str(row["name"]): str(row["digest"]) for row in conn.execute(text)}
