"""The prompt text of an ACB (`gitmem acb --format text`), and what its parts cost.

An LLM reads the text alone, so the text says what the JSON says beside the items:
when each happened (`[2026-11-27 10:01 UTC]`, then `[10:03]` while the day stays
the same), that a summary is stale or conflicts with what it cites, and where a tool's
output was cut and which artifact holds it all. Those parts cost tokens, counted
into their section as the items are packed (`overhead`, `ARTIFACT_NOTE_TOKENS`), so
that the text never takes more tokens than the bundle says it uses. The counts are
made ahead, as upper bounds that a test holds to tiktoken's counts: packing a bundle
never loads the encoder, but to count the note of a summary in conflict (rare) and to
cut an item to fit (a pinned one, the newest turn's first chunk). A
date is counted in full for every item; a section's dates shortened when rendered
are given back once the bundle is packed (`shortened`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

SECTION_TITLES = {
    "identity": "Identity", "rules": "Rules", "task_state": "Task state",
    "relevant_decisions": "Relevant decisions", "retrieved_evidence": "Retrieved evidence",
    "recent_window": "Recent conversation", "tool_state": "Tool state",
    "handoff": "Handoff packet",
}
# The cl100k_base tokens of each heading (`header`), counted ahead: nothing else in
# packing a bundle needs the encoder (items carry the counts made at index time), and
# loading it cost a daemon's first build 220-360 ms on the slowest machine seen. A test
# holds them to tiktoken's count.
HEADER_TOKENS = {"identity": 3, "rules": 3, "task_state": 4, "relevant_decisions": 4,
                 "retrieved_evidence": 4, "recent_window": 4, "tool_state": 4, "handoff": 5}
# What a date in front of an item's text adds to it, at most (joins included): in full,
# "[2026-11-27 10:01 UTC] ", and the time alone, "[10:01] ", after an item of the same
# day (items' times are UTC).
STAMP_TOKENS = 14
TIME_TOKENS = 6
# The note after a tool's output that was cut, once per result in a section; its
# artifact's id costs at most a token a character (ASCII) on top. Where the section
# shows the output's chunks with a hole between (its head and its tail's end, the middle
# left out for budget), the note stands at the hole instead (`GAP_NOTE`): after the
# tail, it would read as if the output were cut after its end (after the error).
ARTIFACT_NOTE = "[output cut here; the whole output is artifact {}]"
GAP_NOTE = "[… output not shown from here to its next part; the whole output is artifact {}]"
ARTIFACT_NOTE_TOKENS = 13
# The note ending the head of the newest turn of the recent window where the rest of it
# did not fit (the turn's chunks shown, marked `truncated`): it is part of the last one's
# text and `token_est`, its numbers counted at most a token a digit, a token of slack for
# the join.
TURN_NOTE = "\n[turn cut: {} of {} tokens shown]"
TURN_NOTE_TOKENS = 12


def header(name: str) -> str:
    """The rendered heading of a section."""
    return f"## {SECTION_TITLES[name]}\n"


def header_tokens(name: str) -> int:
    """Tokens a section's heading and its separator cost."""
    return HEADER_TOKENS[name] + 1


def overhead(item: Mapping[str, Any]) -> int:
    """Tokens the text adds to an item's own: its date, the note of its conflicts."""
    cost = STAMP_TOKENS if "ts" in item else 0
    if item.get("conflicts"):
        cost += _counted(conflict_note(item["conflicts"])) + 1  # its line break
    return cost


def artifact_note_tokens(artifact_id: str) -> int:
    """Tokens the note of a cut tool output costs, at most (once per result and section)."""
    return ARTIFACT_NOTE_TOKENS + len(artifact_id)


def turn_note_tokens(shown: int, full: int) -> int:
    """Tokens the note of a cut turn costs, at most."""
    return TURN_NOTE_TOKENS + len(str(shown)) + len(str(full))


