"""Event lines a tool took out of a day file, that no file holds now: named, not silent.

An editor's save (read, write a temporary file, rename it over the day file) that races
the daemon's appends, or a `git stash` while it writes, rewrites a day file without lines
the index had read from it; the index follows the file and drops their rows. A person
may mean that (a line deleted by hand), so nothing is refused: a sync that reads a day
file again after a rewrite or a truncation (gitmem/freshness.py) notes the ids whose rows
it held and the index then holds from no line, and once every file of the sync is read
(a line moved to another day file is indexed from there by then) names those still held
by no line, by file. The daemon adds the events its writer appended to such a file that
no line holds now (`add_handed_over`): acknowledged, and gone before the index read them.
Each file's message says how to have them again:

- in HEAD's version of the file (committed): `git diff HEAD -- FILE` shows them;
- else (never committed, or only in a commit HEAD has left): `git stash list` and
  `git stash show -p`, the editor's backup, `git log --all -S ID`.

An id still written in the file (a line that no longer parses, named as skipped) or in
a day file of the date its id carries (moved there, read by a later sync) is not named;
nor one that a local branch's tip or the previous HEAD (`HEAD@{1}`) holds in its version
of the file, and HEAD's does not: a checkout of another branch, a reset or a rebase took
it out, and git has it (a `git stash` is no branch: its lines are named).
A deleted day file is not either (a checkout of a commit without it, or a person's
`rm`: `git status` says so). Only a rewrite or a truncation costs anything here: an
append never asks.

The daemon logs each as a WARNING and lists it among its problems (`gitmem daemon
status`, gitmem/problems.py: a file's newest, until a later batch finds its ids back,
20 newer problems push it out or the daemon restarts); `gitmem sync` prints those its
own sync found.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem.errors import UnreadableFileError
from gitmem.regular_files import read_regular
from gitmem.store import file_stat, home_dates

if TYPE_CHECKING:
    from gitmem.db import Database
    from gitmem.indexer import SyncReport
    from gitmem.rows import Appended

SHOWN_IDS = 3  # ids a message names (the count says how many)
LEFT = "event lines gone from "  # how each message starts (`gitmem daemon status`)


class Homes(set[str]):
    """The files a sync reads again whole once the rest is done (day files holding a copy
    of an event another file gave up, summary files whose twin gave their id up), and
    `left`: by day file, the ids a rewrite or truncation took out of it that the index
    then held from no line (`named` checks them once the sync is done)."""

    def __init__(self) -> None:
        super().__init__()
        self.left: dict[str, set[str]] = {}

    def taken_from(self, rel: str, action: str) -> set[str] | None:
        """Where to note the ids that left day file `rel` (None: its `action` is not a
        rewrite or a truncation, and nothing is noted)."""
        return self.left.setdefault(rel, set()) if action in ("rewrite", "truncate") else None


def named(db: Database, store: Path, left: dict[str, set[str]]) -> list[dict[str, Any]]:
    """The day files that lost event lines no file holds now: for each, its path, the
    ids (sorted), those of them in HEAD's version of the file, and the message. Ids
    that only a local branch's tip or the previous HEAD (`HEAD@{1}`) holds in its
    version of the file are not named: a checkout, reset or rebase moved them, and git
    has them."""
    present = still_present(db, left)
    read: dict[str, bytes] = {}  # the files read, for this call only
    gone_by_file = {rel: sorted(i for i in ids - present if not _on_disk(store, rel, i, read))
                    for rel, ids in sorted(left.items())}
    gone_by_file = {rel: gone for rel, gone in gone_by_file.items() if gone}
    read.clear()
    if not gone_by_file:
        return []
    found: list[dict[str, Any]] = []
    prefix, in_head, in_git = _in_git(store, gone_by_file)
    for rel, ids in gone_by_file.items():
        committed = [i for i in ids if i in in_head.get(rel, set())]
        if committed:  # read again after HEAD: a checkout back puts them in the file first
            now = written_in(store, rel, ids)
            ids, committed = ([i for i in ids if i not in now],
                              [i for i in committed if i not in now])
        gone = [i for i in ids if i in committed or i not in in_git.get(rel, set())]
        if gone:
            found.append({"path": rel, "ids": gone, "committed": committed,
                          "message": message(rel, prefix + rel, gone, committed)})
    return found


def still_present(db: Database, left: Mapping[str, Iterable[str]]) -> set[str]:
    """Those of the ids in `left` that the index holds now (from some file's line)."""
    wanted = sorted(set().union(*left.values())) if left else []
    if not wanted:
        return set()
    return {r["event_id"] for r in db.fetchall("events_present", {"ids": wanted})}


def written_in(store: Path, rel: str, wanted: Iterable[str]) -> set[str]:
    """Those of the ids `wanted` that a line of `rel` gives as its id (parsing or not;
    none if it is gone)."""
    return given(_read(store, rel), wanted)


def _read(store: Path, rel: str) -> bytes:
    try:
        return read_regular(store / rel)
    except (OSError, UnreadableFileError):  # gone, or no file: holds no line
        return b""


def given(data: bytes, wanted: Iterable[str]) -> set[str]:
    """Those of the ids `wanted` that a line of `data` gives as its id (`"id": "…"`, a
    line that parses or not): one pass over `data`, keeping only the wanted ids (a set
    of every id of a day file of a million-event store, made at each rewrite, stayed in
    the daemon's memory as 30 MB more; a search per id cost a pass each)."""
    want = {event_id.encode("utf-8", "surrogateescape"): event_id for event_id in wanted}
    found: set[str] = set()
    if not want:
        return found
    for match in _GIVEN_ID.finditer(data):
        event_id = want.get(match.group(1))
        if event_id is not None:
            found.add(event_id)
            if len(found) == len(want):
                break
    return found


def add_handed_over(db: Database, store: Path, report: SyncReport,
                    appended: Mapping[str, Sequence[Appended]]) -> None:
    """Add to `report.left` the events the daemon's writer appended to a day file that
    no line holds now: acknowledged, and gone before the index read them. Asked only of
    a file this sync found rewritten or truncated, or that is now another file than the
    writer wrote to (another inode: renamed over) or shorter than where its lines end (a
    save racing the writer reads as an append when its file outgrows the index); the
    writer's other appends cost a stat per file."""
    rewritten = {c["path"] for c in report.changed if c["action"] in ("rewrite", "truncate")}
    rels = [rel for rel, runs in sorted(appended.items()) if any(a.events for a in runs)
            and (rel in rewritten or _replaced(store, rel, runs))]
    if not rels:  # the writer's lines where it wrote them: nothing to ask
        return
    left = {item["path"]: set(item["ids"]) for item in report.left}
    for rel in rels:
        left.setdefault(rel, set()).update(e.id for a in appended[rel] for e in a.events)
    report.left = named(db, store, left)


def _replaced(store: Path, rel: str, runs: Sequence[Appended]) -> bool:
    """Whether day file `rel` is now another file than the one the writer appended
    `runs` to, or shorter than where they end (gone: not asked, as a deleted file)."""
    now = file_stat(store / rel)
    if now is None:
        return False
    return (now[0] < max(a.end for a in runs)
            or any(a.stat is not None and a.stat[2] != now[2] for a in runs))


def message(rel: str, in_repo: str, gone: list[str], committed: list[str]) -> str:
    """What a loss says: the file, how many events it held left it (a few ids), and
    how to have them again. `in_repo`: the file's path from the repository's root."""
    shown = ", ".join(gone[:SHOWN_IDS]) + (f" and {len(gone) - SHOWN_IDS} more"
                                          if len(gone) > SHOWN_IDS else "")
    said = (f"{LEFT}{rel}: {len(gone)} event(s) it held (indexed, or written by the daemon) "
            f"are gone from it and no file holds them now ({shown}); if you removed them on "
            "purpose, nothing to do. ")
    if committed:
        said += (f"In HEAD's version of the file (committed): {len(committed)}, "
                 f"`git diff HEAD -- {in_repo}` shows them. ")
    uncommitted = [i for i in gone if i not in committed]
    if uncommitted:
        said += (f"Not in HEAD's version (never committed, or only in a commit HEAD has "
                 f"left): {len(uncommitted)}; if a tool rewrote the file (an editor's save, "
                 "`git stash`), see `git stash list` and `git stash show -p`, the editor's "
                 f"backup, or `git log --all -S {uncommitted[0]}`.")
    return said.rstrip()


_GIVEN_ID = re.compile(rb'"id"\s*:\s*"([^"\\\n]{1,200})"')  # an id a line gives


def _on_disk(store: Path, rel: str, event_id: str, read: dict[str, bytes]) -> bool:
    """Whether a line gives `event_id` as its id in `rel` (a line that no longer parses)
    or in a day file of the date the id carries (moved there, and not read yet); `read`:
    the files read so far."""
    homes = [f"events/{date[:7]}/{date}.jsonl" for date in home_dates(event_id)]
    for path in dict.fromkeys([rel, *homes]):
        if path not in read:
            read[path] = _read(store, path)
        if given(read[path], [event_id]):
            return True
    return False


def _in_git(store: Path, wanted: Mapping[str, list[str]]) -> tuple[str, dict[str, set[str]],
                                                                  dict[str, set[str]]]:
    """The store's path from the repository's root (with its slash; '' outside git), and
    by file of `wanted`, those of its ids HEAD's version of it gives, and those any local branch
    tip's, the previous HEAD's (`HEAD@{1}`) or HEAD's version gives. One `git cat-file
    --batch` reads every version, whatever the number of branches."""
    git = ["git", "-C", str(store)]
    where = subprocess.run([*git, "rev-parse", "--show-prefix"], capture_output=True)
    if where.returncode != 0:
        return "", {}, {}
    prefix = where.stdout.decode("utf-8", "replace").strip()
    refs = subprocess.run([*git, "for-each-ref", "--format=%(objectname)", "refs/heads"],
                          capture_output=True)
    tips = refs.stdout.decode("ascii", "replace").split() if refs.returncode == 0 else []
    revs = ["HEAD", "HEAD@{1}", *dict.fromkeys(tips)]
    asked = [(rev, rel) for rel in sorted(wanted) for rev in revs]
    batch = subprocess.run([*git, "cat-file", "--batch"], capture_output=True,
                           input="".join(f"{rev}:{prefix}{rel}\n" for rev, rel in asked)
                           .encode("utf-8", "surrogateescape"))
    in_head: dict[str, set[str]] = {}
    in_git: dict[str, set[str]] = {}
    out, at = batch.stdout, 0
    for rev, rel in asked:
        end = out.find(b"\n", at)
        if end < 0:  # git failed part way: what it gave so far
            break
        header, at = out[at:end].split(), end + 1
        if len(header) != 3 or not header[2].isdigit():  # missing, ambiguous
            continue
        size = int(header[2])
        ids = given(out[at:at + size], wanted[rel])
        at += size + 1
        in_git.setdefault(rel, set()).update(ids)
        if rev == "HEAD":
            in_head.setdefault(rel, set()).update(ids)
    return prefix, in_head, in_git
