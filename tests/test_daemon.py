"""The daemon's lifecycle and resilience, with real processes, sockets and databases."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import psycopg
import pytest
from psycopg import sql

from gitmem.client import Client, socket_address
from gitmem.config import Config, redact_dsn
from gitmem.daemon import log_path, running_pid
from gitmem.errors import DaemonError, RpcError
from gitmem.store import init_store
from tests.conftest import Cli, snapshot
from tests.daemons import (
    FAST_FLAGS,
    Daemon,
    Index,
    append,
    cleanup_dir,
    event_line,
    items,
    new_repo,
    running,
    short_dir,
    short_store,
    wait_for,
)


@pytest.fixture
def store_config(dsn: str, schema: str) -> Iterator[Config]:
    """A committed store in a short directory, on the test database."""
    with short_store(dsn, schema) as config:
        yield config


def ids_in_files(store: Path) -> list[str]:
    out = []
    for path in sorted(store.glob("events/*/*.jsonl")):
        for line in path.read_bytes().split(b"\n"):
            try:
                out.append(json.loads(line)["id"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn fragment (reported by the index, never glued to a record)
    return out


# --------------------------------------------------------------------------- lifecycle

@pytest.mark.embedded
def test_start_status_stop(store_config: Config) -> None:
    daemon = Daemon(store_config)
    pid = daemon.start()
    assert running_pid(store_config) == pid
    status = daemon.cli("daemon", "status", "--json")
    report = json.loads(status.stdout)
    assert report["running"] and report["daemon"]["pid"] == pid
    assert report["daemon"]["watcher"]["mode"] == "inotify"
    collector = report["daemon"]["gc"]  # start-up's objects frozen (gitmem/gctune.py)
    assert collector["installed"] and collector["frozen"] > 10000
    assert "serves" in daemon.log()
    daemon.stop()
    assert running_pid(store_config) is None
    assert not store_config.socket_path.exists()
    stopped = daemon.cli("daemon", "status", check=False)
    assert stopped.returncode == 3 and "not running" in stopped.stdout
    again = daemon.cli("daemon", "stop")
    assert "no daemon was running" in again.stderr


def test_sigusr1_writes_every_threads_stack_to_the_log(store_config: Config) -> None:
    with running(store_config) as daemon:
        assert daemon.pid is not None
        os.kill(daemon.pid, signal.SIGUSR1)
        wait_for(lambda: all(name in daemon.log() for name in (
            "(most recent call first)", "gitmem/server.py", "gitmem/watcher.py")))
        daemon.call("daemon_status")  # and it goes on serving
    assert running_pid(store_config) is None


def test_files_that_failed_to_parse_before_the_start_are_listed_as_skipped(
        store_config: Config) -> None:
    """A file that was malformed before the daemon started is not indexed again, so it
    was never logged: the start lists it under "skipped", field and all."""
    day = store_config.store / "events" / "2026-03" / "2026-03-01.jsonl"
    day.parent.mkdir(parents=True, exist_ok=True)
    day.write_text('{"content": {"text": "no id"}}\n{broken\n')
    with running(store_config) as daemon:
        daemon.call("sync", {})
    with running(store_config) as daemon:  # unchanged since: nothing indexed at start
        problems = daemon.call("daemon_status")["watcher"]["problems"]
        shown = daemon.cli("daemon", "status").stdout
        day.write_text(event_line("s", "mended")[1])  # fixed: no longer listed
        daemon.call("sync", {})
        mended = daemon.call("daemon_status")["watcher"]["problems"]
    rel = "events/2026-03/2026-03-01.jsonl"
    assert any(p.startswith(f"{rel}:1: field 'id': missing required field (also missing: ts,")
               for p in problems)
    assert any(p.startswith(f"{rel}:2: malformed JSON") for p in problems)
    assert f"  skipped {rel}:1: field 'id'" in shown
    assert mended == []


def test_a_daemon_whose_policies_do_not_load_names_the_line_not_a_traceback(
        store_config: Config) -> None:
    budgets = store_config.store / "policies" / "budgets.yaml"
    budgets.write_text(budgets.read_text().replace("reserve_tokens: 5000",
                                                   "reserve_tokens: lots"))
    result = Daemon(store_config).cli("daemon", "start", check=False)
    assert result.returncode == 1
    assert "policies/budgets.yaml:5: field 'reserve_tokens'" in result.stderr
    assert "Traceback" not in result.stderr and 'File "' not in result.stderr
    assert running_pid(store_config) is None


def test_stores_side_by_side_each_have_their_own_daemon(store_config: Config,
                                                          schema: str) -> None:
    """Two stores in one directory share its state directory: each has its own socket,
    pid file and log there, and a command for one is never served by the other's."""
    spare = store_config.root / "spare"
    init_store(spare)
    (spare / "memory").rename(store_config.root / "agent2")
    shutil.rmtree(spare)  # what init put beside the store (.gitignore, ...)
    other = Config(store=(store_config.root / "agent2").resolve(), dsn=store_config.dsn,
                   schema=f"{schema}_2")
    assert other.socket_path != store_config.socket_path
    with running(store_config) as first:
        second = Daemon(other)
        written = second.cli("record", "said to agent2").stdout.strip()  # no daemon of its own
        assert written in json.dumps([json.loads(line) for path in other.store.glob(
            "events/*/*.jsonl") for line in path.read_text().splitlines()])
        assert written not in json.dumps(ids_in_files(store_config.store))
        try:
            second.start()
            assert second.call("daemon_status")["store"] == str(other.store)
            assert first.call("daemon_status")["store"] == str(store_config.store)
            assert second.pid != first.pid and log_path(other).exists()
        finally:
            second.stop()
            with psycopg.connect(store_config.dsn or "", autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{other.schema}" CASCADE')


def test_a_stopped_daemon_is_worked_around_not_waited_for(store_config: Config) -> None:
    """A daemon that cannot answer (SIGSTOP) accepts connections still: every command
    asks it which store it serves first (whether or not it names an index of its own),
    and on no answer within 5 s works without it. It was sent nothing, so nothing is
    done again once it resumes; `gitmem call`, which has no work of its own, fails
    saying nothing was sent."""
    with running(store_config) as daemon:
        assert daemon.pid is not None
        plain = {k: v for k, v in daemon.env().items() if k not in ("GITMEM_SCHEMA",
                                                                    "GITMEM_DSN")}
        commands = [(["record", "written beside a stopped daemon"], daemon.env()),
                    (["record", "no index named, no wait either"], plain),
                    (["call", "record_event", '{"content": {"text": "never sent"}}'], plain)]
        os.kill(daemon.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            running_now = [subprocess.Popen(
                [sys.executable, "-m", "gitmem", "--store", str(store_config.store), *args],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for args, env in commands]
            done = [p.communicate(timeout=60) for p in running_now]
            took = time.monotonic() - started
        finally:
            os.kill(daemon.pid, signal.SIGCONT)
        assert took < 30  # not the 120 s a call may take
        for (out, err), process in zip(done[:2], running_now, strict=False):
            assert process.returncode == 0, err
            assert "did not answer within 5.0s: working without it" in err
            assert err.startswith("gitmem: ") and "WARNING" not in err  # a plain line
            assert out.strip() in ids_in_files(store_config.store)
        assert running_now[2].returncode == 1
        assert "did not answer within 5.0s; nothing was sent to it" in done[2][1]
        assert daemon.call("daemon_status")["pid"] == daemon.pid  # and it goes on
        daemon.call("status")  # whatever it had queued is done by now
        texts = [line["content"]["text"] for path in store_config.store.glob("events/*/*.jsonl")
                 for line in map(json.loads, path.read_text().splitlines())]
        assert sorted(texts) == ["no index named, no wait either",
                                 "written beside a stopped daemon"]  # once each, no more


def test_a_write_sent_but_not_answered_says_it_may_still_happen(store_config: Config) -> None:
    """A write the daemon was sent and did not answer in time (here: a batch longer to
    write than the caller waits) may still be done: the error says so, says not to
    write again blindly, and names the event ids to look for; and it is done."""
    from gitmem.client import call_if_running

    with running(store_config):
        events = [{"id": f"evt_01KHBYB{n:019d}", "session_id": "slow",
                   "content": {"text": f"line {n}"}} for n in range(5_000)]
        with pytest.raises(DaemonError) as caught:  # 0.1-1.5 s to write, machine by machine
            call_if_running(store_config.socket_path, "record_events", {"events": events},
                            timeout=0.02)
        message = str(caught.value)
        assert "did not answer within 0.02s; it was sent the record_events request and may " \
            "still carry it out" in message
        assert "do not simply run it again, or it may be done twice" in message
        assert f"look for {events[0]['id']} (and 4999 more) in the store's events/" in message
        wait_for(lambda: len(ids_in_files(store_config.store)) == 5_000, timeout=120,
                 step=0.2)  # and it was done


def test_a_daemon_that_cannot_listen_names_why_not_a_traceback(store_config: Config) -> None:
    store_config.socket_path.mkdir(parents=True)  # something else holds the socket's path
    result = Daemon(store_config).cli("daemon", "start", check=False)  # with autocommit
    assert result.returncode == 1
    assert f"cannot listen on {store_config.socket_path}: Is a directory" in result.stderr
    assert "Traceback" not in result.stderr and 'File "' not in result.stderr
    assert running_pid(store_config) is None


def _left_running(config: Config) -> bool:
    """Whether a daemon serves `config` (stopped, so that no test leaves one behind)."""
    pid = running_pid(config)
    if pid is not None:
        Daemon(config).cli("daemon", "stop", check=False)
    return pid is not None


@pytest.mark.parametrize("command", ["start", "stop"])
@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "-NaN"])
def test_a_timeout_of_no_time_is_refused_as_a_bad_flag(store_config: Config, command: str,
                                                      timeout: str) -> None:
    """`start --timeout 0` gave up on the daemon it had just spawned and left it running;
    `stop --timeout -1` stopped it, then failed advising `kill -9`; `nan` passed the
    range check and did both."""
    daemon = Daemon(store_config)
    try:
        if command == "stop":
            daemon.start()
        result = daemon.cli("daemon", command, "--timeout", timeout, check=False)
        assert result.returncode == 2, result.stderr
        said = (f"{float(timeout)} is not" if math.isfinite(float(timeout))
                else f"{timeout!r} is not a finite number")
        assert f"Invalid value for '--timeout': {said} in the range x>0" in result.stderr
        assert (running_pid(store_config) is not None) == (command == "stop")
    finally:
        _left_running(store_config)


def test_a_start_that_gives_up_stops_the_daemon_it_spawned(store_config: Config) -> None:
    """It said the daemon did not answer "within 0s", exited 1, and left it running: the
    next start was refused as a second daemon."""
    daemon = Daemon(store_config)
    try:
        result = daemon.cli("daemon", "start", "--no-autocommit", "--timeout", "0.05",
                            check=False)
        assert result.returncode == 1
        assert "did not answer within 0.05s, so it was stopped" in result.stderr
        assert str(log_path(store_config)) in result.stderr
        assert running_pid(store_config) is None
        pid = int(result.stderr.split("(pid ", 1)[1].split(")", 1)[0])
        assert _gone(pid)
        daemon.start()  # the next start is no second daemon
        daemon.stop()
    finally:
        assert not _left_running(store_config)


def test_a_state_directory_that_is_a_file_is_named_not_a_traceback(store_config: Config) -> None:
    """`.gitmem` a regular file: start, status and stop ended in a NotADirectoryError."""
    state = store_config.state_dir
    shutil.rmtree(state, ignore_errors=True)
    state.touch()
    daemon = Daemon(store_config)
    started = daemon.cli("daemon", "start", "--no-autocommit", check=False)
    assert started.returncode == 1 and "Traceback" not in started.stderr, started.stderr
    assert started.stderr.splitlines() == [
        f"Error: cannot write {state}: it is a file, not a directory; the daemon keeps its "
        f"socket, pid file and log in {state}: move that file away (the daemon makes the "
        "directory), or work without a daemon (every command does)"]
    status = daemon.cli("daemon", "status", check=False)
    assert status.returncode == 3 and "not running" in status.stdout, status.stderr
    stopped = daemon.cli("daemon", "stop", check=False)
    assert stopped.returncode == 0 and "no daemon was running" in stopped.stderr
    assert state.is_file()


def test_a_start_on_a_full_disk_says_so_and_leaves_no_empty_pid_file(
        store_config: Config) -> None:
    """A disk that takes no byte more (a real `ulimit -f 0`, failing as ENOSPC does): the
    daemon's pid file write ended in a traceback, lost with the log it went to, `start`
    said "(nothing logged)", and an empty pid file stayed. Now the daemon names the file
    and the reason, and `start` says its log could not be written."""
    daemon = Daemon(store_config)
    state = store_config.state_dir
    state.mkdir(exist_ok=True)

    def full() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def gitmem(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gitmem", "--store",
                               str(store_config.store), *args], capture_output=True,
                              text=True, env=daemon.env(), cwd=store_config.root,
                              timeout=120, preexec_fn=full)

    ran = gitmem("daemon", "run", *FAST_FLAGS)  # its stderr a pipe, which takes it
    assert ran.returncode == 1 and "Traceback" not in ran.stderr, ran.stderr
    assert ran.stderr.splitlines() == [
        f"Error: cannot write {state / 'gitmem.pid'}: File too large; the daemon keeps "
        f"its socket, pid file and log in {state}: free space there (or raise the quota "
        "or the `ulimit -f` limit), or work without a daemon (every command does)"]
    assert not (state / "gitmem.pid").exists()
    started = gitmem("daemon", "start", *FAST_FLAGS)
    assert started.returncode == 1 and "Traceback" not in started.stderr, started.stderr
    assert (f"(the log {log_path(store_config)} cannot be written: File too large, so "
            "the daemon could not say why it ended; free space there (or raise the quota "
            "or the `ulimit -f` limit), then start again)") in started.stderr
    assert "nothing logged" not in started.stderr
    assert not (state / "gitmem.pid").exists()
    daemon.start()  # with room again
    daemon.stop()


