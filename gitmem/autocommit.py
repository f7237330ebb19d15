"""Autocommit: the store's machine-written changes committed without touching a person's work.

The commit is built in a temporary index from HEAD plus the store's changed paths
only, HEAD moves with a compare-and-swap (`update-ref NEW OLD`), and afterwards only
those paths of the person's index are reset to the new HEAD, so whatever else they
staged stays staged. It never commits during a merge, rebase, cherry-pick, revert,
bisect or with conflicts, nor on a detached HEAD, nor while a person's `git commit`
runs its hooks (gitmem's pre-commit hook leaves a marker that post-commit clears).

What it commits passes the checks the pre-commit hook makes (`gitmem.checks`): a file
with a problem (a rewritten event line, a secret, a record that does not parse, a
dangling reference) is held back and reported, the clean files are committed; a
deletion is never committed (it is left for a person to commit, through the hook's
checks). What an autocommit that died leaves behind is put right by gitmem/leftovers.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gitmem import gitops, leftovers, recovery
from gitmem.documents import parse_decision, parse_task
from gitmem.errors import FormatError, GitError
from gitmem.recovery import PREFIX
from gitmem.store import classify, exclusive

if TYPE_CHECKING:
    import git

    from gitmem.policies import Policies

# Machine-written parts of the store; views and policies are left for people to commit.
AUTOCOMMIT_DIRS = ("events", "decisions", "tasks", "summaries", "handoffs", "artifacts")


@dataclass
class CommitResult:
    """What an autocommit recorded."""

    sha: str | None            # None: every changed file was held back
    message: str
    paths: list[str] = field(default_factory=list)
    events: int = 0
    held_back: dict[str, list[str]] = field(default_factory=dict)  # path: its problems


def uncommitted(repo: git.Repo, specs: list[str]) -> list[str]:
    """The paths under `specs` that `git status` shows changed (what autocommit commits)."""
    # a write's staged files (`.tmp-`) are never store content: in place, they
    # show up under their own names; left by a crash, `recovery.finish` sees to them
    return [path for path in _changed(repo, specs) if not _staging(path)]


def _changed(repo: git.Repo, specs: list[str]) -> list[str]:
    status = repo.git.status("--porcelain=v1", "-z", "--untracked-files=all",
                             "--no-renames", "--", *specs)
    return sorted({entry[3:] for entry in status.split("\0") if len(entry) > 3})


def _staging(path: str) -> bool:
    return path.rsplit("/", 1)[-1].startswith(PREFIX)


def recover(store: Path, dirs: tuple[str, ...] = AUTOCOMMIT_DIRS) -> list[str]:
    """At the daemon's start: put right what an autocommit that died left behind
    (gitmem/leftovers.py), and return the store's changes under `dirs` that wait to be
    committed (made with no daemon, or answered just before a crash).

    The index is left alone while committing would be wrong (`busy_state`)."""
    import git

    repo = gitops.open_repo(store)
    try:
        specs = [gitops.store_prefix(repo, store) + d for d in dirs]
        if gitops.busy_state(repo) is None:
            leftovers.repair_index(repo, specs)
            leftovers.remove_temporary(Path(repo.git_dir))
        return uncommitted(repo, specs)
    except git.GitCommandError as exc:
        raise GitError(f"git {' '.join(map(str, exc.command[1:3]))} failed in "
                       f"{repo.working_tree_dir}: {str(exc.stderr).strip()}") from None
    finally:
        repo.close()


def _identity(repo: git.Repo) -> dict[str, str]:
    """gitmem's own identity when git has none configured (a bare CI box, a container)."""
    name = repo.git.config("user.name", with_exceptions=False)
    email = repo.git.config("user.email", with_exceptions=False)
    env: dict[str, str] = {}
    if not (name or os.environ.get("GIT_AUTHOR_NAME")):
        env.update(GIT_AUTHOR_NAME="gitmem", GIT_COMMITTER_NAME="gitmem")
    if not (email or os.environ.get("GIT_AUTHOR_EMAIL")):
        env.update(GIT_AUTHOR_EMAIL="gitmem@localhost", GIT_COMMITTER_EMAIL="gitmem@localhost")
    return env


STAGED_WAIT_S = 0.5  # the longest an autocommit waits for writes to put their files in place
STAGED_FRESH_S = 5.0  # a staged file older than this is a crash's, not a write's in flight


