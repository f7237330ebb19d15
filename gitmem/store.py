"""The memory tree on disk: its layout, `gitmem init`, and what each path holds."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from importlib import resources
from pathlib import Path

from gitmem import ids
from gitmem.errors import NotFoundError, StoreError, UnreadableFileError, ValidationError
from gitmem.policies import FORMAT_VERSION, TOKENIZER
from gitmem.records import MAX_OFFSET, check_id
from gitmem.regular_files import open_regular as open_regular
from gitmem.regular_files import read_regular as read_regular

TEMPLATE_FILES = (
    "policies/budgets.yaml", "policies/privacy.yaml", "policies/channels.yaml",
    "views/identity.md", "views/rules.project.md", "views/preferences.md", "views/glossary.md",
)
DIRECTORIES = ("policies", "views", "events", "decisions", "tasks", "summaries/session",
               "summaries/episode", "handoffs", "artifacts")
UNION_RULE = "events/**/*.jsonl merge=union"

# Matched whole (`fullmatch`: `$` let a name end in a newline), in ASCII digits (`\d` took
# Arabic-Indic ones); a day file's name is a real day, in its month's folder
# (`_a_day`, and the pattern's own reference to its folder).
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("events", re.compile(r"events/([0-9]{4}-[0-9]{2})/(\1-[0-9]{2})\.jsonl")),
    ("decision", re.compile(r"decisions/dec_[0-9A-HJKMNP-TV-Z]{26}\.md")),
    ("task", re.compile(r"tasks/tsk_[0-9A-HJKMNP-TV-Z]{26}\.md")),
    ("summary", re.compile(r"summaries/(session|episode)/sum_[0-9A-HJKMNP-TV-Z]{26}\.md")),
    ("handoff", re.compile(r"handoffs/hof_[0-9A-HJKMNP-TV-Z]{26}\.yaml")),
    ("view", re.compile(r"views/[A-Za-z0-9][A-Za-z0-9._-]*\.md")),
    ("policy", re.compile(r"policies/(budgets|privacy|channels)\.yaml|manifest\.json")),
    ("artifact", re.compile(r"artifacts/[0-9a-f]{2}/[0-9a-f]{64}")),
)
INDEXED_KINDS = ("events", "decision", "task", "summary", "handoff", "view")
TENANT_FILE_KINDS = frozenset({"decision", "task"})  # files whose rows concern their tenant only
# files named for a record's id, whoever's tenant it is (and so never named to another)
RECORD_KINDS = frozenset({"decision", "task", "summary", "handoff"})


def classify(rel: str) -> str | None:
    """What a store-relative path holds, or None for files gitmem ignores."""
    for kind, pattern in _PATTERNS:
        found = pattern.fullmatch(rel)
        if found:
            return kind if kind != "events" or _a_day(found[2]) else None
    return None


def _a_day(name: str) -> bool:
    try:
        date.fromisoformat(name)
    except ValueError:  # 2026-02-30
        return False
    return True


@dataclass(frozen=True)
class InitReport:
    """What `gitmem init` created (paths relative to the repository root)."""

    store: Path
    created: tuple[str, ...]
    git_initialized: bool


def template(rel: str) -> bytes:
    """A file `gitmem init` puts in a new store (`policies/privacy.yaml`, ...)."""
    return (resources.files("gitmem") / "templates" / rel).read_bytes()


def manifest_text(default_tenant: str = "default") -> str:
    """The manifest a new store starts with."""
    return json.dumps({"format": "gitmem", "format_version": FORMAT_VERSION,
                       "default_tenant": default_tenant, "tokenizer": TOKENIZER},
                      indent=2) + "\n"


@contextmanager
def exclusive(path: Path, flags: int = os.O_RDONLY) -> Iterator[int]:
    """A descriptor of `path` (a file or a directory, opened with `flags`) under an
    exclusive lock between processes, held until the block ends."""
    fd = os.open(path, flags, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing releases the lock


@contextmanager
def try_exclusive(path: Path, flags: int = os.O_RDONLY) -> Iterator[int | None]:
    """As `exclusive`, without waiting: None while another holds the lock."""
    fd = os.open(path, flags)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield fd
    finally:
        os.close(fd)


@functools.cache
def _file_mode() -> int:
    """The mode `open()` gives a new file here: 0o666 less the umask (read from /proc,
    which leaves it as it is; else set and set back)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def staging_file(directory: Path, prefix: str, suffix: str = "") -> tuple[int, str]:
    """`tempfile.mkstemp`, with the mode any new file gets (not mkstemp's 0o600: a
    record put in place from it would be hidden from the others of a shared checkout,
    beside day files they can read)."""
    fd, name = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=suffix)
    os.fchmod(fd, _file_mode())
    return fd, name


