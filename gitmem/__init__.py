"""gitmem: memory for AI agents that people review like code.

Files in git are the truth; PostgreSQL is the disposable index; `build_acb`
assembles the token-budgeted Active Context Bundle for each LLM call.
"""

from gitmem.config import Config, load_config
from gitmem.documents import Decision, Handoff, Summary, Task, View
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
from gitmem.memory import Memory
from gitmem.records import Event
from gitmem.store import init_store

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
