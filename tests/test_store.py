"""`gitmem init` and store discovery: the tree of docs/FORMATS.md, git wiring, idempotence."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from gitmem.config import Config, find_store, load_config
from gitmem.errors import ConfigError, StoreError, ValidationError
from gitmem.policies import load_policies
from gitmem.store import (
    DIRECTORIES,
    TEMPLATE_FILES,
    artifact_path,
    classify,
    init_store,
    iter_store_files,
    linked_folders,
    read_artifact,
    stat_store_files,
    unrecognized_files,
    walk_files,
    write_new,
)
from tests.conftest import git


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root except .git: relative path -> bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts[:1]}


def test_init_creates_the_memory_tree(tmp_path: Path) -> None:
    report = init_store(tmp_path / "proj")
    store = tmp_path / "proj" / "memory"
    assert report.store == store.resolve() and report.git_initialized
    for sub in DIRECTORIES:
        assert (store / sub).is_dir(), sub
    for rel in ("manifest.json", *TEMPLATE_FILES):
        assert (store / rel).is_file(), rel
    assert {"policies/budgets.yaml", "policies/privacy.yaml", "policies/channels.yaml",
            "views/identity.md", "views/rules.project.md", "views/preferences.md",
            "views/glossary.md"} <= set(TEMPLATE_FILES)
    manifest = json.loads((store / "manifest.json").read_text())
    assert manifest["format_version"] == 1 and manifest["tokenizer"] == "cl100k_base"
    assert "memory/manifest.json" in report.created
    # the defaults are valid and the views parse
    policies = load_policies(store)
    assert policies.budgets.total == 65000
    assert {rel for rel, kind in iter_store_files(store) if kind == "view"} == {
        "views/identity.md", "views/rules.project.md", "views/preferences.md",
        "views/glossary.md"}


def test_init_git_inits_and_wires_union_merge_and_ignore(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    init_store(root)
    assert (root / ".git").is_dir()
    assert "memory/events/**/*.jsonl merge=union" in (root / ".gitattributes").read_text()
    assert ".gitmem/" in (root / ".gitignore").read_text().splitlines()
    day = root / "memory" / "events" / "2026-02" / "2026-02-09.jsonl"
    day.parent.mkdir()
    day.write_text("")
    assert git(root, "check-attr", "merge", str(day.relative_to(root))).strip().endswith(
        "merge: union")
    (root / ".gitmem").mkdir()
    (root / ".gitmem" / "gitmem.sock").write_text("")
    assert git(root, "check-ignore", ".gitmem/gitmem.sock").strip() == ".gitmem/gitmem.sock"


def test_init_in_a_subdirectory_of_a_repository(tmp_path: Path) -> None:
    outer = tmp_path / "mono"
    outer.mkdir()
    git(outer, "init", "-q")
    report = init_store(outer / "services" / "agent")
    assert not report.git_initialized
    assert not (outer / "services" / "agent" / ".git").exists()
    day = outer / "services" / "agent" / "memory" / "events" / "2026-02" / "2026-02-09.jsonl"
    day.parent.mkdir()
    day.write_text("")
    out = git(outer, "check-attr", "merge", str(day.relative_to(outer)))
    assert out.strip().endswith("merge: union"), out


def test_init_is_idempotent(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    init_store(root)
    before = tree(root)
    again = init_store(root)
    assert again.created == () and not again.git_initialized
    assert tree(root) == before


def test_init_never_overwrites_an_edited_file(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    init_store(root)
    identity = root / "memory" / "views" / "identity.md"
    identity.write_text("---\nsection: identity\n---\n# Identity\n\nI am Ada.\n")
    budgets = root / "memory" / "policies" / "budgets.yaml"
    budgets.write_text(budgets.read_text().replace("65000", "32000"))
    (root / ".gitignore").write_text("node_modules/\n")
    (root / ".gitattributes").write_text("*.png binary")  # no trailing newline
    before = tree(root)
    report = init_store(root)
    assert "memory/views/identity.md" not in report.created
    assert identity.read_text().endswith("I am Ada.\n")
    assert "32000" in budgets.read_text()
    after = tree(root)
    for rel, data in before.items():
        if rel not in (".gitignore", ".gitattributes"):
            assert after[rel] == data, rel
    assert (root / ".gitignore").read_text() == "node_modules/\n.gitmem/\n"
    assert (root / ".gitattributes").read_text() == (
        "*.png binary\nmemory/events/**/*.jsonl merge=union\n")


def test_init_recreates_a_deleted_template_only(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    init_store(root)
    (root / "memory" / "views" / "glossary.md").unlink()
    report = init_store(root)
    assert report.created == ("memory/views/glossary.md",)


def test_write_new_never_replaces(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b.txt"
    assert write_new(target, b"first")
    assert not write_new(target, b"second")
    assert target.read_bytes() == b"first"
    assert [p.name for p in target.parent.iterdir()] == ["b.txt"]  # no temp left behind


def test_union_merge_keeps_both_branches_appends(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    init_store(root)
    day = root / "memory" / "events" / "2026-02" / "2026-02-09.jsonl"
    day.parent.mkdir()
    day.write_text('{"n":0}\n')
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    git(root, "checkout", "-qb", "other")
    day.write_text('{"n":0}\n{"n":"other"}\n')
    git(root, "commit", "-qam", "other")
    git(root, "checkout", "-q", "-")
    day.write_text('{"n":0}\n{"n":"main"}\n')
    git(root, "commit", "-qam", "main")
    git(root, "merge", "-q", "--no-edit", "other")
    lines = day.read_text().splitlines()
    assert sorted(lines) == sorted(['{"n":0}', '{"n":"main"}', '{"n":"other"}'])


def test_classify_paths() -> None:
    assert classify("events/2026-02/2026-02-09.jsonl") == "events"
    assert classify("decisions/dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3.md") == "decision"
    assert classify("summaries/episode/sum_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3.md") == "summary"
    assert classify("handoffs/hof_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3.yaml") == "handoff"
    assert classify("views/rules.project.md") == "view"
    assert classify("artifacts/ab/" + "ab" + "0" * 62) == "artifact"
    for ignored in ("events/2026-02/notes.txt", "decisions/README.md", "views/.hidden.md",
                    "events/2026-02/.tmp-x", "decisions/dec_x.md"):
        assert classify(ignored) is None, ignored


def test_iter_store_files_is_sorted_and_skips_foreign_files(tmp_path: Path) -> None:
    store = init_store(tmp_path / "proj").store
    (store / "decisions" / "notes.txt").write_text("not a record")
    (store / "events" / "2026-02").mkdir()
    (store / "events" / "2026-02" / "2026-02-10.jsonl").write_text("")
    (store / "events" / "2026-02" / "2026-02-09.jsonl").write_text("")
    found = list(iter_store_files(store))
    assert found == sorted(found)
    paths = [rel for rel, _ in found]
    assert "decisions/notes.txt" not in paths
    assert paths.index("events/2026-02/2026-02-09.jsonl") < paths.index(
        "events/2026-02/2026-02-10.jsonl")


def test_stat_store_files_gives_each_indexed_file_its_stat(tmp_path: Path) -> None:
    store = init_store(tmp_path / "proj").store
    month = store / "events" / "2026-02"
    month.mkdir()
    (month / "2026-02-10.jsonl").write_text("{}\n")
    (store / "decisions" / "notes.txt").write_text("not a record")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "2026-03-01.jsonl").write_text("")
    (store / "events" / "2026-03").symlink_to(elsewhere, target_is_directory=True)
    (store / "views" / "gone.md").symlink_to(tmp_path / "missing.md")
    (month / "2026-02-11.jsonl").symlink_to(elsewhere, target_is_directory=True)

    found = stat_store_files(store)

    kind, st = found["events/2026-02/2026-02-10.jsonl"]
    assert kind == "events" and st is not None and st.st_size == 3
    assert st.st_ino == (month / "2026-02-10.jsonl").stat().st_ino
    assert found["views/gone.md"] == ("view", None)  # a broken link: listed, no stat
    assert "decisions/notes.txt" not in found
    assert not any(rel.startswith("events/2026-03/") for rel in found)  # link not entered
    assert "events/2026-02/2026-02-11.jsonl" not in found  # named as a day file, a folder
    assert sorted(found) == [rel for rel, _ in iter_store_files(store)]
    assert unrecognized_files(store) == [
        {"path": "events/2026-03", "reason": "ignored: a link to a folder, not entered"},
        {"path": "events/2026-02/2026-02-11.jsonl",
         "reason": "ignored: a link to a folder, not entered"},
        {"path": "decisions/notes.txt", "reason": "ignored: not named decisions/dec_<ULID>.md"},
    ]


def test_read_artifact_errors(tmp_path: Path) -> None:
    store = init_store(tmp_path / "proj").store
    with pytest.raises(ValidationError, match="not an artifact id"):  # never a path
        read_artifact(store, "art_../../etc/passwd")
    missing = "art_" + "a" * 64
    with pytest.raises(StoreError, match="not found"):
        read_artifact(store, missing)
    target = artifact_path(store, missing)
    assert target.relative_to(store).parts == ("artifacts", "aa", "a" * 64)


# ----------------------------------------------------------------------------- discovery


def test_discovery_finds_the_nearest_ancestor_store(tmp_path: Path) -> None:
    outer = init_store(tmp_path / "outer").store
    inner = init_store(tmp_path / "outer" / "pkg").store
    deep = tmp_path / "outer" / "pkg" / "src" / "mod"
    deep.mkdir(parents=True)
    assert find_store(deep) == inner
    assert load_config(env={}, cwd=deep).store == inner
    assert load_config(env={}, cwd=tmp_path / "outer").store == outer
    assert load_config(env={}, cwd=outer / "views").store == outer


def test_gitmem_store_variable_wins_over_discovery(tmp_path: Path) -> None:
    a = init_store(tmp_path / "a").store
    b = init_store(tmp_path / "b").store
    config = load_config(env={"GITMEM_STORE": str(b)}, cwd=a.parent)
    assert config.store == b
    assert config.root == b.parent and config.state_dir == b.parent / ".gitmem"
    assert config.socket_path == b.parent / ".gitmem" / "gitmem.sock"
    # a flag wins over the variable; relative paths are relative to the cwd
    assert load_config("a/memory", env={"GITMEM_STORE": str(b)}, cwd=tmp_path).store == a


def test_dsn_and_schema_resolution(tmp_path: Path) -> None:
    init_store(tmp_path / "a")
    cwd = tmp_path / "a"
    assert load_config(env={}, cwd=cwd).dsn is None  # the embedded server
    assert load_config(env={"GITMEM_DSN": ""}, cwd=cwd).dsn is None
    assert load_config(env={"GITMEM_DSN": "postgresql://x/y"}, cwd=cwd).dsn == "postgresql://x/y"
    assert load_config(dsn="postgresql://flag/db", env={"GITMEM_DSN": "postgresql://x/y"},
                       cwd=cwd).dsn == "postgresql://flag/db"
    assert load_config(env={"GITMEM_SCHEMA": "s_1"}, cwd=cwd).schema == "s_1"
    with pytest.raises(ConfigError, match="schema name"):
        load_config(env={"GITMEM_SCHEMA": "Bad-Name"}, cwd=cwd)
    with pytest.raises(ConfigError, match="not beginning with pg_"):
        load_config(env={"GITMEM_SCHEMA": "pg_mine"}, cwd=cwd)  # PostgreSQL refuses it


def test_stores_side_by_side_get_an_index_each(tmp_path: Path) -> None:
    """memory/ and notes/ in one directory share its state directory, so its embedded
    server: with one schema, each would take the other's index over."""
    init_store(tmp_path)
    shutil.copytree(tmp_path / "memory", tmp_path / "My Notes")
    own = load_config(env={}, cwd=tmp_path)
    other = load_config(store=tmp_path / "My Notes", env={}, cwd=tmp_path)
    assert own.schema == "gitmem" and other.schema.startswith("gitmem_my_notes_")
    assert own.state_dir == other.state_dir and own.socket_path != other.socket_path
    assert Config(store=tmp_path / "My Notes").schema == other.schema
    names = ["notes", "Notes", "NOTES", "my-notes", "my_notes", "ünï", "ïnü", "x" * 80,
             "x" * 81]
    schemas = [Config(store=tmp_path / name).schema for name in names]
    assert schemas[0] == "gitmem_notes" and schemas[4] == "gitmem_my_notes"
    assert len(set(schemas)) == len(names)  # each its own
    assert all(len(s) <= 63 and re.fullmatch(r"[a-z0-9_]+", s) for s in schemas)
    assert load_config(store=tmp_path / "My Notes", env={"GITMEM_SCHEMA": "s_2"},
                       cwd=tmp_path).schema == "s_2"