def test_a_second_daemon_on_the_same_store_is_refused(store_config: Config) -> None:
    with running(store_config) as first:
        second = first.cli("daemon", "start", "--no-autocommit", check=False)
        assert second.returncode == 1
        assert f"already serves {store_config.store}" in second.stderr
        foreground = first.cli("daemon", "run", "--no-autocommit", check=False)
        assert foreground.returncode == 1 and f"pid {first.pid}" in foreground.stderr
        assert first.call("daemon_status")["pid"] == first.pid


def test_a_daemon_stops_answering_from_an_index_another_store_took_over(
        store_config: Config) -> None:
    """Another store's `gitmem reindex` from a machine where this daemon's pid cannot be
    seen takes the index over: within seconds, idle or not, the daemon counts the index
    as unavailable and its reads fail naming both stores instead of answering from the
    other's rows; once the index is this store's again, they answer."""
    elsewhere = "/elsewhere/memory"
    mine = str(store_config.store.resolve())

    def owner(path: str) -> None:
        with psycopg.connect(store_config.dsn or "", autocommit=True) as conn:
            conn.execute(sql.SQL("UPDATE {}.meta SET value = %s WHERE key = 'store'").format(
                sql.Identifier(store_config.schema)), (path,))

    def db_ok(daemon: Daemon) -> Any:
        return daemon.call("daemon_status")["watcher"]["db_ok"]

    with running(store_config) as daemon:
        daemon.cli("record", "the alpha team plans a rocket launch", "--session", "s1")
        assert "rocket launch" in daemon.cli("acb", "rocket launch", "--format", "text").stdout
        owner(elsewhere)  # nothing written meanwhile: the idle check finds it
        wait_for(lambda: db_ok(daemon) is False, timeout=10)
        refused = daemon.cli("acb", "rocket launch", "--format", "text", check=False)
        assert refused.returncode != 0 and "rocket" not in refused.stdout
        assert f"holds the index of {elsewhere}, not of {mine}" in refused.stderr
        owner(mine)
        wait_for(lambda: db_ok(daemon), timeout=15)
        daemon.cli("record", "one more line for the watcher", "--session", "s1")
        assert "one more line" in daemon.cli("acb", "one more line", "--format", "text").stdout


