"""Helpers for tests that run real daemon processes on real stores.

Stores live in short directories under /tmp so that their sockets stay within
the 107 bytes a Unix socket path may have (one test covers longer paths).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from gitmem.client import Client
from gitmem.config import Config
from gitmem.daemon import log_path, running_pid
from gitmem.records import content_hash
from gitmem.store import init_store
from tests.conftest import git

FAST_FLAGS = ("--no-autocommit", "--max-request-bytes", "1048576")


def short_dir(prefix: str = "gm") -> Path:
    """A fresh directory with a short path (removed by `cleanup_dir`)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def cleanup_dir(path: Path) -> None:
    """Remove a directory made by `short_dir`."""
    shutil.rmtree(path, ignore_errors=True)


def new_repo(root: Path) -> Path:
    """A git repository with a store and a first commit; returns the repository root."""
    init_store(root)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


@contextmanager
def short_store(dsn: str, schema: str, prefix: str = "gm") -> Iterator[Config]:
    """A committed store (`new_repo`) in a short directory (`short_dir`), on the test
    database; the directory is removed afterwards."""
    root = short_dir(prefix)
    try:
        new_repo(root)
        yield Config(store=root / "memory", dsn=dsn, schema=schema)
    finally:
        cleanup_dir(root)


@dataclass
class Daemon:
    """A daemon process on one store, driven through the real CLI."""

    config: Config
    flags: tuple[str, ...] = FAST_FLAGS
    pid: int | None = None
    env_extra: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = {**os.environ, "GITMEM_SCHEMA": self.config.schema, **self.env_extra}
        env.pop("GITMEM_STORE", None)
        env.pop("GITMEM_NO_DAEMON", None)
        if self.config.dsn:
            env["GITMEM_DSN"] = self.config.dsn
        return env

    def cli(self, *args: str, input: str | None = None, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run `gitmem --store STORE ARGS` as a separate process."""
        result = subprocess.run([sys.executable, "-m", "gitmem", "--store", str(self.config.store),
                                 *args], input=input, capture_output=True, text=True,
                                env=env or self.env(), cwd=self.config.root, timeout=120)
        if check:
            assert result.returncode == 0, (f"gitmem {' '.join(args)} -> {result.returncode}\n"
                                            f"{result.stdout}\n{result.stderr}")
        return result

    def start(self, *extra: str) -> int:
        """`gitmem daemon start`; its pid."""
        result = self.cli("daemon", "start", *self.flags, *extra)
        self.pid = int(result.stdout.strip())
        return self.pid

    def stop(self) -> None:
        """`gitmem daemon stop` (a no-op when not running)."""
        self.cli("daemon", "stop")
        self.pid = None

    def kill9(self) -> None:
        """SIGKILL: the crash case."""
        assert self.pid is not None
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while running_pid(self.config) is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        self.pid = None

    def client(self, timeout: float = 60.0) -> Client:
        """A connected client."""
        return Client(self.config.socket_path, timeout=timeout).connect()

    def call(self, method: str, params: Any = None) -> Any:
        """One call on a fresh connection."""
        with self.client() as client:
            return client.call(method, params)

    def log(self) -> str:
        """The daemon's log so far."""
        path = log_path(self.config)
        return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def running(config: Config, *flags: str) -> Iterator[Daemon]:
    """A started daemon, stopped (or killed) afterwards."""
    daemon = Daemon(config, flags or FAST_FLAGS)
    daemon.start()
    try:
        yield daemon
    finally:
        pid = running_pid(config)
        if pid is not None:
            try:
                daemon.stop()
            except AssertionError:
                os.kill(pid, signal.SIGKILL)


def event_line(session: str, text: str, *, ts: str = "2026-03-01T10:00:00+00:00",
               number: int = 0, **fields: Any) -> tuple[str, str]:
    """(id, JSONL line) of a valid message event, as a person could append it by hand."""
    event_id = "evt_01KHBYB" + f"{number:019d}"
    content = {"text": text}
    obj = {"id": event_id, "ts": ts, "tenant_id": "default", "session_id": session,
           "agent_id": "agent", "channel": "private", "actor": {"type": "human", "id": "alice"},
           "kind": "message", "content": content, "refs": [], "tags": [],
           "sensitivity": "none", "hash": content_hash("message", content), **fields}
    return event_id, json.dumps(obj) + "\n"


def append(path: Path, line: str) -> None:
    """Append like a person's editor or `echo >>` would (no lock, no fsync)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line)


class Index:
    """Direct reads of a store's index tables, for assertions."""

    def __init__(self, config: Config) -> None:
        assert config.dsn
        self.conn = psycopg.connect(config.dsn, autocommit=True,
                                    options=f"-c search_path={config.schema}")

    def close(self) -> None:
        self.conn.close()

    def scalar(self, query: str, *params: Any) -> Any:
        row = self.conn.execute(query, params).fetchone()  # type: ignore[arg-type]
        return row[0] if row else None

    def event_ids(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT event_id FROM events ORDER BY 1")]

    def has_event(self, event_id: str) -> bool:
        return bool(self.scalar("SELECT count(*) FROM events WHERE event_id = %s", event_id))


def wait_for(condition: Callable[[], Any], timeout: float = 5.0, step: float = 0.005) -> float:
    """Seconds until `condition()` is true; AssertionError after `timeout`."""
    started = time.monotonic()
    while True:
        try:
            if condition():
                return time.monotonic() - started
        except psycopg.errors.UndefinedTable:
            pass
        if time.monotonic() - started > timeout:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(step)


def items(acb: dict[str, Any], section: str | None = None) -> list[dict[str, Any]]:
    """The items of one section (or of all) of an ACB."""
    return [item for s in acb["sections"] if section in (None, s["name"]) for item in s["items"]]
