"""What the daemon's `status` lists as skipped or not applied: the parse problems of the
files it indexed, and the problem of a policy edit that does not load; and the policy
edits it applies, before every write and as their file events come.

Each problem is logged once, when first met, and listed (the newest 20) until it is
mended: a file read again without it, the policies loaded again. A policy edit's last
problem alone is listed (an editor's saves one after the other would fill the list).
Event lines gone from a day file (gitmem/lost_lines.py) are listed too, each file's
newest, as information (a removal may be meant), until a later batch finds every id it
names back: held by the index, or given by a line of the file synced again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem import lost_lines
from gitmem.errors import FormatError
from gitmem.lost_lines import LEFT
from gitmem.store import StatKey, file_stat

if TYPE_CHECKING:
    from gitmem.db import Database
    from gitmem.memory import Memory

logger = logging.getLogger("gitmem.watcher")

LISTED_MAX = 20
# How a policy edit's problem is listed: its file is not skipped (nothing is indexed
# from it), its edit is not applied.
NOT_APPLIED = "not applied (the last good policies stay): "


class Problems:
    """The problems listed; every method may be called from any thread."""

    def __init__(self) -> None:
        self.listed: list[str] = []  # oldest first (shared with the watcher's stats)
        self._lock = threading.RLock()
        self._logged: dict[str, set[str]] = {}  # a file's problems as last indexed
        self._policy: str | None = None  # the problem of the policies not applied
        self._left: dict[str, tuple[str, set[str]]] = {}  # lines gone: file -> text, ids

    def files_indexed(self, states: Iterable[tuple[str, Mapping[str, Any] | None]]) -> None:
        """Files just indexed, each with its index state (its `errors`): log each new
        problem, and forget those mended since."""
        for rel, state in states:
            found = {str(FormatError.from_dict({**e, "path": e.get("path") or rel}))
                     for e in (state["errors"] if state else [])}
            with self._lock:
                before = self._logged.get(rel, set())
                for text in sorted(found - before):
                    logger.warning("skipped: %s", text)
                    self._add(text)
                fixed = before - found  # mended since: no longer skipped
                if fixed:
                    self.listed[:] = [t for t in self.listed if t not in fixed]
                self._logged[rel] = found

    def lines_left(self, found: Iterable[Mapping[str, Any]], db: Database) -> None:
        """Event lines a rewrite or truncation took out of a day file that no file holds
        now (`lost_lines.named`): logged, and listed as information with the way back (a
        file's newest replaces its earlier). A file listed before is mended once the
        index holds every id it names again (a checkout back, a `git stash pop`): one
        query per batch while a listing stands, never a read of the file (a day file of
        a large store is megabytes, and the fast path waits on no such read)."""
        for item in found:
            logger.warning("%s", item["message"])
            with self._lock:
                self._drop_left(item["path"])
                self._left[item["path"]] = (item["message"], set(item["ids"]))
                self._add(item["message"])
        named = {item["path"] for item in found}
        with self._lock:
            for rel in [r for r, (text, _) in self._left.items() if text not in self.listed]:
                del self._left[rel]  # pushed out by newer problems: nothing to mend
            earlier = {rel: ids for rel, (_, ids) in self._left.items() if rel not in named}
        if not earlier:
            return
        present = lost_lines.still_present(db, earlier)
        for rel, ids in earlier.items():
            if ids <= present:
                with self._lock:
                    self._drop_left(rel)

    def _drop_left(self, rel: str) -> None:
        start = f"{LEFT}{rel}: "
        self.listed[:] = [t for t in self.listed if not t.startswith(start)]
        self._left.pop(rel, None)

    def policy_failed(self, exc: Exception) -> None:
        """A policy edit that could not be applied (the last good policies stay)."""
        said = str(exc) if isinstance(exc, FormatError) else f"{type(exc).__name__}: {exc}"
        logger.warning("policy change not applied (the last good policies stay): %s", said,
                       exc_info=None if isinstance(exc, FormatError) else exc)
        with self._lock:
            self._drop_policy()
            self._policy = NOT_APPLIED + said
            self._add(self._policy)

    def policies_applied(self) -> None:
        """The policy files loaded: their problem, if any, is mended."""
        with self._lock:
            self._drop_policy()

    def _drop_policy(self) -> None:
        if self._policy in self.listed:
            self.listed.remove(self._policy)
        self._policy = None

    def _add(self, text: str) -> None:
        if text in self.listed:  # met again: listed as the newest
            self.listed.remove(text)
        self.listed.append(text)
        del self.listed[:-LISTED_MAX]


class PolicyReload:
    """The store's policy files as last applied, by their stats: an edit is applied
    before the next write (`refresh`) or when its file events come (`apply`)."""

    def __init__(self, memory: Memory, store: Path, problems: Problems) -> None:
        self.memory = memory
        self.store = store
        self.problems = problems
        self._seen: dict[str, StatKey | None] = {}
        self._lock = threading.Lock()  # a write waits for another's reload

    def note(self) -> None:
        """Take the files as they are now as applied (the watcher's start)."""
        self._seen = self._stats()

    def refresh(self) -> None:
        """Before a write: apply a policy edit whose file events are still on their way.

        A redaction pattern added a moment ago must already apply to the next
        event; a stat of the few policy files costs microseconds. Every kind of write
        calls it (the group writer's events, a batch, a decision, a task, a handoff),
        from any thread: one that comes while another reloads waits for the reload.
        """
        with self._lock:
            stats = self._stats()
            if stats == self._seen:
                return
            changed = sorted(rel for rel in stats.keys() | self._seen.keys()
                             if stats.get(rel) != self._seen.get(rel))
            self._seen = stats
            self.apply(changed)

    def apply(self, changed: list[str]) -> None:
        """Load the policy files changed; a problem is listed until they load."""
        try:
            self.memory.invalidate(changed)
        except Exception as exc:  # a FormatError, or a bug: the last good ones stay
            self.problems.policy_failed(exc)
        else:
            self.problems.policies_applied()

    def _stats(self) -> dict[str, StatKey | None]:
        # None: gone, or a loop of links (loading it names which)
        return {rel: file_stat(self.store / rel) for rel in self.memory.policies.hashes}