def test_a_crashed_daemon_leaves_nothing_that_blocks_the_next(store_config: Config) -> None:
    daemon = Daemon(store_config)
    daemon.start()
    daemon.kill9()
    assert store_config.socket_path.exists()  # stale socket and pid file stay behind
    assert (store_config.state_dir / "gitmem.pid").exists()
    assert running_pid(store_config) is None
    record = daemon.cli("record", "while no daemon runs")  # the CLI works alone meanwhile
    assert record.stdout.startswith("evt_")
    try:
        pid = daemon.start()
        assert daemon.call("daemon_status")["pid"] == pid
    finally:
        daemon.stop()


def test_sigterm_stops_cleanly_with_writes_answered(store_config: Config) -> None:
    daemon = Daemon(store_config)
    daemon.start()
    with daemon.client() as client:
        client.call("record_event", {"content": {"text": "before stop"}})
    daemon.stop()
    assert "stopped" in daemon.log()
    assert len(ids_in_files(store_config.store)) == 1


def _socket_inodes(pid: int) -> set[str]:
    """Inodes of the sockets process `pid` holds open."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def test_the_daemon_listens_on_its_unix_socket_and_no_network_port(store_config: Config) -> None:
    with running(store_config) as daemon:
        assert daemon.pid is not None
        daemon.call("record_event", {"content": {"text": "the pool is connected now"}})
        mine = _socket_inodes(daemon.pid)
        network = []
        for table in ("tcp", "tcp6", "udp", "udp6"):
            path = Path(f"/proc/{daemon.pid}/net/{table}")
            for row in path.read_text().splitlines()[1:] if path.exists() else []:
                fields = row.split()
                listening = table.startswith("udp") or fields[3] == "0A"  # 0A: TCP LISTEN
                if fields[9] in mine and listening:
                    network.append(f"{table} {fields[1]}")
        assert network == []  # client connections to PostgreSQL are fine; no port is served
        unix = [row.split() for row in Path("/proc/net/unix").read_text().splitlines()[1:]]
        served = [r[7] for r in unix if len(r) > 7 and r[6] in mine
                  and int(r[3], 16) & 0x10000]  # __SO_ACCEPTCON: a listening socket
        assert served == [str(store_config.socket_path)]


def test_long_store_paths_still_get_a_socket(dsn: str, schema: str) -> None:
    root = short_dir()
    deep = root / ("d" * 60) / ("e" * 40)
    try:
        new_repo(deep)
        config = Config(store=deep / "memory", dsn=dsn, schema=schema)
        assert len(str(config.socket_path)) > 107
        with running(config) as daemon:
            assert daemon.call("daemon_status")["pid"] == daemon.pid
            assert daemon.cli("record", "through a long path").stdout.startswith("evt_")
            assert daemon.call("daemon_status")["writer"]["events"] == 1
    finally:
        cleanup_dir(root)


def test_a_client_without_a_daemon_gets_a_clear_error(store_config: Config) -> None:
    with pytest.raises(DaemonError, match=r"no daemon answers on .*gitmem daemon start"):
        Client(store_config.socket_path).connect()
    result = Daemon(store_config).cli("call", "status", check=False)
    assert result.returncode == 1 and "gitmem daemon start" in result.stderr


def test_socket_address_is_the_path_itself_when_short(tmp_path: Path) -> None:
    with socket_address(Path("/tmp/x.sock")) as address:
        assert address == "/tmp/x.sock"
    with pytest.raises(DaemonError, match="no daemon state directory"), \
            socket_address(tmp_path / ("z" * 120) / "gitmem.sock"):
        pass


# --------------------------------------------------------------------------- the CLI asks first

def test_cli_commands_go_through_the_daemon_with_the_same_results(store_config: Config) -> None:
    local_env = {**Daemon(store_config).env(), "GITMEM_NO_DAEMON": "1"}
    jsonl = '{"content": {"text": "one"}}\n{"content": {"text": "two"}, "session_id": "j"}\n'
    bad = '{"content": {"text": "ok"}}\n{"channel": "radio", "content": {"text": "bad"}}\n'
    with running(store_config) as daemon:
        served = daemon.cli("record", "via the socket", "--session", "cli")
        jsonl_ids = daemon.cli("record", "--json", "-", input=jsonl).stdout.split()
        decision = daemon.cli("decide", "Use the socket", "--ref", served.stdout.strip(),
                              "--title", "Socket first").stdout.strip()
        task = daemon.cli("task", "Document the socket", "--owner", "ana",
                          "--sensitivity", "high").stdout.strip()
        handoff = daemon.cli("handoff", "writer", "Document the socket", "--decision",
                             decision).stdout.strip()
        status = json.loads(daemon.cli("status", "--json").stdout)
        synced = json.loads(daemon.cli("sync").stdout)
        errors = {
            "daemon": daemon.cli("record", "x", "--channel", "radio", check=False),
            "local": daemon.cli("record", "x", "--channel", "radio", check=False, env=local_env),
        }
        batch_errors = {
            "daemon": daemon.cli("record", "--json", "-", input=bad, check=False),
            "local": daemon.cli("record", "--json", "-", input=bad, check=False, env=local_env),
        }
        not_object = '{"content": {"text": "ok"}}\n[1, 2]\n'
        shape_errors = {
            "daemon": daemon.cli("record", "--json", "-", input=not_object, check=False),
            "local": daemon.cli("record", "--json", "-", input=not_object, check=False,
                                env=local_env),
        }
        surrogate = '{"content": {"text": "a\\ud800b"}}\n'  # JSON for a lone surrogate
        surrogate_errors = {
            "daemon": daemon.cli("record", "--json", "-", input=surrogate, check=False),
            "local": daemon.cli("record", "--json", "-", input=surrogate, check=False,
                                env=local_env),
        }
        unsendable = daemon.cli("call", "record_event", surrogate.strip(), check=False)
        writer = daemon.call("daemon_status")["writer"]
    assert served.stdout.startswith("evt_") and len(jsonl_ids) == 2
    assert decision.startswith("dec_") and (store_config.store / "decisions"
                                           / f"{decision}.md").is_file()
    assert task.startswith("tsk_")
    assert "sensitivity: high" in (store_config.store / "tasks" / f"{task}.md").read_text()
    assert (store_config.store / "handoffs" / f"{handoff}.yaml").is_file()
    assert writer["events"] >= 1  # record went through the group writer
    assert status["clean"] and status["index"]["events"] == 5
    assert synced["changed"] == [] and "files" in synced
    for pair in (errors, batch_errors, shape_errors, surrogate_errors):
        assert pair["daemon"].returncode == pair["local"].returncode == 1
        assert pair["daemon"].stderr == pair["local"].stderr
    assert "field 'channel'" in errors["daemon"].stderr
    assert "<stdin>:2" in batch_errors["daemon"].stderr
    assert "<stdin>:2: expected a JSON object, got list" in shape_errors["daemon"].stderr
    assert "field 'content.text'" in surrogate_errors["daemon"].stderr
    assert "Traceback" not in surrogate_errors["daemon"].stderr + unsendable.stderr
    assert unsendable.returncode == 1 and "lone surrogate" in unsendable.stderr
    assert len(ids_in_files(store_config.store)) == 5  # the bad batch wrote nothing


def test_acb_through_the_daemon_equals_the_local_one(store_config: Config) -> None:
    local_env = {**Daemon(store_config).env(), "GITMEM_NO_DAEMON": "1"}
    now = "2026-03-02T09:00:00+00:00"
    with running(store_config) as daemon:
        evt = daemon.cli("record", "Our deploys run on the blue cluster in Frankfurt",
                         "--session", "s1").stdout.strip()
        daemon.cli("decide", "Deploy only from Frankfurt", "--ref", evt)
        daemon.cli("record", "lunch is at noon", "--session", "s1")
        asks = {"json": ("acb", "Which city hosts our deploys?", "--session", "s1", "--now", now),
                "text": ("acb", "Which city hosts our deploys?", "--session", "s1", "--now", now,
                         "--format", "text"),
                "fast": ("acb", "--session", "s1", "--now", now, "--max-tokens", "3000")}
        served, local = {}, {}
        for name, args in asks.items():
            before = daemon.call("daemon_status")["accepted"]
            served[name] = daemon.cli(*args).stdout
            assert daemon.call("daemon_status")["accepted"] == before + 2  # acb, then this call
            local[name] = daemon.cli(*args, env=local_env).stdout
            assert daemon.call("daemon_status")["accepted"] == before + 3  # never asked
        bad = ("acb", "--max-tokens", "-5")
        bad_served = daemon.cli(*bad, check=False)
        bad_local = daemon.cli(*bad, check=False, env=local_env)
    for name in ("json", "fast"):
        one, other = json.loads(served[name]), json.loads(local[name])
        assert one["sections"] and one["provenance"]["path"] == ("retrieval" if name == "json"
                                                                 else "fast")
        for key in ("acb_id", "budget_tokens", "token_used_est", "sections", "omissions"):
            assert one[key] == other[key], key
    assert evt in served["json"] and "Frankfurt" in served["text"]
    assert served["text"] == local["text"]
    assert bad_served.returncode == bad_local.returncode == 1
    assert bad_served.stderr == bad_local.stderr and "max_tokens" in bad_served.stderr


def test_gitmem_call_prints_the_result_and_reports_errors(store_config: Config) -> None:
    with running(store_config) as daemon:
        recorded = daemon.cli("call", "record_event", "-",
                              input='{"content": {"text": "from call"}}')
        assert json.loads(recorded.stdout)["event_id"].startswith("evt_")
        wrong = daemon.cli("call", "record_event", '{"channel": 1}', check=False)
        assert wrong.returncode == 1 and "-32602" in wrong.stderr and "channel" in wrong.stderr
        usage = daemon.cli("call", "status", "{not json", check=False)
        assert usage.returncode == 2 and "not JSON" in usage.stderr
        long = daemon.cli("call", "build_acb", '{"max_tokens": 1' + "0" * 5000 + "}",
                          check=False)  # json.loads' own ValueError: it was a traceback
        assert long.returncode == 2 and "an integer of more than 4,300 digits" in long.stderr
        assert "Traceback" not in long.stderr


def test_a_warm_fast_path_build_acb_needs_no_database_round_trip(store_config: Config) -> None:
    """The caches answer a fast-path build_acb; PostgreSQL sees no query from the daemon."""
    app = f"gm_fast_{uuid.uuid4().hex[:10]}"
    assert store_config.dsn
    tagged = dataclasses.replace(store_config, dsn=store_config.dsn
                                 + ("&" if "?" in store_config.dsn else "?")
                                 + f"application_name={app}")
    request = {"session_id": "fast", "now": "2026-03-02T09:00:00+00:00"}
    with running(tagged) as daemon, \
            psycopg.connect(store_config.dsn, autocommit=True) as watch, daemon.client() as client:
        def backends() -> list[tuple[Any, ...]]:
            return sorted(watch.execute(
                "SELECT pid, backend_start, xact_start, query_start, state_change "
                "FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchall())

        for n in range(3):
            client.call("record_event", {"session_id": "fast", "content": {"text": f"turn {n}"}})
        first = client.call("build_acb", request)
        assert first["provenance"]["path"] == "fast" and items(first, "recent_window")
        quiet, deadline = backends(), time.monotonic() + 20
        while time.monotonic() < deadline:  # until the pool's background work is done
            time.sleep(0.3)
            previous, quiet = quiet, backends()
            if quiet == previous:
                break
        assert quiet, "the daemon holds no connection under its application_name"
        answers = [client.call("build_acb", request) for _ in range(20)]
        assert backends() == quiet, "a warm fast-path build_acb ran a statement or opened " \
            "a connection"
    assert all(a["sections"] == first["sections"] for a in answers)


# --------------------------------------------------------------------------- resilience

def test_reconcile_at_start_indexes_changes_made_while_down(store_config: Config) -> None:
    event_id, line = event_line("offline", "appended while no daemon ran", number=1)
    append(store_config.store / "events/2026-03/2026-03-01.jsonl", line)
    (store_config.store / "views" / "glossary.md").unlink()
    index = Index(store_config)
    try:
        with running(store_config) as daemon:
            assert index.has_event(event_id)  # reconciled before the socket opened
            assert not index.scalar("SELECT count(*) FROM views WHERE path = %s",
                                    "views/glossary.md")
            assert daemon.call("status")["clean"]
    finally:
        index.close()


def test_a_malformed_file_is_logged_shown_in_status_and_survived(store_config: Config) -> None:
    with running(store_config) as daemon:
        day = store_config.store / "events/2026-03/2026-03-01.jsonl"
        good_id, good = event_line("m", "good line after a bad one", number=2)
        append(day, '{"id": "evt_broken", "not json\n' + good)
        (store_config.store / "decisions" / "dec_01KHBYB0000000000000000001.md").write_text(
            "---\nid: [unclosed\n---\nbody\n")
        status = daemon.call("status")
        problems = {f"{e['path']}:{e['line']}" for e in status["errors"]}
        assert "events/2026-03/2026-03-01.jsonl:1" in problems
        assert any(p.startswith("decisions/dec_01KHBYB0000000000000000001.md") for p in problems)
        acb = daemon.call("build_acb", {"session_id": "m"})
        assert any("good line after a bad one" in i["text"] for i in items(acb))
        watcher = daemon.call("daemon_status")["watcher"]
        assert any("2026-03-01.jsonl:1" in p for p in watcher["problems"])
        assert "skipped" in daemon.log() and "2026-03-01.jsonl:1" in daemon.log()
        assert good_id


def test_a_record_file_the_disk_refuses_is_a_store_error_through_the_daemon(
        store_config: Config) -> None:
    """A decision or task whose file the disk refuses (a real file-size limit the daemon
    runs under: EFBIG, as ENOSPC on a full disk) is answered with -32007 naming the
    file, as a plain record is, not -32603; the CLI says it in one line, and no staged
    file is left."""
    daemon = Daemon(store_config)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))  # inherited by the daemon
    try:
        daemon.start()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    try:
        cited = daemon.call("record_event", {"content": {"text": "why"}})["event_id"]
        before = snapshot(store_config.store)
        big = "x" * 100_000
        with pytest.raises(RpcError) as caught:
            daemon.call("decide", {"text": big, "refs": [cited]})
        assert caught.value.code == -32007
        assert f"writing {store_config.store / 'decisions'}/dec_" in str(caught.value)
        task = daemon.cli("task", "Write the guide", "--details", big, check=False)
        assert task.returncode == 1 and "Traceback" not in task.stderr
        assert f"writing {store_config.store / 'tasks'}/tsk_" in task.stderr
        assert "File too large; nothing was written" in task.stderr
        assert snapshot(store_config.store) == before  # no .tmp- file either
    finally:
        daemon.stop()


def test_an_index_schema_dropped_under_the_daemon_is_built_again(
        store_config: Config, dsn: str, schema: str) -> None:
    """`drop schema ... cascade` under a running daemon: it notices (its idle check of
    the index, or the next batch or read) and builds the index again from the files in
    bulk, as a command without a daemon does as it starts; meanwhile a read is a clear
    -32001, never -32603, and writes go on."""
    with running(store_config) as daemon:
        daemon.call("record_event", {"session_id": "s", "content": {"text": "deploy runs "
                                                                             "in frankfurt"}})
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
        daemon.call("record_event", {"session_id": "s", "content": {"text": "second fact"}})
        codes = set()

        def rebuilt() -> bool:
            try:
                acb = daemon.call("build_acb", {"session_id": "s", "query_text": "deploy"})
                status = daemon.call("status")
            except RpcError as exc:
                codes.add(exc.code)
                return False
            text = " ".join(i["text"] for i in items(acb))
            return "frankfurt" in text and "second fact" in text and status["clean"]

        wait_for(rebuilt, timeout=30, step=0.1)
        assert codes <= {-32001}, codes
        assert daemon.call("status")["index"]["views"] == 4  # every file, not only the new
        daemon.cli("sync")
        assert "rebuilt in bulk" in daemon.log()
        assert "Traceback" not in daemon.log()


@pytest.mark.slow
def test_postgres_restarted_under_a_running_daemon(tmp_path_factory: pytest.TempPathFactory,
                                                   schema: str) -> None:
    """A private PostgreSQL (pgserver), stopped and started again under the daemon."""
    import pgserver
    from pgserver._commands import pg_ctl

    pgdata = short_dir("gpg")
    root = short_dir()
    server = pgserver.get_server(pgdata, cleanup_mode="delete")
    uri = server.get_uri()
    socket_dir = parse_qs(urlparse(uri).query)["host"][0]
    config = Config(store=root / "memory", dsn=uri, schema=schema)
    new_repo(root)
    try:
        with running(config) as daemon:
            before = daemon.call("record_event", {"session_id": "pg",
                                                  "content": {"text": "before the restart"}})
            pg_ctl(["-w", "stop", "-m", "fast"], pgdata=server.pgdata, user=server.system_user,
                   timeout=30)
            during = daemon.call("record_event", {"session_id": "pg",
                                                  "content": {"text": "while it was down"}})
            hand_id, line = event_line("pg", "appended by hand while it was down", number=3)
            append(config.store / "events/2026-03/2026-03-01.jsonl", line)
            with pytest.raises(RpcError) as down:
                daemon.call("build_acb", {"session_id": "pg"})
            assert down.value.code == -32001  # no stale answer: a clear "index unavailable"
            assert daemon.call("daemon_status")["watcher"]["db_ok"] is False
            pg_ctl(["-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(server.log),
                    "start"], pgdata=server.pgdata, user=server.system_user, timeout=30)

            def caught_up() -> bool:
                try:
                    acb = daemon.call("build_acb", {"session_id": "pg"})
                except RpcError:
                    return False
                text = " ".join(i["text"] for i in items(acb))
                return all(t in text for t in ("before the restart", "while it was down",
                                               "appended by hand while it was down"))

            wait_for(caught_up, timeout=30, step=0.2)
            assert daemon.call("daemon_status")["pid"] == daemon.pid
            assert daemon.call("status")["clean"]
            ids = {before["event_id"], during["event_id"], hand_id}
            with psycopg.connect(uri, options=f"-c search_path={schema}") as conn:
                found = {r[0] for r in conn.execute("SELECT event_id FROM events")}
            assert ids <= found
    finally:
        server.cleanup()
        cleanup_dir(root)
        cleanup_dir(pgdata)


@pytest.mark.slow
def test_kill_9_during_a_50k_event_load_loses_and_doubles_nothing(store_config: Config) -> None:
    total, threads_n, batch = 50_000, 8, 250
    acked: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    daemon = Daemon(store_config)
    daemon.start()

    def load(worker: int) -> None:
        try:
            with Client(store_config.socket_path, timeout=30) as client:
                for start in range(0, total // threads_n, batch):
                    if stop.is_set():
                        return
                    requests = [{"jsonrpc": "2.0", "id": n, "method": "record_event",
                                 "params": {"session_id": f"load{worker}",
                                            "content": {"text": f"w{worker} e{start + n}"}}}
                                for n in range(batch)]
                    client.send_line(json.dumps(requests).encode() + b"\n")
                    answers: Any = client.read_response()
                    with lock:
                        acked.extend(a["result"]["event_id"] for a in answers if "result" in a)
        except DaemonError:
            return  # the daemon was killed under us

    workers = [threading.Thread(target=load, args=(n,)) for n in range(threads_n)]
    for worker in workers:
        worker.start()
    wait_for(lambda: len(acked) >= total // 3, timeout=60, step=0.01)
    daemon.kill9()
    stop.set()
    for worker in workers:
        worker.join(timeout=30)
    killed_at = len(acked)
    assert 0 < killed_at < total
    try:
        daemon.start()
        daemon.call("status")  # catch up on read
        on_disk = ids_in_files(store_config.store)
        assert len(on_disk) == len(set(on_disk))  # nothing written twice
        assert set(acked) <= set(on_disk)  # nothing answered was lost
        index = Index(store_config)
        try:
            assert index.scalar("SELECT count(*) FROM events") == len(on_disk)
            assert index.scalar("SELECT count(DISTINCT event_id) FROM events") == len(on_disk)
            assert index.scalar("SELECT count(*) FROM chunks") == len(on_disk)
            assert set(index.event_ids()) == set(on_disk)
        finally:
            index.close()
        # the crash is over: the load goes on and is indexed once
        more = daemon.call("record_event", {"content": {"text": "after the crash"}})
        assert more["event_id"] in ids_in_files(store_config.store)
    finally:
        daemon.stop()
    print(f"killed after {killed_at} answered events; {len(on_disk)} on disk")


def _gone(pid: int, within: float = 10.0) -> bool:
    """Whether process `pid` ends (or is a zombie no one reaped yet) within `within` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.02)
    return False


