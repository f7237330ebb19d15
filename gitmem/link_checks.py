"""The checks of symbolic links in a store (gitmem/checks.py runs them for `gitmem
verify` and the pre-commit hook). git keeps only where a link points, so nothing behind
one is versioned or reviewed; one rule on disk and in what is committed:

- a link where a record or policy file (or the manifest) should be: `a symbolic link
  (...), not a file`. On disk gitmem reads the file it points to (gitmem/regular_files.py
  follows a link to a regular file), and checks it as well;
- a link to a folder in place of a record folder or within one: never entered, none of
  its files read (`store.linked_folders`);
- a link in place of policies/: the policy files are read through it on disk, and a
  commit holds none of them (not `missing`: the link is what is named).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from gitmem.store import RECORD_FOLDERS, link_on_way, linked_folders
from gitmem.trees import GitTree, Tree, WorkTree

POLICY_FOLDER = "policies"
Fail = Callable[[str, int | None, str], None]


def behind_policy_link(tree: Tree, rel: str) -> bool:
    """Whether `rel` is under policies/ and policies/ is a link (named as such)."""
    if not rel.startswith(POLICY_FOLDER + "/"):
        return False
    if isinstance(tree, GitTree):
        return POLICY_FOLDER in tree.links()
    return isinstance(tree, WorkTree) and link_on_way(tree.store, rel) is not None


def committed_link(tree: Tree, rel: str, kind: str | None, display: str, fail: Fail) -> bool:
    """A symbolic link that git holds (mode 120000) in place of a record folder or
    policies/, in a record folder, or where a record or policy file should be, named as
    what it is (its blob is not the file: never parsed). False: no such link."""
    if not isinstance(tree, GitTree) or rel not in tree.links():
        return False
    if kind is None and rel != POLICY_FOLDER and rel.partition("/")[0] not in RECORD_FOLDERS:
        return False  # a file gitmem never reads, wherever it points
    target, undo = tree.links()[rel], f"`git rm --cached {display}{rel}`"
    if rel == POLICY_FOLDER:
        fail(rel, None, f"a symbolic link ({target}) in place of the policies folder: git "
             "keeps only the link, so no policy file is versioned or reviewed; take the "
             f"link out of the commit ({undo}), then move the policy files into the store "
             "in its place, or remove the link")
    elif tree.links_to_folder(rel):
        fail(rel, None, f"a symbolic link to a folder ({target}): gitmem never enters it "
             "and git keeps only the link, so none of its files is read, versioned or "
             f"reviewed; take the link out of the commit ({undo}), then move the files "
             "into the store in its place, or remove the link")
    else:
        fail(rel, None, f"a symbolic link ({target}), not a file: git keeps only where it "
             "points, so the file itself is not versioned or reviewed; take the link out "
             f"of the commit ({undo}), then put the file itself in its place, or remove "
             "the link")
    return True


def file_link(tree: Tree, rel: str, kind: str | None, fail: Fail) -> None:
    """A link to a regular file on disk where a record or policy file (or the manifest)
    should be: gitmem reads the file it points to, but git would keep only the link, as
    the pre-commit hook says (`committed_link`)."""
    if kind is None or not isinstance(tree, WorkTree):
        return
    path = tree.store / rel
    try:
        if not (os.path.islink(path) and os.path.isfile(path)):
            return  # a link to nothing or to no file: unread, and named as such
        target = os.readlink(path)
    except OSError:  # removed meanwhile
        return
    fail(rel, None, f"a symbolic link ({target}), not a file: gitmem reads the file it "
         "points to, but git keeps only the link, so the file itself is not versioned or "
         "reviewed (the pre-commit hook refuses it); put the file itself in its place, or "
         "remove the link")


def linked_folders_on_disk(tree: Tree, fail: Fail) -> None:
    """A link to a folder in a record directory of the work tree, or in place of one
    (events/ itself, say): never entered, so none of its files is read (`gitmem status`
    lists it as ignored), and git keeps only the link; and policies/ as a link. A
    whole-store check, with the references'."""
    if not isinstance(tree, WorkTree):
        return
    for rel in linked_folders(tree.store):
        try:
            target = os.readlink(tree.store / rel)
        except OSError:  # removed meanwhile
            continue
        what = "a folder" if (tree.store / rel).is_dir() else "no folder"
        fail(rel, None, f"a symbolic link to {what} ({target}): gitmem never enters it, so "
             "none of its files is read (and git keeps only the link); move the files into "
             "the store, or remove the link")
    try:
        target = os.readlink(tree.store / POLICY_FOLDER)
    except OSError:  # no link there (or removed meanwhile)
        return
    if (tree.store / POLICY_FOLDER).is_dir():
        fail(POLICY_FOLDER, None, f"a symbolic link to a folder ({target}) in place of the "
             "policies folder: gitmem reads the policy files through it, but git keeps only "
             "the link, so none of them is versioned or reviewed (the pre-commit hook "
             "refuses it); move them into the store in its place, or remove the link")
    else:
        fail(POLICY_FOLDER, None, f"a symbolic link to no folder ({target}) in place of the "
             "policies folder: no policy file can be read; remove the link and run `gitmem "
             "init` to write the defaults, or put the folder in its place")
