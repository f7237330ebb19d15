"""An event id a write names that the store holds already: the same event again (a
retried write, answered as it was recorded, never written twice), or another event's
id (refused, naming how it differs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import replace
from datetime import datetime
from typing import Any

from gitmem.errors import ValidationError
from gitmem.records import Event, format_ts

# An event the index holds: its tenant, time and content hash.
Recorded = tuple[str, datetime, str]


class Repeated(Exception):
    """An event of a write repeats another's id (`position`: its index in the write)."""

    def __init__(self, position: int, error: ValidationError) -> None:
        super().__init__(str(error))
        self.position = position
        self.error = error


def retried(obj: Mapping[str, Any], event: Event, recorded: Recorded | None,
             digest: str) -> bool:
    """Whether `event` is one recorded already (`recorded`): the same id, tenant and
    content, and the same time where the write gives one (a retry without `ts` is
    stamped with the time of the retry)."""
    if recorded is None:
        return False
    tenant, ts, held = recorded
    return (tenant, held) == (event.tenant_id, digest) and (
        not obj.get("ts") or ts == event.when)


def answered(events: Sequence[Event], objs: Sequence[Mapping[str, Any]],
             written: Set[str], known: Mapping[str, Recorded]) -> list[Event]:
    """The events a write answers with: a retried one (its id not among those
    `written`) that gave no `ts` at the instant it was recorded (in UTC: the index
    keeps instants), not stamped with the time of the retry; one that gave its `ts`,
    as given."""
    return [event if event.id in written or obj.get("ts")
            else replace(event, ts=format_ts(known[event.id][1]))
            for event, obj in zip(events, objs, strict=True)]