def write_new(path: Path, data: bytes) -> bool:
    """Create `path` with `data` atomically unless it exists; True if created."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = staging_file(path.parent, ".tmp-", path.suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)  # fails if someone created it meanwhile: never overwrite
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def _ensure_line(path: Path, line: str) -> bool:
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    if line in existing.splitlines():
        return False
    prefix = "" if not existing or existing.endswith("\n") else "\n"
    with path.open("a", encoding="utf-8") as handle:
        handle.write(f"{prefix}{line}\n")
    return True


def init_store(directory: Path, default_tenant: str = "default") -> InitReport:
    """Create the memory tree in `directory/memory`; never touches existing files."""
    from gitmem.errors import FormatError
    from gitmem.policies import shipped_privacy
    from gitmem.records import check_name

    try:
        check_name(default_tenant, "default_tenant")  # before anything is made
    except FormatError as exc:  # the value it quotes may be a secret
        raise exc.redacted(shipped_privacy().redact_message) from None
    try:
        return _init_store(directory.resolve(), default_tenant)
    except OSError as exc:
        raise StoreError(f"cannot create a store in {directory}: "
                         f"{exc.strerror or exc} ({exc.filename or directory})") from exc


def _init_store(root: Path, default_tenant: str) -> InitReport:
    for path in (root, root / "memory"):
        if path.exists() and not path.is_dir():
            raise StoreError(f"{path} is a file, not a directory: nothing was created; "
                             "move it away or init another directory")
    holder = next((p for p in (root, *root.parents) if _holds_store(p)), None)
    if holder is not None:  # a store of its own inside: its files would be the outer's
        where = ("is a gitmem store" if holder == root else
                 f"is inside the gitmem store {holder}, which would read a store in it as its own")
        raise StoreError(f"{root} {where}: nothing was created (`gitmem init {holder.parent}` "
                         "brings that one up to date)")
    root.mkdir(parents=True, exist_ok=True)
    git_initialized = False
    if not _inside_git(root):
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        git_initialized = True
    store = root / "memory"
    created: list[str] = []
    for sub in DIRECTORIES:
        target = store / sub
        if not target.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            keep = target / ".gitkeep"
            keep.touch()
    if write_new(store / "manifest.json", manifest_text(default_tenant).encode()):
        created.append("memory/manifest.json")
    for rel in TEMPLATE_FILES:
        if write_new(store / rel, template(rel)):
            created.append(f"memory/{rel}")
    # .gitattributes patterns are relative to the file's own directory, which is
    # `root` even when root is a subdirectory of a larger repository
    if _ensure_line(root / ".gitattributes", "memory/" + UNION_RULE):
        created.append(".gitattributes")
    if _ensure_line(root / ".gitignore", ".gitmem/"):
        created.append(".gitignore")
    return InitReport(store=store, created=tuple(created), git_initialized=git_initialized)


def _holds_store(path: Path) -> bool:
    """Whether `path` is a gitmem store (its manifest says so): not only a folder
    holding a manifest.json of some other tool's."""
    try:  # a FIFO named so in a folder above would wait for a writer for good
        return b'"gitmem"' in read_regular(path / "manifest.json")[:4096]
    except (OSError, UnreadableFileError):
        return False


def _inside_git(path: Path) -> bool:
    result = subprocess.run(["git", "-C", str(path), "rev-parse", "--is-inside-work-tree"],
                            capture_output=True, text=True)
    return result.returncode == 0 and result.stdout.strip() == "true"


_MS = timedelta(milliseconds=1)
_DAY_MS = 86_400_000


def day_file(store: Path, ts: datetime) -> Path:
    """The event log file of the day of `ts` (in its own offset)."""
    return store / day_file_rel(ts)


def day_file_rel(ts: datetime) -> str:
    """`day_file` relative to the store."""
    return f"events/{ts:%Y-%m}/{ts:%Y-%m-%d}.jsonl"


def day_files_near(event_id: str) -> list[str]:
    """The day files an event of `event_id` is looked for in: the date of the time its id
    carries, then the day before and the day after (an event's file is its own date, at
    its own offset); [] when the id carries no time."""
    when = ids.time_of(event_id)
    if when is None:
        return []
    return [day_file_rel(when + timedelta(days=offset)) for offset in (0, -1, 1)]