def test_no_store_found_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(env={}, cwd=tmp_path)
    assert "gitmem init" in str(caught.value) and "--store" in str(caught.value)
    assert load_config(env={}, cwd=tmp_path, must_exist=False).store == tmp_path / "memory"


def test_store_path_that_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()  # a directory without manifest.json is not a store
    with pytest.raises(ConfigError, match="not a gitmem store") as caught:
        load_config(env={"GITMEM_STORE": str(tmp_path / "memory")}, cwd=tmp_path)
    assert f"run `gitmem init {tmp_path}` to create one" in str(caught.value)
    assert find_store(tmp_path) is None
    # a store path not named memory: init DIR would make DIR/memory, so say so
    with pytest.raises(ConfigError, match="not a gitmem store") as caught:
        load_config("notes", env={}, cwd=tmp_path)
    assert (f"`gitmem init {tmp_path / 'notes'}` creates the store "
            f"{tmp_path / 'notes' / 'memory'} (pass that as --store)") in str(caught.value)



def test_a_store_path_inside_a_store_names_the_store(tmp_path: Path) -> None:
    """--store at a store's decisions/ suggested `gitmem init` there: a store nested in
    a store."""
    store = init_store(tmp_path / "proj").store
    with pytest.raises(ConfigError) as caught:
        load_config(str(store / "decisions"), env={}, cwd=tmp_path)
    assert str(caught.value) == (f"{store / 'decisions'} is inside the gitmem store {store}: "
                                 f"pass --store {store}")