def test_the_index_process_is_the_daemons_child_and_ends_with_it(
        store_config: Config) -> None:
    daemon = Daemon(store_config)
    pid = daemon.start()
    state = daemon.call("daemon_status")["indexer"]
    assert state["alive"] and state["pid"] not in (None, pid)
    status = Path(f"/proc/{state['pid']}/status").read_text()
    assert f"PPid:\t{pid}\n" in status
    record = daemon.cli("record", "indexed by the child")
    acb = daemon.call("build_acb", {"query_text": "indexed by the child"})
    assert record.stdout.strip() in json.dumps(acb)
    daemon.stop()
    assert _gone(state["pid"])


def test_the_index_process_ends_when_the_daemon_is_killed(store_config: Config) -> None:
    daemon = Daemon(store_config)
    daemon.start()
    child = daemon.call("daemon_status")["indexer"]["pid"]
    daemon.kill9()  # waits for the pid file's lock, which the child shares
    assert _gone(child)


def test_status_and_stop_tell_a_killed_daemon_whose_process_still_holds_the_store(
        cli: Cli) -> None:
    """After `kill -9` the daemon's pid is gone while its indexer process finishes its
    batch, holding the pid file's lock: status says so (exit 3), and stop waits for the
    lock, not claiming at once to have stopped what it never reached. `start` said the
    dead pid "already serves" the store; now it says what status says, and all three
    name the process that holds it."""
    from gitmem.daemon import pid_path

    dead = subprocess.Popen(["true"])  # ended, and not reaped yet: a zombie, as a daemon
    # killed a moment ago is (signal 0 finds it)
    wait_for(lambda: Path(f"/proc/{dead.pid}/stat").read_text().rpartition(")")[2].split()[0]
             == "Z")
    path = pid_path(cli.config)
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        f"os.ftruncate(fd, 0); os.pwrite(fd, b'{dead.pid}\\n', 0)\n"
        "print('held', flush=True); time.sleep(float(sys.argv[1]))"), "1.5"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        status = cli("daemon", "status", ok=False)
        assert status.exit_code == 3
        told = (f"pid {dead.pid} is gone, and a process it started (pid {holder.pid}) still "
                "holds the store (it ends with its batch; `gitmem daemon stop` waits for it, "
                f"or `kill -9 {holder.pid}` ends it now: the next daemon's index catches up "
                "from the files)")
        assert status.stdout.strip() == f"not running: {told}"
        report = json.loads(cli("daemon", "status", "--json", ok=False).stdout)
        assert report["finishing"] and report["holders"] == [holder.pid]
        # `start` said "a gitmem daemon (pid N) already serves": N was dead
        start = cli("daemon", "start", "--no-autocommit", ok=False)
        assert start.exit_code == 1 and "already serves" not in start.stderr
        assert start.stderr.strip() == (f"Error: cannot start a daemon for {cli.config.store} "
                                        f"yet: {told}")
        refused = cli("daemon", "stop", "--timeout", "0.2", ok=False)
        assert refused.exit_code != 0
        assert (f"the daemon (pid {dead.pid}) is gone, but a process it started (pid "
                f"{holder.pid}) still holds") in refused.stderr
        assert f"`kill -9 {holder.pid}` ends it" in refused.stderr
        started = time.monotonic()
        assert f"stopped gitmem daemon {dead.pid}" in cli("daemon", "stop").stderr
        assert time.monotonic() - started > 0.3 and holder.poll() is not None
    finally:
        holder.kill()
        holder.wait()
        dead.wait()


