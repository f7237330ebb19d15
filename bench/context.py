"""What every measurement gets: the corpus, the database, a scratch directory.

The corpus's index is built once per run, by the reindex measurement (timed)
or on first use by any later measurement (untimed), and shared from here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.corpus import Corpus
from bench.pg import Schemas
from gitmem import indexer
from gitmem.config import Config
from gitmem.db import Database
from gitmem.policies import Policies, load_policies


class Skip(Exception):
    """A measurement cannot run here (a missing module, no daemon, ...); the message says why."""


@dataclass
class Context:
    """One benchmark run: size, corpus, database, scratch space, shared state."""

    size: str
    seed: int
    dsn: str
    corpus: Corpus
    scratch: Path
    schemas: Schemas
    repeat: int = 1
    index_schema: str | None = None   # an existing index of the corpus to use (kept)
    shared: dict[str, Any] = field(default_factory=dict)
    cleanups: list[Callable[[], None]] = field(default_factory=list)  # run by close(), last first
    indexed: bool = False
    _index: Database | None = None

    @property
    def policies(self) -> Policies:
        """The corpus store's policies."""
        return load_policies(self.corpus.store)

    def index_config(self) -> Config:
        """The configuration of the corpus's index in this run's schema."""
        schema = self.index_schema or self.schemas.name("idx")
        return Config(store=self.corpus.store, dsn=self.dsn, schema=schema)

    def index_database(self) -> Database:
        """The connection pool onto the corpus's index schema (maybe still empty)."""
        if self._index is None:
            self._index = Database(self.dsn, self.index_config().schema, max_size=4)
        return self._index

    def ensure_index(self) -> Database:
        """The corpus's index, reindexed first (untimed) when no measurement built it yet."""
        db = self.index_database()
        if not self.indexed and self.index_schema and db.schema_exists():
            indexer.sync(db, self.corpus.store, self.policies)  # catch up, if it must
            self.indexed = True
        if not self.indexed:
            indexer.reindex(db, self.corpus.store, self.policies)
            self.indexed = True
        return db

    def close(self) -> None:
        """Run the cleanups (daemons stop), close the shared connections (schemas are
        dropped by the caller)."""
        while self.cleanups:
            cleanup = self.cleanups.pop()
            try:
                cleanup()
            except Exception as exc:  # the others must still run
                print(f"cleanup {cleanup!r} failed: {exc}", file=sys.stderr)
        if self._index is not None:
            self._index.close()
            self._index = None
