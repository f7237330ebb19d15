"""`Memory`: one store opened for work — the core API the CLI and daemon share."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gitmem import indexer
from gitmem.config import Config
from gitmem.db import Database
from gitmem.policies import Policies, file_hash, load_policies
from gitmem.recorder import Recorder
from gitmem.records import Event, Handoff
from gitmem.store import read_artifact

logger = logging.getLogger(__name__)


class Memory:
    """A store with its policies, its write path and (lazily) its index.

    Policies are re-read when their files change (checked by content hash), so
    an edit in a PR applies to the next call.
    """

    def __init__(self, config: Config, *, db: Database | None = None,
                 db_pool_size: int = 4) -> None:
        self.config = config
        self.store: Path = config.store
        self._db = db
        self._owns_db = db is None
        self._db_pool_size = db_pool_size
        self._lock = threading.RLock()
        self._policies = load_policies(self.store)
        self._recorder = Recorder(self.store, self._policies)

    # ------------------------------------------------------------------ plumbing

    @property
    def db(self) -> Database:
        """The index connection, opened (and the schema created) on first use."""
        with self._lock:
            if self._db is None:
                self._db = Database.open(self.config, max_size=self._db_pool_size)
            return self._db

    @property
    def policies(self) -> Policies:
        """The current policies (re-read if a policy file changed on disk)."""
        with self._lock:
            if self._policies_changed():
                self._policies = load_policies(self.store)
                self._recorder = Recorder(self.store, self._policies)
            return self._policies

    def _policies_changed(self) -> bool:
        for rel, digest in self._policies.hashes.items():
            try:
                if file_hash((self.store / rel).read_bytes()) != digest:
                    return True
            except FileNotFoundError:
                return True
        return False

    def reload_policies(self) -> Policies:
        """Force a re-read of manifest and policies (the watcher calls this)."""
        with self._lock:
            self._policies = load_policies(self.store)
            self._recorder = Recorder(self.store, self._policies)
            return self._policies

    @property
    def recorder(self) -> Recorder:
        """The write path with the current policies."""
        self.policies  # noqa: B018 - refreshes the recorder when policies changed
        return self._recorder

    def close(self) -> None:
        """Release the database connections this object opened."""
        if self._db is not None and self._owns_db:
            self._db.close()
            self._db = None

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writes

    def record(self, obj: Mapping[str, Any]) -> Event:
        """Append one event (see `Recorder.record`)."""
        return self.recorder.record(obj)

    def record_many(self, objs: Iterable[Mapping[str, Any]], source: str = "<input>",
                    lines: Sequence[int] | None = None) -> list[Event]:
        """Append many events; all validated before any is written."""
        return self.recorder.record_many(objs, source, lines)

    def decide(self, text: str, refs: list[str], **options: Any) -> Event:
        """Record a decision event and its decision file."""
        return self.recorder.decide(text, refs, **options)

    def task(self, title: str, **options: Any) -> Event:
        """Create or update a task."""
        return self.recorder.task(title, **options)

    def create_handoff(self, to_agent: str, task: str, **options: Any) -> Handoff:
        """Write a handoff packet."""
        return self.recorder.handoff(to_agent, task, **options)

    def get_artifact(self, artifact_id: str) -> bytes:
        """The full bytes of a stored tool output."""
        return read_artifact(self.store, artifact_id)

    # ------------------------------------------------------------------ index

    def sync(self, paths: Iterable[str] | None = None) -> indexer.SyncReport:
        """Catch the index up with the files."""
        return indexer.sync(self.db, self.store, self.policies, paths)

    def reindex(self, progress: indexer.Progress | None = None) -> indexer.SyncReport:
        """Drop and rebuild the index from the files."""
        return indexer.reindex(self.db, self.store, self.policies, progress)

    def status(self) -> dict[str, Any]:
        """What in the index is stale relative to the files, and why."""
        return indexer.status(self.db, self.store, self.policies)