def commit(store: Path, dirs: tuple[str, ...] = AUTOCOMMIT_DIRS) -> CommitResult | None:
    """Commit the store's changes under `dirs` in one commit; None when there are none.

    Raises GitError naming the reason when committing now would be wrong. First puts
    right what an autocommit that died left (gitmem/leftovers.py).
    """
    import git

    repo = gitops.open_repo(store)
    try:
        reason = gitops.busy_state(repo)
        if reason:
            raise GitError(f"not committing the store now: {reason}")
        prefix = gitops.store_prefix(repo, store)
        specs = [prefix + d for d in dirs]
        leftovers.repair_index(repo, specs)
        leftovers.remove_temporary(Path(repo.git_dir))
        paths = uncommitted(repo, specs)
        if not paths:
            return None
        old = repo.head.commit.hexsha if gitops.has_head(repo) else None
        root = Path(str(repo.working_tree_dir))
        held: dict[str, list[str]] = {}
        for path in paths:
            if not os.path.lexists(root / path):
                held[path] = [f"{path}: " + (_DELETED_EVENTS.format(path=path) if classify(
                    path[len(prefix):]) == "events" else _DELETED)]
        policies = _policies(store)
        with leftovers.temporary_index(repo) as (env, tmp):
            candidates = [p for p in paths if p not in held]
            blobs, candidates = _snapshot(repo, specs, prefix, candidates, held)
            tree = None
            while candidates:  # drop the files with problems until what is left is clean
                tree = _stage(repo, env, tmp, old, candidates, blobs)
                problems = _check(repo, prefix, policies, old, tree, candidates)
                if not problems:
                    break
                for path, found in problems.items():
                    held.setdefault(path, []).extend(found)
                candidates = [p for p in candidates if p not in problems]
                tree = None
            if tree is None or (old and tree == repo.git.rev_parse(f"{old}^{{tree}}")):
                return (CommitResult(sha=None, message="", held_back=_shown(held))
                        if held else None)
            message, events = describe(repo, prefix, candidates, old, tree)
            (tmp / "message").write_text(message, encoding="utf-8")
            parents = ["-p", old] if old else []
            sha = repo.git.commit_tree(tree, *parents, "-F", str(tmp / "message"),
                                       env=_identity(repo))
            reason = gitops.commit_in_progress(Path(repo.git_dir))  # began while this was built
            if reason:
                raise GitError(f"not committing the store now: {reason}")
            leftovers.note_pending(tmp, candidates)  # until the index agrees
            try:
                repo.git.update_ref("-m", "gitmem: autocommit", "HEAD", sha, old or gitops.ZERO_OID)
            except git.GitCommandError as exc:
                raise GitError(f"HEAD moved while committing the store; will retry: "
                               f"{exc.stderr.strip()}") from None
            _sync_index(repo, candidates)
        return CommitResult(sha=sha, message=message,
                            paths=[p[len(prefix):] for p in candidates], events=events,
                            held_back=_shown(held))
    except git.GitCommandError as exc:
        raise GitError(f"autocommit failed: git {' '.join(map(str, exc.command[1:3]))}: "
                       f"{str(exc.stderr).strip()}") from None
    finally:
        repo.close()


_DELETED_EVENTS = ("events files are append-only, but this one is deleted; restore it with "
                   "`git checkout HEAD -- {path}`")
_DELETED = ("deleted; autocommit never commits a deletion: commit it yourself (the "
            "pre-commit hook checks it) or restore the file")


def _policies(store: Path) -> Policies:
    from gitmem.errors import GitmemError
    from gitmem.policies import load_policies

    try:
        return load_policies(store)
    except GitmemError as exc:
        raise GitError(f"not committing the store now: its policies do not load: {exc}") \
            from None


