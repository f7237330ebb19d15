"""The store's policies (budgets, privacy, channels) and its manifest.

Each file is parsed into a frozen object; a bad value is a `FormatError` naming
the file, the line of the key and what was expected. `load_policies` raises the
first; `read_policies` (for `gitmem verify`) lists them all. `Policies.hashes` are
the files' content hashes, recorded in every ACB's provenance.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any, TypeVar

from gitmem.errors import FormatError, UnreadableFileError, ValidationError, malformed_json
from gitmem.patterns import pattern_problem, screened
from gitmem.policy_reader import PolicyReader
from gitmem.records import CHANNELS, SENSITIVITIES, RepeatedKey, decode_json, valid_name
from gitmem.regular_files import read_regular

SECTIONS = ("identity", "rules", "task_state", "relevant_decisions", "retrieved_evidence",
            "recent_window", "tool_state", "handoff")
POLICY_FILES = ("policies/budgets.yaml", "policies/privacy.yaml", "policies/channels.yaml")
FORMAT_VERSION = 1
TOKENIZER = "cl100k_base"


@dataclass(frozen=True)
class SectionBudget:
    """The cap and fill priority of one ACB section."""

    max_tokens: int
    priority: int


@dataclass(frozen=True)
class Budgets:
    """policies/budgets.yaml."""

    total: int = 65000
    reserve: int = 5000
    sections: Mapping[str, SectionBudget] = field(default_factory=dict)
    candidate_pool_max: int = 2000
    retrieved_chunks_max: int = 200
    recent_window_events: int = 40
    tool_state_events: int = 5
    decisions_max: int = 100
    handoff_evidence_max: int = 20
    alpha: float = 0.7
    beta: float = 0.2
    gamma: float = 0.1
    recency_tau_days: float = 14.0
    max_excerpt_bytes: int = 8192
    chunk_max_tokens: int = 600

    def section_order(self) -> list[str]:
        """Section names by descending priority, ties in the documented order."""
        return sorted(self.sections, key=lambda n: (-self.sections[n].priority,
                                                    SECTIONS.index(n)))


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
        if not self._may_hold(text):
            return text  # the common case: nothing to redact, a quick scan per pattern
        for pattern in self.patterns:
            text = pattern.sub(self._replacement, text)
        return text

    def without_secrets(self, text: str) -> str:
        """`text` with what the patterns match taken out, a space in its place, and the
        redaction string where it stands alone (a bundle's text pasted back): what a
        query searches, for the index holds none of the one and every row of the other."""
        if self._marker is not None and self.redaction in text:
            text = self._marker.sub(" ", text)
        if not self._may_hold(text):
            return text
        for pattern in self.patterns:
            text = pattern.sub(" ", text)
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


@dataclass(frozen=True)
class Channels:
    """policies/channels.yaml: the views each channel loads by default."""

    default_views: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Manifest:
    """manifest.json."""

    format_version: int = FORMAT_VERSION
    default_tenant: str = "default"
    tokenizer: str = TOKENIZER


@dataclass(frozen=True)
class Policies:
    """Everything under policies/ plus the manifest, with content hashes."""

    budgets: Budgets
    privacy: Privacy
    channels: Channels
    manifest: Manifest
    hashes: Mapping[str, str]


def file_hash(data: bytes) -> str:
    """The content hash recorded for files: `sha256:` + hex."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


# The keys each policy mapping may hold: a misspelt key is an error, never a silent
# default. A new policy setting is added here and to its parser together.
BUDGET_KEYS = ("version", "acb_total_max_tokens", "reserve_tokens", "sections", "retrieval",
               "write")
RETRIEVAL_KEYS = ("candidate_pool_max", "retrieved_chunks_max", "recent_window_events",
                  "tool_state_events", "decisions_max", "handoff_evidence_max", "weights",
                  "recency_tau_days")
PRIVACY_KEYS = ("version", "store", "load")
CHANNEL_RULE_KEYS = ("suppress_sensitivity", "suppress_views", "load_event_channels")
STORE_KEYS = ("never_store_sensitivity", "never_store_kinds", "redaction", "redact_patterns",
              "redact_keys")


def parse_budgets(text: str, path: str = "policies/budgets.yaml",
                  errors: list[FormatError] | None = None) -> Budgets:
    """Parse and validate budgets.yaml: the first problem raised, or with `errors`
    each added to it, the default standing in for a bad value (so for every parser)."""
    r = PolicyReader(text, path, errors)
    r.known(r.data, "", BUDGET_KEYS)
    if r.loaded and r.data.get("sections") is None:  # never a silent "show nothing"
        r.problem("sections" if "sections" in r.data else "",
                  "no sections: every bundle would be empty (an empty file, or one cut "
                  "short while being saved?); `sections: {}` shows nothing on purpose")
    sections: dict[str, SectionBudget] = {}
    for name, spec in r.mapping(r.data, "sections", "sections").items():
        if name not in SECTIONS:
            r.problem(f"sections.{name}", f"unknown section; expected one of "
                                          f"{', '.join(SECTIONS)}")
            continue
        if not isinstance(spec, dict):
            r.problem(f"sections.{name}", "expected {max_tokens: N, priority: N}")
            continue
        r.known(spec, f"sections.{name}", ("max_tokens", "priority"))
        sections[name] = SectionBudget(
            r.integer(spec, "max_tokens", f"sections.{name}.max_tokens", 0),
            r.integer(spec, "priority", f"sections.{name}.priority", 0))
    ret = r.mapping(r.data, "retrieval", "retrieval")
    r.known(ret, "retrieval", RETRIEVAL_KEYS)
    weights = r.mapping(ret, "weights", "retrieval.weights")
    r.known(weights, "retrieval.weights", ("alpha", "beta", "gamma"))
    write = r.mapping(r.data, "write", "write")
    r.known(write, "write", ("max_excerpt_bytes", "chunk_max_tokens"))
    total = r.integer(r.data, "acb_total_max_tokens", "acb_total_max_tokens", 65000, 1)
    reserve = r.integer(r.data, "reserve_tokens", "reserve_tokens", 5000)
    if reserve >= total:
        r.problem("reserve_tokens", f"must be below acb_total_max_tokens ({total})")
    return Budgets(
        total=total, reserve=reserve, sections=sections,
        candidate_pool_max=r.integer(ret, "candidate_pool_max", "retrieval.candidate_pool_max",
                                     2000, 1),
        retrieved_chunks_max=r.integer(ret, "retrieved_chunks_max",
                                       "retrieval.retrieved_chunks_max", 200, 1),
        recent_window_events=r.integer(ret, "recent_window_events",
                                       "retrieval.recent_window_events", 40),
        tool_state_events=r.integer(ret, "tool_state_events", "retrieval.tool_state_events", 5),
        decisions_max=r.integer(ret, "decisions_max", "retrieval.decisions_max", 100),
        handoff_evidence_max=r.integer(ret, "handoff_evidence_max",
                                       "retrieval.handoff_evidence_max", 20),
        alpha=r.number(weights, "alpha", "retrieval.weights.alpha", Budgets.alpha),
        beta=r.number(weights, "beta", "retrieval.weights.beta", Budgets.beta),
        gamma=r.number(weights, "gamma", "retrieval.weights.gamma", Budgets.gamma),
        recency_tau_days=r.number(ret, "recency_tau_days", "retrieval.recency_tau_days",
                                  Budgets.recency_tau_days),
        max_excerpt_bytes=r.integer(write, "max_excerpt_bytes", "write.max_excerpt_bytes",
                                    8192, 256),
        chunk_max_tokens=r.integer(write, "chunk_max_tokens", "write.chunk_max_tokens", 600, 32),
    )


def parse_privacy(text: str, path: str = "policies/privacy.yaml",
                  errors: list[FormatError] | None = None) -> Privacy:
    """Parse and validate privacy.yaml (regexes compiled here, once)."""
    r = PolicyReader(text, path, errors)
    r.known(r.data, "", PRIVACY_KEYS)
    store = r.mapping(r.data, "store", "store")
    r.known(store, "store", STORE_KEYS)
    # never a silent "redact nothing" (a `store` that is no mapping is its own problem)
    said = not isinstance(r.data.get("store", {}), dict | None)
    if r.loaded and not said and store.get("redact_patterns") is None:
        r.problem("store.redact_patterns" if "redact_patterns" in store else "store",
                  "no redact_patterns: nothing would be redacted (an empty file, or one "
                  "cut short while being saved?); `redact_patterns: []` redacts nothing "
                  "on purpose")
    patterns = _regexes(r, store, "redact_patterns")
    key_patterns = (_regexes(r, store, "redact_keys") if "redact_keys" in store
                    else [re.compile(source) for source in DEFAULT_REDACT_KEYS])
    redaction = store.get("redaction", "[REDACTED]")
    if not isinstance(redaction, str):
        r.problem("store.redaction", "expected a string")
        redaction = "[REDACTED]"
    matched = Privacy(patterns=tuple(patterns)).find_secret(redaction)
    if matched is not None:  # what is read again must read the same (the index redacts
        r.problem("store.redaction", f"{redaction!r} matches the redaction pattern "  # lines
                  f"{matched!r}: a text redacted twice would differ from one redacted "
                  "once; choose a redaction no pattern matches")
    rules: dict[str, ChannelRule] = {}
    load = r.mapping(r.data, "load", "load")
    r.known(load, "load", ("channel_rules",))
    for channel, spec in r.mapping(load, "channel_rules", "load.channel_rules").items():
        if channel not in CHANNELS:
            r.problem(f"load.channel_rules.{channel}",
                      f"unknown channel; expected one of {'|'.join(CHANNELS)}")
            continue
        if not isinstance(spec, dict):
            r.problem(f"load.channel_rules.{channel}", "expected a mapping")
            continue
        r.known(spec, f"load.channel_rules.{channel}", CHANNEL_RULE_KEYS)
        event_channels = (frozenset(r.strings(
            spec, "load_event_channels", f"load.channel_rules.{channel}.load_event_channels",
            CHANNELS)) if "load_event_channels" in spec else None)
        rules[channel] = ChannelRule(
            frozenset(r.strings(spec, "suppress_sensitivity",
                                f"load.channel_rules.{channel}.suppress_sensitivity",
                                SENSITIVITIES)) | {"secret"},
            frozenset(r.strings(spec, "suppress_views",
                                f"load.channel_rules.{channel}.suppress_views")),
            event_channels)
    never = frozenset(r.strings(store, "never_store_sensitivity", "store.never_store_sensitivity",
                                SENSITIVITIES)) | {"secret"}
    # seed 002 §4.1 spells it never_store_kinds; accept that spelling too
    never |= frozenset(r.strings(store, "never_store_kinds", "store.never_store_kinds",
                                 SENSITIVITIES))
    return Privacy(never_store=never, redaction=redaction, patterns=tuple(patterns),
                   channel_rules=rules, key_patterns=tuple(key_patterns))


def _regexes(r: PolicyReader, store: Mapping[str, Any], key: str) -> list[re.Pattern[str]]:
    """`store.<key>`: a list of regular expressions, each compiled."""
    patterns = []
    for number, source in enumerate(r.strings(store, key, f"store.{key}")):
        try:
            pattern = re.compile(source)
        except re.error as exc:
            r.problem(f"store.{key}", f"invalid regular expression {source!r}: {exc}", number)
            continue
        problem = pattern_problem(pattern, key)
        if problem is not None:
            r.problem(f"store.{key}", problem, number)
            continue
        patterns.append(pattern)
    return patterns


def parse_channels(text: str, path: str = "policies/channels.yaml",
                   errors: list[FormatError] | None = None) -> Channels:
    """Parse and validate channels.yaml."""
    r = PolicyReader(text, path, errors)
    r.known(r.data, "", ("version", "channels"))
    views: dict[str, tuple[str, ...]] = {}
    entries = r.data.get("channels")
    if isinstance(entries, list):  # seed 002 §4.2 form: [{name: private, ...}], or []
        pairs = []
        for number, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                r.problem("channels", "expected {name: CHANNEL, default_load_views: [...]}",
                          number)
                continue
            pairs.append((entry["name"], {k: v for k, v in entry.items() if k != "name"}))
    else:
        pairs = list(r.mapping(r.data, "channels", "channels").items())  # None: {}
    for channel, spec in pairs:
        if channel not in CHANNELS:
            r.problem(f"channels.{channel}", f"unknown channel; expected one of "
                                             f"{'|'.join(CHANNELS)}")
            continue
        if not isinstance(spec, dict):
            r.problem(f"channels.{channel}", "expected {default_load_views: [...]}")
            continue
        r.known(spec, f"channels.{channel}", ("default_load_views",))
        views[channel] = r.strings(spec, "default_load_views",
                                   f"channels.{channel}.default_load_views")
    return Channels(default_views=views)


def _json_key_line(text: str, key: str, nth: int = 1) -> int:
    """The line of the `nth` place `text` gives `key` a value (1 where it does not)."""
    found = list(re.finditer(rf'"{re.escape(key)}"\s*:', text))
    return text.count("\n", 0, found[nth - 1].start()) + 1 if len(found) >= nth else 1


def parse_manifest(text: str, path: str = "manifest.json",
                   errors: list[FormatError] | None = None) -> Manifest:
    """Parse and validate manifest.json."""
    found: list[FormatError] = []
    data: Any = {}
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
    try:
        data = decode_json(text)
    except RepeatedKey as exc:  # named at its second place
        found.append(malformed_json(exc, path=path, line=_json_key_line(text, exc.key, 2)))
    except ValueError as exc:
        found.append(malformed_json(exc, path=path, line=getattr(exc, "lineno", None)))
    if not isinstance(data, dict):
        found.append(FormatError("expected a JSON object", path=path, line=1))
        data = {}
    version = data.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        found.append(ValidationError(
            f"this gitmem reads format_version {FORMAT_VERSION}, got {version!r}", path=path,
            line=_json_key_line(text, "format_version"), field="format_version"))
    tenant = data.get("default_tenant", "default")
    if not isinstance(tenant, str) or not valid_name(tenant):
        found.append(ValidationError(
            f"expected a name of letters, digits and ._:@/+-, got {tenant!r}", path=path,
            line=_json_key_line(text, "default_tenant"), field="default_tenant"))
        tenant = "default"
    tokenizer = data.get("tokenizer", TOKENIZER)
    if tokenizer != TOKENIZER:
        found.append(ValidationError(f"only {TOKENIZER} is supported, got {tokenizer!r}",
                                     path=path, line=_json_key_line(text, "tokenizer"),
                                     field="tokenizer"))
    if found and errors is None:
        raise found[0]
    if errors is not None:
        errors += found
    return Manifest(default_tenant=tenant)


_Parsed = TypeVar("_Parsed")


def read_policies(store: Path) -> tuple[Policies, list[FormatError]]:
    """The manifest and every policy file of a store, and each problem found in them:
    a bad value's default stands in for it (and a missing file's defaults for the file),
    so that `gitmem verify` checks the rest of the store and lists every problem."""
    hashes: dict[str, str] = {}
    problems: list[FormatError] = []

    def parse(rel: str, parser: Callable[[str, str, list[FormatError]], _Parsed],
              default: _Parsed) -> _Parsed:
        try:
            data = read_regular(store / rel)  # a FIFO there would hang verify, the daemon
        except FileNotFoundError:
            problems.append(FormatError("missing; run `gitmem init` to create the default",
                                        path=rel))
            return default
        except UnreadableFileError as exc:  # a FIFO, a link to nothing, a loop of links
            reason = "Is a directory" if exc.directory else exc.reason  # as it was said
            problems.append(FormatError(f"cannot be read: {reason}", path=rel))
            return default
        except OSError as exc:  # a file that cannot be read
            problems.append(FormatError(f"cannot be read: {exc.strerror or exc}", path=rel))
            return default
        hashes[rel] = file_hash(data)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(FormatError(f"not valid UTF-8 at byte {exc.start}", path=rel,
                                        line=data.count(b"\n", 0, exc.start) + 1))
            return default
        return parser(text, rel, problems)

    manifest = parse("manifest.json", parse_manifest, Manifest())
    budgets = parse(POLICY_FILES[0], parse_budgets, Budgets())
    privacy = parse(POLICY_FILES[1], parse_privacy, Privacy())
    channels = parse(POLICY_FILES[2], parse_channels, Channels())
    return Policies(budgets, privacy, channels, manifest, hashes), problems


@cache
def shipped_privacy() -> Privacy:
    """The privacy policy `gitmem init` writes: what redacts a message where a store's
    own policy cannot be read (or there is no store yet)."""
    from gitmem.store import template

    return parse_privacy(template(POLICY_FILES[1]).decode(), POLICY_FILES[1])


def load_policies(store: Path) -> Policies:
    """Read and validate the manifest and every policy file of a store; the first
    problem is raised (`gitmem verify` lists them all)."""
    policies, problems = read_policies(store)
    if problems:
        raise problems[0]
    return policies