@pytest.mark.parametrize(("rel", "kind"), [
    ("events/2026-03/2026-03-01.jsonl", "events"),
    ("events/2024-02/2024-02-29.jsonl", "events"),
    ("events/2026-03/2026-03-01.jsonl\n", None),  # `$` matched before a final newline
    ("views/rules.md\n", None),
    ("events/\u0662\u0660\u0662\u0666-\u0660\u0663/\u0662\u0660\u0662\u0666-\u0660\u0663-"
     "\u0660\u0667.jsonl", None),  # `\d` matched Arabic-Indic digits
    ("events/2026-02/2026-02-30.jsonl", None),  # no such day
    ("events/2026-03/2026-04-01.jsonl", None),  # not its month's folder
    ("events/2026-13/2026-13-01.jsonl", None),
    ("decisions/dec_01KHBYB0000000000000000009.md", "decision"),
    ("manifest.json", "policy"), ("policies/privacy.yaml", "policy"),
    ("policies/privacy.yaml.orig", None),
])
def test_a_store_path_is_a_record_only_when_its_whole_name_says_so(rel: str,
                                                                   kind: str | None) -> None:
    """Names that are no record's were read as records: gitmem status said the store was
    clean, and an ACB served a file FORMATS.md says is never read."""
    assert classify(rel) == kind