def _snapshot(repo: git.Repo, specs: list[str], prefix: str, candidates: list[str],
              held: dict[str, list[str]]) -> tuple[dict[str, str], list[str]]:
    """The events files among `candidates` as they are now, and the task files changed
    (held by the tasks lock as well: a task update rewrites its file after it appends
    its line, and a file read later cited a line the day file read here did not hold,
    which held the whole day file back), written as blobs ({path: blob id}); and the
    candidates with the record files written since they were listed.

    A decision's or a task's file is staged (`.tmp-`), its event line appended, then
    the file put in place, while this runs: the day file read after the listing may
    hold the line of a record file the listing missed, which the checks would call
    lost. So the store is listed again once the day files are read, and where writes
    had files staged then, once more after waiting for them (`STAGED_WAIT_S` at most; a
    crash's leftovers are not waited for): every record file a line of theirs wrote is
    in place by then."""
    events = [p for p in candidates if classify(p[len(prefix):]) == "events"]
    if not events:
        return {}, candidates
    root = Path(str(repo.working_tree_dir))
    recovery.settle(root / prefix)  # a crashed write's lines cut back first
    gone = {p for p in events if not os.path.lexists(root / p)}  # made by it: removed
    events = [p for p in events if p not in gone]
    candidates = [p for p in candidates if p not in gone]
    tasks = root / prefix / "tasks"
    # writers wait on what runs under their locks: the tasks folder's `git status` alone
    task_specs = [spec for spec in specs if spec == prefix + "tasks"]
    with ExitStack() as locks:  # read under the writers' locks: never a write's midway
        if tasks.is_dir():  # a task update holds it while it appends and rewrites the file
            locks.enter_context(exclusive(tasks))
        for path in sorted(events):
            with contextlib.suppress(FileNotFoundError):
                locks.enter_context(exclusive(root / path))
        changed = [p for p in (_changed(repo, task_specs) if task_specs else [])
                   if classify(p[len(prefix):]) == "task"
                   and not _staging(p) and p not in held and os.path.lexists(root / p)]
        read = [*events, *changed]  # a task file as its update's line left it
        blobs = dict(zip(read, repo.git.hash_object("-w", "--", *read).split(),
                         strict=True)) if read else {}
    candidates = sorted({*candidates, *changed})
    listed = _changed(repo, specs)
    staged = [root / p for p in listed if _staging(p) and _fresh(root / p)]
    if staged:  # listed again once they are in place (or the wait is over)
        deadline = time.monotonic() + STAGED_WAIT_S
        while any(os.path.lexists(p) for p in staged) and time.monotonic() < deadline:
            time.sleep(0.005)
        listed = _changed(repo, specs)
    later = [p for p in listed if not _staging(p) and p not in held and p not in blobs
             and classify(p[len(prefix):]) not in ("events", "task")  # next time: an
             and os.path.lexists(root / p)]  # update since holds a line not read here
    return blobs, sorted({*candidates, *later})


def _fresh(path: Path) -> bool:
    """Whether a staged file is a write's in flight (a crash's is older)."""
    try:
        return time.time() - path.stat().st_mtime < STAGED_FRESH_S
    except FileNotFoundError:
        return False


def _stage(repo: git.Repo, env: dict[str, str], tmp: Path, old: str | None,
           paths: list[str], blobs: dict[str, str]) -> str:
    """The tree of HEAD plus `paths`: those of `blobs` as they were read into them, the
    others as they are on disk (built in the temporary index)."""
    if old:
        repo.git.read_tree(old, env=env)
    else:
        repo.git.read_tree("--empty", env=env)
    files = [p for p in paths if p not in blobs]
    if files:
        pathspec = tmp / "paths"
        pathspec.write_bytes(b"\0".join(p.encode() for p in files))
        repo.git.add("-A", f"--pathspec-from-file={pathspec}", "--pathspec-file-nul", env=env)
    cached = [arg for p in paths if p in blobs
              for arg in ("--cacheinfo", f"100644,{blobs[p]},{p}")]
    if cached:
        repo.git.update_index("--add", *cached, env=env)
    return str(repo.git.write_tree(env=env))


def _check(repo: git.Repo, prefix: str, policies: Policies, old: str | None, tree: str,
           paths: list[str]) -> dict[str, list[str]]:
    """The pre-commit hook's checks on `tree` against `old`: {path: problems}.

    A problem that names no path of `paths` holds all of them back.
    """
    from gitmem.checks import Checker
    from gitmem.trees import GitTree

    base = GitTree(repo, prefix, old) if old else None
    checker = Checker(GitTree(repo, prefix, tree), policies, display=prefix, base=base,
                      only_new=True)
    for path in paths:
        checker.check_file(path[len(prefix):])
    checker.check_refs(complete=False)
    found: dict[str, list[str]] = {}
    known = set(paths)
    for problem in checker.problems:
        text = str(problem)
        named = problem.path if problem.path in known else None
        for path in [named] if named else paths:
            found.setdefault(path, []).append(text)
    return found


