"""The one error hierarchy of gitmem.

    GitmemError
    ├── ConfigError          no store found, bad flag value, bad DSN
    ├── FormatError          a record or policy file does not parse or validate (path:line);
    │   │                    a record file's further problems ride along (`others`)
    │   └── ValidationError  a field has a wrong value or type
    ├── PrivacyError         a write refused by the privacy policy (secret sensitivity)
    ├── StoreError           the memory tree on disk cannot be read or written
    │   └── UnreadableFileError  a store path holds no regular file (a FIFO, a link loop)
    ├── DatabaseError        the PostgreSQL index cannot be reached or is unusable
    ├── DaemonError          the daemon cannot be started, stopped or reached
    │   └── RpcError         a JSON-RPC call answered with an error
    ├── GitError             a git operation failed or the repository is mid-merge
    ├── VerifyError          `gitmem verify` / a hook found problems (carries them all)
    └── ScenarioError        a scenario file is malformed
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def json_kind(value: Any) -> str:
    """A value's JSON type, as the caller wrote it (`null`, not `NoneType`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    names: dict[type, str] = {str: "string", list: "list", dict: "object"}
    return names.get(type(value), type(value).__name__)


def shown(value: Any) -> str:
    """A value as a message quotes it: a string as Python quotes it (`'gossip'`), any
    other as JSON writes it (`true`, `null`, `[1, 2]`), as the caller wrote it."""
    if isinstance(value, str):
        return repr(value)
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


class GitmemError(Exception):
    """Root of every error gitmem raises on purpose."""


class ConfigError(GitmemError):
    """Configuration or discovery failed (no store, bad option value)."""


class FormatError(GitmemError):
    """A file or record does not parse; names `path:line` and what was expected.

    A record file is checked whole, so one error may stand for several: it is the
    first problem, in the file's line order, and `others` holds the rest. A caller
    that handles one error sees the first (its path, line, field); one that reports
    them lists `problems`. Its text names every problem, one a line.
    """

    def __init__(self, message: str, *, path: str = "", line: int | None = None,
                 field: str | None = None, severity: str = "error",
                 others: Iterable[FormatError] = ()) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.detail = message
        self.severity = severity  # "warning": reported, but no reason to fail a check
        self.others = tuple(others)
        super().__init__("\n".join([self._compose(), *map(str, self.others)]))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as what it was made from (a reindex's workers send errors back)."""
        return (_located_error, (type(self), self.detail, self.path, self.line, self.field,
                                 self.severity, self.others))

    @property
    def location(self) -> str:
        """`path:line`, `path` or '' for an in-memory record."""
        if not self.path:
            return ""
        return f"{self.path}:{self.line}" if self.line is not None else self.path

    @property
    def problems(self) -> list[FormatError]:
        """Every problem this error stands for, each on its own: itself, then `others`."""
        if not self.others:
            return [self]
        return [self._copy(others=()), *self.others]

    def _compose(self) -> str:
        where = self.location
        field = f"field '{self.field}': " if self.field else ""
        return f"{where}: {field}{self.detail}" if where else f"{field}{self.detail}"

    def _copy(self, **changes: Any) -> FormatError:
        made: dict[str, Any] = {"path": self.path, "line": self.line, "field": self.field,
                                "severity": self.severity, "others": self.others}
        return type(self)(changes.pop("message", self.detail), **(made | changes))

    def with_others(self, others: Iterable[FormatError]) -> FormatError:
        """The same error, standing for `others` too (the rest of its file's problems)."""
        return self._copy(others=others)

    def at(self, path: str, line: int | None) -> FormatError:
        """The same error, located in a file (keeps an existing location)."""
        if self.path:
            return self
        return self._copy(path=path, line=line)

    def redacted(self, redact: Callable[[str], str], path: str | None = None) -> FormatError:
        """The same error with its message through `redact` (a value it quotes may be a
        secret), named at `path` when one is given; `others` alike."""
        return self._copy(message=redact(self.detail), path=self.path if path is None else path,
                          others=[o.redacted(redact, path) for o in self.others])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form for status reports and RPC errors (this problem alone:
        a report lists each of `problems`)."""
        return {"path": self.path, "line": self.line, "field": self.field,
                "message": self.detail, "severity": self.severity}

    @classmethod
    def from_dict(cls, problem: Mapping[str, Any]) -> FormatError:
        """The error `to_dict` made (a status report's, an index state's)."""
        return cls(str(problem.get("message", "")), path=problem.get("path") or "",
                   line=problem.get("line") or None, field=problem.get("field"),
                   severity=problem.get("severity") or "error")


TOO_MANY_DIGITS = "integer string conversion"  # Python's 4,300-digit limit, as it says


def json_problem(exc: ValueError) -> str:
    """What a JSON parser's ValueError says, for the user: `json.loads` raises a bare
    ValueError (no JSONDecodeError) for an integer of more than 4,300 digits."""
    if TOO_MANY_DIGITS in str(exc):
        return "an integer of more than 4,300 digits; write it as a string"
    return str(exc)


def malformed_json(exc: ValueError, *, path: str, line: int | None) -> FormatError:
    """A FormatError for JSON that does not parse, naming the column: "malformed JSON:
    Expecting ',' delimiter at column 12" (json's messages that end in "at" take the
    column directly: "Unterminated string starting at column 2"); or that parses to
    what a record cannot hold (`records.decode_json`: a key given twice, NaN)."""
    if not isinstance(exc, json.JSONDecodeError):
        return FormatError(f"malformed JSON: {exc}", path=path, line=line)
    where = "" if exc.msg.endswith(" at") else " at"
    return FormatError(f"malformed JSON: {exc.msg}{where} column {exc.colno}", path=path,
                       line=line)


def _located_error(cls: type[FormatError], detail: str, path: str, line: int | None,
                   field: str | None, severity: str,
                   others: tuple[FormatError, ...] = ()) -> FormatError:
    return cls(detail, path=path, line=line, field=field, severity=severity, others=others)


class ValidationError(FormatError):
    """A field holds a wrong value or type."""


class PrivacyError(GitmemError):
    """The privacy policy refuses this write (nothing was written)."""


class StoreError(GitmemError):
    """The memory tree cannot be read or written."""


class NotFoundError(StoreError):
    """What was asked for is not in the store (an artifact id nobody holds)."""


class UnreadableFileError(StoreError):
    """A store path holds something that is not read as a file: a FIFO, a socket, a
    device, a directory, a symbolic link to nothing or a loop of them, or a file that
    cannot be opened. `reason` says which; `directory`: a directory is in its place."""

    def __init__(self, path: str, reason: str, *, directory: bool = False) -> None:
        self.path = path
        self.reason = reason
        self.directory = directory
        super().__init__(f"{path}: cannot be read: {reason}")


class DatabaseError(GitmemError):
    """The PostgreSQL index cannot be reached or used."""


class DaemonError(GitmemError):
    """The daemon cannot be started, stopped or reached."""


class RequestNotSent(DaemonError):
    """The connection broke before the request reached the daemon whole: the daemon
    did none of it (it acts on complete lines only)."""


class RpcError(DaemonError):
    """A JSON-RPC call answered with an error object."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        self.code = code
        self.data = data
        super().__init__(f"[{code}] {message}")


class GitError(GitmemError):
    """A git operation failed or is not allowed right now."""


class VerifyError(GitmemError):
    """Checks found problems; `problems` lists each as a FormatError."""

    def __init__(self, problems: list[FormatError]) -> None:
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{len(problems)} problem(s):\n{lines}")


class ScenarioError(GitmemError):
    """A scenario file is malformed (names the file and step)."""