def test_status_and_stop_reach_a_daemon_whose_socket_or_store_is_gone(
        store_config: Config) -> None:
    """A deleted socket: status said "running" and exited 0, advising a start the daemon
    then refused. A store moved away: stop and status failed to find it, and only `kill`
    ended the daemon."""
    store = store_config.store
    moved = store.parent / "moved-away"
    with running(store_config) as daemon:
        store_config.socket_path.unlink()
        status = daemon.cli("daemon", "status", check=False)
        assert status.returncode == 1
        assert "is gone (deleted?)" in status.stdout and "`gitmem daemon stop`" in status.stdout
        store.rename(moved)
        try:
            assert daemon.cli("daemon", "status", check=False).returncode == 1
            stopped = daemon.cli("daemon", "stop")
            assert f"stopped gitmem daemon {daemon.pid}" in stopped.stderr
            assert running_pid(store_config) is None
        finally:
            moved.rename(store)
    nothing = daemon.cli("daemon", "stop", env={**daemon.env(), "GITMEM_STORE": ""},
                         check=False)
    assert "no daemon was running" in nothing.stderr


def test_a_killed_index_process_leaves_the_daemon_indexing_itself(
        store_config: Config) -> None:
    with running(store_config) as daemon:
        child = daemon.call("daemon_status")["indexer"]["pid"]
        os.kill(child, signal.SIGKILL)
        assert _gone(child)
        event_id, line = event_line("s", "appended after the child died", number=7)
        append(store_config.store / "events/2026-03/2026-03-01.jsonl", line)
        acb = daemon.call("build_acb", {"session_id": "s",
                                        "query_text": "appended after the child died"})
        assert event_id in json.dumps(acb)
        assert daemon.call("daemon_status")["indexer"]["alive"] is False
        assert "indexing in the daemon from now on" in daemon.log()


