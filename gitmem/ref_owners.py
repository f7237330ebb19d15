"""The tenants of what a store's files cite, read from the files themselves (no index),
for `gitmem verify` and the pre-commit hook (gitmem/checks.py): a record or event
cites only its own tenant's records and events (an artifact is anyone's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gitmem import ids
from gitmem.documents import parse_decision, parse_handoff, parse_summary, parse_task
from gitmem.errors import FormatError
from gitmem.records import iter_events
from gitmem.store import classify, day_files_near, record_paths
from gitmem.trees import Tree

_PARSERS: dict[str, Callable[[str, str, str], Any]] = {
    "decision": parse_decision, "task": parse_task, "summary": parse_summary,
    "handoff": parse_handoff}
_NAMES = {"evt": "an event", "dec": "a decision", "tsk": "a task", "sum": "a summary",
          "hof": "a handoff"}


def cited(target: str) -> str:
    """What an id names, as a message says it (`a decision`)."""
    return _NAMES.get(target.split("_", 1)[0], "a record")


class Owners:
    """The tenant of each id cited, looked up once: an event's from the lines the checks
    read (`events`), else from the day files around the time its id carries (a check
    of new lines only reads no committed one); a record's from its file."""

    def __init__(self, tree: Tree, default_tenant: str) -> None:
        self.tree = tree
        self.default = default_tenant
        self.events: dict[str, str] = {}  # event id -> tenant, of the lines read
        self._known: dict[str, str | None] = {}
        self._days: dict[str, _Day | None] = {}

    def tenant(self, target: str) -> str | None:
        """The tenant of the event or record `target` (None: no telling: an artifact, a
        file that does not parse, which is its own problem, or none found)."""
        if target in self.events:
            return self.events[target]
        if target not in self._known:
            self._known[target] = (self._event(target) if target.startswith("evt_")
                                   else self._record(target))
        return self._known[target]

    def _record(self, target: str) -> str | None:
        for rel in sorted(record_paths(target)):  # a summary's episode file first, as indexed
            parse = _PARSERS.get(classify(rel) or "")
            data = self.tree.read(rel) if parse is not None else None
            if parse is None or data is None:
                continue
            try:
                return str(parse(data.decode("utf-8"), rel, self.default).tenant_id)
            except (UnicodeDecodeError, FormatError):
                return None
        return None

    def _event(self, target: str) -> str | None:
        for rel in day_files_near(target):
            if rel not in self._days:
                self._days[rel] = _Day.read(self.tree.read(rel))
            day = self._days[rel]
            found = day.tenant(target, rel) if day is not None else None
            if found is not None:
                return found
        return None


class _Day:
    """A day file's bytes and, by event id, the starts of the lines that hold it (its
    own line or ones citing it), found in one pass: a lookup parses only those lines, in
    file order, as `find_event` would (which searches the file from its start each
    time: a commit citing 10k events of one large day file spent a minute on it)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.lines: dict[str, list[int]] = {}
        for match in ids.ANY_EVENT_ID.finditer(data):
            begin = data.rfind(b"\n", 0, match.start()) + 1
            starts = self.lines.setdefault(match.group().decode("ascii"), [])
            if not starts or starts[-1] != begin:
                starts.append(begin)

    @classmethod
    def read(cls, data: bytes | None) -> _Day | None:
        return None if data is None else cls(data)

    def tenant(self, event_id: str, rel: str) -> str | None:
        """The tenant of the first line whose event is `event_id` (None: none is)."""
        for begin in self.lines.get(event_id, ()):
            end = self.data.find(b"\n", begin) + 1 or len(self.data)
            for _, event in iter_events(self.data[begin:end], rel):
                if not isinstance(event, FormatError) and event.id == event_id:
                    return event.tenant_id
        return None
