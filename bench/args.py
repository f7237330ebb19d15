"""Argument types the benchmark's commands share: each refuses a value that would
fail later, or silently measure nothing, with argparse's own message."""

from __future__ import annotations

import argparse

from gitmem.config import check_schema
from gitmem.errors import ConfigError


def count(text: str) -> int:
    """A whole number of at least 1 (passes, repeats)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def schema(text: str) -> str:
    """A schema name gitmem accepts (checked before a connection waits on it)."""
    try:
        return check_schema(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
