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
import time
from functools import cache
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
_LONG_REPEAT = 16  # an inner repeat of more than this many is as bad as an unbounded one

# The probe's texts: runs of each character a pattern names (and of pairs of them),
# ended by one that makes a match fail there, where backtracking explodes; each run
# tried at growing lengths, so that a pattern whose time explodes is caught at a short
# one, after milliseconds (re cannot be stopped: a long run would hang the check too).
PROBE_LENGTHS = (8, 12, 16, 20, 24, 28, 32, 40, 48)
PROBE_SLOW_S = 0.05  # a search of a text this short takes microseconds
_PROBE_CHARS = ("a", " ", "1")
_PROBE_ENDS = ("!", "\x00", "")  # "": a pattern whose tail takes any end fails on the run
_SMALL_OUTER = 3  # an outer repeat of at most this many (a JWT's `(\.x+){2}`) multiplies
_SLOW = ("on a text that almost matches, it tries exponentially (or hugely) many ways, "
         "and re holds the process while it does: one write would hang the daemon")


def pattern_problem(pattern: re.Pattern[str], key: str) -> str | None:
    """Why a compiled pattern of `store.<key>` cannot be used, or None: it matches the
    empty string, it nests a repeat in a repeat, or, tried on the texts that make
    backtracking explode (`_probes`), it takes more than PROBE_SLOW_S. The check of
    the nesting is quick and says why; the trial catches what it cannot see (`(a|a)+`,
    six `(x+)` in a row)."""
    if any(m.start() == m.end() for probe in _EMPTY_PROBES for m in pattern.finditer(probe)):
        return (_MATCHING_EMPTY[key].format(pattern.pattern)
                + "; make it match at least one character (`x+`, not `x*`)")
    parsed = sre_parse.parse(pattern.pattern, pattern.flags).data
    if _nested_repeat(parsed, inside=False):
        return (f"the pattern {pattern.pattern!r} repeats what holds a repeat of its own "
                f"(`(x+x+)+`, `(\\w+\\s?){{2,30}}`): {_SLOW}; make the inner repeat "
                "possessive (`x++`), or drop the nesting")
    slow = None if pattern.pattern in _shipped() else _slow_probe(pattern.pattern,
                                                                  pattern.flags)
    if slow is not None:
        return (f"the pattern {pattern.pattern!r} takes {slow[1] * 1000:.0f} ms already on "
                f"{slow[0]!r}, and more with every character: {_SLOW}; write it so that "
                "one way of matching is tried (no two repeats or alternatives that can "
                "take the same characters)")
    return None


def _nested_repeat(items: Any, inside: bool) -> bool:
    """Whether parsed pattern `items` holds a long repeat (unbounded, or of more than
    _LONG_REPEAT) within a repeat (`inside`: within one already), where backtracking can
    take exponential time. A possessive repeat never gives back what it took: what it
    holds is not looked into; an atomic group's inside still backtracks."""
    for op, value in items:
        deeper = inside
        if op in _REPEATS:
            long = value[1] == sre.MAXREPEAT or value[1] > _LONG_REPEAT
            if long and inside:
                return True
            parts, deeper = [value[2]], inside or value[1] > _SMALL_OUTER  # the ways by
        elif op == sre.SUBPATTERN:
            parts = [value[-1]]
        elif op == sre.ATOMIC_GROUP:
            parts = [value]
        elif op == sre.BRANCH:
            parts = value[1]
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            parts = [value[1]]
        elif op == sre.GROUPREF_EXISTS:
            parts = [branch for branch in value[1:] if branch]
        else:  # a character, a class, or what never gives back (`x++`)
            continue
        if any(_nested_repeat(part, deeper) for part in parts):
            return True
    return False


@cache
def _shipped() -> frozenset[str]:
    """The patterns of `gitmem init`'s privacy.yaml, tried when they were written: a
    store that keeps them pays no trial (25 ms of every command's start)."""
    from gitmem.store import template
    from gitmem.yamlio import load_yaml

    store = load_yaml(template("policies/privacy.yaml").decode(), "privacy.yaml")["store"]
    return frozenset([*store["redact_patterns"], *store["redact_keys"]])


@cache
def _slow_probe(source: str, flags: int) -> tuple[str, float] | None:
    """A probe text (shown short) the pattern takes more than PROBE_SLOW_S on, and how
    long, else None. Remembered per pattern: a process checks each once."""
    pattern = re.compile(source, flags)
    for base, end in _probes(sre_parse.parse(source, flags).data):
        for length in PROBE_LENGTHS:
            text = base * (length // len(base)) + end
            took = _timed(pattern, text)
            if took > PROBE_SLOW_S:  # again: a time slice the machine lost is no verdict
                took = min(took, _timed(pattern, text), _timed(pattern, text))
            if took > PROBE_SLOW_S:
                return (text if len(text) <= 20 else f"{text[:12]}...{text[-4:]}"), took
    return None


def _timed(pattern: re.Pattern[str], text: str) -> float:
    started = time.perf_counter()
    pattern.search(text)
    return time.perf_counter() - started


def _probes(parsed: Any) -> list[tuple[str, str]]:
    """(what is repeated, the end that fails): each character the pattern names (its
    literals, a member of each of its classes) and each pair of its first six."""
    named = list(dict.fromkeys(_named_chars(parsed)))
    chars = list(dict.fromkeys([*named, *_PROBE_CHARS]))[:12]
    pairs = [a + b for a in named[:6] for b in named[:6] if a != b]
    return [(base, end) for base in [*chars, *pairs] for end in _PROBE_ENDS]


def _named_chars(items: Any) -> list[str]:
    """A character of each literal and class of parsed pattern `items`, in order."""
    found: list[str] = []
    for op, value in items:
        if op == sre.LITERAL:
            found.append(chr(value))
        elif op == sre.IN:
            found += [chr(v) if k == sre.LITERAL else chr(v[0]) if k == sre.RANGE else
                      {sre.CATEGORY_DIGIT: "1", sre.CATEGORY_SPACE: " "}.get(v, "a")
                      for k, v in value[:2] if k in (sre.LITERAL, sre.RANGE, sre.CATEGORY)]
        elif op in _REPEATS or op == sre.POSSESSIVE_REPEAT:
            found += _named_chars(value[2])
        elif op == sre.SUBPATTERN:
            found += _named_chars(value[-1])
        elif op == sre.ATOMIC_GROUP:
            found += _named_chars(value)
        elif op == sre.BRANCH:
            for branch in value[1]:
                found += _named_chars(branch)
    return found


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