def test_no_index_process_indexes_in_the_daemon(store_config: Config) -> None:
    with running(store_config, *FAST_FLAGS, "--no-index-process") as daemon:
        assert daemon.call("daemon_status")["indexer"] == {"pid": None, "alive": False}
        record = daemon.cli("record", "indexed by the daemon itself")
        acb = daemon.call("build_acb", {"query_text": "indexed by the daemon itself"})
        assert record.stdout.strip() in json.dumps(acb)


def test_the_daemon_starts_its_embedded_database_again_after_a_crash() -> None:
    """No DSN: the daemon's own embedded PostgreSQL. Killed, it comes back without a
    command from anyone, and the daemon answers again (docs/DAEMON.md: it survives a
    restarted database)."""
    root = short_dir()
    new_repo(root)
    config = Config(store=root / "memory")
    try:
        with running(config) as daemon:
            first = daemon.call("build_acb", {"query_text": "anything at all"})
            pgdata = config.state_dir / "pg"
            postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
            children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True,
                                      text=True).stdout.split()
            for pid in [postmaster, *map(int, children)]:  # the server and its backends
                os.kill(pid, signal.SIGKILL)

            def answers() -> bool:
                try:
                    daemon.call("build_acb", {"query_text": "anything at all"})
                except RpcError as exc:
                    assert exc.code == -32001  # the index is down: said so, never stale
                    return False
                return True

            wait_for(answers, timeout=60, step=0.2)
            # the connections the pool held to the old server fail once each, until the
            # watcher, back from its wait for the database, has dropped that pool
            wait_for(lambda: daemon.call("daemon_status")["watcher"]["db_ok"] is True,
                     timeout=30)
            wait_for(answers, timeout=10, step=0.1)
            again = daemon.call("build_acb", {"query_text": "anything at all"})
            assert again["sections"] == first["sections"]
            revived = int((pgdata / "postmaster.pid").read_text().split()[0])
            assert revived != postmaster
            assert "starting it again" in daemon.log()
    finally:
        cleanup_dir(root)


