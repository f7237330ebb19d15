"""ACB items made of index rows: each row's item is made once (a cached row is reused
by every ACB) and copied per ACB, with its score when it is ranked."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gitmem import tokens
from gitmem.db import Row
from gitmem.records import format_ts


def item(row: Row, make: Callable[[Row], dict[str, Any]],
         score: float | None = None) -> dict[str, Any]:
    """The bundle item of `row`: made once per row (cached rows are reused by every
    ACB) and copied per ACB, with its score when it has one."""
    template = row.get("_item")
    if template is None:
        template = row["_item"] = make(row)
    made = dict(template)
    if score is not None:
        made["score"] = score
    return made


def chunk_item(row: Row, score: float | None = None) -> dict[str, Any]:
    """The item of a chunk row (an event's, a decision's, a task's, a summary's)."""
    return item(row, chunk_template, score)


def chunk_template(row: Row) -> dict[str, Any]:
    """A chunk row's item, made anew (rows of one build alone need no template)."""
    template = {
        "type": row["source_type"] if row["source_type"] != "event" else row["kind"],
        "id": row["chunk_id"], "source_id": row["source_id"], "text": row["text"],
        "refs": list(dict.fromkeys([row["source_id"], *row["refs"]])),
        "source": f"{row['path']}:{row['line']}", "token_est": row["token_est"],
        "ts": iso_utc(row["ts"]),
    }
    if row.get("artifact_id"):
        template["artifact_id"] = row["artifact_id"]
    return template


def iso_utc(value: datetime) -> str:
    """A time as items show it: RFC 3339 in UTC."""
    return format_ts(value.astimezone(UTC))


def task_item(row: Row) -> dict[str, Any]:
    """The item of a task row (its text, its chunk's: `Task [status] title (owner: X)`),
    with its `owner` when it has one."""
    return item(row, _task_template)


def _task_template(r: Row) -> dict[str, Any]:
    made = {"type": "task", "id": r["task_id"], "text": r["item_text"],
            "refs": list(dict.fromkeys([r["task_id"], *r["refs"]])),
            "source": f"{r['path']}:1", "token_est": r["token_est"], "status": r["status"]}
    if r["owner"]:
        made["owner"] = r["owner"]
    return made


def decision_item(row: Row, score: float | None) -> dict[str, Any]:
    """The item of a decision row, with its score when it was ranked."""
    return item(row, lambda r: {
        "type": "decision", "id": r["decision_id"], "text": r["item_text"],
        "refs": list(r["refs"]), "source": f"{r['path']}:1",
        "token_est": r["token_est"], "ts": iso_utc(r["ts"]),
        "rationale": list(r["rationale"]), "supersedes": list(r["supersedes"])}, score)


CUT_MIN_TOKENS = 16  # a pinned item is cut to fit when at least this much of it shows


def cut_to_fit(item: dict[str, Any], limit: int) -> dict[str, Any] | None:
    """`item` (a pinned one, larger than the room its section has left) cut to at most
    `limit` tokens: the start of its text, a note saying where the whole is, marked
    `truncated` with its `full_token_est`. None when too little of it would show.

    A pinned item is the memory a person put in every bundle: what fits of it is
    better than nothing, and the note keeps the reader from taking the start for the
    whole."""
    full = item["token_est"]
    for note in (f"\n[cut to fit: {{}} of {full} tokens shown; the whole is {item['source']}]",
                 f"\n[cut: {{}} of {full} tokens]"):  # where the room is small: its source
        room = limit - tokens.count(note.format(full))  # is the item's, `truncated` says it
        while room >= CUT_MIN_TOKENS:
            head = cut_text(item["text"], room)
            text = head + note.format(tokens.count(head))
            size = tokens.count(text)
            if size <= limit:
                return {**item, "text": text, "token_est": size, "truncated": True,
                        "full_token_est": full}
            room -= size - limit  # a join of the pieces counted more than each alone
    return None


# Where a cut may end, best first, and how much of the mark stays: a paragraph break, a
# line break, the end of a sentence (in scripts written without spaces too), a space.
_CUT_MARKS = (("\n\n", 0), ("\n", 0), (". ", 1), ("\u3002", 1), ("\uff01", 1), ("\uff1f", 1),
              (" ", 0))  # the ideographic full stop, full-width ! and ?: no space after


def cut_text(text: str, limit: int) -> str:
    """The longest start of `text` of at most `limit` tokens that ends at a paragraph
    break, else a line break, else the end of a sentence, else a space, where one keeps
    at least half of it; else anywhere (not inside a character): a text of no spaces
    (Chinese, Japanese, Thai) was cut at its heading's `# `, to nothing."""
    encoded = tokens.encode(text)
    if len(encoded) <= limit:
        return text
    head = tokens.encoding().decode(encoded[:limit])
    while head and not text.startswith(head):  # a character cut in two: decoded as U+FFFD
        head = head[:-1]
    for mark, kept in _CUT_MARKS:
        at = head.rfind(mark)
        if at >= len(head) // 2:
            return head[:at + kept].rstrip()
    return head.rstrip()
