"""Git hooks: what `gitmem hook NAME` does, and `gitmem hooks install`.

The files git runs are shims (`hooks/*` in the package, or the ones `install`
writes) that exec `gitmem hook NAME`; everything else lives here:

- pre-commit: the checks of `gitmem verify` over what is staged for the store;
  the installed hook first marks a commit in progress (`$GIT_DIR/
  gitmem-commit-in-progress`, the git process's pid) so that the daemon's
  autocommit does not move HEAD under it, and once its checks pass notes in the
  mark the tree it checked and the commit it follows; post-commit removes the
  mark, and checks a commit that does not match that note (`git revert`, `git
  cherry-pick`, `git am`, a rebase's picks, `--no-verify` come without a mark; a
  commit git aborted after pre-commit leaves one that notes another tree) when
  it changed the store's files;
- pre-merge-commit: the same checks for a merge that git concludes by itself
  (every line of HEAD's events files must survive);
- post-merge, post-checkout, post-rewrite: an incremental sync, through the
  daemon when one runs, else locally when an index exists. A database that is
  down only warns: a hook never fails a git operation that already happened.

Git runs hooks at the top of the work tree, where a store in a subdirectory
(`gitmem init proj` in a larger repository) is not found by looking upward:
`install` records every store it is run for in the repository's git config
(`gitmem.store`, a path from the top of the work tree, one entry per store),
and the hooks run for each of them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import git

from gitmem import client, gitops
from gitmem.config import STORE_KEY, Config, recorded_stores
from gitmem.db import Database
from gitmem.errors import ConfigError, FormatError, GitError, GitmemError, VerifyError
from gitmem.memory import Memory
from gitmem.policies import read_policies
from gitmem.verify import verify_commit, verify_staged

HOOK_NAMES = ("pre-commit", "pre-merge-commit", "post-commit", "post-merge", "post-checkout",
              "post-rewrite")
SYNC_HOOKS = ("post-merge", "post-checkout", "post-rewrite", "sync")
CHAINED_SUFFIX = ".pre-gitmem"
MARKER = "# gitmem-hook v1"
HOOK_DB_TIMEOUT = 1.5


def hook_script(name: str, python: str) -> str:
    """The hook file `install` writes: chain the previous hook, then `gitmem hook NAME`."""
    chained = f'"$hook_dir/{name}{CHAINED_SUFFIX}"'
    py = shlex.quote(python)
    run_gitmem = (f'if command -v gitmem >/dev/null 2>&1; then {{cmd}} gitmem hook {name} "$@"; '
                  f'elif python3 -c "import gitmem" 2>/dev/null; then '
                  f'{{cmd}} python3 -m gitmem hook {name} "$@"; else {_not_installed(name)}; fi')
    if python:  # this machine's interpreter first (its gitmem, whatever PATH holds)
        run_gitmem = f'if [ -x {py} ]; then {{cmd}} {py} -m gitmem hook {name} "$@"; el' \
            + run_gitmem
    head = (f"#!/bin/sh\n{MARKER}: written by `gitmem hooks install`; the logic is in "
            f"`gitmem hook {name}`.\n# A hook that was here before is kept as "
            f"{name}{CHAINED_SUFFIX} and runs first.\nhook_dir=$(dirname \"$0\")\n")
    marker = f'"$git_dir/{gitops.COMMIT_MARKER}"'
    head += "git_dir=$(git rev-parse --git-dir 2>/dev/null) || git_dir=\n" \
        if name in ("pre-commit", "post-commit") else ""
    if name == "pre-commit":  # mark first: a chained hook (a linter) may take a while
        return (head + f'[ -n "$git_dir" ] && echo $PPID > {marker} 2>/dev/null\n'
                f'if [ -x {chained} ]; then {chained} "$@" || {{ status=$?; '
                f'[ -z "$git_dir" ] || rm -f {marker}; exit $status; }}; fi\n'
                + run_gitmem.replace("{cmd}", "exec") + "\n")
    if name == "pre-merge-commit":  # a refusal stops the merge
        return (head + f'if [ -x {chained} ]; then {chained} "$@" || exit $?; fi\n'
                + run_gitmem.replace("{cmd}", "exec") + "\n")
    if name == "post-commit":
        # Python starts only for a commit that pre-commit did not check (no mark, or a
        # mark that notes another tree or parent: that commit was aborted after
        # pre-commit) and that changed a store's files: `git config gitmem.store` lists
        # them (none: look)
        made = ("$(git rev-parse -q --verify 'HEAD^{tree}') "
                "$(git rev-parse -q --verify 'HEAD^1^{commit}' || echo none)")
        return (head + f'checked=1\nif [ -n "$git_dir" ]; then\n'
                f'  noted=$(sed -n 2p {marker} 2>/dev/null); rm -f {marker}\n'
                f'  if [ -z "$noted" ] || [ "$noted" != "{made}" ]; then\n'
                f'    stores=$(git config --get-all {STORE_KEY})\n'
                '    if [ -z "$stores" ] || ! git diff-tree --no-commit-id --quiet --root -r '
                'HEAD -- $stores; then checked=; fi\n  fi\nfi\n'
                f'status=0\nif [ -x {chained} ]; then {chained} "$@" || status=$?; fi\n'
                f'[ -n "$checked" ] || {{ {run_gitmem.replace("{cmd} ", "")}; }}\n'
                'exit $status\n')
    return (head + f'status=0\nif [ -x {chained} ]; then {chained} "$@" || status=$?; fi\n'
            + run_gitmem.replace("{cmd} ", "") + "\nexit $status\n")


def _not_installed(name: str) -> str:
    """What a hook does where gitmem is not installed (a teammate's clone of hooks
    committed under core.hooksPath): a commit that stages nothing in a store goes on; one
    that does is refused, saying why (it cannot be checked); the others say the index
    was not brought up to date."""
    said = "gitmem: gitmem is not installed here (pip install gitmem)"
    if name not in ("pre-commit", "pre-merge-commit"):
        return f'echo "{said}: the index was not brought up to date" >&2'
    # a clone records no stores until `gitmem hooks install` runs in it: memory/ anywhere
    return (f'stores=$(git config --get-all {STORE_KEY}); if [ -n "$stores" ]; then '
            'git diff --cached --quiet -- $stores; else stores=memory; '
            "git diff --cached --quiet -- ':(glob)**/memory/**'; fi && exit 0; "
            f'echo "{said}: the change staged in $stores cannot be checked; install it, or '
            'commit with --no-verify" >&2; exit 1')


def _committed(directory: Path, repo: git.Repo) -> bool:
    """Whether hooks in `directory` are files of the work tree (a `core.hooksPath`
    inside it, committed for the team), not of this clone's .git."""
    work_tree = Path(str(repo.working_tree_dir)).resolve()
    where = directory.resolve()
    return where.is_relative_to(work_tree) and not where.is_relative_to(
        Path(repo.git_dir).resolve())


