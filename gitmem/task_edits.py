"""A task update written as the smallest edit of the task's file.

A task file is a person's file too: a reviewer adds a comment to a field
(`owner: alice  # lead until May`) or spaces out the details. Writing an update
as the whole file made again from its fields drops both, and the pull request
shows every line of the file changed for a status. `edited_task` changes only
the lines of the fields that changed (a field's line keeps its comment), adds
the new refs under the ones there, and keeps the body as written unless the
details changed. It gives up (None: the caller writes the file made again)
wherever the edit would not be plain — a field missing, a list written inline
— and its result is used only when it reads back as exactly the updated task.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import yaml

from gitmem.documents import Task
from gitmem.errors import FormatError
from gitmem.yamlio import dump_yaml

_SCALARS = ("title", "status", "owner", "sensitivity")


def edited_task(current: str, old: Task, new: Task,
                parse: Callable[[str], Task]) -> str | None:
    """`current` (the file of task `old`) edited to hold `new`, or None."""
    if not current.startswith("---\n") or "\n---\n" not in current[3:]:
        return None
    end = current.index("\n---\n", 3)
    head = current[4:end + 1].splitlines(keepends=True)
    body = current[end + 5:]
    for key in _SCALARS:
        before, after = getattr(old, key), getattr(new, key)
        if before != after and not _set(head, key, after, before):
            return None
    added = [ref for ref in new.refs if ref not in old.refs]
    if added and not _append(head, "refs", added):
        return None
    if old.details != new.details:
        body = f"{new.details.strip()}\n"
    text = "---\n" + "".join(head) + "---\n" + body
    try:
        return text if parse(text) == new else None
    except FormatError:  # the edit broke the file: the file made again is written
        return None


def _scalar(value: str) -> str:
    """`value` as YAML writes a plain or quoted scalar on one line."""
    dumped = dump_yaml(value, default_flow_style=True, width=float("inf"))
    return dumped.removesuffix("\n...\n").removesuffix("\n")


def _set(head: list[str], key: str, value: str, before: str) -> bool:
    """Set top-level `key` (now `before`) in the front matter's lines, keeping a comment
    after it; a field cleared ("") loses its line, a new one is added last. False: not
    plain."""
    line = re.compile(rf"^{key}:[ \t]*(?P<value>[^#\n]*?)(?P<rest>[ \t]+#.*)?\n?$")
    for n, text in enumerate(head):
        found = line.match(text)
        if found is None:
            continue
        if found["value"].startswith(("|", ">", "[", "{", "&", "*", "!")):
            return False  # a block, a flow collection, an anchor or a tag: not plain
        if _loaded(found["value"]) != before:
            return False  # what looked like a comment is inside the value: 'a #1'
        if n + 1 < len(head) and head[n + 1].startswith((" ", "\t")):
            return False  # the value goes on over the next lines
        if not value:
            del head[n]
        else:
            head[n] = f"{key}: {_scalar(value)}{found['rest'] or ''}\n"
        return True
    if value:
        head.append(f"{key}: {_scalar(value)}\n")
    return True


def _loaded(value: str) -> str:
    """A scalar's text as YAML reads it ("" for none)."""
    try:
        loaded = yaml.safe_load(f"v: {value}")
    except yaml.YAMLError:
        return "\0"  # never a field's value
    read = loaded.get("v") if isinstance(loaded, dict) else None
    return "" if read is None else str(read)


def _append(head: list[str], key: str, items: list[str]) -> bool:
    """Add `items` to the block list under top-level `key` (made when missing), after
    its last item and as it indents them. False: not plain."""
    for n, text in enumerate(head):
        if not re.match(rf"^{key}:[ \t]*(#.*)?\n?$", text):
            continue
        last, indent = n, "- "
        for m in range(n + 1, len(head)):
            bullet = re.match(r"^([ \t]*- )", head[m])
            if bullet is None:
                break
            last, indent = m, bullet[1]
        head[last + 1:last + 1] = [f"{indent}{item}\n" for item in items]
        return True
    if any(re.match(rf"^{key}:", text) for text in head):
        return False  # written inline: [a, b]
    head.append(f"{key}:\n" + "".join(f"- {item}\n" for item in items))
    return True
