"""Packing a bundle: sections under their caps, one copy per content hash, and the
record of what was left out and why (the `omissions` of an ACB). What an item costs
is what its part of the prompt text costs (gitmem/prompt.py): its tokens, the date and
notes the text adds to it, its separator, its section's heading."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from gitmem import prompt
from gitmem.items import cut_to_fit
from gitmem.prompt import header_tokens

ITEM_SEPARATOR_TOKENS = 2  # "\n\n" between items, plus a token of slack for BPE joins
OMISSION_IDS_MAX = 200
# Every reason an omission gives (docs/FORMATS.md, "The ACB's omissions").
OMISSION_REASONS = ("budget", "privacy", "duplicate", "superseded", "conflict",
                    "truncated_tool_output", "truncated_pinned", "unknown")
# Reasons an id may be left out for by one section and packed by another later: the
# omissions list only those still left out ("conflict" names packed summaries).
LEFT_OUT = frozenset({"budget", "duplicate"})


@dataclass(frozen=True)
class _Many:
    """Ids left out together: the sorted `ids` but those in `but`."""

    ids: Sequence[str]
    members: AbstractSet[str]
    but: frozenset[str]
    section: str = ""  # the section that left them out (a later pass lists them again)

    def __contains__(self, item: str) -> bool:
        return item in self.members and item not in self.but

    def __len__(self) -> int:
        return len(self.ids) - sum(1 for i in self.but if i in self.members)

    def __iter__(self) -> Iterator[str]:
        return (i for i in self.ids if i not in self.but)


@dataclass
class Section:
    """A section being packed: `cap` is its cap scaled to the request's budget,
    `pinned_cap` the policy's own, which pinned items may fill. `short`: it left items
    out for budget (a later pass may have room for them); `gave_up`: an item it packed
    went to a later section (the room it left may hold what it left out); `ranks`: the
    order its filler offered items in, the order they are shown in."""

    name: str
    cap: int
    pinned_cap: int = 0
    items: list[dict[str, Any]] = field(default_factory=list)
    used: int = 0
    short: bool = False
    ranks: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, int] = field(default_factory=dict)  # cut tool output -> its chunks
    gave_up: bool = False  # an item packed here was taken out (moved, or a duplicate's)


def within_caps(section: Mapping[str, Any], cap: int) -> bool:
    """Whether a packed section (its JSON form) keeps to its policy's `cap`, and costs at
    least its items' tokens. (The caps scaled to a request's budget bound the first pass
    only: the second gives what they leave unused to what they left out, up to `cap`.)"""
    items: int = sum(i["token_est"] for i in section["items"])
    whole: int = section["token_est"]
    return items <= whole <= cap


class Packer:
    """Places items into sections under every cap; records what it leaves out.

    An item is packed once, by id. A content hash is packed once too, but for the turns
    of the conversation (`add(turn=True)`): two turns that say the same ("no" to two
    questions) are two answers, each meaning what its place makes it mean.
    """

    def __init__(self, available: int) -> None:
        self.available = available
        self.used = 0
        self.sections: dict[str, Section] = {}
        self.seen: dict[str, str] = {}  # content hash -> the id packed with it
        self.packed: dict[str, tuple[str, str]] = {}  # id -> its section, its content hash
        self.omitted: dict[str, dict[str, None]] = {}  # reason -> ids, as an ordered set
        self.omitted_all: dict[str, list[_Many]] = {}  # reason -> ids left out together
        self.truncated: dict[str, list[str]] = {}
        self.cut: dict[str, dict[str, Any]] = {}  # pinned items cut to fit, by id

    def open(self, name: str, cap: int, pinned_cap: int = 0) -> Section:
        """Start a section with its scaled cap and the cap its pinned items may fill."""
        section = Section(name, cap, max(cap, pinned_cap))
        self.sections[name] = section
        return section

    def omit(self, reason: str, item_id: str) -> None:
        """Record an id left out, by reason."""
        self.omitted.setdefault(reason, {})[item_id] = None

    def omit_all(self, reason: str, ids: Sequence[str], members: AbstractSet[str],
                 but: AbstractSet[str], section: Section) -> None:
        """Record the ids `section` left out, by reason: `ids` (sorted; `members` holds
        them too) except those in `but`. Nothing is walked until the omissions are
        listed, and then only as far as they show."""
        if reason == "budget":
            section.short = True
        self.omitted_all.setdefault(reason, []).append(
            _Many(ids, members, frozenset(but), section.name))

    def room(self, section: Section) -> int:
        """What `section` may still take: the rest of its cap, within the bundle's."""
        return min(section.cap - section.used, self.available - self.used)

    def full(self, section: Section) -> bool:
        """True when not even the smallest item would fit any more."""
        return self.room(section) <= ITEM_SEPARATOR_TOKENS + (
            0 if section.items else header_tokens(section.name))

    def fits(self, section: Section, items: Sequence[Mapping[str, Any]]) -> bool:
        """Whether `items` fit `section` all together (those it holds already cost
        nothing): their text, separators and overhead, the section's heading if it has
        no item yet, the note of each cut output among them (as `_cost` counts one)."""
        new = [i for i in items if not self.holds(section, i["id"])]
        cost: int = sum(i["token_est"] + ITEM_SEPARATOR_TOKENS + prompt.overhead(i)
                        for i in new)
        cost += sum(prompt.artifact_note_tokens(a) for a in {i.get("artifact_id") for i in new}
                    if a)
        if new and not section.items:
            cost += header_tokens(section.name)
        return cost <= self.room(section)

    def spent(self) -> bool:
        """True when not even the smallest item would fit in any section any more."""
        return self.available - self.used <= ITEM_SEPARATOR_TOKENS

    def reopen(self, section: Section, cap: int) -> None:
        """Let a section fill on up to `cap` (its policy's own) in a later pass, which
        makes the omissions of what it still leaves out again."""
        section.cap = max(section.cap, cap)
        section.pinned_cap = max(section.pinned_cap, cap)
        section.short = False
        for reason, many in self.omitted_all.items():
            self.omitted_all[reason] = [m for m in many if m.section != section.name]

    def arrange(self, section: Section) -> None:
        """Put a section's items back in the order its filler offered them (a later pass
        appends what it found room for)."""
        ranks = section.ranks
        section.items.sort(key=lambda item: ranks[item["id"]])

    def holds(self, section: Section, item_id: str) -> bool:
        """Whether `item_id` is packed in `section`."""
        where = self.packed.get(item_id)
        return where is not None and where[0] == section.name

    def add(self, section: Section, item: dict[str, Any], digest: str, *,
            turn: bool = False) -> bool:
        """Add `item` if it is new and fits; else record why not. A pinned item
        (`item["pinned"]`) fits under the section's pinned cap: a small budget scales
        the caps down, and pinned memory is always included while the whole budget has
        room for it; one larger than the room left is included cut to fit (listed as
        `truncated_pinned`), unless too little of it would show.

        Items are new by content hash, turns (`turn`) by id: a turn packed already in
        another section moves here when it fits (it appears once, in its place), and an
        item of another section that says what a new turn says gives way as a duplicate.
        """
        section.ranks.setdefault(item["id"], len(section.ranks))
        if turn:
            return self._add_turn(section, item, digest)
        if digest in self.seen:
            if self.seen[digest] != item["id"]:
                self.omit("duplicate", item["id"])
            return False
        return self._place(section, item, digest)

    def _add_turn(self, section: Section, item: dict[str, Any], digest: str) -> bool:
        where = self.packed.get(item["id"])
        if where is not None:
            return where[0] != section.name and self._move(item, where[0], section)
        holder = self.seen.get(digest)
        if not self._place(section, item, digest):
            return False
        if holder is not None and self.packed[holder][0] != section.name:
            self._take(holder)
            self.omit("duplicate", holder)
            self.seen[digest] = item["id"]
        return True

    def _cost(self, section: Section, item: Mapping[str, Any], *, leaving: bool = False
              ) -> int:
        """What `item` costs in `section` (`leaving`: what taking it out gives back): its
        part of the text, the section's heading if it is the only item, and the note of
        a cut tool output if it is the only chunk of that output there."""
        cost: int = item["token_est"] + ITEM_SEPARATOR_TOKENS + prompt.overhead(item)
        if len(section.items) == (1 if leaving else 0):
            cost += header_tokens(section.name)
        artifact = item.get("artifact_id")
        if artifact and section.outputs.get(item["source_id"], 0) == (1 if leaving else 0):
            cost += prompt.artifact_note_tokens(artifact)
        return cost

    def _place(self, section: Section, item: dict[str, Any], digest: str) -> bool:
        cost = self._cost(section, item)
        cap = section.pinned_cap if item.get("pinned") else section.cap
        room = min(cap - section.used, self.available - self.used)
        if cost > room and item.get("pinned"):  # never dropped while a part of it fits
            cut = cut_to_fit(item, room - (cost - item["token_est"]))
            if cut is not None:
                self.cut[item["id"]] = cut
                item, cost = cut, self._cost(section, cut)
        if cost > room:
            self.omit("budget", item["id"])
            section.short = True
            return False
        section.items.append(item)
        section.used += cost
        self.used += cost
        self.seen.setdefault(digest, item["id"])
        self.packed[item["id"]] = (section.name, digest)
        if item.get("artifact_id"):
            self.truncated.setdefault(item["artifact_id"], []).append(item["source_id"])
            section.outputs[item["source_id"]] = section.outputs.get(item["source_id"], 0) + 1
        return True

    def _move(self, item: dict[str, Any], source_name: str, target: Section) -> bool:
        """Move a packed item to `target` as `item` (keeping its score and whether it is
        pinned), if it fits there."""
        source = self.sections[source_name]
        old = next(i for i in source.items if i["id"] == item["id"])
        freed = self._cost(source, old, leaving=True)
        cost = self._cost(target, item)
        if target.used + cost > target.cap or self.used - freed + cost > self.available:
            return False
        digest = self._take(item["id"])
        for key in ("score", "pinned"):  # what retrieval said of it
            if key in old:
                item[key] = old[key]
        return self._place(target, item, digest)

    def release(self, item_id: str) -> None:
        """Take a packed item out, to be packed anew (a turn shown cut by a first pass)."""
        self._take(item_id)

    def _take(self, item_id: str) -> str:
        """Take a packed item out of its section, giving back what it cost; its hash."""
        name, digest = self.packed.pop(item_id)
        section = self.sections[name]
        index = next(n for n, i in enumerate(section.items) if i["id"] == item_id)
        cost = self._cost(section, section.items[index], leaving=True)
        item = section.items.pop(index)
        self.cut.pop(item_id, None)
        section.gave_up = True
        section.used -= cost
        self.used -= cost
        if item.get("artifact_id"):
            section.outputs[item["source_id"]] -= 1
            sources = self.truncated[item["artifact_id"]]
            sources.remove(item["source_id"])
            if not sources:
                del self.truncated[item["artifact_id"]]
        return digest

    def settle(self) -> None:
        """Give back what the dates the text shortens save (prompt.shortened): each was
        counted in full as packed, since a section's order is known only once filled."""
        for section in self.sections.values():
            saved = prompt.shortened(section.items)
            section.used -= saved
            self.used -= saved

    def ledger(self) -> list[tuple[str, str, str, float | None]]:
        """What was packed, section by section, by content hash: the acb_id is a digest
        of it."""
        return [(name, i["id"], self.packed[i["id"]][1], i.get("score"))
                for name, section in self.sections.items() for i in section.items]

    def copy(self) -> Packer:
        """A packer in this one's state that packs on by itself: its sections and
        omissions are its own; the items packed so far are shared, not copied."""
        other = Packer(self.available)
        other.used = self.used
        other.sections = {name: replace(s, items=list(s.items), ranks=dict(s.ranks),
                                        outputs=dict(s.outputs))
                          for name, s in self.sections.items()}
        other.seen = dict(self.seen)
        other.packed = dict(self.packed)
        other.omitted = {reason: dict(ids) for reason, ids in self.omitted.items()}
        other.omitted_all = {reason: list(many) for reason, many in self.omitted_all.items()}
        other.truncated = {artifact: list(ids) for artifact, ids in self.truncated.items()}
        other.cut = dict(self.cut)
        return other

    def omissions(self) -> list[dict[str, Any]]:
        """The omissions list: one entry per reason (and per truncated artifact). An id
        left out once but packed since (a turn that moved, a duplicate whose copy gave
        way to it) is not listed."""
        out: list[dict[str, Any]] = []
        for reason in sorted(self.omitted.keys() | self.omitted_all.keys()):
            packed = self.packed if reason in LEFT_OUT else {}
            many = self.omitted_all.get(reason, [])
            one = sorted(i for i in self.omitted.get(reason, {})
                         if i not in packed and not any(i in m for m in many))
            count = len(one) + sum(len(m) for m in many) - sum(
                1 for i in packed if any(i in m for m in many))
            if not count:
                continue
            ids = list(itertools.islice(
                (i for i in heapq.merge(one, *many) if i not in packed), OMISSION_IDS_MAX))
            entry: dict[str, Any] = {"reason": reason, "candidates": ids}
            if count > OMISSION_IDS_MAX:
                entry["count"] = count
            out.append(entry)
        for artifact in sorted(self.truncated):
            out.append({"reason": "truncated_tool_output",
                        "candidates": sorted(set(self.truncated[artifact])),
                        "artifact_id": artifact})
        for item_id in sorted(self.cut):
            cut = self.cut[item_id]
            out.append({"reason": "truncated_pinned", "candidates": [item_id],
                        "source": cut["source"], "token_est": cut["full_token_est"],
                        "shown_token_est": cut["token_est"]})
        return out


