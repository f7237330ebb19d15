"""Scenario files (`scenarios/*.scenario.yaml`): their format, and running a suite.

A scenario is a story a user would tell, with measurable assertions (P8,
docs/SCENARIOS.md). `load_scenario` validates a whole file before anything
runs: a malformed file is a `ScenarioError` naming `file:line`, the step and
what is wrong. `run_scenarios` runs each in a fresh git repository and its own
PostgreSQL schema and writes `reports/run_<ts>.report.json`:

    scenario.py  the format: load, validate, `$name` substitution, the clock
    steps.py     what each step does to a real store (`Run`)
    assertions.py  what each assertion checks
    harness.py   one scenario, a suite, the report
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from gitmem.consistency import CONFLICT_KINDS
from gitmem.errors import GitmemError, ScenarioError, ValidationError
from gitmem.packing import OMISSION_REASONS
from gitmem.policies import SECTIONS
from gitmem.records import (
    CHANNELS,
    KINDS,
    SENSITIVITIES,
    TS_END,
    TS_MIN,
    TS_RANGE,
    format_ts,
    parse_ts,
)
from gitmem.yamlio import SafeLoader, yaml_problem

PRINCIPLES = ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "G1")
TOP_KEYS = ("id", "title", "principles", "budget_tokens", "now", "description", "defaults",
            "setup", "steps", "assertions")
DEFAULT_KEYS = ("session", "agent", "tenant", "channel", "actor")
MODIFIERS = ("name", "as", "at", "advance", "repeat", "every", "assertions", "expect_error")
_EVENT = {"session": "str", "agent": "str", "tenant": "str", "tags": "strs",
          "sensitivity": "str", "refs": "strs"}
# action -> field -> type. A bare value (`git: commit`, `reindex: true`) is allowed
# where BARE names what it means.
ACTIONS: dict[str, dict[str, str]] = {
    "record": {"text": "str", "content": "map", "kind": "str", "channel": "str",
               "actor": "str", "tool": "str", "path": "str", "output": "output",
               "args": "map", **_EVENT},
    "decide": {"text": "str!", "supersedes": "strs", "rationale": "strs", "title": "str",
               "scope": "str", "constraints": "strs", "alternatives": "strs",
               "consequences": "strs", "confidence": "num", **_EVENT, "refs": "strs!"},
    "task": {"title": "str", "status": "str", "task_id": "str", "details": "str",
             "owner": "str", **_EVENT},
    "summary": {"text": "str!", "decisions": "strs", "scope": "str", "channel": "str",
                **_EVENT, "refs": "strs!"},
    "handoff": {"to_agent": "str!", "task": "str!", "from_agent": "str", "constraints": "strs",
                "decisions": "strs", "required_files": "strs", "open_questions": "strs",
                "refs": "strs", "tenant": "str"},
    "write": {"path": "str!", "text": "str!"},
    "edit": {"path": "str!", "replace": "map!"},
    "delete": {"path": "str!"},
    "acb": {"query": "str", "channel": "str", "session": "str", "agent": "str",
            "tenant": "str", "intent": "str", "max_tokens": "int", "handoff": "str",
            "now": "str", "cold": "bool"},
    "git": {"commit": "str", "branch": "str", "checkout": "str", "merge": "str"},
    "reindex": {"drop": "bool"},
    "sync": {},
    "reopen": {},
    "daemon": {"action": "str!"},
}
BARE = {"git": "commit", "reindex": None, "sync": None, "reopen": None, "daemon": "action",
        "acb": "query", "delete": "path"}
DAEMON_ACTIONS = ("start", "stop", "kill", "restart")
# The values an assertion's field may name: a misspelt reason, item type, section or
# conflict kind is never found, so `present: false` or a not-contains would pass.
ASSERTION_VALUES: dict[str, tuple[str, ...]] = {
    "reason": OMISSION_REASONS,
    "item_type": tuple(dict.fromkeys((*KINDS, "task", "view", "handoff"))),
    "section": SECTIONS,
    "kind": CONFLICT_KINDS,
}
ERRORS = ("PrivacyError", "ValidationError", "FormatError", "StoreError", "GitError",
          "GitmemError")
_ACB = {"acb": "str"}
# assertion type -> parameter -> type ("!" = required)
ASSERTIONS: dict[str, dict[str, str]] = {
    "event_exists": {"where": "map", "count": "int", "min": "int", "max": "int"},
    "acb_max_tokens": {"max": "int!", **_ACB},
    "acb_within_caps": {**_ACB},
    "acb_section_contains": {"section": "str", "contains": "str", "id": "str",
                             "item_type": "str", "count": "int", **_ACB},
    "acb_section_not_contains": {"section": "str", "contains": "str", "id": "str",
                                 "item_type": "str", **_ACB},
    "acb_contains_ref": {"ref": "str!", "section": "str", **_ACB},
    "acb_not_contains_ref": {"ref": "str!", "section": "str", **_ACB},
    "acb_sections": {"only": "strs", "non_empty": "strs", **_ACB},
    "acb_path": {"path": "str!", **_ACB},
    "item_max_tokens": {"max": "int!", "section": "str", "item_type": "str", **_ACB},
    "traceability": {"target": "str", "must_have_refs": "bool", **_ACB},
    "decision_active": {"decision": "str!", "tenant": "str"},
    "decision_superseded": {"decision": "str!", "by": "str", "tenant": "str"},
    "omission": {"reason": "str!", "ref": "str", "artifact": "bool", "min": "int",
                 "present": "bool", **_ACB},
    "pinned_included": {"refs": "strs", **_ACB},
    "no_duplicates": {**_ACB},
    "conflict_flagged": {"summary": "str!", "kind": "str", "decision": "str", "ref": "str",
                         "present": "bool", "where": "str", **_ACB},
    "index_equivalent": {},
    "index_fresh": {},
    "deterministic": {"after_reindex": "bool", "fresh": "bool", **_ACB},
    "acb_build_latency_p95_ms": {"max": "num!", "runs": "int", "cold": "bool", **_ACB},
    "acb_build_latency_max_ms": {"max": "num!", "runs": "int", "cold": "bool", **_ACB},
    "acb_candidate_scan_max": {"max": "int!", **_ACB},
    "not_stored": {"text": "str!"},
}
_REF = re.compile(r"^\$([A-Za-z_]\w*)(?:\[(-?\d+)\])?$")
_EMBEDDED = re.compile(r"\$\{([A-Za-z_]\w*)(?:\[(-?\d+)\])?\}")
_DURATION = re.compile(r"^([+-]?)(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class Step:
    """One validated step: its action, the action's fields and the modifiers."""

    number: int          # 1-based
    action: str
    fields: Mapping[str, Any]
    name: str = ""
    bind: str = ""       # `as`
    at: str | None = None
    advance: float = 0.0  # seconds
    every: float = 1.0    # seconds the clock moves per write
    repeat: int = 0
    assertions: tuple[Mapping[str, Any], ...] = ()
    expect_error: str = ""
    line: int | None = None
    clock: Mapping[str, tuple[str, int | None]] = field(default_factory=dict)  # at, advance,
    # every: as the file wrote them, and their lines (a clock error quotes and cites them)

    @property
    def label(self) -> str:
        """`step 3 (record: "name")` for messages."""
        named = f' "{self.name}"' if self.name else ""
        return f"step {self.number} ({self.action}{named})"