def _recorded(repo: git.Repo, path: Path) -> tuple[str, list[str]]:
    """The store at `path` as the git config records stores (a path from the top of
    the work tree), and the stores it records."""
    rel = gitops.store_prefix(repo, path).rstrip("/") or "."
    return rel, repo.git.config("--get-all", STORE_KEY, with_exceptions=False).splitlines()


def install(path: Path, python: str | None = None) -> list[str]:
    """Wire gitmem's hooks into the repository holding `path`; idempotent.

    Honours `core.hooksPath`. A hook that is not gitmem's is kept beside it as
    `NAME.pre-gitmem` and called first.
    """
    python = python or sys.executable
    repo = gitops.open_repo(path)
    try:
        directory = gitops.hooks_dir(repo)
        if _committed(directory, repo):  # teammates share the file: no path of this machine
            python = ""
        rel, known = _recorded(repo, path)
        if rel not in known:
            repo.git.config("--add", STORE_KEY, rel)
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


def uninstall(path: Path) -> list[str]:
    """Take gitmem's hooks out of the repository holding `path`: each hook `install`
    wrote is removed and the hook it kept (`NAME.pre-gitmem`) put back in its place;
    the store is no longer recorded. A hook that is not gitmem's is left alone."""
    repo = gitops.open_repo(path)
    try:
        directory = gitops.hooks_dir(repo)
        rel, known = _recorded(repo, path)
        if rel in known:
            repo.git.config("--unset-all", STORE_KEY, f"^{re.escape(rel)}$")
        others = [store for store in known if store != rel]
    finally:
        repo.close()
    if others:  # the hooks guard every recorded store: they stay for the others
        return [f"{path}: no longer guarded; the hooks stay for {', '.join(others)}"]
    messages: list[str] = []
    for name in HOOK_NAMES:
        target, chained = directory / name, directory / f"{name}{CHAINED_SUFFIX}"
        if not target.is_file() or MARKER not in target.read_text(errors="replace"):
            continue
        if chained.exists() or chained.is_symlink():
            os.replace(chained, target)
            messages.append(f"{target}: the hook that was there before is back")
        else:
            target.unlink()
            messages.append(f"{target}: removed")
    return messages or [f"{directory}: no gitmem hook to remove"]


