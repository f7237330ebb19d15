"""Identifiers: a type prefix plus a ULID (time-sortable, unique across machines)."""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from datetime import UTC, datetime, timedelta

from ulid import ULID

PREFIXES = ("evt", "dec", "tsk", "sum", "hof")
ULID_ID = re.compile(r"^(evt|dec|tsk|sum|hof)_[0-9A-HJKMNP-TV-Z]{26}$")
# an event id anywhere in a file's bytes: an event's own, or one it cites
ANY_EVENT_ID = re.compile(rb"evt_[0-9A-HJKMNP-TV-Z]{26}")
ARTIFACT_ID = re.compile(r"^art_[0-9a-f]{64}$")
ANY_REF = re.compile(r"^(?:(?:evt|dec|tsk|sum|hof)_[0-9A-HJKMNP-TV-Z]{26}|art_[0-9a-f]{64})$")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_lock = threading.Lock()
_last: dict[str, int] = {}


def new_id(prefix: str, at: datetime | None = None) -> str:
    """A fresh `<prefix>_<ULID>`; the ULID's time part is `at` (default now).

    Ids minted in one process for the same millisecond increase strictly, so a
    burst of writes sorts in the order it was made. The random part comes from the
    operating system for every new millisecond (python-ulid's own generator gives
    the first id of its process at 1970-01-01T00:00:00Z no random part: one id for
    every such event, on every machine).
    """
    if prefix not in PREFIXES:
        raise ValueError(f"unknown id prefix {prefix!r}; expected one of {PREFIXES}")
    millis = (time.time_ns() // 1_000_000 if at is None
              else (at.astimezone(UTC) - EPOCH) // timedelta(milliseconds=1))
    value = millis << 80 | int.from_bytes(os.urandom(10), "big")
    with _lock:
        last = _last.get(prefix, 0)
        if value >> 80 == last >> 80 and value <= last:
            value = last + 1
        _last[prefix] = value
    return f"{prefix}_{ULID.from_int(value)}"


_CROCKFORD = str.maketrans("0123456789ABCDEFGHJKMNPQRSTVWXYZ", "0123456789abcdefghijklmnopqrstuv")
# a ULID's 26 characters; its first is at most 7, or its 130 bits overflow 128
_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", re.IGNORECASE)


def millis_of(record_id: str) -> int | None:
    """The time the ULID of `<prefix>_<ULID>` carries, in milliseconds since the
    epoch (an id gitmem minted carries its record's time); None when the rest is not
    a ULID. Decoded directly: an index build asks it of every event."""
    body = record_id.partition("_")[2]
    if _ULID.fullmatch(body) is None:
        return None
    return int(body[:10].upper().translate(_CROCKFORD), 32)


def time_of(record_id: str) -> datetime | None:
    """`millis_of` as a time in UTC (None past 9999-12-31, where a ULID's 48 bits still
    reach)."""
    millis = millis_of(record_id)
    try:
        return None if millis is None else EPOCH + timedelta(milliseconds=millis)
    except OverflowError:
        return None


def artifact_id(data: bytes) -> str:
    """The content address of an artifact: `art_` + sha256 hex of its bytes."""
    return "art_" + hashlib.sha256(data).hexdigest()


def id_kind(ref: str) -> str | None:
    """The prefix of a well-formed id (`evt`, `dec`, ..., `art`), else None."""
    return ref.split("_", 1)[0] if ANY_REF.match(ref) else None