@dataclass(frozen=True)
class Scenario:
    """A validated scenario file."""

    path: Path
    id: str
    title: str
    principles: tuple[str, ...]
    budget_tokens: int
    now: datetime
    steps: tuple[Step, ...]
    assertions: tuple[Mapping[str, Any], ...] = ()
    defaults: Mapping[str, str] = field(default_factory=dict)
    setup: Mapping[str, str] = field(default_factory=dict)   # store-relative path -> text
    description: str = ""


class _Checker:
    """Validation with messages that name file:line, the step and the field."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.text = path, text
        self._root: yaml.Node | None = None

    def line(self, where: Sequence[str | int]) -> int | None:
        """The 1-based line of the node at `where` (the file is composed once)."""
        if self._root is None:
            self._root = yaml.compose(self.text)
        node, line = self._root, None
        for step in where:
            if isinstance(node, yaml.MappingNode) and isinstance(step, str):
                found = next((v for k, v in node.value if k.value == step), None)
                if found is None:
                    break
                node = found
            elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) \
                    and 0 <= step < len(node.value):
                node = node.value[step]
            else:
                break
            line = node.start_mark.line + 1
        return line

    def fail(self, where: Sequence[str | int], message: str, step: str = "") -> ScenarioError:
        line = self.line(where)
        location = f"{self.path}:{line}" if line else str(self.path)
        prefix = f"{step}: " if step else ""
        return ScenarioError(f"{location}: {prefix}{message}")

    def typed(self, value: Any, kind: str, where: Sequence[str | int], name: str,
              step: str = "") -> None:
        kind = kind.rstrip("!")
        ok = {"str": isinstance(value, str),
              "strs": isinstance(value, str) or (isinstance(value, list) and all(
                  isinstance(v, str) for v in value)),
              "int": isinstance(value, int) and not isinstance(value, bool),
              "num": isinstance(value, int | float) and not isinstance(value, bool),
              "bool": isinstance(value, bool),
              "map": isinstance(value, dict),
              "output": isinstance(value, str) or (isinstance(value, dict) and set(value) <= {
                  "line", "lines"} and isinstance(value.get("line"), str)
                  and isinstance(value.get("lines"), int))}[kind]
        if not ok:
            wanted = {"str": "a string", "strs": "a string or a list of strings",
                      "int": "an integer", "num": "a number", "bool": "true or false",
                      "map": "a mapping", "output": "a string or {line: TEXT, lines: N}"}[kind]
            raise self.fail(where, f"field {name!r}: expected {wanted}, got {value!r}", step)

    def params(self, data: Any, spec: Mapping[str, str], where: list[str | int], what: str,
               step: str = "") -> None:
        if not isinstance(data, dict):
            raise self.fail(where, f"{what}: expected a mapping, got {data!r}", step)
        for key, value in data.items():
            if key not in spec:
                raise self.fail([*where, key], f"{what}: unknown field {key!r}; expected one "
                                f"of {', '.join(sorted(spec))}", step)
            self.typed(value, spec[key], [*where, key], key, step)
        for key, kind in spec.items():
            if kind.endswith("!") and key not in data:
                raise self.fail(where, f"{what}: missing required field {key!r}", step)


def parse_duration(text: str) -> float:
    """Seconds in `30s`, `5m`, `2h`, `21d`, `3w` (signed); ValueError otherwise."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ValueError(f"expected a duration like 30s, 5m, 2h, 21d or 3w, got {text!r}")
    sign = -1.0 if match.group(1) == "-" else 1.0
    return sign * float(match.group(2)) * _UNITS[match.group(3)]


