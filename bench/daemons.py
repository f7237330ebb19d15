"""gitmem daemons for the benchmark: started through the real CLI, stopped by their pid.

A `BenchDaemon` serves one store with the index in one of this run's schemas
(`GITMEM_SCHEMA`, `GITMEM_DSN` in its environment, as `gitmem daemon start`
hands them on), with `--no-autocommit` so no git commit runs during a
measurement. `corpus_daemon(ctx)` is the run's shared daemon on the corpus
store (its index built first); every daemon is stopped when the run ends.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

from bench.context import Context
from bench.recording import gitmem_command
from bench.stats import timed
from gitmem import daemon as lifecycle
from gitmem.client import Client
from gitmem.config import Config
from gitmem.errors import DaemonError

FLAGS = ("--no-autocommit",)
CORPUS_DAEMON = "corpus_daemon"


@dataclass
class BenchDaemon:
    """One daemon process on `store`, its index in `schema`."""

    store: Path
    dsn: str
    schema: str
    flags: tuple[str, ...] = FLAGS
    pid: int | None = None
    start_s: float = 0.0          # wall time of the last `gitmem daemon start`
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> Config:
        """The store, DSN and schema the daemon serves."""
        return Config(store=self.store, dsn=self.dsn, schema=self.schema)

    def env(self) -> dict[str, str]:
        """The environment of the CLI that starts it (the DSN never on a command line)."""
        env = {**os.environ, "GITMEM_SCHEMA": self.schema, "GITMEM_DSN": self.dsn}
        for name in ("GITMEM_STORE", "GITMEM_NO_DAEMON"):
            env.pop(name, None)
        return env

    def start(self) -> float:
        """`gitmem daemon start` (returns once the daemon answers); its wall seconds."""
        if lifecycle.running_pid(self.config) is not None:
            raise RuntimeError(f"a daemon already serves {self.store}")
        command = [*gitmem_command(), "--store", str(self.store), "daemon", "start",
                   *self.flags]
        try:
            with timed() as clock:
                done = subprocess.run(command, capture_output=True, text=True,
                                      env=self.env(), cwd=self.store.parent, timeout=300)
        except BaseException:  # Ctrl-C: the daemon, in a session of its own, goes on starting
            self._stop_started(wait_s=10.0)
            raise
        if done.returncode != 0:
            self._stop_started(wait_s=0.0)
            raise RuntimeError(f"gitmem daemon start failed ({done.returncode}): "
                               f"{done.stderr.strip()}")
        self.pid = int(done.stdout.split()[-1])
        self.start_s = clock.s
        return clock.s

    def _stop_started(self, wait_s: float) -> None:
        """Stop a daemon a start that did not finish left serving the store (found by its
        pid file, waited for up to `wait_s` while it comes up)."""
        deadline = time.monotonic() + wait_s
        while True:
            self.pid = lifecycle.running_pid(self.config)
            if self.pid is not None or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        self.stop()

    def stop(self) -> None:
        """SIGTERM to this daemon's pid, then wait until it has exited."""
        if self.pid is None:
            return
        if lifecycle.running_pid(self.config) == self.pid:
            try:
                lifecycle.stop(self.config, timeout=60.0)
            except DaemonError as exc:  # the log holds its threads' stacks by now
                time.sleep(1.0)
                raise DaemonError(f"{exc}\n{self.log_tail(80)}") from None
        self.pid = None

    def client(self, timeout: float = 120.0) -> Client:
        """A new connection to the daemon's socket."""
        return Client(self.config.socket_path, timeout=timeout).connect()

    def call(self, method: str, params: Any = None) -> Any:
        """One call on a fresh connection."""
        with self.client() as client:
            return client.call(method, params)

    def process(self) -> psutil.Process:
        """The daemon's process."""
        if self.pid is None:
            raise RuntimeError("the daemon is not running")
        return psutil.Process(self.pid)

    def processes(self) -> list[psutil.Process]:
        """The daemon's process and its children (its indexer process)."""
        main = self.process()
        return [main, *main.children(recursive=True)]

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the daemon and its children have used so far."""
        total = 0.0
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total += float(times.user + times.system)
        return total

    def rss_mb(self) -> float:
        """Resident memory now of the daemon and its children, MB (pages the child
        still shares with the daemon after the fork count twice)."""
        total = 0
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                total += int(proc.memory_info().rss)
        return round(total / (1 << 20), 1)

    def memory_by_process(self) -> dict[str, dict[str, float]]:
        """RSS and PSS (shared pages split among the processes that map them) of the
        daemon and of each child, MB."""
        out: dict[str, dict[str, float]] = {}
        for number, proc in enumerate(self.processes()):
            with contextlib.suppress(psutil.Error):
                info = proc.memory_full_info()
                out["daemon" if number == 0 else f"child {proc.pid}"] = {
                    "rss": round(info.rss / (1 << 20), 1), "pss": round(info.pss / (1 << 20), 1)}
        return out

    def peak_rss_mb(self) -> float:
        """The kernel's high-water marks of resident memory since start (VmHWM) of the
        daemon and its children, summed, MB."""
        total = 0.0
        for proc in self.processes():
            status = Path(f"/proc/{proc.pid}/status")
            with contextlib.suppress(OSError):
                for line in status.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1]) / 1024
        return round(total, 1) if total else self.rss_mb()

    def log_tail(self, lines: int = 20) -> str:
        """The end of the daemon's log."""
        log = lifecycle.log_path(self.config)
        if not log.is_file():
            return ""
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def postgres_cpu_s() -> float:
    """CPU seconds used so far by every process named `postgres` on the machine (the
    server's backends; other users' servers included), and by those that have ended:
    the postmaster's reaped children. Without them a backend that ended during a
    measurement took its time with it, and the difference could come out negative."""
    total = 0.0
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] == "postgres":
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            total += float(times.user + times.system + times.children_user
                           + times.children_system)
    return total


def corpus_daemon(ctx: Context) -> BenchDaemon:
    """The run's daemon on the corpus store (index built first), started on first use."""
    found = ctx.shared.get(CORPUS_DAEMON)
    if isinstance(found, BenchDaemon) and found.pid is not None:
        return found
    ctx.ensure_index()
    daemon = BenchDaemon(ctx.corpus.store, ctx.dsn, ctx.index_config().schema)
    ctx.cleanups.append(daemon.stop)  # before the start: an interrupt in it cleans up too
    daemon.start()
    daemon.stats["rss_after_start_mb"] = daemon.rss_mb()
    daemon.stats["memory_after_start"] = daemon.memory_by_process()
    ctx.shared[CORPUS_DAEMON] = daemon
    return daemon


def stop_corpus_daemon(ctx: Context) -> None:
    """Stop the shared corpus daemon if one runs (only one daemon may serve a store)."""
    found = ctx.shared.pop(CORPUS_DAEMON, None)
    if isinstance(found, BenchDaemon):
        found.stop()
