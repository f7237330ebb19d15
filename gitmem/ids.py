"""Identifiers: a type prefix plus a ULID (time-sortable, unique across machines)."""

from __future__ import annotations

import hashlib
import re
import threading
from datetime import datetime

from ulid import ULID

PREFIXES = ("evt", "dec", "tsk", "sum", "hof")
ULID_ID = re.compile(r"^(evt|dec|tsk|sum|hof)_[0-9A-HJKMNP-TV-Z]{26}$")
ARTIFACT_ID = re.compile(r"^art_[0-9a-f]{64}$")
ANY_REF = re.compile(r"^(?:(?:evt|dec|tsk|sum|hof)_[0-9A-HJKMNP-TV-Z]{26}|art_[0-9a-f]{64})$")

_lock = threading.Lock()
_last: dict[str, int] = {}


def new_id(prefix: str, at: datetime | None = None) -> str:
    """A fresh `<prefix>_<ULID>`; the ULID's time part is `at` (default now).

    Ids minted in one process for the same millisecond increase strictly, so a
    burst of writes sorts in the order it was made.
    """
    if prefix not in PREFIXES:
        raise ValueError(f"unknown id prefix {prefix!r}; expected one of {PREFIXES}")
    ulid = ULID.from_datetime(at) if at is not None else ULID()
    value = int(ulid)
    with _lock:
        last = _last.get(prefix, 0)
        if value >> 80 == last >> 80 and value <= last:
            value = last + 1
        _last[prefix] = value
    return f"{prefix}_{ULID.from_int(value)}"


def artifact_id(data: bytes) -> str:
    """The content address of an artifact: `art_` + sha256 hex of its bytes."""
    return "art_" + hashlib.sha256(data).hexdigest()


def id_kind(ref: str) -> str | None:
    """The prefix of a well-formed id (`evt`, `dec`, ..., `art`), else None."""
    return ref.split("_", 1)[0] if ANY_REF.match(ref) else None