def resolve_at(value: str, now: datetime, field: str = "at") -> datetime:
    """`at:` (or an acb step's `now:`) as a time: an RFC 3339 timestamp, `now`, or an
    offset from the scenario's `now` (-21d). An error names all three forms: a date
    alone is none of them, and the author may have meant any."""
    text = value.strip()
    if text == "now":
        return now
    if text[:1] in "+-":
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            raise ScenarioError(f"field {field!r}: {exc} (an offset from the scenario's now); "
                                f"`{field}:` also takes an RFC 3339 timestamp like "
                                "2026-02-09T05:12:33+09:00, or `now`") from None
        return moved(now, seconds, field, text)
    try:
        return parse_ts(text, field)
    except ValidationError as exc:
        raise ScenarioError(f"field {field!r}: {exc.detail}; `{field}:` also takes `now`, or an "
                            "offset from the scenario's now like -35d or +2h") from None


def moved(when: datetime, seconds: float, field: str, value: str) -> datetime:
    """`when` moved by `seconds`; a ScenarioError naming `field` and its `value` where that
    leaves the range the index holds, or the calendar (`at: +3000000d` did, with an
    OverflowError's traceback)."""
    try:
        later: datetime | None = when + timedelta(seconds=seconds)
    except OverflowError:
        later = None
    if later is None or not TS_MIN <= later < TS_END:
        raise ScenarioError(f"field {field!r}: {value!r} moves the clock from {format_ts(when)} "
                            f"outside {TS_RANGE}, the range ids and the index can hold")
    return later


def _check_at(check: _Checker, value: Any, now: datetime, where: list[str | int],
              label: str, field: str = "at") -> datetime:
    """`at:` or an acb step's `now:` as a time; an error cites the field's own line."""
    try:
        return resolve_at(str(value), now, field)
    except ScenarioError as exc:
        raise check.fail(where, str(exc), label) from None