def test_a_cli_asking_for_another_index_is_not_answered_by_the_daemon(
        store_config: Config) -> None:
    """The daemon serves one schema of one database; a command that names another
    (GITMEM_SCHEMA, --dsn) works on that one itself, and says so."""
    other = f"t_{uuid.uuid4().hex[:12]}"
    with running(store_config) as daemon:
        same = json.loads(daemon.cli("acb", "anything").stdout)
        assert same["provenance"]["index_state"]["freshness"] == "watcher"
        assert daemon.call("daemon_status")["database"] == redact_dsn(store_config.dsn or "")
        asked = daemon.cli("acb", "anything", env={**daemon.env(), "GITMEM_SCHEMA": other})
        bundle = json.loads(asked.stdout)
        assert bundle["provenance"]["index_state"]["schema"] == other
        assert bundle["provenance"]["index_state"]["freshness"] == "sync-on-read"
        assert f"the daemon serves schema {store_config.schema}" in asked.stderr
    with psycopg.connect(store_config.dsn or "", autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{other}" CASCADE')


def test_a_word_scrubbed_in_place_between_the_daemons_writes_is_not_served(
        store_config: Config) -> None:
    """A same-length edit in a day file's middle and a line appended right after it,
    both by hand (one batch of file events): the file grew and its anchors are as
    indexed, yet the edit is seen (the prefix is read again) and the old word goes.
    The daemon's own appends after it chain from a stat its indexer never read."""
    day = store_config.store / "events" / "2026-03" / "2026-03-01.jsonl"
    lines = "".join(json.dumps({"session_id": "s1", "ts": f"2026-03-01T10:{n // 60:02d}:"
                                f"{n % 60:02d}+00:00", "content": {"text": f"note {n:03d}" + (
                                    " the vault code is swordfish" if n == 60 else "")}}) + "\n"
                    for n in range(120))
    with running(store_config) as daemon:
        daemon.cli("record", "--json", "-", input=lines)
        daemon.cli("record", "one", "--session", "s1", "--ts", "2026-03-01T11:00:00+00:00")
        assert "swordfish" in daemon.cli("acb", "vault code", "--format", "text").stdout
        data = day.read_bytes()
        where = data.index(b"swordfish")
        assert 4096 < where < len(data) - 4096  # past the anchors
        with day.open("r+b") as handle:  # same inode, same size
            handle.seek(where)
            handle.write(b"XXXXXXXXX")
        append(day, event_line("s1", "two", ts="2026-03-01T11:01:00+00:00", number=2)[1])
        served = daemon.cli("acb", "vault code", "--format", "text").stdout
        assert "swordfish" not in served and "the vault code is XXXXXXXXX" in served
        with day.open("r+b") as handle:
            handle.seek(where)
            handle.write(b"ZZZZZZZZZ")
        daemon.cli("record", "three", "--session", "s1", "--ts", "2026-03-01T11:02:00+00:00")
        served = daemon.cli("acb", "vault code", "--format", "text").stdout
        assert "XXXXXXXXX" not in served and "the vault code is ZZZZZZZZZ" in served
        assert "clean" in daemon.cli("status").stdout


@pytest.mark.parametrize("flag, value", [("--reconcile-interval", "nan"),
                                         ("--reconcile-interval", "inf"),
                                         ("--commit-interval", "nan"),
                                         ("--commit-interval", "-inf"),
                                         ("--timeout", "inf")])
def test_seconds_that_are_not_finite_are_refused_as_a_bad_flag(store_config: Config, flag: str,
                                                              value: str) -> None:
    """`--reconcile-interval nan` spun an idle daemon at 50-70% of a core;
    `--commit-interval nan` never committed."""
    daemon = Daemon(store_config)
    try:
        result = daemon.cli("daemon", "start", flag, value, check=False)
        assert result.returncode == 2, result.stderr
        assert f"Invalid value for '{flag}': {value!r} is not a finite number in the range" in (
            result.stderr)
        assert running_pid(store_config) is None
    finally:
        _left_running(store_config)


def test_a_request_cut_short_by_the_stop_is_answered_shutting_down(store_config: Config) -> None:
    """Half a request line received when the daemon stopped was parsed: -32700."""
    with running(store_config) as daemon, socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(store_config.socket_path))
        sock.sendall(b'{"jsonrpc":"2.0","id":1,"method":"record_event",'
                     b'"params":{"content":{"text":"half')
        time.sleep(0.3)
        assert daemon.pid is not None
        os.kill(daemon.pid, signal.SIGTERM)
        sock.settimeout(10)
        answer = json.loads(sock.makefile("rb").readline())
    assert answer["error"]["code"] == -32006, answer
    assert "shutting down; nothing was written" in answer["error"]["message"]
    assert not any("half" in path.read_text() for path in store_config.store.glob("events/*/*"))
