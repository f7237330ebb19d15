"""Store files from somewhere, as the checks of gitmem/verify.py read them: the work
tree, the git index, a commit."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gitmem import gitops

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
            self._paths = gitops.list_paths(self.repo, self.prefix, self.rev)
        return self._paths

    def read(self, rel: str) -> bytes | None:
        """The blob's bytes, or None."""
        return gitops.read_blob(self.repo, f"{self.rev}:{self.prefix}{rel}")

    def files_holding(self, needles: set[str], under: str) -> list[str]:
        """Store-relative paths of the revision's files under `under` that may hold one of
        `needles` (more, never fewer: the caller reads them); a commit's only."""
        held = set(self.paths())
        return [rel for rel in gitops.files_holding(self.repo, self.prefix, self.rev,
                                                    sorted(needles), under) if rel in held]