def hook_stores(cwd: Path | None = None) -> list[Path]:
    """The stores `install` recorded for the repository git runs the hook in (git config
    `gitmem.store`, from the top of the work tree) that still exist; [] when none does."""
    _absolute_git_env()
    return recorded_stores(cwd or Path.cwd())


def _staged_problems(store: Path) -> list[FormatError]:
    """What pre-commit refuses: the staged change's problems, checked with the work
    tree's policies as far as they go, and those policies' own problems (a file deleted
    or broken, staged or not: the store cannot be read with them), each listed once,
    as `gitmem verify` lists them."""
    with contextlib.closing(gitops.open_repo(store)) as repo:
        prefix = gitops.store_prefix(repo, store)
        if not repo.git.diff("--cached", "--name-only", "--", prefix or "."):
            return []  # nothing of the store staged: a policy edit in progress is no matter
    policies, broken = read_policies(store)
    problems = verify_staged(store, policies)
    if broken:
        listed = {(p.path, p.line, p.field, p.detail) for p in problems}
        for error in broken:  # named as git names them, a value they quote redacted
            redacted = error.redacted(policies.privacy.redact_message, prefix + error.path)
            for problem in redacted.problems:
                if (problem.path, problem.line, problem.field, problem.detail) not in listed:
                    problems.append(problem)
    return problems


def run_hook(name: str, args: Sequence[str], config: Config) -> list[str]:
    """Run hook `name`; the warnings to show. Raises VerifyError when pre-commit rejects."""
    _absolute_git_env()
    if name == "pre-commit":
        _commit_starts(config.store)
        problems = _staged_problems(config.store)
        if problems:
            _commit_done(config.store)
            raise VerifyError(problems)
        _commit_checked(config.store)
        return []
    if name == "pre-merge-commit":
        problems = _staged_problems(config.store)
        if problems:
            raise VerifyError(problems)
        return []
    if name == "post-commit":
        if _commit_done(config.store):
            return []
        return unchecked_commit(config.store)
    if name == "post-merge":
        return fast_forward_problems(config.store) + sync_after_git(config)
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


def _commit_starts(store: Path) -> None:
    """Mark a commit in progress when the hook runs without the installed shim (the
    pre-commit framework): the mark is then honoured for COMMIT_MARKER_FRESH_S."""
    try:
        repo = gitops.open_repo(store)
    except GitError:
        return
    try:
        if not (Path(repo.git_dir) / gitops.COMMIT_MARKER).exists():
            gitops.mark_commit(Path(repo.git_dir), os.getppid())
    finally:
        repo.close()


