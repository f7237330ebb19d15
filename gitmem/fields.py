"""A record's frontmatter fields, read with the checks the records share.

A person who hand-edits a record file with three mistakes should see all three at
once, not one per `gitmem verify`. So a check that fails here is noted, not raised:
its read gives a stand-in value and the reading goes on, and `raise_problems` then
raises every problem of the file together (gitmem/errors.py: the first, in line
order, carrying the rest as `others`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gitmem.errors import FormatError, ValidationError
from gitmem.records import (
    SENSITIVITIES,
    check_choice,
    check_id,
    check_name,
    check_number,
    check_refs,
    check_str_list,
    check_text,
    parse_ts,
)

T = TypeVar("T")


def unknown_keys(meta: Mapping[str, Any], allowed: tuple[str, ...]) -> list[ValidationError]:
    """An error for each key of `meta` that is not `allowed`."""
    return [ValidationError(f"unknown field; expected only {', '.join(allowed)}", field=key)
            for key in sorted(set(meta) - set(allowed))]


class Fields:
    """A record's metadata, read key by key; a failing check names its key and is kept
    in `problems` while its read returns a stand-in (the record is never built from
    one: `raise_problems` comes first)."""

    def __init__(self, meta: Mapping[str, Any], allowed: tuple[str, ...],
                 default_tenant: str) -> None:
        self.meta = dict(meta)
        self.default_tenant = default_tenant
        self.problems: list[FormatError] = list(unknown_keys(self.meta, allowed))

    def checked(self, read: Callable[[], T], stand_in: T) -> T:
        """What `read` returns, or `stand_in` once its problem is noted."""
        try:
            return read()
        except FormatError as exc:
            self.problems.append(exc)
            return stand_in

    def fail(self, problem: FormatError) -> None:
        """Note a problem a record finds beyond its fields' own checks."""
        self.problems.append(problem)

    def raise_problems(self, locate: Callable[[FormatError], FormatError]) -> None:
        """Raise every problem noted, each located by `locate`, in line order (a missing
        field, at line 1, first): the first error, carrying the others."""
        if not self.problems:
            return
        first, *rest = sorted(map(locate, self.problems), key=lambda e: e.line or 0)
        raise first.with_others(rest)

    def id(self, prefix: str) -> str:
        return self.checked(lambda: check_id(self.meta.get("id"), prefix), "")

    def ts(self) -> str:
        def read() -> str:
            ts = check_text(self.meta.get("ts"), "ts")
            parse_ts(ts)
            return ts
        return self.checked(read, "")

    def tenant(self) -> str:
        return self.name("tenant_id", self.default_tenant)

    def name(self, key: str, default: str | None = None) -> str:
        return self.checked(lambda: check_name(self.meta.get(key, default), key), "")

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        return self.checked(lambda: check_choice(self.meta.get(key, default), choices, key),
                            default)

    def sensitivity(self) -> str:
        return self.choice("sensitivity", "none", SENSITIVITIES)

    def text(self, key: str) -> str:
        """A required text."""
        return self.checked(lambda: check_text(self.meta.get(key), key), "")

    def optional_text(self, key: str) -> str:
        return self.checked(lambda: check_text(self.meta.get(key, ""), key, allow_empty=True),
                            "")

    def body(self, body: str) -> str:
        """The body's text, which a decision and a summary must have."""
        return self.checked(lambda: check_text(body.strip(), "body"), "")

    def number(self, key: str, lo: float, hi: float) -> float | None:
        """An optional number in [lo, hi]."""
        value = self.meta.get(key)
        return None if value is None else self.checked(
            lambda: check_number(value, key, lo, hi), None)

    def strings(self, key: str) -> tuple[str, ...]:
        return self.checked(lambda: check_str_list(self.meta.get(key), key), ())

    def ids(self, key: str, prefix: str) -> tuple[str, ...]:
        return self.checked(lambda: tuple(check_id(v, prefix, key) for v in check_str_list(
            self.meta.get(key), key)), ())

    def refs(self, required: str = "") -> tuple[str, ...]:
        """The cited ids; `required`: the message when a record must cite some."""
        def read() -> tuple[str, ...]:
            refs = check_refs(self.meta.get("refs"))
            if required and not refs:
                raise ValidationError(required, field="refs")
            return refs
        return self.checked(read, ())
