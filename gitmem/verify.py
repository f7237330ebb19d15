"""`gitmem verify` and the git hooks' checks: the store's files on disk against HEAD
(or, with `--since`, against where the branch left a revision), what is staged, or
what a commit recorded, each run through `checks.Checker` (its list of problems).
`verify_tree` also warns about the policies (gitmem/policy_warnings.py): redaction
patterns that lack some of the defaults `gitmem init` writes now, a view path that
matches no file in views/, a pinned view larger than its section's cap, a channel
with no rule, a section with no cap.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gitmem import consistency, gitops
from gitmem.checks import Checker
from gitmem.errors import FormatError, GitError
from gitmem.policies import POLICY_FILES, Policies, read_policies
from gitmem.policy_warnings import (
    channels_unruled,
    defaults_missing,
    sections_unbudgeted,
    views_missing,
)
from gitmem.store import classify, linked_tops
from gitmem.trees import GitTree, Tree, WorkTree, changed_paths

if TYPE_CHECKING:
    import git


def verify_tree(store: Path, policies: Policies | None = None, *, display: str | None = None,
                since: str | None = None) -> list[FormatError]:
    """Check every file of the store on disk (and append-only against git's HEAD, or
    with `since` against the commit where the work tree's branch left that revision:
    what a pull request into it adds must be appends).

    `policies` default to the store's own, read as far as they go: a policy file's
    problems are its check's to report, all of them, and the rest of the store is
    still checked. Files are named with `display` in front; by default as git names
    them (`memory/...`), or by the store's directory name outside git.
    """
    if policies is None:
        policies = read_policies(store)[0]
    base: Tree | None = None
    repo: git.Repo | None = None
    rev, name = "HEAD", ""
    try:
        repo = gitops.open_repo(store)
        prefix = gitops.store_prefix(repo, store)
        display = prefix if display is None else display
        if since is not None:
            rev = gitops.fork_point(repo, since)
            name = f"the version where this branch left {since} (commit {rev[:12]})"
            base = GitTree(repo, prefix, rev)
        elif gitops.has_head(repo):
            base = GitTree(repo, prefix, "HEAD")
    except GitError:
        if since is not None:
            raise
        display = f"{store.name}/" if display is None else display  # nothing to compare
    try:
        checker = Checker(WorkTree(store), policies, display=display, base=base,
                          base_rev=rev, base_name=name)
        paths = checker.tree.paths()  # a walk of the whole store: once
        for rel in sorted({*paths, "manifest.json", *POLICY_FILES}):
            checker.check_file(rel)  # a policy file missing too
        if base is not None:
            for rel in base.paths():
                if classify(rel) == "events" and not (store / rel).exists():
                    checker.check_file(rel)
        checker.check_refs(complete=True)
        problems = _with_summary_conflicts(checker.problems, store, policies, display)
        return (problems + defaults_missing(store, policies, display)
                + channels_unruled(store, policies, display)
                + sections_unbudgeted(store, policies, display)
                + ([] if "views" in linked_tops(store)  # the link is the problem named
                   else views_missing(store, paths, display)))
    finally:
        if repo is not None:
            repo.close()


def _with_summary_conflicts(problems: list[FormatError], store: Path, policies: Policies,
                            display: str) -> list[FormatError]:
    """Add `consistency.check_tree` (summaries that no longer agree with what they cite);
    where it names the same line as a dangling reference, its message is the better one."""
    conflicts = [type(p)(p.detail, path=display + p.path, line=p.line, field=p.field,
                         severity=p.severity)
                 for p in consistency.check_tree(store, policies.manifest.default_tenant)]
    places = {(c.path, c.line) for c in conflicts}
    kept = [p for p in problems
            if not ((p.path, p.line) in places and "dangling" in p.detail)]
    return kept + conflicts


def verify_staged(store: Path, policies: Policies) -> list[FormatError]:
    """Check what `git commit` would record for the store (the pre-commit hook)."""
    repo = gitops.open_repo(store)
    try:
        merging = (Path(repo.git_dir) / "MERGE_HEAD").exists()
        head = gitops.has_head(repo)
        amend = head and not merging and bool(gitops.parents(repo, "HEAD"))
        return _verify_changes(repo, gitops.store_prefix(repo, store), policies, "",
                               "HEAD" if head else None, merging, "HEAD^1" if amend else None)
    finally:
        repo.close()


def verify_commit(store: Path, policies: Policies, rev: str = "HEAD",
                  base: str | None = None) -> list[FormatError]:
    """Check what commit `rev` recorded for the store against its first parent (or
    `base`, an older commit of its history), as the pre-commit hook would have: for a
    commit made without it (`git revert`, `git cherry-pick`, `git commit --no-verify`;
    the post-commit hook), or commits a fast-forward brought in (the post-merge hook)."""
    repo = gitops.open_repo(store)
    try:
        parents = gitops.parents(repo, rev)
        if base is None and parents:
            base = f"{rev}^1"
        return _verify_changes(repo, gitops.store_prefix(repo, store), policies, rev,
                               base, len(parents) > 1)
    finally:
        repo.close()


def _verify_changes(repo: git.Repo, prefix: str, policies: Policies, rev: str,
                    base_rev: str | None, merging: bool,
                    amend_rev: str | None = None) -> list[FormatError]:
    """The checks of the store files that `rev` ('': the git index) changes from
    `base_rev` (None: from nothing); `amend_rev`: base_rev's parent (`Checker.amend_base`)."""
    changes = changed_paths(repo, prefix, base_rev, rev)
    if not changes:
        return []
    base = GitTree(repo, prefix, base_rev) if base_rev is not None else None
    checker = Checker(GitTree(repo, prefix, rev), policies, display=prefix, base=base,
                      merging=merging, only_new=True, base_rev=base_rev or "HEAD",
                      committed=bool(rev),
                      amend_base=GitTree(repo, prefix, amend_rev) if amend_rev else None,
                      disk=None if rev else WorkTree(Path(str(repo.working_tree_dir)) / prefix))
    for _, rel in changes:
        checker.check_file(rel)
    checker.check_refs(complete=False)
    for status, rel in changes:
        if status == "D" and classify(rel) in ("decision", "task", "summary", "handoff"):
            _cited_elsewhere(repo, prefix, rel, checker, rev)
    return checker.problems


def _cited_elsewhere(repo: git.Repo, prefix: str, rel: str, checker: Checker,
                     rev: str) -> None:
    record_id = rel.rsplit("/", 1)[-1].split(".", 1)[0]
    where = [rev] if rev else ["--cached"]
    out = repo.git.grep(*where, "-n", "-F", "-I", record_id, "--", prefix or ".",
                        with_exceptions=False)
    for hit in out.splitlines():
        path, _, rest = (hit[len(rev) + 1:] if rev else hit).partition(":")
        number, _, _ = rest.partition(":")
        checker.fail(path[len(prefix):], int(number) if number.isdigit() else None,
                     f"cites {record_id}, which this commit deletes ({prefix}{rel}); "
                     "supersede a decision instead of deleting it")
