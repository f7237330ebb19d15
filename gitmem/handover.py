"""What the daemon's own writer hands the indexer, and what that tells a read.

The writer tells the watcher about each write before it answers it: the lines it
appended to a day file (with their events, so the indexer need not decode them
again) and the task, decision or summary files it put in place. `Handover`
keeps, per file:

- the appends not yet indexed (bounded: past `max_appended_bytes` the indexer
  reads the lines from the file, as always), and those the indexer works on now;
- where the writer's last append ended and the file's stat right after it, and,
  while every byte before that end is indexed or one of those appends, that end
  (the file's bytes are *accounted for*);
- the append the writer is making now, announced under its file lock before it
  writes (the file's stat then, its size after), until it is handed over;
- the files the writer put in place (`store.Placed`: stat, digest, tenant);
- the tenants of each task or decision file's indexed rows, as its last sync here
  reported them.

From these the watcher tells whether a change is the writer's own (no barrier is
needed to see it queued: `as_written`, `placed_as_is`) and whether a queued file
can change a read (`wait`). Not thread-safe: the watcher calls it under its lock,
except `placed_as_is` and `as_written`, which read files (a dict lookup, then a
stat).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gitmem.context import ReadScope
from gitmem.rows import Announced, Appended
from gitmem.store import TENANT_FILE_KINDS, Placed, StatKey, classify, file_stat

PLACED_MAX = 10_000  # files put in place (or row tenants) remembered, at most


class Wait(enum.Enum):
    """What a queued file means to a read."""

    YES = "yes"          # it may change the answer: wait for it
    NAMED = "named"      # it cannot, but it is being indexed: name it as not awaited
    NO = "no"            # nothing of it is pending


class Handover:
    """The writer's hand-over to the indexer, per file (see the module's docstring)."""

    def __init__(self, store: Path, max_appended_bytes: int) -> None:
        self.store = store
        self.max_appended_bytes = max_appended_bytes
        self.appended: dict[str, list[Appended]] = {}
        self.appended_bytes = 0
        self.taken: dict[str, list[Appended]] = {}
        self.last_write: dict[str, tuple[int, StatKey | None]] = {}
        self.appending: dict[str, Announced] = {}  # the append being made, per file
        self.accounted: dict[str, int] = {}
        self.placed: dict[str, Placed] = {}
        self.row_tenants: dict[str, frozenset[str]] = {}

    # ------------------------------------------------------------------ the writer

    def append(self, rel: str, appended: Appended, *, keep: bool) -> None:
        """The writer appended lines to `rel`; `keep`: their events may be kept for
        the indexer (not while the index is down)."""
        self.appending.pop(rel, None)
        kept = keep and self.appended_bytes + len(appended.data) <= self.max_appended_bytes
        if kept:
            self.appended.setdefault(rel, []).append(appended)
            self.appended_bytes += len(appended.data)
        # the stat after the write is taken after its fsync: bytes someone appended by
        # hand meanwhile are in it, past the writer's lines, and nobody hands them over
        theirs = appended.stat is not None and appended.stat[0] != appended.end
        self.last_write[rel] = (appended.end, None if theirs else appended.stat)
        if kept and not theirs and self.accounted.get(rel) == appended.offset:
            self.accounted[rel] = appended.end
        else:  # bytes before these lines that nobody handed over, or these dropped
            self.accounted.pop(rel, None)

    def announce(self, rel: str, expected: Announced | None) -> None:
        """The writer is about to append to `rel` (`expected`: the file's stat before,
        its size after), or (None) that append failed."""
        if expected is None:
            self.appending.pop(rel, None)
        else:
            self.appending[rel] = expected

    def place(self, placed: Iterable[Placed]) -> None:
        """The writer put these files in place (and queued them)."""
        if len(self.placed) >= PLACED_MAX:
            self.placed.clear()  # an optimization only: their file events queue them
        self.placed.update((item.rel, item) for item in placed)

    def placed_as_is(self, rel: str) -> bool:
        """Whether `rel` is a file the writer put in place, unchanged since: the stat
        taken right after, and the same bytes (a hand edit of the same size within the
        same timestamp tick leaves the stat as it was)."""
        placed = self.placed.get(rel)
        return placed is not None and placed.still(self.store)

    def as_written(self, rel: str, last: tuple[int, StatKey | None] | None) -> bool:
        """Whether `rel`'s stat is still the one the writer took right after its last
        append to it (`last`: its `last_write` entry), or the file is as the append
        the writer is making now leaves it: that append began on the file as the
        last one left it (the same stat) and the file has the size it ends at (the
        writer is between its write and `append`, in its fsync say). Unlike a placed
        file's, an events file's own file events always queue it, so bytes changed in
        place within the append's timestamp tick (or its fsync) are still indexed by
        the next batch."""
        if last is None or last[1] is None:
            return False
        stat = file_stat(self.store / rel)
        if stat == last[1]:
            return True
        appending = self.appending.get(rel)
        return (stat is not None and appending is not None and appending[0] == last[1]
                and (stat[0], stat[2]) == (appending[1], last[1][2]))

    # ------------------------------------------------------------------ the indexer

    def take(self, batch: Iterable[str]) -> dict[str, list[Appended]]:
        """The appends of the files of a batch, now the indexer's."""
        taken = {rel: self.appended.pop(rel) for rel in batch if rel in self.appended}
        self.appended_bytes -= sum(len(a.data) for found in taken.values() for a in found)
        self.taken = taken
        return taken

    def settle(self, rel: str, offset: int | None) -> None:
        """After a batch synced `rel` up to `offset`: the file's bytes are accounted for
        again if the writer's appends since then continue from there to its last."""
        last = self.last_write.get(rel)
        end = offset
        for appended in self.appended.get(rel, ()):
            if end is None or appended.end <= end:
                continue  # indexed already, read from the file
            end = appended.end if appended.offset == end else None
        if last is not None and end == last[0]:
            self.accounted[rel] = end
        else:
            self.accounted.pop(rel, None)

    def batch_done(self) -> None:
        """The indexer finished its batch."""
        self.taken = {}

    def batch_failed(self, batch: Iterable[str]) -> None:
        """The indexer's batch failed: the lines handed over with it are gone."""
        self.taken = {}
        for rel in batch:
            self.accounted.pop(rel, None)

    def synced(self, changed: Iterable[dict[str, Any]]) -> None:
        """A sync's changed files: keep the tenants of each task or decision file's rows
        (none known for one synced without them: a rebuild)."""
        if len(self.row_tenants) >= PLACED_MAX:
            self.row_tenants.clear()  # an optimization only: such reads wait
        for item in changed:
            if classify(item["path"]) not in TENANT_FILE_KINDS:
                continue
            if "tenants" in item:
                self.row_tenants[item["path"]] = frozenset(item["tenants"])
            else:
                self.row_tenants.pop(item["path"], None)

    # ------------------------------------------------------------------ reads

    def wait(self, rel: str, scope: ReadScope) -> Wait:
        """Whether a read in `scope` waits for the queued file `rel`: not for lines the
        writer appended (every other byte of their file accounted for, its stat the
        writer's) none of whose events is in the scope, files of a kind the read does
        not load, nor (`elsewhere`) another tenant's task or decision file."""
        kind = classify(rel)
        if kind != "events":
            if kind is None or (scope.file(kind) and not self.elsewhere(rel, scope)):
                return Wait.YES
            return Wait.NAMED
        last = self.last_write.get(rel)
        if last is None or self.accounted.get(rel) != last[0] or not self.as_written(rel, last):
            return Wait.YES  # bytes nobody handed over, or changed since the writer's append
        waiting = (*self.taken.get(rel, ()), *self.appended.get(rel, ()))
        if any(scope.event(event) for appended in waiting for event in appended.events):
            return Wait.YES
        return Wait.NAMED if waiting else Wait.NO

    def elsewhere(self, rel: str, scope: ReadScope) -> bool:
        """Whether indexing `rel` changes only other tenants' rows than the reader's: a
        task or decision file the writer put in place for another tenant, still as it
        left it, whose indexed rows (none for an id the writer minted; else as its last
        sync here reported) are not the reader's either. Not for retrieval: its
        summaries may cite any record."""
        placed = self.placed.get(rel)
        rows = self.row_tenants.get(rel, frozenset() if placed and placed.fresh else None)
        return (not scope.retrieval and placed is not None and rows is not None
                and placed.tenant not in ("", scope.tenant) and scope.tenant not in rows
                and placed.still(self.store))
