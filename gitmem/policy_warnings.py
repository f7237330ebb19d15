"""What `gitmem verify` warns about in a store's policies: settings that parse, but
likely do not do what the person who wrote them meant.

- redaction patterns that lack some of the defaults `gitmem init` writes now (a store
  keeps the list it was made with);
- a view path in `suppress_views` (privacy.yaml) or `default_load_views`
  (channels.yaml) that matches no file in views/: the view meant is shown on that
  channel, or not loaded, with no word;
- a view neither pinned nor in any channel's `default_load_views`: no bundle loads it;
- a pinned view larger than its section's cap (budgets.yaml): every bundle shows it
  cut to fit;
- a channel privacy.yaml gives no rule: it loads what an unlisted channel may;
- a section budgets.yaml gives no cap: nothing is ever packed into it.

Warnings (severity "warning"): reported, exit 0.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from gitmem.documents import field_line, split_frontmatter
from gitmem.errors import FormatError, UnreadableFileError
from gitmem.items import cut_to_fit
from gitmem.packing import ITEM_SEPARATOR_TOKENS
from gitmem.policies import SECTIONS, Budgets, Policies, parse_privacy
from gitmem.policy_reader import yaml_line
from gitmem.prompt import header_tokens
from gitmem.records import CHANNELS
from gitmem.regular_files import read_regular
from gitmem.rows import FileRows
from gitmem.store import classify, template
from gitmem.yamlio import load_yaml

PRIVACY = "policies/privacy.yaml"
BUDGETS = "policies/budgets.yaml"


def defaults_missing(store: Path, policies: Policies, display: str) -> list[FormatError]:
    """A warning when the store's redaction patterns lack some of this gitmem's defaults:
    a store keeps the list it was made with, and a shape of secret gitmem learnt since
    (a bearer token, a password in a URL) would be stored as written."""
    text = _policy_text(store, PRIVACY)
    if text is None:
        return []
    have = {p.pattern for p in policies.privacy.patterns}
    defaults = parse_privacy(template(PRIVACY).decode("utf-8"), PRIVACY).patterns
    missing = [" ".join(p.pattern.split()) for p in defaults if p.pattern not in have]
    if not missing:
        return []
    line = next((n for n, row in enumerate(text.splitlines(), 1)
                 if row.strip().startswith("redact_patterns:")), None)
    shown = ", ".join(repr(m if len(m) <= 40 else m[:37] + "...") for m in missing[:3])
    return [FormatError(
        f"{len(missing)} of gitmem's default redaction patterns are not in this store's "
        f"list ({shown}{', ...' if len(missing) > 3 else ''}): what they catch would be "
        "stored as written; copy them from the privacy.yaml that `gitmem init` writes now",
        path=display + PRIVACY, line=line, field="store.redact_patterns",
        severity="warning")]


def channels_unruled(store: Path, policies: Policies, display: str) -> list[FormatError]:
    """A warning for each channel that privacy.yaml gives no rule: an ACB for it loads
    what an unlisted channel may (`Privacy.rule`), likely not what was meant."""
    text = _policy_text(store, PRIVACY)
    if text is None:
        return []
    line = yaml_line(text, ["load", "channel_rules"])
    return [FormatError(
        f"channel {name!r} has no rule in load.channel_rules: an ACB for it loads only "
        + (f"events of {name!r} and 'public' channels" if name != "public"
           else "events of the 'public' channel")
        + ", and nothing of sensitivity high or secret; give it a rule",
        path=display + PRIVACY, line=line,
        field="load.channel_rules", severity="warning")
        for name in CHANNELS if name not in policies.privacy.channel_rules]


def sections_unbudgeted(store: Path, policies: Policies, display: str) -> list[FormatError]:
    """A warning for each section of the ACB that budgets.yaml gives no cap: nothing is
    ever packed into it (a handoff's packet, where `handoff` is missing)."""
    text = _policy_text(store, BUDGETS)
    if text is None:
        return []
    line = yaml_line(text, ["sections"])
    return [FormatError(
        f"section {name!r} has no entry under sections: no ACB ever holds anything in it; "
        "give it {max_tokens: N, priority: N}", path=display + BUDGETS, line=line,
        field="sections", severity="warning")
        for name in SECTIONS if name not in policies.budgets.sections]


def _policy_text(store: Path, rel: str) -> str | None:
    """A policy file's text, or None where it is missing (the defaults apply) or does not
    read as YAML (its own check says so)."""
    try:
        text = read_regular(store / rel).decode("utf-8")
        load_yaml(text, rel)
    except (OSError, UnreadableFileError, UnicodeDecodeError, FormatError):
        return None  # a FIFO, say: its own check says so
    return text


CHANNELS_FILE = "policies/channels.yaml"
# What a view path that matches no file does, by the setting that names it.
_UNMATCHED = {"suppress_views": "the view meant is not suppressed on this channel",
              "default_load_views": "no view is loaded by it on this channel"}


def views_missing(store: Path, paths: Iterable[str], display: str) -> list[FormatError]:
    """A warning at each view path of the channel policies that matches no file in
    views/ (the ACB compares paths exactly: `views/plan.md` is not `views/plans.md`),
    and at each view file that is neither pinned nor named by any channel's
    `default_load_views`: no ACB ever loads it."""
    views = sorted(p for p in paths if classify(p) == "view")
    problems = []
    listed: set[str] | None = set()  # None: channels.yaml does not read (its check says)
    for rel in (CHANNELS_FILE, PRIVACY):
        try:
            text = read_regular(store / rel).decode("utf-8")
            data = load_yaml(text, rel)
        except FileNotFoundError:
            continue  # no file: the defaults apply (no channel loads a view by default)
        except (OSError, UnreadableFileError, UnicodeDecodeError, FormatError):
            if rel == CHANNELS_FILE:
                listed = None
            continue  # a broken one: its own check says so
        for steps, name in _view_lists(rel, data):
            value = _at(data, steps)
            for number, path in enumerate(value if isinstance(value, list) else []):
                if rel == CHANNELS_FILE and listed is not None and isinstance(path, str):
                    listed.add(path)
                if not isinstance(path, str) or path in views:
                    continue  # not a string: the file's own check says so
                problems.append(FormatError(
                    f"{path!r} matches no file in views/{_guess(path, views)}, so "
                    f"{_UNMATCHED[str(steps[-1])]}; name a view file, or remove the entry",
                    path=display + rel,
                    line=yaml_line(text, [*steps, number]), field=name, severity="warning"))
    if listed is not None:
        problems += _views_unloaded(store, [v for v in views if v not in listed], display)
    return problems


def _views_unloaded(store: Path, views: Iterable[str], display: str) -> list[FormatError]:
    """A warning at each of these view files (named by no channel's default_load_views)
    that is not pinned either: `build_acb` loads a view only so, and retrieval never
    finds one, so what it says reaches no agent."""
    problems = []
    for rel in views:
        try:
            text = read_regular(store / rel).decode("utf-8")
            meta, _, _ = split_frontmatter(text, rel)
        except (OSError, UnreadableFileError, UnicodeDecodeError, FormatError):
            continue  # its own check says so
        if meta.get("pinned") is True:
            continue
        problems.append(FormatError(
            f"{rel} is neither pinned nor in any channel's default_load_views "
            f"({CHANNELS_FILE}): no ACB loads it; pin it (pinned: true) or list it",
            path=display + rel, line=field_line(text, "pinned") or 1, field="pinned",
            severity="warning"))
    return problems


def _guess(path: str, views: list[str]) -> str:
    """" (did you mean views/x.md?)" for the view whose name is closest, if one is close
    (names compared without `views/` and `.md`, which every path shares)."""
    names = {view[len("views/"):-len(".md")]: view for view in views}
    close = difflib.get_close_matches(path.removeprefix("views/").removesuffix(".md"), names,
                                      n=1)
    return f" (did you mean {names[close[0]]}?)" if close else ""


def _view_lists(rel: str, data: dict[str, Any]) -> Iterator[tuple[list[str | int], str]]:
    """Where each list of view paths of a policy file is (the steps to it), and its
    field's name."""
    if rel == PRIVACY:
        rules = _at(data, ["load", "channel_rules"])
        for channel in rules if isinstance(rules, dict) else []:
            yield (["load", "channel_rules", channel, "suppress_views"],
                   f"load.channel_rules.{channel}.suppress_views")
        return
    entries = data.get("channels")
    if isinstance(entries, list):  # seed 002 §4.2 form: [{name: CHANNEL, default_load_views}]
        for number, entry in enumerate(entries):
            name = entry.get("name") if isinstance(entry, dict) else None
            yield ["channels", number, "default_load_views"], f"channels.{name}.default_load_views"
    elif isinstance(entries, dict):
        for channel in entries:
            yield (["channels", channel, "default_load_views"],
                   f"channels.{channel}.default_load_views")


def _at(data: Any, steps: list[str | int]) -> Any:
    """The value at `steps` (mapping keys, list indexes), or None."""
    for step in steps:
        if isinstance(data, dict):
            data = data.get(step)
        elif isinstance(data, list) and isinstance(step, int) and step < len(data):
            data = data[step]
        else:
            return None
    return data


def pinned_view_too_big(rows: FileRows, budgets: Budgets, text: str,
                        display: str) -> list[FormatError]:
    """A warning when a pinned view (its rows, the file's `text`) costs more than its
    section's cap: every bundle, at the full budget too, shows it cut to fit, and what
    is cut off reaches no agent."""
    problems = []
    for path, section, pinned, *_, max_tokens, _ in rows.tables["views"]:
        if section not in budgets.sections:
            continue  # no cap to compare with: `sections_unbudgeted` (or the file's problem)
        cap = budgets.sections[section].max_tokens
        chunks = [c for c in rows.tables["view_chunks"] if c[0] == path]
        cost = header_tokens(section) + sum(
            size + ITEM_SEPARATOR_TOKENS for size in _loaded([c[6] for c in chunks], max_tokens))
        if pinned and cost > cap:
            room = cap - header_tokens(section) - ITEM_SEPARATOR_TOKENS
            first = {"text": chunks[0][5], "token_est": chunks[0][6],
                     "source": f"{path}#{chunks[0][1]}"} if chunks else None
            shown = ("leaves it out: a cut to that cap would show too little of it"
                     if first is not None and first["token_est"] > room
                     and cut_to_fit(first, room) is None else "shows it cut to fit")
            problems.append(FormatError(
                f"a pinned view of {cost} tokens, but its section {section} holds {cap} "
                f"(sections.{section}.max_tokens in policies/budgets.yaml): every bundle "
                f"{shown}; shorten it, move a part of it to a view of its own, "
                "or raise that cap", path=display, line=field_line(text, "pinned"),
                field="pinned", severity="warning"))
    return problems


def _loaded(sizes: list[int], max_tokens: int | None) -> list[int]:
    """The sizes of the chunks of a view that build_acb loads (its `max_tokens` keeps
    the chunks before the first that would go past it)."""
    if max_tokens is None:
        return sizes
    kept: list[int] = []
    for size in sizes:
        if sum(kept) + size > max_tokens:
            break
        kept.append(size)
    return kept
