"""Reading a policy file's YAML: typed values, each bad one a `FormatError` at its line.

`PolicyReader` is what the parsers of gitmem/policies.py read a file through: a
value of the wrong type, a key nobody reads (a typo) and a value out of range are
named as `path:line`, the line found by `yaml_line`. A reader raises the first
problem, or, given a list for them, adds each to it and goes on with the default:
`gitmem verify` names every problem of a file at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from gitmem.errors import FormatError, ValidationError
from gitmem.yamlio import load_yaml

INTEGER_MAX = 2**31 - 1  # PostgreSQL's integer
NUMBER_MAX = 1e6  # a weight or a number of days


class PolicyReader:
    """Typed access to a YAML mapping that names `path:line` on error.

    With `errors`, a problem is added to it and the reader goes on: a bad value reads
    as its default, and a file that is not YAML as an empty mapping.
    """

    def __init__(self, text: str, path: str, errors: list[FormatError] | None = None) -> None:
        self.text, self.path, self.errors = text, path, errors
        self.data: Mapping[str, Any] = {}
        self.loaded = False  # the text was YAML (else its one problem is said already)
        try:
            self.data = load_yaml(text, path)
            self.loaded = True
        except FormatError as exc:
            self.report(exc)

    def report(self, error: FormatError) -> None:
        """Raise the problem, or add it to `errors` to go on."""
        if self.errors is None:
            raise error
        self.errors.append(error)

    def problem(self, key: str, message: str, item: int | None = None) -> None:
        """Report a problem at the line of `key` (see `fail`)."""
        self.report(self.fail(key, message, item))

    def fail(self, key: str, message: str, item: int | None = None) -> FormatError:
        """An error at the line of `key` (dotted), or of its list element `item`."""
        steps: list[str | int] = [*key.split(".")]
        if item is not None:
            steps.append(item)
        line = yaml_line(self.text, steps) or 1
        return ValidationError(message, path=self.path, line=line, field=key)

    def known(self, src: Mapping[str, Any], name: str, allowed: tuple[str, ...]) -> None:
        """Refuse keys a person may have misspelt: a typo must not fall back silently."""
        for key in src:
            if key not in allowed:
                where = f"{name}.{key}" if name else str(key)
                self.problem(where, f"unknown field {key!r}; expected one of "
                                    f"{', '.join(allowed)}")

    def mapping(self, src: Mapping[str, Any], key: str, name: str) -> Mapping[str, Any]:
        value = src.get(key, {})
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(name, f"expected a mapping, got {type(value).__name__}")
            return {}
        return value

    def integer(self, src: Mapping[str, Any], key: str, name: str, default: int,
                lo: int = 0) -> int:
        """An integer from `lo` to INTEGER_MAX (a count or a number of tokens: one past
        what PostgreSQL and `islice` take crashed every build)."""
        value = src.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            self.problem(name, f"expected an integer >= {lo}, got {value!r}")
            return default
        if value > INTEGER_MAX:
            self.problem(name, f"expected an integer <= {INTEGER_MAX}, got {value!r}")
            return default
        return value

    def number(self, src: Mapping[str, Any], key: str, name: str, default: float) -> float:
        """A number from 0 to NUMBER_MAX (`.nan` and `.inf` are YAML's floats too; a
        weight of 1e300 overflowed PostgreSQL's scores, 1 and 400 zeros a float)."""
        value = src.get(key, default)
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not 0 <= value <= NUMBER_MAX):
            self.problem(name, f"expected a number from 0 to {NUMBER_MAX:,.0f}, "
                               f"got {value!r}")
            return float(default)
        return float(value)

    def strings(self, src: Mapping[str, Any], key: str, name: str,
                choices: tuple[str, ...] | None = None) -> tuple[str, ...]:
        value = src.get(key, [])
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problem(name, "expected a list of strings")
            return ()
        if choices is not None:
            bad = [v for v in value if v not in choices]
            if bad:
                self.problem(name, f"expected values from {'|'.join(choices)}, got {bad[0]!r}")
                return tuple(v for v in value if v in choices)
        return tuple(value)


def yaml_line(text: str, steps: Sequence[str | int]) -> int | None:
    """The 1-based line of the node at `steps` (mapping keys, list indexes) in YAML
    text: the deepest step found, or None."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for step in steps:
        if isinstance(node, yaml.MappingNode) and isinstance(step, str):
            found = next(((k, v) for k, v in node.value
                          if isinstance(k, yaml.ScalarNode) and k.value == step), None)
            if found is None:
                break
            line, node = found[0].start_mark.line + 1, found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) \
                and 0 <= step < len(node.value):
            node = node.value[step]
            line = node.start_mark.line + 1
        else:
            break
    return line
