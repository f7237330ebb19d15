"""The privacy policy (policies/privacy.yaml) at work: what each channel may load,
and redaction (of text, of values under keys that name a secret, of names and of
messages), as the write path, the index and every message apply it.

`policies.parse_privacy` makes a `Privacy` from the file; `patterns` checks each
redaction pattern before it is used.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from gitmem.patterns import screened


@dataclass(frozen=True)
class ChannelRule:
    """What one channel may not load."""

    suppress_sensitivity: frozenset[str] = frozenset({"secret"})
    suppress_views: frozenset[str] = frozenset()
    event_channels: frozenset[str] | None = None  # channels whose events it may load; None: all

    def loads_event(self, sensitivity: str, channel: str) -> bool:
        """Whether this channel may load an event (or a summary) of that sensitivity
        recorded on that channel ("": none), as build_acb judges it."""
        return self.loads_record(sensitivity) and not (
            channel and self.event_channels is not None and channel not in self.event_channels)

    def hides_stored(self, never_stored: frozenset[str]) -> bool:
        """Whether this channel may not load some rows the index can hold."""
        return bool(self.suppress_sensitivity - never_stored) or self.event_channels is not None

    def loads_record(self, sensitivity: str) -> bool:
        """Whether this channel may load a decision or task of that sensitivity (they
        have no channel: their sensitivity decides)."""
        return sensitivity not in self.suppress_sensitivity


# `store.redact_keys` when privacy.yaml has none (a store made before the setting existed
# keeps this protection): object keys whose words name a secret.
DEFAULT_REDACT_KEYS = (r"\b(api ?keys?|access ?keys?|private ?keys?|secrets?|token|passwords?"
                       r"|passwd|passphrase|credentials?|authorization)\b",)
_KEY_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_KEY_CACHE_MAX = 4096  # keys remembered by Privacy._key
_QUOTED = re.compile(  # a repr'd string: its quote after no letter (store's), but a prefix's
    r"(?:(?<!\w)|(?<=(?<!\w)[bBrRfFuU]))(?:'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")")
_NAME_CACHE_MAX = 16384  # names remembered by Privacy.redact_name, forgotten all at once


def key_words(key: str) -> str:
    """An object key as lower-case words, split at `_ - .`, spaces and camelCase humps:
    what `store.redact_keys` patterns are searched in (`OPENAI_API_KEY`, `openaiApiKey`:
    `openai api key`)."""
    return " ".join(word.lower() for word in _KEY_WORD.findall(key))


@dataclass(frozen=True)
class Privacy:
    """policies/privacy.yaml."""

    never_store: frozenset[str] = frozenset({"secret"})
    redaction: str = "[REDACTED]"
    patterns: tuple[re.Pattern[str], ...] = ()
    channel_rules: Mapping[str, ChannelRule] = field(default_factory=dict)
    key_patterns: tuple[re.Pattern[str], ...] = ()  # store.redact_keys

    def rule(self, channel: str) -> ChannelRule:
        """The rule of a channel. An unlisted channel fails closed: it loads events of
        its own channel and public ones only, and nothing of sensitivity high or secret
        (`gitmem verify` warns about it)."""
        return self.channel_rules.get(channel, ChannelRule(
            frozenset({"high", "secret"}), frozenset(), frozenset({channel, "public"})))

    def redact(self, text: str) -> str:
        """`text` with every redaction pattern's matches replaced."""
        return self._substituted(text, self._replacement)

    def without_secrets(self, text: str) -> str:
        """`text` with what the patterns match taken out, a space in its place, and the
        redaction string where it stands alone (a bundle's text pasted back): what a
        query searches, for the index holds none of the one and every row of the other."""
        if self._marker is not None and self.redaction in text:
            text = self._marker.sub(" ", text)
        return self._substituted(text, " ")

    def _substituted(self, text: str, replacement: str) -> str:
        """`text` with every pattern's matches replaced by `replacement` (a template)."""
        if not self._may_hold(text):
            return text  # the common case: nothing to redact, a quick scan per pattern
        for pattern in self.patterns:
            text = pattern.sub(replacement, text)
        return text

    @cached_property
    def _marker(self) -> re.Pattern[str] | None:
        if not self.redaction.strip():
            return None
        return re.compile(r"(?<!\w)" + re.escape(self.redaction) + r"(?!\w)")

    @cached_property
    def _replacement(self) -> str:
        """`redaction` as `re.sub` takes it literally: `\\g<0>` in it would have put the
        secret back, and a `\\s` failed every write."""
        return self.redaction.replace("\\", "\\\\")

    def redact_message(self, message: str) -> str:
        """`redact` for a message that quotes values (`'...'`, `"..."`, as repr does):
        each quoted value is redacted on its own first, so a pattern that runs to the
        next space (`password=\\S+`) leaves the quote that closes it (`'[REDACTED]'`, not
        `'[REDACTED]`); then the whole message, for what no quote holds."""
        quoted = _QUOTED.sub(lambda found: found[0][0] + self.redact(found[0][1:-1])
                             + found[0][-1], message)
        return self.redact(quoted)

    def redact_name(self, name: str) -> str:
        """`redact` for the short texts that repeat from line to line (a session's,
        agent's or actor's name, a tag, an event's names joined): those that hold no
        secret are remembered (never one that does), and a reindex of a million lines
        looks most of them up instead of running every pattern on each."""
        names = self._names
        if name in names:
            return name
        redacted = self.redact(name)
        if redacted == name:
            if len(names) >= _NAME_CACHE_MAX:
                names.clear()
            names.add(name)
        return redacted

    @cached_property
    def _names(self) -> set[str]:
        return set()

    def _may_hold(self, text: str) -> bool:
        """Whether a pattern may match `text` (none does where no screen finds it)."""
        return any(screen.search(text) for screen in self._screens)

    @cached_property
    def _screens(self) -> tuple[re.Pattern[str], ...]:
        r"""Per pattern, a search that finds a match wherever the pattern would (maybe
        more): the pattern begun at its first literal (`_screen`). A pattern that starts
        with a literal lets `re` skip to that literal with a substring search instead of
        trying the pattern at every position: on chat text, `sk-[A-Za-z0-9]{20,}` scans
        13 times faster than `\bsk-[A-Za-z0-9]{20,}\b` (docs/performance-log.md, section
        4). Dropping what comes before can only add matches, so a text none of these
        finds has nothing to redact."""
        screens = []
        for pattern in self.patterns:
            screen = screened(pattern.pattern)
            if screen is not None:
                with contextlib.suppress(re.error):  # else the pattern itself
                    pattern = re.compile(screen, pattern.flags)
            screens.append(pattern)
        return tuple(screens)

    def find_secret(self, text: str) -> str | None:
        """The first pattern that matches `text` as verify names it (on one line, a long
        one cut short), else None."""
        if not self._may_hold(text):
            return None  # as in `redact`: most texts hold nothing
        for pattern in self.patterns:
            if pattern.search(text):
                shown = " ".join(pattern.pattern.split())
                return shown if len(shown) <= 72 else shown[:69] + "..."
        return None

    def names_secret(self, key: str) -> bool:
        """Whether an object key names a secret: a `store.redact_keys` pattern is found
        in its words (`key_words`)."""
        return self._key(key)[1]

    def _key(self, key: str) -> tuple[str, bool]:
        """A key as it may be stored, and whether it names a secret. Keys repeat (text,
        tool, args), so the answers for keys that hold no secret are kept."""
        known = self._keys.get(key)
        if known is None:
            stored = self.redact(key)  # what it names once stored counts too: redacted
            words = {key_words(key), key_words(stored)}  # again it must not change
            known = (stored, any(p.search(w) for p in self.key_patterns for w in words))
            if known[0] == key and len(self._keys) < _KEY_CACHE_MAX:
                self._keys[key] = known
        return known

    @cached_property
    def _keys(self) -> dict[str, tuple[str, bool]]:
        return {}

    def redact_value(self, value: Any) -> Any:
        """A JSON value with its secrets redacted: every string, object keys included,
        through the patterns, and whatever a key naming a secret holds replaced whole
        (`redact_keys`). Keys that redaction makes equal are told apart by `#2`, `#3`...,
        so no key replaces another."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, list):
            return [self.redact_value(item) for item in value]
        if isinstance(value, dict):
            return self._redact_object(value, self.redact_value)
        return value

    def _redact_all(self, value: Any) -> Any:
        """What a key naming a secret holds: every string and number of it replaced (a
        numeric PIN or key is as secret as a written one; an empty string, true, false
        and null hide nothing and stay)."""
        if isinstance(value, str):
            return self.redaction if value else value
        if _secret_number(value):
            return self.redaction
        if isinstance(value, list):
            return [self._redact_all(item) for item in value]
        if isinstance(value, dict):
            return self._redact_object(value, self._redact_all)
        return value

    def _redact_object(self, obj: Mapping[str, Any],
                       inner: Callable[[Any], Any]) -> dict[str, Any]:
        keys = {key: self._key(key) if isinstance(key, str) else (key, False) for key in obj}
        taken = {key for key, (new, _) in keys.items() if new == key}
        out: dict[str, Any] = {}
        for key, item in obj.items():
            new, secret = keys[key]
            if new != key:
                new = _unique(new, taken)
                taken.add(new)
            out[new] = self._redact_all(item) if secret else inner(item)
        return out

    def find_secret_in(self, value: Any) -> str | None:
        """What in a JSON value the write path would have redacted (for verify), never
        the secret itself, else None."""
        if isinstance(value, str):
            pattern = self.find_secret(value)
            return None if pattern is None else f"matches the redaction pattern {pattern!r}"
        if isinstance(value, list):
            return next(filter(None, map(self.find_secret_in, value)), None)
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    continue  # not JSON: the record's own validation names it
                found = self.find_secret_in(key)
                if found is None and self.names_secret(key) and _unredacted(item,
                                                                          self.redaction):
                    found = (f"key {key!r} names a secret (store.redact_keys) and holds a "
                             "value that is not redacted")
                found = found or self.find_secret_in(item)
                if found is not None:
                    return found
        return None


def _unique(key: str, taken: set[str]) -> str:
    """`key`, or `key#2`, `key#3`... the first that `taken` does not hold."""
    number = 1
    unique = key
    while unique in taken:
        number += 1
        unique = f"{key}#{number}"
    return unique


def _secret_number(value: Any) -> bool:
    """A number (not a boolean) a key naming a secret holds: replaced as a string is."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _unredacted(value: Any, redaction: str) -> bool:
    """Whether a value under a key naming a secret holds a string or a number the write
    path would have replaced."""
    if isinstance(value, str):
        return value not in ("", redaction)
    if _secret_number(value):
        return True
    if isinstance(value, list):
        return any(_unredacted(item, redaction) for item in value)
    if isinstance(value, dict):
        return any(_unredacted(item, redaction) for item in value.values())
    return False
