"""Shared fixtures: a real PostgreSQL, real git repositories, real files.

The database is `GITMEM_TEST_DSN` when set (CI points it at the machine's
server), else an embedded server started once per test session. Every test
gets its own schema, dropped afterwards, so tests never see each other's rows.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result

from gitmem.cli import main
from gitmem.config import Config
from gitmem.memory import Memory
from gitmem.store import init_store


@pytest.fixture(scope="session")
def dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A DSN of a real PostgreSQL server."""
    configured = os.environ.get("GITMEM_TEST_DSN")
    if configured:
        yield configured
        return
    import pgserver

    server = pgserver.get_server(tmp_path_factory.mktemp("pg"), cleanup_mode="delete")
    yield str(server.get_uri())
    server.cleanup()


@pytest.fixture
def schema(dsn: str) -> Iterator[str]:
    """A schema name of this test's own; dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd` with a fixed identity; its stdout."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.com",
           "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.com"}
    result = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"git {' '.join(args)} failed: {result.stderr}"
    return result.stdout


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` (except .git/): relative path -> bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] != ".git"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A fresh git repository with an initialized store at repo/memory."""
    root = tmp_path / "repo"
    init_store(root)
    return root


@pytest.fixture
def config(repo: Path, dsn: str, schema: str) -> Config:
    """Configuration for the test store on the test database."""
    return Config(store=repo / "memory", dsn=dsn, schema=schema)


@pytest.fixture
def memory(config: Config) -> Iterator[Memory]:
    """The test store opened through the core API."""
    with Memory(config) as opened:
        yield opened


@pytest.fixture
def cli(config: Config) -> Cli:
    """Run `gitmem` commands in-process against the test store."""
    return Cli(config)


class Cli:
    """`gitmem ...` through click's CliRunner, on one store and schema."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.runner = CliRunner()

    def env(self) -> dict[str, str]:
        return {"GITMEM_STORE": str(self.config.store), "GITMEM_DSN": self.config.dsn or "",
                "GITMEM_SCHEMA": self.config.schema}

    def __call__(self, *args: str, input: str | None = None, ok: bool = True) -> Result:
        result = self.runner.invoke(main, list(args), input=input, env=self.env(),
                                    catch_exceptions=False)
        if ok:
            assert result.exit_code == 0, f"gitmem {' '.join(args)}: {result.output}"
        return result
