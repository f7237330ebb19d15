"""The one error hierarchy of gitmem.

    GitmemError
    ├── ConfigError          no store found, bad flag value, bad DSN
    ├── FormatError          a record or policy file does not parse or validate (path:line)
    │   └── ValidationError  a field has a wrong value or type
    ├── PrivacyError         a write refused by the privacy policy (secret sensitivity)
    ├── StoreError           the memory tree on disk cannot be read or written
    ├── DatabaseError        the PostgreSQL index cannot be reached or is unusable
    ├── DaemonError          the daemon cannot be started, stopped or reached
    │   └── RpcError         a JSON-RPC call answered with an error
    ├── GitError             a git operation failed or the repository is mid-merge
    ├── VerifyError          `gitmem verify` / a hook found problems (carries them all)
    └── ScenarioError        a scenario file is malformed
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any


class GitmemError(Exception):
    """Root of every error gitmem raises on purpose."""


class ConfigError(GitmemError):
    """Configuration or discovery failed (no store, bad option value)."""


class FormatError(GitmemError):
    """A file or record does not parse; names `path:line` and what was expected."""

    def __init__(self, message: str, *, path: str = "", line: int | None = None,
                 field: str | None = None, severity: str = "error") -> None:
        self.path = path
        self.line = line
        self.field = field
        self.detail = message
        self.severity = severity  # "warning": reported, but no reason to fail a check
        super().__init__(self._compose())

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as what it was made from (a reindex's workers send errors back)."""
        return (_located_error, (type(self), self.detail, self.path, self.line, self.field,
                                 self.severity))

    @property
    def location(self) -> str:
        """`path:line`, `path` or '' for an in-memory record."""
        if not self.path:
            return ""
        return f"{self.path}:{self.line}" if self.line is not None else self.path

    def _compose(self) -> str:
        where = self.location
        field = f"field '{self.field}': " if self.field else ""
        return f"{where}: {field}{self.detail}" if where else f"{field}{self.detail}"

    def at(self, path: str, line: int | None) -> FormatError:
        """The same error, located in a file (keeps an existing location)."""
        if self.path:
            return self
        return type(self)(self.detail, path=path, line=line, field=self.field,
                          severity=self.severity)

    def redacted(self, redact: Callable[[str], str], path: str | None = None) -> FormatError:
        """The same error with its message through `redact` (a value it quotes may be a
        secret), named at `path` when one is given."""
        return type(self)(redact(self.detail), path=self.path if path is None else path,
                          line=self.line, field=self.field, severity=self.severity)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form for status reports and RPC errors."""
        return {"path": self.path, "line": self.line, "field": self.field,
                "message": self.detail, "severity": self.severity}

    @classmethod
    def from_dict(cls, problem: Mapping[str, Any]) -> FormatError:
        """The error `to_dict` made (a status report's, an index state's)."""
        return cls(str(problem.get("message", "")), path=problem.get("path") or "",
                   line=problem.get("line") or None, field=problem.get("field"),
                   severity=problem.get("severity") or "error")


def malformed_json(exc: json.JSONDecodeError, *, path: str, line: int | None) -> FormatError:
    """A FormatError for JSON that does not parse, naming the column: "malformed JSON:
    Expecting ',' delimiter at column 12" (json's messages that end in "at" take the
    column directly: "Unterminated string starting at column 2")."""
    where = "" if exc.msg.endswith(" at") else " at"
    return FormatError(f"malformed JSON: {exc.msg}{where} column {exc.colno}", path=path,
                       line=line)


def _located_error(cls: type[FormatError], detail: str, path: str, line: int | None,
                   field: str | None, severity: str) -> FormatError:
    return cls(detail, path=path, line=line, field=field, severity=severity)


class ValidationError(FormatError):
    """A field holds a wrong value or type."""


class PrivacyError(GitmemError):
    """The privacy policy refuses this write (nothing was written)."""


class StoreError(GitmemError):
    """The memory tree cannot be read or written."""


class NotFoundError(StoreError):
    """What was asked for is not in the store (an artifact id nobody holds)."""


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
