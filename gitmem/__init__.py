"""gitmem: memory for AI agents that people review like code.

Files in git are the truth; PostgreSQL is the disposable index; `build_acb`
assembles the token-budgeted Active Context Bundle for each LLM call.
"""

import typing

from gitmem.errors import (
    ConfigError,
    DaemonError,
    DatabaseError,
    FormatError,
    GitError,
    GitmemError,
    PrivacyError,
    RpcError,
    ScenarioError,
    StoreError,
    ValidationError,
    VerifyError,
)

if typing.TYPE_CHECKING:
    from gitmem.config import Config, load_config
    from gitmem.documents import Decision, Handoff, Summary, Task, View
    from gitmem.memory import Memory
    from gitmem.records import Event
    from gitmem.store import init_store

# Imported on first use (PEP 562): a CLI call that a running daemon answers needs none
# of them, and importing them all (psycopg, the read and write paths) cost each such
# call 0.4 s on the slowest machine seen.
_LAZY = {"Config": "gitmem.config", "load_config": "gitmem.config",
         "Decision": "gitmem.documents", "Handoff": "gitmem.documents",
         "Summary": "gitmem.documents", "Task": "gitmem.documents",
         "View": "gitmem.documents", "Memory": "gitmem.memory", "Event": "gitmem.records",
         "init_store": "gitmem.store"}


def __getattr__(name: str) -> typing.Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gitmem' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "Config",
    "ConfigError",
    "DaemonError",
    "DatabaseError",
    "Decision",
    "Event",
    "FormatError",
    "GitError",
    "GitmemError",
    "Handoff",
    "Memory",
    "PrivacyError",
    "RpcError",
    "ScenarioError",
    "StoreError",
    "Summary",
    "Task",
    "ValidationError",
    "VerifyError",
    "View",
    "init_store",
    "load_config",
]