def at_home(event_id: str, rel: str, ts: str) -> bool:
    """Whether a line of `event_id` whose ts is `ts` (the line's text of it) is at home in
    file `rel`: its ts is the time the id carries (every id gitmem mints carries its
    event's time, gitmem/ids.py), to the millisecond, and `rel` is the day file of the
    ts's date in its own offset (`day_file_rel`; RFC 3339 writes that date first). An
    id's original line is the one at home (gitmem/copies.py)."""
    millis = ids.millis_of(event_id)
    if millis is None or not rel.endswith(".jsonl") or rel[-16:-6] != ts[:10]:
        return False
    try:
        when = datetime.fromisoformat(ts)
        return when.tzinfo is not None and (when - ids.EPOCH) // _MS == millis
    except (ValueError, OverflowError):
        return False


def home_dates(event_id: str) -> tuple[str, ...]:
    """The dates (YYYY-MM-DD) of the day files a line of `event_id` can be at home in: the
    date of the time it carries in every offset an event's ts may have (two days or
    three); () when it carries no time."""
    millis = ids.millis_of(event_id)
    if millis is None:
        return ()
    reach = MAX_OFFSET // _MS
    return _dates((millis - reach) // _DAY_MS, (millis + reach) // _DAY_MS)


@functools.lru_cache(maxsize=4096)
def _dates(first: int, last: int) -> tuple[str, ...]:
    try:
        return tuple(f"{ids.EPOCH + timedelta(days=day):%Y-%m-%d}"
                     for day in range(first, last + 1))
    except OverflowError:
        return ()


StatKey = tuple[int, int, int]  # size, ctime_ns, inode: `stat_key`


def stat_key(st: os.stat_result) -> StatKey:
    """What says a file is unchanged: size, ctime and inode, as the index keeps them.
    The status change time, not the modification time: tools that copy or restore a
    file set its mtime back (`touch -r`, `cp -p`, `rsync -t`), and every change of its
    bytes moves its ctime, which nothing sets back (git checks it for the same reason)."""
    return st.st_size, st.st_ctime_ns, st.st_ino


def file_stat(path: Path) -> StatKey | None:
    """`stat_key` of the file at `path`, or None if it cannot be read."""
    try:
        return stat_key(os.stat(path))
    except OSError:
        return None


def content_digest(data: bytes) -> bytes:
    """A short digest of a file's bytes (is this file still what was written?)."""
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class Placed:
    """A file the writer put in place: its store-relative path, its `stat_key` right
    after, its bytes' `content_digest` and, for a task or decision file, the tenant
    of its rows and whether its id was minted by the writer (`fresh`: no rows of
    that path can have been indexed before). A write within the same timestamp
    tick can leave a file of the same size with the same stat, so a matching stat
    alone does not say the file is still the writer's; the digest does."""

    rel: str
    stat: StatKey
    digest: bytes
    tenant: str = ""
    fresh: bool = False

    def still(self, store: Path) -> bool:
        """Whether the file is still as the writer left it (its stat, then its bytes)."""
        path = store / self.rel
        if file_stat(path) != self.stat:
            return False
        try:
            return content_digest(path.read_bytes()) == self.digest
        except OSError:
            return False


def artifact_path(store: Path, artifact_id: str) -> Path:
    """Where the artifact `art_<sha256>` lives."""
    digest = artifact_id.removeprefix("art_")
    return store / "artifacts" / digest[:2] / digest


def check_artifact_id(artifact_id: str) -> None:
    """A ValidationError unless `artifact_id` is one (never a path: `art_../..`)."""
    if not ids.ARTIFACT_ID.fullmatch(artifact_id):
        raise ValidationError(f"{artifact_id!r} is not an artifact id (art_ + 64 hex "
                              "digits)", field="artifact_id")


def read_artifact(store: Path, artifact_id: str) -> bytes:
    """The bytes of an artifact, or NotFoundError naming the id (a ValidationError for
    what is not an artifact id); behind a symbolic link (which gitmem never reads
    through) it is not in the store either: NotFoundError naming the link."""
    check_artifact_id(artifact_id)
    path = artifact_path(store, artifact_id)
    if (folder := link_on_way(store, path.relative_to(store).as_posix())) is not None:
        raise NotFoundError(f"artifact {artifact_id} cannot be read: {_behind(store, folder)}; "
                            + _unlink_hint(store, folder))
    try:  # a FIFO in its place waited for a writer for good, a directory was a -32603
        return read_regular(path)
    except FileNotFoundError:
        raise NotFoundError(f"artifact {artifact_id} not found under {path}") from None
    except UnreadableFileError as exc:
        raise NotFoundError(f"artifact {artifact_id} cannot be read: {path}: "
                            f"{exc.reason}") from None


EXPECTED_NAMES = {
    "events": "events/YYYY-MM/YYYY-MM-DD.jsonl, of a day that exists, in its month's folder",
    "decisions": "decisions/dec_<ULID>.md",
    "tasks": "tasks/tsk_<ULID>.md",
    "summaries": "summaries/session|episode/sum_<ULID>.md",
    "handoffs": "handoffs/hof_<ULID>.yaml",
    "views": "views/<name>.md (letters, digits and ._-)",
}


def unrecognized_files(store: Path) -> list[dict[str, str]]:
    """Files in the record directories that gitmem ignores because of their name, and
    the symbolic links it never enters (a record folder itself, or one within).

    A decision saved as `decisions/use-fts.md` would otherwise never be indexed and
    nothing would say why.
    """
    found = [{"path": rel, "reason": f"ignored: {_link_kind(store / rel)}, not entered"}
             for rel in linked_tops(store)]
    for top in EXPECTED_NAMES:
        for rel, entry in _files_under(str(store), top):
            if _linked_folder(entry):
                found.append({"path": rel, "reason": "ignored: a link to a folder, not entered"})
            elif (expected := misnamed(rel)) is not None:
                found.append({"path": rel, "reason": f"ignored: not named {expected}"})
    return found


def linked_folders(store: Path) -> list[str]:
    """The symbolic links in place of a record folder (`linked_tops`) and those to a
    folder within one, which gitmem never enters (`unrecognized_files` lists them as
    ignored; `gitmem verify` names them)."""
    return [*linked_tops(store),
            *(rel for top in EXPECTED_NAMES for rel, entry in _files_under(str(store), top)
              if _linked_folder(entry))]


def linked_tops(store: Path) -> list[str]:
    """The record folders (views/, events/, ..., artifacts/) that are symbolic links:
    never entered, read or written through, as no link to a folder within one is (git
    would keep only the link)."""
    return [top for top in RECORD_FOLDERS if os.path.islink(store / top)]


def _linked_folder(entry: os.DirEntry[str]) -> bool:
    return not entry.name.startswith(".") and _links_to_folder(entry)


def _link_kind(path: Path) -> str:
    return "a link to a folder" if path.is_dir() else "a link to no folder"


def link_on_way(store: Path, rel: str) -> str | None:
    """The folder on the way from the store to `rel` (its record folder, a month's
    folder, ...) that is a symbolic link, or None: what is behind one is never read nor
    written (`linked_folders`)."""
    root, end = str(store), rel.rfind("/")  # strings, not paths: once per write
    at = rel.find("/")
    while 0 < at <= end:
        if os.path.islink(f"{root}/{rel[:at]}"):
            return rel[:at]
        at = rel.find("/", at + 1) if at < end else -1
    return None


def refuse_linked(store: Path, paths: Iterable[Path]) -> None:
    """A StoreError naming the link when a file to be written in the store (a day file,
    a record file) is behind a symbolic link to a folder: it would be written outside
    the repository, where git keeps only the link and no sync reads it."""
    root = f"{store}/"
    for path in paths:
        text = str(path)
        folder = link_on_way(store, text[len(root):] if text.startswith(root)
                             else path.relative_to(store).as_posix())
        if folder is not None:
            raise StoreError(f"cannot write {path}: {_behind(store, folder)}: nothing was "
                             f"written; {_unlink_hint(store, folder)}")


def _behind(store: Path, folder: str) -> str:
    return (f"{store / folder} is a symbolic link (to {os.path.realpath(store / folder)}), "
            "which gitmem never writes, reads nor indexes through (git keeps only the link)")


def _unlink_hint(store: Path, folder: str) -> str:
    link = store / folder
    return (f"move the files into the store (`rm {link} && mv {os.path.realpath(link)} "
            f"{link}`), or remove the link")


def misnamed(rel: str) -> str | None:
    """How a file of a record directory should be named, where its name makes gitmem
    ignore it (None: a record's file, a dot file such as .gitkeep, .tmp- files and
    swap files, or a file outside those directories)."""
    top, _, rest = rel.partition("/")
    if top not in EXPECTED_NAMES or not rest or rel.rsplit("/", 1)[-1].startswith("."):
        return None
    return EXPECTED_NAMES[top] if classify(rel) is None else None


def walk_files(store: Path, tops: Iterable[str], prefix: str = "") -> Iterator[Path]:
    """Every file under these directories of the store whose name begins with `prefix`,
    hidden ones included, in a stable order (see `_files_under`)."""
    for top in tops:
        for rel, _ in _files_under(str(store), top, prefix):
            yield store / rel


RECORD_DIRS = ("views", "events", "decisions", "tasks", "summaries", "handoffs")
RECORD_FOLDERS = (*RECORD_DIRS, "artifacts")


def _files_under(root: str, top: str, prefix: str = ""
                 ) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """(store-relative path, entry) of everything under `top` that is not a directory
    and whose name begins with `prefix`, folder by folder in name order. A symbolic
    link to a directory is listed, not entered; unreadable folders are skipped. Names
    are compared before any path is made: at 1M events the 25,000 record files are
    listed in ~40 ms. Nothing is listed under a `top` that is (or is in) such a link."""
    if link_on_way(Path(root), f"{top}/-") is not None:
        return
    pending = [top]
    while pending:
        folder = pending.pop()
        below: list[str] = []
        found: list[os.DirEntry[str]] = []
        try:
            with os.scandir(os.path.join(root, folder)) as listing:
                for entry in listing:
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    if is_dir:
                        below.append(entry.name)
                    elif entry.name.startswith(prefix):
                        found.append(entry)
        except OSError:
            continue
        for entry in sorted(found, key=lambda entry: entry.name):
            yield f"{folder}/{entry.name}", entry
        pending.extend(f"{folder}/{name}" for name in sorted(below, reverse=True))


def _indexed_files(store: Path) -> Iterator[tuple[str, str, os.DirEntry[str]]]:
    """(relative path, kind, entry) of every indexed file, in scan order."""
    root = str(store)
    for top in RECORD_DIRS:
        for rel, entry in _files_under(root, top):
            kind = classify(rel)
            if kind in INDEXED_KINDS and not _links_to_folder(entry):
                yield rel, kind, entry


def _links_to_folder(entry: os.DirEntry[str]) -> bool:
    """Whether a listed entry is a symbolic link to a directory (never a record)."""
    try:
        return entry.is_symlink() and entry.is_dir()
    except OSError:
        return False


def stat_store_files(store: Path) -> dict[str, tuple[str, os.stat_result | None]]:
    """Every indexed file: relative path -> (kind, its stat, or None when it vanished
    or is a broken link). One scan of the record directories, a stat per file: the
    reconcile of a store of 20,000 files reads nothing else."""
    found: dict[str, tuple[str, os.stat_result | None]] = {}
    for rel, kind, entry in _indexed_files(store):
        try:
            found[rel] = (kind, entry.stat())
        except OSError:
            found[rel] = (kind, None)
    return found


def linked_files(store: Path) -> list[str]:
    """The indexed files that are symbolic links (their targets may change with no file
    event inside the store)."""
    return [rel for rel, _, entry in _indexed_files(store) if entry.is_symlink()]


def record_paths(record_id: str) -> list[str]:
    """Where the record `record_id` would live in the store."""
    if record_id.startswith("art_"):
        digest = record_id[4:]
        return [f"artifacts/{digest[:2]}/{digest}"]
    prefix = record_id[:3]
    if prefix == "dec":
        return [f"decisions/{record_id}.md"]
    if prefix == "tsk":
        return [f"tasks/{record_id}.md"]
    if prefix == "hof":
        return [f"handoffs/{record_id}.yaml"]
    if prefix == "sum":
        return [f"summaries/session/{record_id}.md", f"summaries/episode/{record_id}.md"]
    return []


def require_task(store: Path, task_id: str, *, missing: bool = False) -> None:
    """Raise unless `task_id` names a task of the store: the target of an update that
    must not create a task by a mistyped id. `missing`: raise as for a task not there
    (another tenant's: tenants never see each other's ids)."""
    check_id(task_id, "tsk", "task_id")
    path = store / "tasks" / f"{task_id}.md"
    if not missing and not path.exists() and os.path.islink(path):  # a link to nothing
        read_regular(path)
    if missing or not path.is_file():
        raise NotFoundError(f"no task {task_id} to update: tasks/{task_id}.md is not in "
                            f"{store} (leave the id out to create a task)")


def iter_store_files(store: Path) -> Iterator[tuple[str, str]]:
    """(relative path, kind) of every indexed file, in a stable order."""
    yield from sorted((rel, kind) for rel, kind, _ in _indexed_files(store))
