"""Git hooks: what `gitmem hook NAME` does, and `gitmem hooks install`.

The files git runs are shims (`hooks/*` in the package, or the ones `install`
writes) that exec `gitmem hook NAME`; everything else lives here:

- pre-commit: the checks of `gitmem verify` over what is staged for the store;
- post-merge, post-checkout, post-rewrite: an incremental sync, through the
  daemon when one runs, else locally when an index exists. A database that is
  down only warns: a hook never fails a git operation that already happened.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from gitmem import client, gitops
from gitmem.config import Config
from gitmem.db import Database
from gitmem.errors import ConfigError, GitError, GitmemError, VerifyError
from gitmem.memory import Memory
from gitmem.policies import load_policies
from gitmem.verify import verify_staged

HOOK_NAMES = ("pre-commit", "post-merge", "post-checkout", "post-rewrite")
SYNC_HOOKS = ("post-merge", "post-checkout", "post-rewrite", "sync")
CHAINED_SUFFIX = ".pre-gitmem"
MARKER = "# gitmem-hook v1"
HOOK_DB_TIMEOUT = 1.5


def hook_script(name: str, python: str) -> str:
    """The hook file `install` writes: chain the previous hook, then `gitmem hook NAME`."""
    chained = f'"$hook_dir/{name}{CHAINED_SUFFIX}"'
    py = shlex.quote(python)
    run_gitmem = (f'if [ -x {py} ]; then {{cmd}} {py} -m gitmem hook {name} "$@"; '
                  f'elif command -v gitmem >/dev/null 2>&1; then {{cmd}} gitmem hook {name} "$@"; '
                  f'else {{cmd}} python3 -m gitmem hook {name} "$@"; fi')
    head = (f"#!/bin/sh\n{MARKER}: written by `gitmem hooks install`; the logic is in "
            f"`gitmem hook {name}`.\n# A hook that was here before is kept as "
            f"{name}{CHAINED_SUFFIX} and runs first.\nhook_dir=$(dirname \"$0\")\n")
    if name == "pre-commit":
        return (head + f'if [ -x {chained} ]; then {chained} "$@" || exit $?; fi\n'
                + run_gitmem.replace("{cmd}", "exec") + "\n")
    return (head + f'status=0\nif [ -x {chained} ]; then {chained} "$@" || status=$?; fi\n'
            + run_gitmem.replace("{cmd} ", "") + "\nexit $status\n")


def install(path: Path, python: str | None = None) -> list[str]:
    """Wire gitmem's hooks into the repository holding `path`; idempotent.

    Honours `core.hooksPath`. A hook that is not gitmem's is kept beside it as
    `NAME.pre-gitmem` and called first.
    """
    python = python or sys.executable
    repo = gitops.open_repo(path)
    try:
        directory = gitops.hooks_dir(repo)
    finally:
        repo.close()
    directory.mkdir(parents=True, exist_ok=True)
    messages: list[str] = []
    for name in HOOK_NAMES:
        target = directory / name
        text = hook_script(name, python)
        if target.is_file() or target.is_symlink():
            current = target.read_text(encoding="utf-8", errors="replace") \
                if target.is_file() else ""
            if current == text:
                messages.append(f"{target}: up to date")
                continue
            if MARKER not in current:
                chained = directory / f"{name}{CHAINED_SUFFIX}"
                if chained.exists() or chained.is_symlink():
                    raise GitError(f"{target} is not gitmem's hook and {chained} exists "
                                   "already; merge the two by hand, then run this again")
                os.replace(target, chained)
                messages.append(f"{target}: kept the existing hook as {chained.name}; "
                                "it runs first")
        tmp = target.with_name(f".{name}.gitmem-tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o755)
        os.replace(tmp, target)
        messages.append(f"{target}: installed")
    return messages


def run_hook(name: str, args: Sequence[str], config: Config) -> list[str]:
    """Run hook `name`; the warnings to show. Raises VerifyError when pre-commit rejects."""
    _absolute_git_env()
    if name == "pre-commit":
        problems = verify_staged(config.store, load_policies(config.store))
        if problems:
            raise VerifyError(problems)
        return []
    if name in SYNC_HOOKS:
        return sync_after_git(config)
    raise ConfigError(f"unknown hook {name!r}; expected one of "
                      f"{', '.join(HOOK_NAMES)} (or sync)")


def sync_after_git(config: Config) -> list[str]:
    """Bring the index in step after git moved files; warnings, never an exception."""
    try:
        if client.call_if_running(config.socket_path, "sync", {}) is not None:
            return []
        if config.dsn is None and not (config.state_dir / "pg").is_dir():
            return []  # no index built yet: nothing to keep in step
        with Database.open(config, max_size=1, timeout=HOOK_DB_TIMEOUT) as db, \
                Memory(config, db=db) as memory:
            memory.sync()
    except GitmemError as exc:
        return [f"gitmem: the index was not updated ({exc}); it catches up on the next "
                "read, or run `gitmem sync`"]
    return []


def _absolute_git_env() -> None:
    """git may hand hooks relative GIT_DIR / GIT_INDEX_FILE; `git -C` elsewhere needs them
    absolute (hooks run at the top of the work tree, so that is the base)."""
    for key in ("GIT_DIR", "GIT_INDEX_FILE", "GIT_WORK_TREE"):
        value = os.environ.get(key)
        if value and not os.path.isabs(value):
            os.environ[key] = os.path.abspath(value)