def test_a_record_folder_that_is_a_link_is_listed_not_entered(tmp_path: Path) -> None:
    """`_files_under` followed a link at the top (views/, events/ itself): its files
    were indexed, while a link to a folder within one was listed and never entered."""
    store = init_store(tmp_path / "proj").store
    outside = tmp_path / "outside"
    (store / "views").rename(outside)
    (store / "views").symlink_to(outside, target_is_directory=True)
    (store / "decisions").rename(tmp_path / "decisions")
    (store / "decisions").symlink_to(tmp_path / "decisions", target_is_directory=True)
    (tmp_path / "decisions" / ".tmp-dec_x.md").write_text("staged")
    (store / "tasks").rename(tmp_path / "tasks")
    (store / "tasks").symlink_to(tmp_path / "nothing")
    (store / "events" / "2026-03").symlink_to(outside, target_is_directory=True)
    assert not any(rel.startswith("views/") for rel, _ in iter_store_files(store))
    assert stat_store_files(store) == {}
    assert list(walk_files(store, ["decisions"], ".tmp-")) == []
    assert linked_folders(store) == ["views", "decisions", "tasks", "events/2026-03"]
    assert unrecognized_files(store) == [
        {"path": "views", "reason": "ignored: a link to a folder, not entered"},
        {"path": "decisions", "reason": "ignored: a link to a folder, not entered"},
        {"path": "tasks", "reason": "ignored: a link to no folder, not entered"},
        {"path": "events/2026-03", "reason": "ignored: a link to a folder, not entered"},
    ]
