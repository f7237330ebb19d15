"""Packing a bundle: sections under their caps, one copy per content hash, and the
record of what was left out and why (the `omissions` of an ACB)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from gitmem import tokens

SECTION_TITLES = {
    "identity": "Identity", "rules": "Rules", "task_state": "Task state",
    "relevant_decisions": "Relevant decisions", "retrieved_evidence": "Retrieved evidence",
    "recent_window": "Recent conversation", "tool_state": "Tool state",
    "handoff": "Handoff packet",
}
ITEM_SEPARATOR_TOKENS = 2  # "\n\n" between items, plus a token of slack for BPE joins
OMISSION_IDS_MAX = 200


def header(name: str) -> str:
    """The rendered heading of a section."""
    return f"## {SECTION_TITLES[name]}\n"


@functools.cache
def header_tokens(name: str) -> int:
    """Tokens a section's heading and its separator cost (counted once per process)."""
    return tokens.count(header(name)) + 1


@dataclass
class Section:
    """A section being packed."""

    name: str
    cap: int
    items: list[dict[str, Any]] = field(default_factory=list)
    used: int = 0


class Packer:
    """Places items into sections under every cap; records what it leaves out."""

    def __init__(self, available: int) -> None:
        self.available = available
        self.used = 0
        self.sections: dict[str, Section] = {}
        self.seen: dict[str, str] = {}
        self.omitted: dict[str, dict[str, None]] = {}  # reason -> ids, as an ordered set
        self.truncated: dict[str, list[str]] = {}
        # what was packed, by content hash: the acb_id is a digest of it
        self.ledger: list[tuple[str, str, str, float | None]] = []

    def open(self, name: str, cap: int) -> Section:
        """Start a section with its (scaled) cap."""
        section = Section(name, cap)
        self.sections[name] = section
        return section

    def omit(self, reason: str, item_id: str) -> None:
        """Record an id left out, by reason."""
        self.omitted.setdefault(reason, {})[item_id] = None

    def full(self, section: Section) -> bool:
        """True when not even the smallest item would fit any more."""
        room = min(section.cap - section.used, self.available - self.used)
        return room <= ITEM_SEPARATOR_TOKENS + (0 if section.items
                                                else header_tokens(section.name))

    def add(self, section: Section, item: dict[str, Any], digest: str) -> bool:
        """Add `item` if its hash is new and it fits; else record why not."""
        if digest in self.seen:
            if self.seen[digest] != item["id"]:
                self.omit("duplicate", item["id"])
            return False
        cost = item["token_est"] + ITEM_SEPARATOR_TOKENS
        if not section.items:
            cost += header_tokens(section.name)
        if section.used + cost > section.cap or self.used + cost > self.available:
            self.omit("budget", item["id"])
            return False
        section.items.append(item)
        section.used += cost
        self.used += cost
        self.seen[digest] = item["id"]
        self.ledger.append((section.name, item["id"], digest, item.get("score")))
        if item.get("artifact_id"):
            self.truncated.setdefault(item["artifact_id"], []).append(item["source_id"])
        return True

    def omissions(self) -> list[dict[str, Any]]:
        """The omissions list: one entry per reason (and per truncated artifact)."""
        out: list[dict[str, Any]] = []
        for reason in sorted(self.omitted):
            ids = sorted(set(self.omitted[reason]))
            entry: dict[str, Any] = {"reason": reason, "candidates": ids[:OMISSION_IDS_MAX]}
            if len(ids) > OMISSION_IDS_MAX:
                entry["count"] = len(ids)
            out.append(entry)
        for artifact in sorted(self.truncated):
            out.append({"reason": "truncated_tool_output",
                        "candidates": sorted(set(self.truncated[artifact])),
                        "artifact_id": artifact})
        return out
