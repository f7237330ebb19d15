"""Configuration: which store, which database. Read only by the entry points."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from gitmem.errors import ConfigError, UnreadableFileError
from gitmem.regular_files import read_regular

STORE_DIRNAME = "memory"
STATE_DIRNAME = ".gitmem"
DEFAULT_SCHEMA = "gitmem"
_SCHEMA_NAME = re.compile(r"^(?!pg_)[a-z_][a-z0-9_]{0,62}$")  # pg_: PostgreSQL's own


@dataclass(frozen=True)
class Config:
    """Where the store lives, where local state goes, and how to reach PostgreSQL.

    `dsn=None` means the embedded server under `state_dir/pg`. `schema` is the
    PostgreSQL schema that holds this store's index, so several stores (or test
    runs) can share one database.
    """

    store: Path
    dsn: str | None = None
    schema: str = ""   # "": `default_schema` of the store

    def __post_init__(self) -> None:
        if not self.schema:
            object.__setattr__(self, "schema", default_schema(self.store))

    @property
    def root(self) -> Path:
        """The directory holding the store (usually the git work tree)."""
        return self.store.parent

    @property
    def state_dir(self) -> Path:
        """Local, git-ignored state: socket, pid, logs, embedded PostgreSQL."""
        return self.root / STATE_DIRNAME

    @property
    def daemon_name(self) -> str:
        """The stem of the daemon's files in the state directory (socket, pid, log):
        `gitmem` for a store named memory/, `gitmem-NAME` for another. Stores side by
        side in one directory share its state directory, never a daemon."""
        name = self.store.name
        return "gitmem" if name == STORE_DIRNAME else f"gitmem-{name}"

    @property
    def socket_path(self) -> Path:
        """The daemon's Unix socket."""
        return self.state_dir / f"{self.daemon_name}.sock"

    def with_store(self, store: Path) -> Config:
        """The same settings for another store."""
        return replace(self, store=store.resolve())


def default_schema(store: Path) -> str:
    """The schema of a store's index when none is given: `gitmem` for a store named
    memory/, `gitmem_NAME` for another, so that stores side by side (one state
    directory, one embedded server) never share an index. A name that is not already
    lower-case letters, digits and `_` (or too long) gets 8 hex digits of its hash as
    well: `Notes` and `notes`, `my-notes` and `my_notes` would have met in one schema."""
    if store.name == STORE_DIRNAME:
        return DEFAULT_SCHEMA
    name = re.sub(r"[^a-z0-9_]+", "_", store.name.lower()).strip("_") or "store"
    schema = f"{DEFAULT_SCHEMA}_{name}"
    if name != store.name or len(schema) > 63:
        digest = hashlib.sha256(os.fsencode(store.name)).hexdigest()[:8]
        schema = f"{DEFAULT_SCHEMA}_{name[:45]}_{digest}"
    return schema


def redact_dsn(dsn: str) -> str:
    """A DSN fit for messages: the password removed."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", _PASSWORD.sub(r"\1***", dsn))


# libpq's key=value form: spaces around =, a value quoted (with \' inside) or bare
_PASSWORD = re.compile(r"(password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|[^\s&]+)", re.IGNORECASE)


# The repository's git config lists its stores (`gitmem hooks install` records each, as a
# path from the top of the work tree): git runs hooks there, and a command run at the
# top of a repository whose store lives in a subdirectory finds it through them.
STORE_KEY = "gitmem.store"


def recorded_stores(cwd: Path) -> list[Path]:
    """The stores recorded in the git config of the repository holding `cwd` that still
    exist; [] outside git or when none is recorded."""
    found = subprocess.run(["git", "config", "--get-all", STORE_KEY], cwd=cwd,
                           capture_output=True, text=True)
    entries = [e for e in found.stdout.splitlines() if e.strip()]
    if not entries:
        return []
    base = _top(cwd) or cwd
    stores = dict.fromkeys((base / entry).resolve() for entry in entries)
    return [store for store in stores if (store / "manifest.json").is_file()]


def _top(cwd: Path) -> Path | None:
    """The top of the work tree holding `cwd` (None outside git)."""
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd,
                         capture_output=True, text=True).stdout.strip()
    return Path(top) if top else None


def committed_stores(cwd: Path) -> list[Path]:
    """The stores committed to the repository holding `cwd` (a manifest.json git tracks,
    beside an events/ or policies/ folder) that are in the work tree: what a fresh
    clone, whose git config records none, holds. [] outside git."""
    found = subprocess.run(["git", "ls-files", "-z", "--full-name", "--",
                            ":(top,glob)**/manifest.json"], cwd=cwd, capture_output=True,
                           text=True)
    top = _top(cwd)
    if found.returncode or top is None:
        return []
    stores = [(top / entry).parent.resolve() for entry in found.stdout.split("\0") if entry]
    return [store for store in stores
            if (store / "manifest.json").is_file() and _has_store_folders(store, "events",
                                                                          "policies")]


def work_tree_stores(cwd: Path) -> list[Path]:
    """Every store of the repository holding `cwd`: recorded, then committed ones."""
    return list(dict.fromkeys([*recorded_stores(cwd), *committed_stores(cwd)]))


def stores_here(store: str | None, cwd: Path | None = None) -> list[Path] | None:
    """The stores a command over every store (verify, hooks install) works on when no
    store is named (`store`) and none is found upward from `cwd`: the work tree's
    (None: the usual single store applies)."""
    cwd = cwd or Path.cwd()
    if store or os.environ.get("GITMEM_STORE") or find_store(cwd.resolve()) is not None:
        return None
    return work_tree_stores(cwd) or None


def _manifest_lost(store: Path) -> None:
    """Raise if `store` is a store whose manifest.json is gone (its folders are there):
    say so, not that there is no store."""
    if not _has_store_folders(store, "events", "policies", "decisions"):
        return
    manifest = store / "manifest.json"
    restore = (f"restore it (`git checkout -- {store.name}/manifest.json` in {store.parent}), "
               f"or run `gitmem init {store.parent}` to write a new one (it leaves every "
               "other file as it is)")
    if os.path.lexists(manifest):  # a directory, a FIFO, a link to nothing in its place
        try:
            read_regular(manifest)
        except UnreadableFileError as exc:
            raise ConfigError(f"{store} holds a store's files but its manifest.json cannot "
                              f"be read: {manifest} is {exc.reason}; remove it "
                              f"(`rm {'-r ' if exc.directory else ''}{manifest}`), then "
                              + restore) from None
        except OSError:  # gone meanwhile
            pass
        else:
            return  # a file after all (made meanwhile): its reader says what it holds
    raise ConfigError(f"{store} holds a store's files but no manifest.json (deleted?): "
                      + restore)


def _has_store_folders(directory: Path, *names: str) -> bool:
    """Whether `directory` has one of a store's folders `names`."""
    return any((directory / name).is_dir() for name in names)