@dataclass
class Packed:
    """The request-independent-of-the-clock part of an ACB, as packed."""

    sections: list[dict[str, Any]]
    omissions: list[dict[str, Any]]
    used: int
    digest: str  # of the items, conflicts and omissions: acb_id's content, hashed once
    summaries: bool = False  # holds a summary (its conflicts cite records of any kind)
    # the sections as JSON in pieces (`fragments`), and the omissions as JSON
    encoded: tuple[list[bytes], bytes] | None = None

    def fragments(self, share: Callable[[bytes], bytes] | None = None
                  ) -> tuple[orjson.Fragment, orjson.Fragment]:
        """The sections and omissions as JSON ready to be embedded in an answer, encoded
        once per cached bundle: a northwind fast-path answer (220 KB) cost 0.21 ms to
        encode and 0.1 ms to copy on every call. From then on the items are kept as
        JSON only, one piece per section, each passed through `share` (the cache's one
        copy of equal pieces: a tenant's tasks and decisions are in the bundles of most
        of its sessions, and 512 bundles of their own held 113 MB); `copy` decodes them.
        Threads may share a bundle: the lists are read before `encoded` here, and
        `encoded` is set before they are dropped."""
        sections, omissions = self.sections, self.omissions
        encoded = self.encoded
        if encoded is None:
            encoded = (_pieces(sections, share), _kept(orjson.dumps(omissions, default=str)))
            self.encoded = encoded
            self.sections, self.omissions = [], []
        return orjson.Fragment(b"".join(encoded[0])), orjson.Fragment(encoded[1])

    def pieces(self) -> list[bytes]:
        """The pieces of the encoded sections (none before `fragments`)."""
        encoded = self.encoded
        return [] if encoded is None else encoded[0]

    def copy(self) -> Packed:
        """A copy whose sections and items a caller may change freely."""
        sections, omissions = self.sections, self.omissions
        encoded = self.encoded
        if encoded is not None:
            return Packed(orjson.loads(b"".join(encoded[0])), orjson.loads(encoded[1]),
                          self.used, self.digest, self.summaries)
        return Packed([{**s, "items": [dict(i) for i in s["items"]]} for s in sections],
                      [dict(o) for o in omissions], self.used, self.digest, self.summaries)


def _pieces(sections: list[dict[str, Any]], share: Callable[[bytes], bytes] | None
            ) -> list[bytes]:
    """`orjson.dumps(sections)` as pieces that join to exactly those bytes: each
    section a piece of its own, through `share`."""
    out = [b"["]
    for number, section in enumerate(sections):
        piece = _kept(orjson.dumps(section, default=str))
        out += (b"," if number else b"", piece if share is None else share(piece))
    out.append(b"]")
    return out


def _kept(encoded: bytes) -> bytes:
    """A copy of orjson's output to keep: orjson's bytes hold the buffer it grew (4 KB
    at least, up to twice the length), and the cached sections held 64 MB for 14 MB
    of JSON."""
    return bytes(memoryview(encoded))
