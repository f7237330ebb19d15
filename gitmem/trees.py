"""Store files from somewhere, as the checks of gitmem/checks.py read them: the work
tree, the git index, a commit; and which of a revision's files are there, hold a
string, or changed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gitmem import gitops
from gitmem.errors import GitError, UnreadableFileError
from gitmem.ids import ANY_EVENT_ID
from gitmem.store import read_regular

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
        # what a path read held instead of a file (a FIFO, a link to nothing or a loop
        # of links), for its check to name: read as absent, never opened for good
        self.unread: dict[str, str] = {}

    def paths(self) -> list[str]:
        """Every path under the store but its directories (hidden and temporary files,
        FIFOs and broken links included: their checks name them)."""
        return sorted(p.relative_to(self.store).as_posix()
                      for p in self.store.rglob("*") if not p.is_dir())

    def read(self, rel: str) -> bytes | None:
        """The file's bytes, or None (nothing there, a directory, no regular file:
        `unread` says what)."""
        try:
            return read_regular(self.store / rel)
        except FileNotFoundError:
            return None
        except UnreadableFileError as exc:
            if not exc.directory:
                self.unread[rel] = exc.reason
            return None


class GitTree:
    """The store as a git revision holds it ('' is the index: what a commit would hold)."""

    def __init__(self, repo: git.Repo, prefix: str, rev: str) -> None:
        self.repo = repo
        self.prefix = prefix
        self.rev = rev
        self._paths: list[str] | None = None
        self._links: dict[str, str] | None = None

    def paths(self) -> list[str]:
        """Store-relative paths in the revision."""
        if self._paths is None:
            self._paths = list_paths(self.repo, self.prefix, self.rev)
        return self._paths

    def read(self, rel: str) -> bytes | None:
        """The blob's bytes, or None."""
        return gitops.read_blob(self.repo, f"{self.rev}:{self.prefix}{rel}")

    def links(self) -> dict[str, str]:
        """The revision's symbolic links (git's mode 120000: the blob is where the link
        points, all git keeps of it): store-relative path -> that target."""
        if self._links is None:
            self._links = {rel: (self.read(rel) or b"").decode("utf-8", "replace")
                           for rel in list_links(self.repo, self.prefix, self.rev)}
        return self._links

    def links_to_folder(self, rel: str) -> bool:
        """Whether the link at `rel` points to a folder in the work tree."""
        return Path(str(self.repo.working_tree_dir), self.prefix + rel).is_dir()

    def on_disk(self, rel: str) -> bytes | None:
        """The bytes of the work tree's file at `rel` (None: none, or no regular file)."""
        if self.repo.working_tree_dir is None:
            return None
        try:
            return read_regular(Path(str(self.repo.working_tree_dir), self.prefix + rel))
        except (OSError, UnreadableFileError):
            return None

    def files_holding(self, event_ids: set[str], under: str) -> list[str]:
        """Store-relative paths of the revision's files under `under` that may hold one of
        `event_ids` (more, never fewer: the caller reads them); a commit's only."""
        held = set(self.paths())
        return [rel for rel in files_holding(self.repo, self.prefix, self.rev,
                                             sorted(event_ids), under) if rel in held]


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


def list_links(repo: git.Repo, prefix: str, rev: str) -> list[str]:
    """Store-relative paths of the symbolic links under `prefix` in `rev` ('' = the
    index), which `list_paths` lists among the files."""
    where = prefix or "."
    if rev:
        if rev == "HEAD" and not gitops.has_head(repo):
            return []
        out = repo.git.ls_tree("-r", "-z", "--full-tree", rev, "--", where)
    else:
        out = repo.git.ls_files("-z", "--stage", "--", where)
    return sorted(entry.partition("\t")[2][len(prefix):] for entry in out.split("\0")
                  if entry.startswith("120000 "))


# Event ids beyond which one pass of Python over the files beats `git grep -F`, whose
# time grows with its patterns: over a 4.4 MB day file 10 ids took 10 ms, 100 120 ms,
# 12,500 (an autocommit after a burst of writes) 6 s, where reading every id of the
# file and looking each up in a set takes 15 ms, however many are wanted.
GREP_IDS_MAX = 16


def files_holding(repo: git.Repo, prefix: str, rev: str, event_ids: list[str],
                  under: str) -> list[str]:
    """Store-relative paths of files under `prefix + under` whose version in commit `rev`
    may contain one of `event_ids`; more, never fewer.

    `git grep` over a commit's blobs inflates every one of them (1.5 s for 200,000
    events); over the work tree it reads files the page cache holds (0.1-0.3 s). So the
    work tree is searched (for many ids, by `_tracked_holding`), and every file whose
    work-tree version is not `rev`'s (`git diff REV`: changed, deleted, or not in the
    index) is listed as well."""
    if not event_ids:
        return []
    where = f"{prefix}{under}"
    if len(event_ids) > GREP_IDS_MAX:
        found = "\0".join(_tracked_holding(repo, where, set(event_ids)))
    else:
        with gitops.unnamed("\n".join(event_ids).encode() + b"\n") as listed:
            status, found, error = repo.git.grep(
                "-l", "-z", "-F", "--full-name", "-f", "-", "--", where, istream=listed,
                with_extended_output=True, with_exceptions=False)
        if status not in (0, 1):  # 1: no match
            raise GitError(f"git grep of the store failed: {str(error).strip()}")
    differ = repo.git.diff("--name-only", "--no-renames", "-z", rev, "--", where)
    return sorted({p[len(prefix):] for p in f"{found}\0{differ}".split("\0") if p})


def _tracked_holding(repo: git.Repo, where: str, event_ids: set[str]) -> list[str]:
    """The repository paths of the tracked files under `where` whose work-tree version
    holds one of `event_ids` (as `git grep` reads them: a file not on disk holds none)."""
    wanted = {i.encode() for i in event_ids}
    root = Path(str(repo.working_tree_dir))
    out = []
    for path in repo.git.ls_files("-z", "--full-name", "--", where).split("\0"):
        try:
            data = read_regular(root / path) if path else b""
        except (OSError, UnreadableFileError):  # gone, or no file in its place
            continue
        if not wanted.isdisjoint(ANY_EVENT_ID.findall(data)):
            out.append(path)
    return out


def changed_paths(repo: git.Repo, prefix: str, base: str | None,
                  rev: str) -> list[tuple[str, str]]:
    """(status A|M|D|T, store-relative path) of the store files that `rev` ('': the git
    index, what a commit would record) changes from `base` (None: the empty tree)."""
    start = base or repo.git.hash_object("-t", "tree", "/dev/null")
    which = [start, rev] if rev else ["--cached", start]
    out = repo.git.diff("--name-status", "--no-renames", "-z", *which, "--", prefix or ".")
    fields = [f for f in out.split("\0") if f]
    return [(fields[i][0], fields[i + 1][len(prefix):]) for i in range(0, len(fields) - 1, 2)]
