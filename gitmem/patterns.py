"""Redaction patterns: which a store may use, and how each is screened for quickly.

A pattern of privacy.yaml runs on every string written and every text indexed, so
one that matches the empty string (it would redact everything) or that can backtrack
for exponential time (it would hang the write path, and the daemon with it: `re`
holds the interpreter while it searches) is refused when the policies load, naming
why; a store then keeps its last good patterns.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

# The parsed form `re` compiles a pattern from: no public API gives it (and no stubs).
sre: Any = importlib.import_module("re._constants")
sre_parse: Any = importlib.import_module("re._parser")

# What a redaction screen may drop from the front of a pattern so that it begins with a
# literal (`Privacy._screens`): a word boundary, a one-character class (`[Bb]earer`), or
# a lookbehind of a literal (`(?<=://)`, searched as the literal itself).
_SCREEN_LEADS = (re.compile(r"\[[^\]\\^]+\]"), re.compile(r"\(\?<=([\w:/@.-]+)\)"))
_LITERAL_FIRST = re.compile(r"[\w:/@-]")  # a pattern that begins with a literal character

# What a pattern that can match the empty string would do: `sub` puts the redaction at
# every empty match, and `search` finds one in every key.
_MATCHING_EMPTY = {
    "redact_patterns": "the redaction pattern {!r} matches the empty string, so it would "
                       "redact everything (the redaction would go between the characters of "
                       "every text and key)",
    "redact_keys": "the pattern {!r} matches the empty string, so every key would name a "
                   "secret and every value be redacted",
}
# The empty text finds `a*` (there search and fullmatch agree); one that matches only
# between characters (`\b`, `(?m)^`, `\S*` at a space) needs ordinary text around it.
_EMPTY_PROBES = ("", "Hello, world: x_1 = 'y'.\nNext line")

_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT)


def pattern_problem(pattern: re.Pattern[str], key: str) -> str | None:
    """Why a compiled pattern of `store.<key>` cannot be used, or None."""
    if any(m.start() == m.end() for probe in _EMPTY_PROBES for m in pattern.finditer(probe)):
        return (_MATCHING_EMPTY[key].format(pattern.pattern)
                + "; make it match at least one character (`x+`, not `x*`)")
    if _nested_repeat(sre_parse.parse(pattern.pattern, pattern.flags).data, inside=False):
        return (f"the pattern {pattern.pattern!r} repeats what holds a repeat of its own "
                "(`(x+x+)+`, `(\\w+\\s?)*`): on a text that almost matches, it tries "
                "exponentially many ways and hangs every write; make the inner repeat "
                "possessive (`x++`) or the group atomic (`(?>...)`), or drop the nesting")
    return None


def _nested_repeat(items: Any, inside: bool) -> bool:
    """Whether parsed pattern `items` holds an unbounded repeat within another (`inside`:
    within one already), where backtracking can take exponential time."""
    for op, value in items:
        deeper = inside
        if op in _REPEATS:
            unbounded = value[1] == sre.MAXREPEAT
            if unbounded and inside:
                return True
            parts, deeper = [value[2]], inside or unbounded
        elif op == sre.SUBPATTERN:
            parts = [value[-1]]
        elif op == sre.BRANCH:
            parts = value[1]
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            parts = [value[1]]
        elif op == sre.GROUPREF_EXISTS:
            parts = [branch for branch in value[1:] if branch]
        else:  # a character, a class, or what is never tried again (`x++`, `(?>...)`)
            continue
        if any(_nested_repeat(part, deeper) for part in parts):
            return True
    return False


def screened(source: str) -> str | None:
    r"""A pattern's source begun at its first literal, or None: a leading `\b` dropped,
    then a one-character class (`[Bb]earer` as `earer`) or a lookbehind of a literal
    (`(?<=://)x` as `://x`). Neither is a group, so back-references keep their numbers."""
    rest = source[2:] if source.startswith("\\b") else source
    for lead in _SCREEN_LEADS:
        found = lead.match(rest)
        if found is not None:
            rest = (found.group(1) if found.groups() else "") + rest[found.end():]
            break
    if rest == source or not _LITERAL_FIRST.match(rest):
        return None
    return rest