def _duration(check: _Checker, modifiers: Mapping[str, Any], key: str,
              where: list[str | int], label: str, start: datetime) -> float:
    """`advance:` or `every:` in seconds, moving the clock forward from `start` (0 when not
    given) and not out of the calendar; an error cites the field's own line."""
    if key not in modifiers:
        return 0.0
    text = str(modifiers[key])
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise check.fail([*where, key], f"field {key!r}: {exc}", label) from None
    if seconds < 0 or (seconds == 0 and key == "every"):  # before the range: `-9e9d` is that
        raise check.fail([*where, key], f"field {key!r}: must move the clock forward, got "
                         f"{text!r}", label)
    try:
        moved(start, seconds, key, text)
    except ScenarioError as exc:
        raise check.fail([*where, key], str(exc), label) from None
    return seconds


def load_scenario(path: Path) -> Scenario:
    """Read and validate one scenario file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.load(text, Loader=SafeLoader)  # timestamps as written: `now` is checked
    except yaml.MarkedYAMLError as exc:
        problem, line = yaml_problem(exc)
        raise ScenarioError(f"{path}:{line}: not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    check = _Checker(path, text)
    if not isinstance(data, dict):
        raise check.fail([], "expected a mapping with id, title, principles, now, steps")
    for key in data:
        if key not in TOP_KEYS:
            raise check.fail([key], f"unknown top-level field {key!r}; expected one of "
                             f"{', '.join(TOP_KEYS)}")
    for key in ("id", "title", "principles", "now", "steps"):
        if key not in data:
            raise check.fail([], f"missing required field {key!r}")
    if not isinstance(data["id"], str) or not re.match(r"^SCN-[A-Z0-9-]+$", data["id"]):
        raise check.fail(["id"], f"field 'id': expected SCN-<name>, got {data['id']!r}")
    principles = data["principles"]
    if not isinstance(principles, list) or not principles or any(
            p not in PRINCIPLES for p in principles):
        raise check.fail(["principles"], f"field 'principles': expected a non-empty list of "
                         f"{', '.join(PRINCIPLES)}, got {principles!r}")
    budget = data.get("budget_tokens", 65000)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise check.fail(["budget_tokens"], f"field 'budget_tokens': expected a positive "
                         f"integer, got {budget!r}")
    try:
        now = parse_ts(data["now"], "now")
    except GitmemError as exc:
        raise check.fail(["now"], str(exc)) from None  # it names the field
    defaults = data.get("defaults") or {}
    check.params(defaults, dict.fromkeys(DEFAULT_KEYS, "str"), ["defaults"], "defaults")
    setup = _setup(check, data.get("setup") or {})
    steps = data["steps"]
    if not isinstance(steps, list) or not steps:
        raise check.fail(["steps"], "field 'steps': expected a non-empty list of steps")
    bound: set[str] = set()
    parsed = tuple(_step(check, raw, number, bound, now)
                   for number, raw in enumerate(steps, start=1))
    finals = data.get("assertions") or []
    if not isinstance(finals, list):
        raise check.fail(["assertions"], "field 'assertions': expected a list")
    for index, item in enumerate(finals):
        _assertion(check, item, ["assertions", index], "final assertions", bound)
    return Scenario(path=path, id=data["id"], title=str(data["title"]),
                    principles=tuple(principles), budget_tokens=budget, now=now,
                    steps=parsed, assertions=tuple(finals), defaults=dict(defaults),
                    setup=setup, description=str(data.get("description") or ""))


def _setup(check: _Checker, setup: Any) -> dict[str, str]:
    check.params(setup, {"views": "map", "policies": "map", "files": "map"}, ["setup"],
                 "setup")
    files: dict[str, str] = {}
    for group, prefix in (("views", "views/"), ("policies", "policies/"), ("files", "")):
        for name, body in (setup.get(group) or {}).items():
            if not isinstance(body, str):
                raise check.fail(["setup", group, name], f"setup.{group}.{name}: expected "
                                 "the file's text (use a YAML block scalar: |)")
            rel = name if name.startswith(prefix) else prefix + name
            if rel.startswith("/") or ".." in rel.split("/"):
                raise check.fail(["setup", group, name], f"setup.{group}: {name!r} must be a "
                                 "path inside the store")
            files[rel] = body
    return files


def _step(check: _Checker, raw: Any, number: int, bound: set[str], now: datetime) -> Step:
    where: list[str | int] = ["steps", number - 1]
    label = f"step {number}"
    if not isinstance(raw, dict):
        raise check.fail(where, f"expected a mapping with one action ({', '.join(ACTIONS)}), "
                         f"got {raw!r}", label)
    actions = [key for key in raw if key in ACTIONS]
    unknown = [key for key in raw if key not in ACTIONS and key not in MODIFIERS]
    if unknown:
        raise check.fail([*where, unknown[0]], f"unknown key {unknown[0]!r}; expected one "
                         f"action ({', '.join(ACTIONS)}) and modifiers "
                         f"({', '.join(MODIFIERS)})", label)
    if len(actions) != 1:
        raise check.fail(where, f"expected exactly one action, found {actions or 'none'}",
                         label)
    action = actions[0]
    label = f"step {number} ({action})"
    body = raw[action]
    if not isinstance(body, dict):
        bare = BARE.get(action, "")
        if action not in BARE or (bare is None and body is not True) or (
                bare and not isinstance(body, str)):
            raise check.fail([*where, action], "expected a mapping of fields"
                             + (f" or a string ({bare})" if bare else
                                " or true" if action in BARE else ""), label)
        body = {} if bare is None else {bare: body}
    check.params(body, ACTIONS[action], [*where, action], action, label)
    _action_values(check, action, body, [*where, action], label)
    modifiers = {k: raw[k] for k in MODIFIERS if k in raw and k != "assertions"}
    check.params(modifiers, {"name": "str", "as": "str", "at": "str", "advance": "str",
                             "repeat": "int", "every": "str", "expect_error": "str"},
                 where, "step", label)
    _refs_bound(check, body, bound, [*where, action], label)
    at = modifiers.get("at")
    start = now if at is None else _check_at(check, at, now, [*where, "at"], label)
    if action == "acb" and body.get("now"):
        _check_at(check, body["now"], now, [*where, action, "now"], label, "now")
    advance = _duration(check, modifiers, "advance", where, label, start)
    every = _duration(check, modifiers, "every", where, label, start) or 1.0
    repeat = modifiers.get("repeat", 0)
    if not 1 <= repeat <= 100000 and "repeat" in modifiers:
        raise check.fail([*where, "repeat"], f"field 'repeat': expected 1..100000, got "
                         f"{repeat!r}", label)
    if modifiers.get("expect_error") and modifiers["expect_error"] not in ERRORS:
        raise check.fail([*where, "expect_error"], f"field 'expect_error': expected one of "
                         f"{', '.join(ERRORS)}", label)
    bind = str(modifiers.get("as", ""))
    if bind and not re.match(r"^[A-Za-z_]\w*$", bind):
        raise check.fail([*where, "as"], f"field 'as': expected a name like e1, got {bind!r}",
                         label)
    items = raw.get("assertions") or []
    if not isinstance(items, list):
        raise check.fail([*where, "assertions"], "field 'assertions': expected a list", label)
    if bind:
        bound.add(bind)
    for index, item in enumerate(items):
        _assertion(check, item, [*where, "assertions", index], label, bound)
    return Step(number=number, action=action, fields=body, name=str(modifiers.get("name", "")),
                bind=bind, at=None if at is None else str(at), advance=advance, every=every,
                repeat=repeat, assertions=tuple(items),
                expect_error=str(modifiers.get("expect_error", "")),
                line=check.line(where),
                clock={k: (str(modifiers[k]), check.line([*where, k]))
                       for k in ("at", "advance", "every") if k in modifiers})


def _action_values(check: _Checker, action: str, body: Mapping[str, Any],
                   where: list[str | int], label: str) -> None:
    choices = {"channel": CHANNELS, "sensitivity": SENSITIVITIES, "kind": KINDS}
    for key, allowed in choices.items():
        if key in body and body[key] not in allowed:
            raise check.fail([*where, key], f"field {key!r}: expected one of "
                             f"{'|'.join(allowed)}, got {body[key]!r}", label)
    if action == "record" and not ({"text", "content", "output", "tool"} & set(body)):
        raise check.fail(where, "record: give text, content, or tool/output", label)
    if action == "task" and not {"title", "task_id"} & set(body):
        raise check.fail(where, "task: missing required field 'title' (a new task needs "
                         "one; an update gives task_id, and its title stays)", label)
    if action == "git" and len(body) != 1:
        raise check.fail(where, "git: give exactly one of commit, branch, checkout, merge",
                         label)
    if action == "acb" and body.get("max_tokens", 1) < 1:
        raise check.fail([*where, "max_tokens"], f"acb: field 'max_tokens': expected a "
                         f"positive integer, got {body['max_tokens']}", label)
    if action == "daemon" and body["action"] not in DAEMON_ACTIONS:
        raise check.fail(where, f"daemon: expected one of {', '.join(DAEMON_ACTIONS)}, got "
                         f"{body['action']!r}", label)
    if action in ("write", "edit", "delete"):
        rel = str(body["path"])
        if rel.startswith("/") or ".." in rel.split("/"):
            raise check.fail([*where, "path"], f"{action}: {rel!r} must be a path inside the "
                             "store", label)


def _assertion(check: _Checker, item: Any, where: list[str | int], label: str,
               bound: set[str]) -> None:
    if not isinstance(item, dict) or "type" not in item:
        raise check.fail(where, f"an assertion must be a mapping with a 'type' (one of "
                         f"{', '.join(ASSERTIONS)}), got {item!r}", label)
    kind = item["type"]
    if kind not in ASSERTIONS:
        raise check.fail([*where, "type"], f"unknown assertion type {kind!r}; expected one "
                         f"of {', '.join(ASSERTIONS)}", label)
    params = {k: v for k, v in item.items() if k not in ("type", "name")}
    check.typed(item.get("name", ""), "str", [*where, "name"], "name", label)
    check.params(params, ASSERTIONS[kind], where, f"assertion {kind}", label)
    for key, allowed in ASSERTION_VALUES.items():  # a misspelt one would pass for absent
        if key in params and params[key] not in allowed:
            raise check.fail([*where, key], f"assertion {kind}: field {key!r}: expected one "
                             f"of {'|'.join(allowed)}, got {params[key]!r}", label)
    if kind in ("acb_section_contains", "acb_section_not_contains") and not (
            {"contains", "id", "item_type"} & set(params)):
        raise check.fail(where, f"assertion {kind}: give contains, id or item_type", label)
    _refs_bound(check, params, bound, where, label)


def _refs_bound(check: _Checker, value: Any, bound: set[str], where: list[str | int],
                label: str) -> None:
    """Every `$name` must be bound by an earlier step's `as`."""
    for name in sorted(set(_names(value))):
        if name not in bound:
            raise check.fail(where, f"${name} is not bound by an earlier step (add "
                             f"`as: {name}` to the step that produces it)", label)


