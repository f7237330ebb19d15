"""The store's policies (budgets, privacy, channels) and its manifest.

Each file is parsed into a frozen object; a bad value is a `FormatError` naming
the file, the line of the key and what was expected. `load_policies` raises the
first; `read_policies` (for `gitmem verify`) lists them all. `Policies.hashes` are
the files' content hashes, recorded in every ACB's provenance.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from gitmem.errors import FormatError, UnreadableFileError, ValidationError, malformed_json
from gitmem.patterns import pattern_problem
from gitmem.policy_reader import PolicyReader
from gitmem.privacy import DEFAULT_REDACT_KEYS, ChannelRule, Privacy
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
        except UnreadableFileError as exc:  # a FIFO, a directory, a link to nothing...
            problems.append(FormatError(f"cannot be read: {exc.reason}", path=rel))
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
