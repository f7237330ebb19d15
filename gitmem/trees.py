"""Store files from somewhere, as the checks of gitmem/checks.py read them: the work
tree, the git index, a commit; and which of a revision's files are there, hold a
string, or changed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gitmem import gitops
from gitmem.errors import GitError

if TYPE_CHECKING:
    import git


class Tree(Protocol):
    """Store files from somewhere: the work tree, the git index, a commit."""

    def paths(self) -> list[str]:
        """Store-relative paths of every file."""
        ...

    def read(self, rel: str) -> bytes | None:
        """A file's bytes, or None when absent."""
        ...


class WorkTree:
    """The store directory on disk."""

    def __init__(self, store: Path) -> None:
        self.store = store

    def paths(self) -> list[str]:
        """Every file under the store (hidden and temporary files included)."""
        return sorted(p.relative_to(self.store).as_posix()
                      for p in self.store.rglob("*") if p.is_file())

    def read(self, rel: str) -> bytes | None:
        """The file's bytes, or None."""
        try:
            return (self.store / rel).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return None


class GitTree:
    """The store as a git revision holds it ('' is the index: what a commit would hold)."""

    def __init__(self, repo: git.Repo, prefix: str, rev: str) -> None:
        self.repo = repo
        self.prefix = prefix
        self.rev = rev
        self._paths: list[str] | None = None

    def paths(self) -> list[str]:
        """Store-relative paths in the revision."""
        if self._paths is None:
            self._paths = list_paths(self.repo, self.prefix, self.rev)
        return self._paths

    def read(self, rel: str) -> bytes | None:
        """The blob's bytes, or None."""
        return gitops.read_blob(self.repo, f"{self.rev}:{self.prefix}{rel}")

    def files_holding(self, needles: set[str], under: str) -> list[str]:
        """Store-relative paths of the revision's files under `under` that may hold one of
        `needles` (more, never fewer: the caller reads them); a commit's only."""
        held = set(self.paths())
        return [rel for rel in files_holding(self.repo, self.prefix, self.rev,
                                             sorted(needles), under) if rel in held]


def list_paths(repo: git.Repo, prefix: str, rev: str) -> list[str]:
    """Store-relative paths of the files under `prefix` in `rev` ('' = the index)."""
    where = prefix or "."
    if rev:
        if rev == "HEAD" and not gitops.has_head(repo):
            return []
        out = repo.git.ls_tree("-r", "-z", "--name-only", "--full-tree", rev, "--", where)
    else:
        out = repo.git.ls_files("-z", "--cached", "--", where)
    return sorted(p[len(prefix):] for p in out.split("\0") if p)


def files_holding(repo: git.Repo, prefix: str, rev: str, needles: list[str],
                  under: str) -> list[str]:
    """Store-relative paths of files under `prefix + under` whose version in commit `rev`
    may contain one of `needles` (fixed strings); more, never fewer.

    `git grep` over a commit's blobs inflates every one of them (1.5 s for 200,000
    events); over the work tree it reads files the page cache holds (0.1-0.3 s). So the
    work tree is searched, and every file whose work-tree version is not `rev`'s (`git
    diff REV`: changed, deleted, or not in the index) is listed as well."""
    if not needles:
        return []
    where = f"{prefix}{under}"
    with gitops.unnamed("\n".join(needles).encode() + b"\n") as listed:
        status, found, error = repo.git.grep(
            "-l", "-z", "-F", "--full-name", "-f", "-", "--", where, istream=listed,
            with_extended_output=True, with_exceptions=False)
    if status not in (0, 1):  # 1: no match
        raise GitError(f"git grep of the store failed: {str(error).strip()}")
    differ = repo.git.diff("--name-only", "--no-renames", "-z", rev, "--", where)
    return sorted({p[len(prefix):] for p in f"{found}\0{differ}".split("\0") if p})


def changed_paths(repo: git.Repo, prefix: str, base: str | None,
                  rev: str) -> list[tuple[str, str]]:
    """(status A|M|D|T, store-relative path) of the store files that `rev` ('': the git
    index, what a commit would record) changes from `base` (None: the empty tree)."""
    start = base or repo.git.hash_object("-t", "tree", "/dev/null")
    which = [start, rev] if rev else ["--cached", start]
    out = repo.git.diff("--name-status", "--no-renames", "-z", *which, "--", prefix or ".")
    fields = [f for f in out.split("\0") if f]
    return [(fields[i][0], fields[i + 1][len(prefix):]) for i in range(0, len(fields) - 1, 2)]