def _commit_checked(store: Path) -> None:
    """Note in the commit-in-progress mark the tree and parent pre-commit checked."""
    try:
        repo = gitops.open_repo(store)
    except GitError:
        return
    try:
        gitops.mark_checked(repo)
    finally:
        repo.close()


def _commit_done(store: Path) -> bool:
    """Clear the commit-in-progress mark the pre-commit hook left; whether HEAD is the
    commit it checked (the tree and parent it noted: a mark left by a commit git aborted
    after pre-commit does not vouch for the next one)."""
    try:
        repo = gitops.open_repo(store)
    except GitError:
        return True
    try:
        return gitops.checked_commit(repo, gitops.unmark_commit(Path(repo.git_dir)))
    finally:
        repo.close()


def unchecked_commit(store: Path) -> list[str]:
    """Warnings for a commit git made without the pre-commit hook (`git revert`, `git
    cherry-pick`, `git am`, a rebase, `git commit --no-verify`): what that hook would
    have refused. The commit is made; the warning says how to take it back."""
    return _checked_after(
        store, None, unchecked="this commit was not checked ({exc}); run `gitmem verify`",
        found="this commit was made without the pre-commit check (git revert, cherry-pick, "
              "am, rebase and --no-verify skip it), and the check finds {n} problem(s) in it:",
        way_back="take it back before you push it: `git reset --soft HEAD^` undoes the "
                 "commit and keeps its changes staged, to mend and commit again (a secret "
                 "then never reaches the history others fetch)")


def fast_forward_problems(store: Path) -> list[str]:
    """Warnings for a merge that fast-forwarded (`git merge`, `git pull`): it made no
    commit, so no pre-merge-commit check saw what it brought in; what that check would
    have refused in it (a day file's lines taken out, a secret), ORIG_HEAD to HEAD."""
    unchecked = "this merge was not checked ({exc}); run `gitmem verify --since ORIG_HEAD`"
    try:
        with contextlib.closing(gitops.open_repo(store)) as repo:
            orig = gitops.fast_forwarded_from(repo)
    except GitmemError as exc:
        return [f"gitmem: {unchecked.format(exc=exc)}"]
    if orig is None:
        return []
    return _checked_after(
        store, orig, unchecked=unchecked,
        found="this merge fast-forwarded (no merge commit, so no pre-merge check), and the "
              "check finds {n} problem(s) in what it brought in:",
        way_back="`git reset --keep ORIG_HEAD` goes back to before the merge (your "
                 "uncommitted changes stay); mend the branch merged, or merge with --no-ff "
                 "to have it checked")


def _checked_after(store: Path, base: str | None, *, unchecked: str, found: str,
                   way_back: str) -> list[str]:
    """What the pre-commit check would have refused in HEAD against `base` (None: its
    first parent), as warnings: `found` (its `{n}` the count), each problem, `way_back`;
    `unchecked` (its `{exc}` the reason) where the check cannot run."""
    try:
        problems = verify_commit(store, read_policies(store)[0], "HEAD", base=base)
    except GitmemError as exc:
        return [f"gitmem: {unchecked.format(exc=exc)}"]
    errors = [p for p in problems if p.severity == "error"]
    if not errors:
        return []
    return [f"gitmem: {found.format(n=len(errors))}", *(f"  {p}" for p in errors),
            f"gitmem: {way_back}"]


def _absolute_git_env() -> None:
    """git may hand hooks relative GIT_DIR / GIT_INDEX_FILE; `git -C` elsewhere needs them
    absolute (hooks run at the top of the work tree, so that is the base)."""
    for key in ("GIT_DIR", "GIT_INDEX_FILE", "GIT_WORK_TREE"):
        value = os.environ.get(key)
        if value and not os.path.isabs(value):
            os.environ[key] = os.path.abspath(value)