def _names(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        match = _REF.match(value)
        if match:
            yield match.group(1)
        for found in _EMBEDDED.finditer(value):
            yield found.group(1)
    elif isinstance(value, list):
        for item in value:
            yield from _names(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _names(item)


def substitute(value: Any, bindings: Mapping[str, Any], i: int | None = None) -> Any:
    """`value` with `$name` / `$name[k]` / `${name}` resolved and `{i}` filled in.

    A `$name` bound to a list (a repeated step) expands in place inside lists.
    """
    if isinstance(value, str):
        if i is not None:
            value = value.replace("{i}", str(i))
        match = _REF.match(value)
        if match:
            return _lookup(bindings, match.group(1), match.group(2))
        return _EMBEDDED.sub(lambda m: str(_lookup(bindings, m.group(1), m.group(2))), value)
    if isinstance(value, list):
        out: list[Any] = []
        for item in value:
            resolved = substitute(item, bindings, i)
            if isinstance(item, str) and _REF.match(item) and isinstance(resolved, list):
                out.extend(resolved)
            else:
                out.append(resolved)
        return out
    if isinstance(value, dict):
        return {k: substitute(v, bindings, i) for k, v in value.items()}
    return value


def _lookup(bindings: Mapping[str, Any], name: str, index: str | None) -> Any:
    if name not in bindings:
        raise ScenarioError(f"${name} is not bound (an acb step's `as:` names an ACB, "
                            "used only as `acb: $name` in assertions)")
    value = bindings[name]
    if index is None:
        return value
    if not isinstance(value, list):
        raise ScenarioError(f"${name}[{index}]: ${name} is not a list (only a repeated "
                            "step binds a list)")
    try:
        return value[int(index)]
    except IndexError:
        raise ScenarioError(f"${name}[{index}]: ${name} holds {len(value)} ids") from None


def run_scenarios(paths: Sequence[Path | str], dsn: str, report_dir: Path | str | None,
                  *, on_result: Callable[[dict[str, Any]], None] | None = None
                  ) -> dict[str, Any]:
    """Run every scenario named by `paths`; write `run_<ts>.report.json` into
    `report_dir` (if given) and return the report (see gitmem.harness.run_suite)."""
    from gitmem.harness import run_suite

    return run_suite(paths, dsn, report_dir, on_result=on_result)