def find_store(start: Path) -> Path | None:
    """`memory/` in `start` or its nearest ancestor that has one."""
    for directory in (start, *start.parents):
        candidate = directory / STORE_DIRNAME
        if (candidate / "manifest.json").is_file():
            return candidate
    return None


def load_config(store: str | Path | None = None, dsn: str | None = None,
                schema: str | None = None, *, env: Mapping[str, str] | None = None,
                cwd: Path | None = None, must_exist: bool = True) -> Config:
    """Resolve flags, then `GITMEM_*` variables, then discovery, into a Config."""
    env = os.environ if env is None else env
    cwd = cwd or Path.cwd()
    if store is not None and not str(store):  # "" would be read as "not given"
        raise ConfigError("--store is empty: give a store's directory, or leave it out "
                          "to find memory/ from here")
    store_value = store or env.get("GITMEM_STORE")
    if store_value:
        store_path = (cwd / Path(store_value).expanduser()).resolve()
        if must_exist and not (store_path / "manifest.json").is_file():
            _manifest_lost(store_path)
            if store_path.exists() and not store_path.is_dir():
                raise ConfigError(f"{store_path} is a file, not a gitmem store: pass --store "
                                  "with a store's directory (`gitmem init DIR` makes DIR/memory)")
            if (store_path / STORE_DIRNAME / "manifest.json").is_file():
                raise ConfigError(f"{store_path} is not a gitmem store but holds one: pass "
                                  f"--store {store_path / STORE_DIRNAME}")
            inside = next((p for p in store_path.parents if (p / "manifest.json").is_file()),
                          None)
            if inside is not None:  # a directory of a store (decisions/), not a store
                raise ConfigError(f"{store_path} is inside the gitmem store {inside}: pass "
                                  f"--store {inside}")
            if store_path.name == STORE_DIRNAME:
                hint = f"run `gitmem init {store_path.parent}` to create one"
            else:  # init makes DIR/memory: say where the store it makes would be
                hint = (f"`gitmem init {store_path}` creates the store "
                        f"{store_path / STORE_DIRNAME} (pass that as --store)")
            raise ConfigError(f"{store_path} is not a gitmem store (no manifest.json); "
                              + hint)
    else:
        found = find_store(cwd.resolve())
        if found is None and must_exist:
            recorded = work_tree_stores(cwd)
            if len(recorded) > 1:
                raise ConfigError(f"this repository holds {len(recorded)} gitmem stores ("
                                  f"{', '.join(map(str, recorded))}); pass --store with one")
            if not recorded:
                for directory in (cwd.resolve(), *cwd.resolve().parents):
                    _manifest_lost(directory / STORE_DIRNAME)
                raise ConfigError(f"no memory/ store in {cwd} or any parent directory; "
                                  "run `gitmem init` here or pass --store PATH")
            found = recorded[0]
        if found is None:
            found = cwd.resolve() / STORE_DIRNAME
        store_path = found
    schema_value = check_schema(schema or env.get("GITMEM_SCHEMA") or default_schema(store_path))
    return Config(store=store_path, dsn=dsn or env.get("GITMEM_DSN") or None,
                  schema=schema_value)


def check_schema(name: str) -> str:
    """`name` if it may name an index's schema, else a ConfigError saying what may."""
    if not _SCHEMA_NAME.match(name):
        raise ConfigError(f"schema name {name!r} must match [a-z_][a-z0-9_]* (at most 63 "
                          "characters), not beginning with pg_ (PostgreSQL's own)")
    return name