@functools.lru_cache(maxsize=1024)
def _counted(text: str) -> int:
    from gitmem import tokens  # tiktoken: not for `gitmem acb --format text`'s rendering

    return tokens.count(text)


def stamps(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """The date in front of each item of a section: in full, or the time alone after an
    item of the same day ("" for an item without a time: a view, an open task)."""
    out: list[str] = []
    day = None
    for item in items:
        ts = item.get("ts")
        if not ts:
            out.append("")
            continue
        date, time = ts[:10], ts[11:16]
        out.append(f"[{time}] " if date == day else f"[{date} {time} UTC] ")
        day = date
    return out


def shortened(items: Sequence[Mapping[str, Any]]) -> int:
    """Tokens the dates `stamps` shortens to a time save on what `overhead` counted."""
    saved = 0
    day = None
    for item in items:
        ts = item.get("ts")
        if ts:
            saved += STAMP_TOKENS - TIME_TOKENS if ts[:10] == day else 0
            day = ts[:10]
    return saved


def conflict_note(conflicts: Sequence[Mapping[str, Any]]) -> str:
    """What a summary's conflicts say to its reader, in a line."""
    return " ".join(f"({_conflict(c)})" for c in conflicts)


def _conflict(conflict: Mapping[str, Any]) -> str:
    kind = conflict["kind"]
    if kind == "superseded_decision":
        by = conflict.get("superseded_by")
        now = f", now {by}" if by else ""
        if conflict.get("stale"):
            return f"stale: cites superseded decision {conflict['decision']}{now}"
        return (f"conflict: cites decision {conflict['decision']}, superseded before "
                f"this was written{now}")
    if kind == "unknown_decision":
        return f"conflict: cites decision {conflict['decision']}, which does not exist"
    if kind == "missing_ref":
        return f"conflict: cites {conflict['ref']}, which exists nowhere"
    return f"conflict: cites {conflict['ref']}, of another session"


def render_text(acb: Mapping[str, Any]) -> str:
    """The prompt text of an ACB: one heading per non-empty section, items between."""
    parts = []
    for section in acb["sections"]:
        if section["items"]:
            parts.append(header(section["name"]) + "\n\n".join(_items(section["items"])))
    return "\n\n".join(parts) + ("\n" if parts else "")


def _items(items: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    """Each item as its text shows it: its date, its text, its notes."""
    notes = _artifact_notes(items)
    for number, (stamp, item) in enumerate(zip(stamps(items), items, strict=True)):
        text = stamp + item["text"]
        if number in notes:
            text += "\n" + notes[number]
        if item.get("conflicts"):
            text += "\n" + conflict_note(item["conflicts"])
        yield text


def _artifact_notes(items: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """Where the note of each cut tool output goes, by item index: after its shown chunk
    whose next part is not shown (the first such hole, by part: retrieved evidence lists
    chunks by score, not in order), else after its last item. Once per output, as
    packing counts it."""
    shown: dict[str, dict[int, int]] = {}  # source -> its parts shown -> their item
    for number, item in enumerate(items):
        source = item.get("source_id")
        if item.get("artifact_id") and source is not None:
            shown.setdefault(source, {})[int(item["id"].partition("#")[2] or 0)] = number
    notes = {}
    for parts in shown.values():
        ordered = sorted(parts)
        hole = next((part for part, after in itertools.pairwise(ordered)
                     if after != part + 1), None)
        at = parts[hole] if hole is not None else max(parts.values())
        artifact = items[at]["artifact_id"]
        notes[at] = (GAP_NOTE if hole is not None else ARTIFACT_NOTE).format(artifact)
    return notes


def summarize(acb: Mapping[str, Any]) -> Iterator[str]:
    """One line per section for people (the CLI prints it on stderr)."""
    for section in acb["sections"]:
        count, used = len(section["items"]), section["token_est"]
        yield f"{section['name']:<20} {count:>4} items {used:>6} tokens"