def _shown(held: dict[str, list[str]]) -> dict[str, list[str]]:
    """Held-back files by their path in the work tree (as `git status` names them)."""
    return {path: sorted(set(problems)) for path, problems in sorted(held.items())}


def _sync_index(repo: git.Repo, paths: list[str]) -> None:
    """Make the person's index agree with the new HEAD for `paths` only."""
    with gitops.unnamed(b"\0".join(p.encode() for p in paths)) as spec:
        repo.git.reset("-q", "HEAD", "--pathspec-from-file=-", "--pathspec-file-nul",
                       istream=spec)


def describe(repo: git.Repo, prefix: str, paths: list[str], old: str | None,
             tree: str) -> tuple[str, int]:
    """A commit message a reviewer can read, and the number of new events."""
    kinds: Counter[str] = Counter()
    sessions: Counter[str] = Counter()
    decisions: list[str] = []
    tasks: list[str] = []
    files: Counter[str] = Counter()
    for path in paths:
        rel = path[len(prefix):]
        kind = classify(rel) or "other"
        files[kind] += 1
        before = gitops.read_blob(repo, f"{old}:{path}") if old else None
        after = gitops.read_blob(repo, f"{tree}:{path}")
        if kind == "events" and after is not None:
            for line in _new_lines(before or b"", after):
                try:
                    obj = json.loads(line)
                except ValueError:
                    kinds["unparsable"] += 1
                    continue
                if isinstance(obj, dict):
                    kinds[str(obj.get("kind", "?"))] += 1
                    sessions[str(obj.get("session_id", "?"))] += 1
        elif kind in ("decision", "task"):
            decisions_or_tasks = decisions if kind == "decision" else tasks
            decisions_or_tasks.append(_record_line(rel, kind, before, after))
    events = sum(kinds.values())
    subject_parts = []
    if events:
        subject_parts.append(f"{events} event{'s' * (events != 1)} in {len(sessions)} "
                             f"session{'s' * (len(sessions) != 1)}")
    for label, items in (("decision", decisions), ("task", tasks)):
        if items:
            subject_parts.append(f"{len(items)} {label}{'s' * (len(items) != 1)}")
    others = {k: v for k, v in files.items() if k not in ("events", "decision", "task")}
    if others:
        subject_parts.append(", ".join(f"{v} {k}{'s' * (v != 1)}"
                                       for k, v in sorted(others.items())))
    lines = ["gitmem: " + ("; ".join(subject_parts) or f"{len(paths)} file(s)"), ""]
    if kinds:
        lines.append("events: " + ", ".join(f"{n} {k}" for k, n in kinds.most_common()))
        lines.append("sessions: " + ", ".join(f"{s} ({n})" for s, n in sessions.most_common(10))
                     + (f", and {len(sessions) - 10} more" if len(sessions) > 10 else ""))
    for label, items in (("decisions", decisions), ("tasks", tasks)):
        if items:
            lines.append(f"{label}:")
            lines.extend(f"  {item}" for item in items[:20])
            if len(items) > 20:
                lines.append(f"  ... and {len(items) - 20} more")
    lines.append("files: " + ", ".join(f"{v} {k}" for k, v in sorted(files.items())))
    lines += ["", leftovers.AUTOCOMMIT_TRAILER]
    return "\n".join(lines) + "\n", events


def _new_lines(before: bytes, after: bytes) -> list[bytes]:
    if after.startswith(before):
        added = after[len(before):]
    else:  # not a pure append (a merge): the lines the old version lacks
        known = set(before.split(b"\n"))
        added = b"\n".join(line for line in after.split(b"\n") if line not in known)
    return [line for line in added.split(b"\n") if line.strip()]


def _record_line(rel: str, kind: str, before: bytes | None, after: bytes | None) -> str:
    name = rel.rsplit("/", 1)[-1].removesuffix(".md")
    if after is None:
        return f"{name} (removed)"
    verb = "" if before is None else " (edited)"
    try:
        text = after.decode("utf-8")
        if kind == "decision":
            decision = parse_decision(text, rel, "default")
            title = decision.title or decision.text.strip().splitlines()[0]
        else:
            task = parse_task(text, rel, "default")
            title = f"{task.title} [{task.status}]"
    except (UnicodeDecodeError, FormatError, IndexError):
        title = "(does not parse)"
    if len(title) > 72:
        title = title[:71] + "…"
    return f"{name}  {title}{verb}"
