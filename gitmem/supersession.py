"""Loops of `supersedes` among decisions, which `gitmem verify` names.

A decision that another lists in `supersedes` is no longer active. No write makes a
loop (a new decision supersedes older ones, and nothing supersedes it yet), but a hand
edit can: a decision that lists itself, or A listing B where B already lists A. Every
decision on such a loop is superseded and none is the active end of its chain
(`context.resolve_decisions` follows the chain until it loops), so all of them leave
every ACB, and only their `superseded` omission says so.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Link:
    """A decision as the loop check reads it: its time, what it supersedes, and where
    its `supersedes` field is."""

    path: str
    line: int | None
    ts: datetime
    supersedes: tuple[str, ...]


def supersede_loops(supersedes: Mapping[str, Collection[str]]) -> dict[str, list[str]]:
    """Per decision on a loop, the shortest loop through it, beginning with it: `[a]` for
    a decision that supersedes itself, `[a, b]` for a that supersedes b that supersedes a.

    `supersedes` maps a decision's id to the ids it supersedes; an id it does not hold
    (a dangling one, a file that did not parse) leads nowhere.
    """
    left = {d: {t for t in targets if t in supersedes} for d, targets in supersedes.items()}
    superseded_by: dict[str, list[str]] = {}
    for decision, targets in left.items():
        for target in targets:
            superseded_by.setdefault(target, []).append(decision)
    # A decision that supersedes nothing left is on no loop: peel those off, repeatedly,
    # from the ends of the chains. In a store without loops nothing is left to search.
    ends = [d for d, targets in left.items() if not targets]
    while ends:
        end = ends.pop()
        del left[end]
        for decision in superseded_by.get(end, ()):
            left[decision].discard(end)
            if not left[decision]:
                ends.append(decision)
    loops: dict[str, list[str]] = {}
    for start in left:  # on a loop, or on a chain that leads into one
        came_from: dict[str, str] = {}
        queue = deque([start])
        while queue and start not in came_from:
            node = queue.popleft()
            for target in sorted(left[node]):
                if target not in came_from:
                    came_from[target] = node
                    queue.append(target)
        if start in came_from:
            back = []
            node = came_from[start]
            while node != start:
                back.append(node)
                node = came_from[node]
            loops[start] = [start, *reversed(back)]
    return loops


def closing_entry(loop: Sequence[str], ts: Mapping[str, datetime]) -> tuple[str, str]:
    """The entry that closes a loop, as (decision, the id in its supersedes to remove):
    one where a decision supersedes another that is not older than it, which no write
    does (around a loop times cannot only fall, so there is one); the oldest such
    decision's when there are several."""
    entries = [(loop[i], loop[(i + 1) % len(loop)]) for i in range(len(loop))]
    backwards = [(d, t) for d, t in entries if ts[d] <= ts[t]]
    return min(backwards, key=lambda entry: (ts[entry[0]], entry))
