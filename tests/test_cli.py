"""The command line through CliRunner: outputs, exit codes, help texts."""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner, Result

from gitmem.cli import main
from gitmem.config import Config
from gitmem.documents import parse_decision, parse_task
from gitmem.ids import ULID_ID
from gitmem.store import init_store
from tests.conftest import Cli, snapshot
from tests.daemons import Daemon, Index, cleanup_dir, new_repo, running, short_dir, short_store

SECRET = "sk-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2"


def day_lines(store: Path) -> list[dict[str, object]]:
    return [json.loads(line) for path in sorted((store / "events").rglob("*.jsonl"))
            for line in path.read_text().splitlines() if line]


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from all_commands(command, (*prefix, name))


# ----------------------------------------------------------------------------- help


def test_every_command_has_help_with_an_example() -> None:
    runner = CliRunner()
    commands = list(all_commands(main))
    assert {("init",), ("record",), ("decide",), ("task",), ("reindex",), ("sync",),
            ("status",)} <= set(commands)
    for path in [(), *commands]:
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, path
        assert "Example" in result.output, f"gitmem {' '.join(path)} --help has no example"


# ----------------------------------------------------------------------------- init


def test_init_creates_a_store_and_is_idempotent(tmp_path: Path) -> None:
    runner = CliRunner()
    target = tmp_path / "proj"
    first = runner.invoke(main, ["init", str(target)], env={"GITMEM_NO_DAEMON": "1"})
    assert first.exit_code == 0, first.output
    assert first.stdout.strip() == str(target.resolve() / "memory")
    assert "created memory/manifest.json" in first.stderr
    assert (target / ".git").is_dir() and (target / "memory" / "manifest.json").is_file()
    before = snapshot(target)
    again = runner.invoke(main, ["init", str(target)], env={"GITMEM_NO_DAEMON": "1"})
    assert again.exit_code == 0 and "nothing changed" in again.stderr
    assert snapshot(target) == before


def test_init_where_memory_is_a_file_says_so_and_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "proj"
    target.mkdir()
    (target / "memory").write_text("my notes")
    result = CliRunner().invoke(main, ["init", str(target)], env={"GITMEM_NO_DAEMON": "1"})
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{target / 'memory'} is a file, not a directory" in result.stderr
    assert sorted(p.name for p in target.iterdir()) == ["memory"]  # not even git init


@pytest.mark.parametrize("inner", ["memory", "memory/views"])
def test_init_inside_a_store_is_refused_and_changes_nothing(tmp_path: Path, inner: str) -> None:
    """A store made inside another was read as the outer's files (verify failed on
    them), and the hooks were set to run for both."""
    runner = CliRunner()
    target = tmp_path / "proj"
    assert runner.invoke(main, ["init", str(target)], env={"GITMEM_NO_DAEMON": "1"}).exit_code == 0
    before = snapshot(target)
    result = runner.invoke(main, ["init", str(target / inner)], env={"GITMEM_NO_DAEMON": "1"})
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "nothing was created" in result.stderr and f"gitmem init {target}" in result.stderr
    assert snapshot(target) == before


def test_init_below_a_fifo_named_manifest_json_does_not_wait_on_it(tmp_path: Path) -> None:
    """Looking for a store above, init read every manifest.json it met: a FIFO named so
    would have waited for a writer for good."""
    os.mkfifo(tmp_path / "manifest.json")
    done = subprocess.run([sys.executable, "-m", "gitmem", "init", str(tmp_path / "proj")],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GITMEM_NO_DAEMON": "1"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "proj" / "memory" / "manifest.json").is_file()


def test_a_manifest_of_another_tools_makes_no_store_and_a_file_is_no_store(
        tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text('{"name": "an extension", "version": "1.0"}')
    runner = CliRunner()
    made = runner.invoke(main, ["init", str(tmp_path / "proj")], env={"GITMEM_NO_DAEMON": "1"})
    assert made.exit_code == 0, made.output
    (tmp_path / "notes.txt").write_text("x")
    result = runner.invoke(main, ["--store", str(tmp_path / "notes.txt"), "status"],
                           env={"GITMEM_NO_DAEMON": "1"})
    assert result.exit_code == 1
    assert f"{tmp_path / 'notes.txt'} is a file, not a gitmem store" in result.stderr


@pytest.mark.parametrize("tenant", ["a b", "", "x" * 250, "api_key=sk-abcdefghijklmnopqrstuv"])
def test_init_refuses_a_tenant_that_is_not_a_name_and_creates_nothing(
        tmp_path: Path, tenant: str) -> None:
    """Written to manifest.json, such a tenant broke every later command (and a secret
    was stored as written)."""
    target = tmp_path / "proj"
    result = CliRunner().invoke(main, ["init", str(target), "--tenant", tenant],
                                env={"GITMEM_NO_DAEMON": "1"})
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "field 'default_tenant'" in result.stderr and "sk-abc" not in result.output
    assert not target.exists()


def test_init_says_an_existing_store_keeps_its_tenant_and_an_unwritable_place_is_an_error(
        tmp_path: Path) -> None:
    runner = CliRunner()
    target = tmp_path / "proj"
    assert runner.invoke(main, ["init", str(target), "--tenant", "acme"],
                         env={"GITMEM_NO_DAEMON": "1"}).exit_code == 0
    again = runner.invoke(main, ["init", str(target), "--tenant", "globex"],
                          env={"GITMEM_NO_DAEMON": "1"})
    assert again.exit_code == 0 and "keeps default_tenant 'acme'" in again.stderr
    assert "keeps" not in runner.invoke(main, ["init", str(target)],
                                        env={"GITMEM_NO_DAEMON": "1"}).stderr
    blocked = runner.invoke(main, ["init", "/proc/gitmem-test"], env={"GITMEM_NO_DAEMON": "1"})
    assert blocked.exit_code == 1 and "Traceback" not in blocked.output
    assert "cannot create a store in /proc/gitmem-test" in blocked.stderr


def test_a_store_option_naming_the_repository_points_at_its_store(tmp_path: Path) -> None:
    runner = CliRunner()
    target = tmp_path / "proj"
    assert runner.invoke(main, ["init", str(target)], env={"GITMEM_NO_DAEMON": "1"}
                         ).exit_code == 0
    result = runner.invoke(main, ["--store", str(target), "status"],
                           env={"GITMEM_NO_DAEMON": "1"})
    assert result.exit_code == 1
    assert f"pass --store {target.resolve() / 'memory'}" in result.stderr


# ----------------------------------------------------------------------------- record


def test_record_prints_the_new_id(cli: Cli) -> None:
    result = cli("record", "We deploy on Fridays", "--session", "s1", "--agent", "planner",
                 "--actor", "human:alice", "--tag", "topic:deploy", "--tag", "ops",
                 "--channel", "team", "--ts", "2026-02-09T05:12:33+09:00")
    event_id = result.stdout.strip()
    assert ULID_ID.match(event_id) and event_id.startswith("evt_")
    [event] = day_lines(cli.config.store)
    assert event["id"] == event_id and event["content"] == {"text": "We deploy on Fridays"}
    assert (event["session_id"], event["agent_id"], event["channel"]) == ("s1", "planner", "team")
    assert event["actor"] == {"type": "human", "id": "alice"}
    assert event["tags"] == ["topic:deploy", "ops"]
    assert (cli.config.store / "events/2026-02/2026-02-09.jsonl").is_file()


def test_record_tool_result_and_content_json(cli: Cli) -> None:
    big = "row\n" * 10_000
    tool_id = cli("record", "--kind", "tool_result", "--tool", "sh", big).stdout.strip()
    call_id = cli("record", "--kind", "tool_call", "--content",
                  '{"tool": "fs.read", "args": {"path": "a.txt"}}',
                  "--ref", tool_id).stdout.strip()
    events = {e["id"]: e for e in day_lines(cli.config.store)}
    content = events[tool_id]["content"]
    assert isinstance(content, dict) and content["truncated"] is True
    assert content["tool"] == "sh" and str(content["artifact_id"]).startswith("art_")
    assert events[call_id]["refs"] == [tool_id]


@pytest.mark.parametrize(("args", "message"), [
    (["--kind", "tool_result", "ls output"], "--kind tool_result needs --tool NAME"),
    (["--tool", "sh", "hello"], "--tool goes with TEXT and --kind tool_call or tool_result"),
    (["--tool", "sh", "--kind", "tool_call", "--content", '{"tool": "x", "args": {}}'],
     "--tool goes with TEXT"),
    (["--kind", "task_update", "Ship it"], "a task_update event is recorded with `gitmem task`"),
    (["--kind", "decision", "Use X"], "a decision event is recorded with `gitmem decide`"),
    (["--kind", "artifact", "blob"], "--kind tool_result --tool NAME"),
])
def test_record_refuses_a_kind_or_tool_it_would_get_wrong(cli: Cli, args: list[str],
                                                          message: str) -> None:
    """A tool_result without --tool was stored as tool "tool", --tool beside a message was
    dropped, and a task_update from TEXT said "a new task needs a title"."""
    before = snapshot(cli.config.store.parent)
    result = cli("record", *args, ok=False)
    assert result.exit_code == 2 and message in result.stderr
    assert snapshot(cli.config.store.parent) == before


def test_record_json_file_and_stdin(cli: Cli, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"content": {"text": "one"}}\n\n{"content": {"text": "two"}, '
                      '"tags": ["x"]}\n')
    ids = cli("record", "--json", str(source)).stdout.split()
    assert len(ids) == 2
    more = cli("record", "--json", "-", input='{"content": {"text": "three"}}\n').stdout.split()
    assert len(more) == 1
    texts = [e["content"] for e in day_lines(cli.config.store)]
    assert texts == [{"text": "one"}, {"text": "two"}, {"text": "three"}]


def test_record_json_with_a_bad_line_writes_nothing(cli: Cli, tmp_path: Path) -> None:
    cli("record", "already here")
    before = snapshot(cli.config.store.parent)
    source = tmp_path / "in.jsonl"
    source.write_text('{"content": {"text": "one"}}\n{"content": {"text": "two"}, "tags": 5}\n')
    result = cli("record", "--json", str(source), ok=False)
    assert result.exit_code == 1
    assert f"{source}:2: field 'tags'" in result.stderr
    result = cli("record", "--json", "-", input='{"content": {"text": "ok"}}\n{"kind": \n',
                 ok=False)
    assert result.exit_code == 1 and "<stdin>:2: malformed JSON" in result.stderr
    result = cli("record", "--json", str(tmp_path / "missing.jsonl"), ok=False)
    assert result.exit_code == 2 and "cannot read" in result.stderr
    deep = '{"content": {"text": "x", "n": ' + "[" * 100_000 + "]" * 100_000 + "}}\n"
    result = cli("record", "--json", "-", input='{"content": {"text": "ok"}}\n' + deep,
                 ok=False)
    assert result.exit_code == 1 and "<stdin>:2: nests objects and arrays too deep" in (
        result.stderr)
    twice = '{"channel": "private", "content": {"text": "x"}, "channel": "public"}\n'
    result = cli("record", "--json", "-", input='{"content": {"text": "ok"}}\n' + twice,
                 ok=False)
    assert result.exit_code == 1 and "<stdin>:2: malformed JSON: key 'channel' is given twice" \
        in result.stderr
    result = cli("record", "--content", '{"text": "x", "score": 1e999}', ok=False)
    assert result.exit_code == 2 and "--content: 1e999 is beyond a float's range" in result.stderr
    assert snapshot(cli.config.store.parent) == before


def test_record_json_refuses_event_flags_it_would_not_apply(cli: Cli) -> None:
    """`--sensitivity high` beside `--json` was dropped without a word: the stream was
    stored as `none` and served on the public channel."""
    before = snapshot(cli.config.store.parent)
    line = '{"content": {"text": "Salary of Bob is 150k"}, "channel": "public"}\n'
    result = cli("record", "--json", "-", "--sensitivity", "high", "--session", "hr",
                 "--tag", "hr", input=line, ok=False)
    assert result.exit_code == 2
    assert "--sensitivity, --session, --tag would not apply to them" in result.stderr
    assert snapshot(cli.config.store.parent) == before


def test_record_non_utf8_input_names_the_line(cli: Cli) -> None:
    result = cli.runner.invoke(main, ["record", "--json", "-"], env=cli.env(),
                               input=b'{"content": {"text": "a"}}\n{"content": {"text": "\xff"}}\n')
    assert result.exit_code == 1 and "<stdin>:2: not valid UTF-8" in result.stderr


def test_record_json_that_the_disk_refuses_writes_nothing_and_says_why(
        cli: Cli, tmp_path: Path) -> None:
    """A real file-size limit (`ulimit -f`, failing as a full disk does) stops the write
    in the middle: the day file is cut back to what it was, and the error is a message."""
    cli("record", "already here", "--ts", "2026-11-26T10:00:00+00:00")
    day = cli.config.store / "events/2026-11/2026-11-26.jsonl"
    before = snapshot(cli.config.store.parent)
    source = tmp_path / "batch.jsonl"
    source.write_text("".join(json.dumps({"ts": "2026-11-26T11:00:00+00:00", "content": {
        "text": f"batch line {n} " + "x" * 300}}) + "\n" for n in range(400)))

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    result = subprocess.run(
        [sys.executable, "-m", "gitmem", "record", "--json", str(source)], capture_output=True,
        text=True, timeout=120, preexec_fn=limited, env={**os.environ, **cli.env(),
                                                         "GITMEM_NO_DAEMON": "1"})
    assert result.returncode == 1, result.stderr
    assert f"appending to {day} failed: File too large" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert snapshot(cli.config.store.parent) == before


def test_record_json_longer_than_the_daemon_reads_is_written_all_the_same(
        dsn: str, schema: str) -> None:
    """A batch over the daemon's --max-request-bytes (1 MiB here) is recorded by the CLI
    itself, as with no daemon: the same ids out, the same errors; the daemon indexes it."""
    root = short_dir("gmcli")
    new_repo(root)
    config = Config(store=root / "memory", dsn=dsn, schema=schema)
    source = root / "bulk.jsonl"
    lines = [json.dumps({"session_id": "bulk", "content": {"text": f"bulk {n} " + "z" * 1000}})
             for n in range(1500)]  # ~1.5 MB
    try:
        with running(config) as daemon:
            source.write_text("\n".join([*lines[:-1], '{"session_id": 5}']) + "\n")
            before = snapshot(config.store)
            refused = daemon.cli("record", "--json", str(source), check=False)
            assert refused.returncode == 1
            assert f"{source}:1500: field 'session_id'" in refused.stderr
            assert snapshot(config.store) == before  # validated whole: nothing written
            source.write_text("\n".join(lines) + "\n")
            ids = daemon.cli("record", "--json", str(source)).stdout.split()
            assert len(ids) == len(set(ids)) == 1500
            on_disk = [line["id"] for line in day_lines(config.store)]
            assert on_disk == ids
            small = daemon.cli("record", "--json", "-", input=lines[0] + "\n").stdout.split()
            daemon.call("status")  # the read catches up with what the CLI wrote
            index = Index(config)
            try:
                assert index.scalar("SELECT count(*) FROM events WHERE session_id = 'bulk'") \
                    == 1501 and index.has_event(small[0])
            finally:
                index.close()
    finally:
        cleanup_dir(root)


def test_record_secret_and_redaction(cli: Cli) -> None:
    result = cli("record", "vault code", "--sensitivity", "secret", ok=False)
    assert result.exit_code == 1 and "never stored" in result.stderr
    assert "Traceback" not in result.output
    cli("record", f"the key is {SECRET}")
    assert SECRET not in json.dumps(day_lines(cli.config.store))


@pytest.mark.parametrize("args", [
    ["record", "x", "--sensitivity", SECRET], ["acb", "q", "--channel", SECRET],
    ["acb", "q", "--now", SECRET], ["acb", "q", "--max-tokens", SECRET],  # click's own
])
def test_a_failure_quotes_no_secret_it_was_given(cli: Cli, args: list[str]) -> None:
    """The messages of bad options repeated the secret given by mistake, where `verify`
    redacts the values it quotes."""
    result = cli(*args, ok=False)
    assert result.exit_code in (1, 2) and "[REDACTED]" in result.stderr
    assert SECRET not in result.output


def test_a_failure_is_redacted_by_the_stores_own_patterns(cli: Cli) -> None:
    """An unknown command is looked up before the root knows the store: its message was
    redacted by the patterns `gitmem init` writes, not by the store's own."""
    privacy = cli.config.store / "policies" / "privacy.yaml"
    privacy.write_text(privacy.read_text().replace(
        "  redact_patterns:\n", "  redact_patterns:\n    - 'zzsecret\\w+'\n"))
    for args in (["nosuchcmd-zzsecret123"], ["record", "x", "--kind", "zzsecretKIND"]):
        result = cli(*args, ok=False)
        assert result.exit_code in (1, 2) and "[REDACTED]" in result.output
        assert "zzsecret" not in result.output


@pytest.mark.parametrize(("args", "code", "message"), [
    (["record", "x", "--kind", "gossip"], 1, "field 'kind'"),
    (["record", "x", "--channel", "radio"], 1, "field 'channel'"),
    (["record", "x", "--ts", "yesterday"], 1, "field 'ts'"),
    (["record", "x", "--ref", "not-an-id"], 1, "field 'refs'"),
    (["record", "x", "--actor", "alice"], 2, "TYPE:ID"),
    (["record"], 2, "give TEXT"),
    (["record", "--content", "[1]"], 2, "JSON object"),
    (["record", "--content", "{oops"], 2, "not JSON"),
    (["record", "x", "--json", "-"], 2, "--json replaces TEXT"),
    (["record", "also text", "--content", '{"text": "a"}'], 2, "--content replaces TEXT"),
    (["record", "x", "--no-such-flag"], 2, "No such option"),
    (["decide", "Use FTS"], 2, "--ref"),
    (["decide", "Use FTS", "--ref", "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3", "--supersedes",
      "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"], 1, "no decision dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"),
    (["decide", "Use FTS", "--ref", "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"], 1,
     "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3 is not in the store (a dangling reference)"),
    (["decide", "Use FTS", "--ref", "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3", "--confidence",
      "high"], 2, "confidence"),
    (["task", "T", "--status", "later"], 1, "field 'status'"),
    (["frobnicate"], 2, "No such command"),
    (["init", ""], 2, "is empty: name a directory"),  # it made a store where it ran
    (["--store", "", "status"], 1, "--store is empty"),  # it looked for one from here
])
def test_errors_exit_with_a_clear_message(cli: Cli, args: list[str], code: int,
                                          message: str) -> None:
    before = snapshot(cli.config.store.parent)
    result = cli(*args, ok=False)
    assert result.exit_code == code, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output and result.stdout == ""
    assert snapshot(cli.config.store.parent) == before


def test_no_store_is_a_clear_error(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["--store", str(tmp_path / "nowhere"), "status"],
                           env={"GITMEM_NO_DAEMON": "1"})
    assert result.exit_code == 1 and "gitmem init" in result.stderr


# ----------------------------------------------------------------------------- decide, task


def test_decide_and_supersede(cli: Cli) -> None:
    ref = cli("record", "FTS is enough for us").stdout.strip()
    first = cli("decide", "Use PostgreSQL FTS", "--ref", ref, "--rationale", "no new service",
                "--title", "Retrieval", "--confidence", "0.8").stdout.strip()
    assert first.startswith("dec_")
    rel = f"decisions/{first}.md"
    decision = parse_decision((cli.config.store / rel).read_text(), rel, "default")
    assert (decision.refs, decision.rationale, decision.confidence) == (
        (ref,), ("no new service",), 0.8)
    second = cli("decide", "Use FTS with bounded pools", "--ref", ref,
                 "--supersedes", first).stdout.strip()
    rel2 = f"decisions/{second}.md"
    assert parse_decision((cli.config.store / rel2).read_text(), rel2,
                          "default").supersedes == (first,)


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-0.5", "1.5"])
def test_decide_names_a_confidence_out_of_range(cli: Cli, value: str) -> None:
    """`--confidence nan` said `field 'content': NaN and Infinity are not JSON numbers`
    (through the daemon `[-32700] parse error: NaN is not a JSON number`), naming no
    option."""
    result = cli("decide", "conf", "--ref", "evt_x", "--confidence", value, ok=False)
    assert result.exit_code == 2
    said = (f"{float(value)} is not" if math.isfinite(float(value))
            else f"{value!r} is not a finite number")
    assert f"Invalid value for '--confidence': {said} in the range 0<=x<=1" in result.output
    assert not list(cli.config.store.glob("decisions/*.md"))


def test_task_create_and_update(cli: Cli) -> None:
    task_id = cli("task", "Write the guide", "--owner", "alice").stdout.strip()
    assert task_id.startswith("tsk_")
    assert cli("task", "Write the guide", "--id", task_id, "--status", "done"
               ).stdout.strip() == task_id
    rel = f"tasks/{task_id}.md"
    task = parse_task((cli.config.store / rel).read_text(), rel, "default")
    assert (task.status, task.owner) == ("done", "alice")
    # an update that leaves the status out keeps it: a rename does not reopen the task
    cli("task", "Write the onboarding guide", "--id", task_id, "--owner", "bob")
    task = parse_task((cli.config.store / rel).read_text(), rel, "default")
    assert (task.title, task.status, task.owner) == ("Write the onboarding guide", "done", "bob")
    cli("task", "Write the onboarding guide", "--id", task_id, "--owner", "")  # cleared
    task = parse_task((cli.config.store / rel).read_text(), rel, "default")
    assert (task.status, task.owner) == ("done", "")
    cli("task", "--id", task_id, "--status", "doing")  # no title: it stays
    task = parse_task((cli.config.store / rel).read_text(), rel, "default")
    assert (task.title, task.status) == ("Write the onboarding guide", "doing")
    result = cli("task", "--owner", "carol", ok=False)  # a new task without a title
    assert result.exit_code == 2 and "a new task needs a TITLE" in result.output
    # tags: a new task's, and an update's added to them (the README said so; no --tag was)
    tagged = cli("task", "Tag me", "--tag", "infra").stdout.strip()
    cli("task", "--id", tagged, "--tag", "urgent")
    rel = f"tasks/{tagged}.md"
    assert parse_task((cli.config.store / rel).read_text(), rel, "default").tags == (
        "infra", "urgent")


def test_task_update_of_a_task_that_does_not_exist_is_refused(cli: Cli) -> None:
    before = snapshot(cli.config.store.parent)
    missing = "tsk_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
    result = cli("task", "Typo", "--id", missing, "--status", "done", ok=False)
    assert result.exit_code == 1 and f"no task {missing} to update" in result.stderr
    assert "leave the id out to create a task" in result.stderr
    result = cli("task", "Typo", "--id", "tsk_nope", ok=False)
    assert result.exit_code == 1 and "'tsk_nope'" in result.stderr and "task_id" in result.stderr
    assert snapshot(cli.config.store.parent) == before


def test_a_decision_or_task_can_be_high_sensitivity(cli: Cli) -> None:
    evt = cli("record", "the candidate is Quixotic", "--sensitivity", "high").stdout.strip()
    dec = cli("decide", "Hire Quixotic", "--ref", evt, "--sensitivity", "high").stdout.strip()
    tsk = cli("task", "Send Quixotic the offer", "--sensitivity", "high").stdout.strip()
    rel = f"decisions/{dec}.md"
    assert parse_decision((cli.config.store / rel).read_text(), rel,
                          "default").sensitivity == "high"
    public = json.loads(cli("acb", "Quixotic offer", "--channel", "public").stdout)
    assert "Quixotic" not in json.dumps(public["sections"])
    assert {dec, tsk} <= {c for o in public["omissions"] if o["reason"] == "privacy"
                          for c in o["candidates"]}
    private = json.dumps(json.loads(cli("acb", "Quixotic offer").stdout)["sections"])
    assert "Hire Quixotic" in private and "Send Quixotic the offer" in private


def test_acb_with_an_empty_tenant_is_refused(cli: Cli) -> None:
    """`--tenant "$TENANT"` with the variable unset must not read the default tenant."""
    cli("record", "The wire transfer limit is 250000 EUR")
    result = cli("acb", "wire transfer limit", "--tenant", "", ok=False)
    assert result.exit_code != 0 and "tenant_id" in result.output
    assert "250000" not in result.output


def test_handoff_writes_a_packet_that_acb_builds_from(cli: Cli) -> None:
    evt = cli("record", "The deploy test fails on Mondays").stdout.strip()
    dec = cli("decide", "Retry the deploy test once", "--ref", evt).stdout.strip()
    hof = cli("handoff", "coder", "Fix the flaky deploy test", "--from", "planner",
              "--decision", dec, "--question", "Why Mondays?", "--ref", evt).stdout.strip()
    assert hof.startswith("hof_")
    packet = yaml.safe_load((cli.config.store / "handoffs" / f"{hof}.yaml").read_text())
    assert (packet["to_agent"], packet["from_agent"], packet["decisions"],
            packet["open_questions"]) == ("coder", "planner", [dec], ["Why Mondays?"])
    acb = json.loads(cli("acb", "--handoff", hof, "--agent", "coder").stdout)
    assert [s["name"] for s in acb["sections"] if s["items"]][:1] == ["handoff"]
    assert dec in json.dumps(acb["sections"])
    before = snapshot(cli.config.store.parent)
    missing = "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
    result = cli("handoff", "coder", "x", "--decision", missing, ok=False)
    assert result.exit_code == 1 and f"no decision {missing}" in result.stderr
    assert snapshot(cli.config.store.parent) == before


# ----------------------------------------------------------------------------- index


def test_verbose_logs_what_each_command_does(cli: Cli) -> None:
    """`-v` "logs what happens to stderr": record, sync, status and acb logged nothing."""
    env = {**os.environ, **cli.env(), "GITMEM_NO_DAEMON": ""}
    gitmem = [sys.executable, "-m", "gitmem", "-v"]
    recorded = subprocess.run([*gitmem, "record", "the walrus naps"], env=env,
                              capture_output=True, text=True, timeout=120)
    event_id = recorded.stdout.strip()
    assert f"recorded {event_id} (message, session default)" in recorded.stderr
    assert "record_event: no daemon answers on" in recorded.stderr
    built = subprocess.run([*gitmem, "acb", "walrus"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert "gitmem.memory: sync: " in built.stderr and "file(s) changed of" in built.stderr
    acb_id = json.loads(built.stdout)["acb_id"]
    assert f"build_acb: {acb_id}, " in built.stderr


def test_reindex_sync_status(cli: Cli) -> None:
    cli("record", "one")
    status = json.loads(cli("status", "--json").stdout)
    assert status["clean"] is False and status["index"]["events"] == 0
    assert ", last full sync at (never)\n" in cli("status").stdout
    report = json.loads(cli("reindex").stdout)
    assert report["errors"] == [] and report["files"] == 5
    assert json.loads(cli("status", "--json").stdout)["clean"] is True
    cli("record", "two")
    sync = cli("sync")
    assert "1 file(s) brought up to date" in sync.stderr
    assert [c["action"] for c in json.loads(sync.stdout)["changed"]] == ["append"]
    status = json.loads(cli("status", "--json").stdout)
    assert status["clean"] is True and status["index"]["events"] == 2
    human = cli("status").stdout
    assert "clean: the index reflects every file" in human
    head = status["git"]["head"] or "(no commit yet)"
    synced = status["git"]["head"] or "no commit (before the first)"
    assert f"git     HEAD {head}, last full sync at {synced}\n" in human


def test_sync_names_event_lines_a_tool_took_out(cli: Cli) -> None:
    """Lines a save took out of a day file, that no file holds: `gitmem sync` says so once
    (the file, how many, how to have them again), and goes on (exit 0)."""
    cli("record", "one")
    cli("record", "two")
    cli("sync")
    [day] = cli.config.store.glob("events/*/*.jsonl")
    day.write_bytes(day.read_bytes().splitlines(keepends=True)[0])  # "two" taken out
    rel = day.relative_to(cli.config.store)
    sync = cli("sync")
    assert f"  event lines gone from {rel}: 1 event(s)" in sync.stderr
    assert "git stash list" in sync.stderr
    assert json.loads(sync.stdout)["left"][0]["path"] == str(rel)
    assert "event lines gone" not in cli("sync").stderr


def test_a_store_whose_manifest_was_deleted_is_named_as_such(cli: Cli, tmp_path: Path) -> None:
    (cli.config.store / "manifest.json").unlink()
    result = cli("status", ok=False)
    assert result.exit_code == 1
    assert f"{cli.config.store} holds a store's files but no manifest.json (deleted?)" in \
        result.stderr and "git checkout -- memory/manifest.json" in result.stderr
    found = subprocess.run([sys.executable, "-m", "gitmem", "status"], capture_output=True,
                           text=True, cwd=cli.config.store / "events",
                           env={k: v for k, v in os.environ.items() if k != "GITMEM_STORE"})
    assert found.returncode == 1 and "no manifest.json (deleted?)" in found.stderr


def test_status_and_reindex_name_bad_lines(cli: Cli) -> None:
    cli("record", "good", "--ts", "2026-02-09T05:12:33+00:00")
    day = cli.config.store / "events/2026-02/2026-02-09.jsonl"
    with day.open("ab") as handle:
        handle.write(b"{broken\n")
        handle.write(b'{"content": {"text": "no id"}}\n')
    reindex = cli("reindex")
    assert "events/2026-02/2026-02-09.jsonl:2: malformed JSON" in reindex.stderr
    status = cli("status")
    assert ("clean: the index reflects every file; 1 file(s) hold errors, left out of it as "
            "listed below") in status.stdout
    assert "error   events/2026-02/2026-02-09.jsonl:2: malformed JSON" in status.stdout
    # the field is named as `gitmem verify` and FormatError name it
    assert "error   events/2026-02/2026-02-09.jsonl:3: field 'id': missing" in status.stdout
    with day.open("ab") as handle:
        handle.write(b'{"torn')
    pending = json.loads(cli("status", "--json").stdout)["pending"]
    assert [p["path"] for p in pending] == ["events/2026-02/2026-02-09.jsonl"]


# ----------------------------------------------------------------------------- embedded


@pytest.mark.embedded
def test_end_to_end_on_the_embedded_server(tmp_path: Path) -> None:
    """init, record, sync, status with no DSN at all: the embedded PostgreSQL."""
    runner = CliRunner()
    root = tmp_path / "proj"
    env: dict[str, str | None] = {"GITMEM_DSN": None, "GITMEM_SCHEMA": None,
                                  "GITMEM_STORE": str(root / "memory"),
                                  "GITMEM_NO_DAEMON": "1"}
    assert runner.invoke(main, ["init", str(root)], env=env).exit_code == 0
    recorded = runner.invoke(main, ["record", "hello from the embedded server",
                                    "--tag", "topic:embedded"], env=env)
    assert recorded.exit_code == 0, recorded.output
    synced = runner.invoke(main, ["sync"], env=env)
    assert synced.exit_code == 0, synced.output
    status = runner.invoke(main, ["status", "--json"], env=env)
    assert status.exit_code == 0, status.output
    report = json.loads(status.stdout)
    assert report["clean"] is True and report["index"]["events"] == 1
    assert (root / ".gitmem" / "pg").is_dir()  # the embedded data lives in .gitmem/
    assert "  .gitmem/" not in (root / ".gitignore").read_text()
    assert ".gitmem/" in (root / ".gitignore").read_text().splitlines()


def embedded_store(root: Path) -> tuple[list[str], dict[str, str]]:
    """A new store at `root`/memory (`gitmem init`) for `gitmem` processes with no DSN and
    no daemon, on the embedded server: the command line to run and its environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("GITMEM_DSN", "GITMEM_SCHEMA")}
    env.update(GITMEM_STORE=str(root / "memory"), GITMEM_NO_DAEMON="1")
    gitmem = [sys.executable, "-m", "gitmem"]
    subprocess.run([*gitmem, "init", str(root)], env=env, check=True, capture_output=True)
    return gitmem, env


@pytest.mark.embedded
def test_the_embedded_server_starts_under_a_path_with_a_space_and_past_a_stale_pid_file(
        tmp_path: Path) -> None:
    """pgserver handed the socket directory to pg_ctl unquoted (no server could start
    under `My Projects/`), and took any process of the pid a stale postmaster.pid names
    for the server: it started none, and killed that process at exit."""
    root = tmp_path / "my project"
    gitmem, env = embedded_store(root)
    for args in (["record", "the walrus is in the aquarium"], ["status"]):
        done = subprocess.run([*gitmem, *args], env=env, capture_output=True, text=True,
                              timeout=180)
        assert done.returncode == 0, done.stderr
    pgdata = root / ".gitmem" / "pg"
    with subprocess.Popen(["sleep", "120"]) as other:
        try:
            (pgdata / "postmaster.pid").write_text(f"{other.pid}\n{pgdata}\n")
            found = subprocess.run([*gitmem, "acb", "walrus", "--format", "text"], env=env,
                                   capture_output=True, text=True, timeout=180)
            assert found.returncode == 0, found.stderr
            assert "walrus is in the aquarium" in found.stdout
            assert f"names pid {other.pid}, which is no server" in found.stderr
            assert other.poll() is None  # not killed
        finally:
            other.kill()


@pytest.mark.embedded
def test_a_data_directory_an_interrupted_initdb_left_is_made_again(tmp_path: Path) -> None:
    """The first command killed while initdb ran (Ctrl-C, kill -9) left a directory every
    later start failed on, until it was removed by hand."""
    root = tmp_path / "proj"
    gitmem, env = embedded_store(root)
    pgdata = root / ".gitmem" / "pg"
    (pgdata / "base" / "1").mkdir(parents=True)
    (pgdata / "global").mkdir()
    for rel in ("PG_VERSION", "base/1/PG_VERSION", "global/pg_control"):
        (pgdata / rel).write_text("16\n")
    done = subprocess.run([*gitmem, "status"], env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    assert "was left unfinished by an initdb that did not complete" in done.stderr
    assert (pgdata / "base" / "5" / "PG_VERSION").exists()


@pytest.mark.embedded
def test_commands_started_together_share_one_embedded_server(tmp_path: Path) -> None:
    """Commands started at once on a new store, with no DSN and no daemon: one starts
    the embedded PostgreSQL and gives it its settings (a restart), the others wait for
    that instead of connecting to a server that is restarting, and the last to finish
    stops it."""
    root = tmp_path / "proj"
    gitmem, env = embedded_store(root)
    commands = [["record", "the blue cluster is in Frankfurt", "--session", "s1"],
                ["acb", "blue cluster"], ["acb", "Frankfurt", "--session", "s1"], ["status"]]
    started = [subprocess.Popen([*gitmem, *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for args in commands]
    finished = [(p.wait(timeout=180), p.stderr.read()) for p in started]
    for p in started:
        assert p.stdout is not None and p.stderr is not None
        p.stdout.close()
        p.stderr.close()
    assert [code for code, _ in finished] == [0, 0, 0, 0], finished
    assert not (root / ".gitmem" / "pg" / "postmaster.pid").exists()  # stopped at the end
    again = subprocess.run([*gitmem, "acb", "blue cluster", "--format", "text"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "blue cluster is in Frankfurt" in again.stdout


@pytest.mark.embedded
def test_an_embedded_server_that_cannot_start_is_named_with_the_way_out(tmp_path: Path) -> None:
    """A data directory the bundled PostgreSQL cannot read (another major version's):
    the error names it, its log, and that removing it loses nothing; after that the
    next command builds the index again from the files."""
    root = tmp_path / "proj"
    gitmem, env = embedded_store(root)
    for args in (["record", "kept in the files"], ["sync"]):  # sync: the server starts
        subprocess.run([*gitmem, *args], env=env, check=True, capture_output=True)
    pgdata = (root / ".gitmem" / "pg").resolve()
    (pgdata / "PG_VERSION").write_text("15\n")
    failed = subprocess.run([*gitmem, "status"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    assert f"could not start the embedded PostgreSQL in {pgdata}" in failed.stderr
    assert f"see {pgdata / 'log'}" in failed.stderr
    assert f"removing {pgdata} loses nothing" in failed.stderr
    shutil.rmtree(pgdata)
    again = subprocess.run([*gitmem, "acb", "kept", "--format", "text"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "kept in the files" in again.stdout


@pytest.mark.embedded
def test_a_process_killed_with_9_does_not_keep_the_embedded_server_running() -> None:
    """pgserver stops the embedded server when the last process using it leaves,
    counting them by pid (`.gitmem/pg/.handle_pids.json`); a daemon killed with -9
    never took its pid out, and the server ran for good. The next command to leave
    forgets the dead first, and stops the server as the last one."""
    root = short_dir("gmpg")
    try:
        gitmem, env = embedded_store(root)
        started = subprocess.run([*gitmem, "daemon", "start"], env=env, capture_output=True,
                                 text=True, timeout=120)
        assert started.returncode == 0, started.stderr
        postmaster = root / ".gitmem" / "pg" / "postmaster.pid"
        server = int(postmaster.read_text().split()[0])
        os.kill(int(started.stdout), signal.SIGKILL)
        status = subprocess.run([*gitmem, "-v", "status"], env=env, capture_output=True,
                                text=True, timeout=120)
        assert status.returncode == 0, status.stderr
        assert not postmaster.exists()  # stopped by the last process to leave
        assert f"forgetting processes that ended without leaving it: [{started.stdout.strip()}]" \
            in status.stderr
        with pytest.raises(ProcessLookupError):
            for _ in range(500):  # pg_ctl waited for the server; its pid may linger a moment
                os.kill(server, 0)
                time.sleep(0.01)
    finally:
        if (root / ".gitmem" / "pg" / "postmaster.pid").exists():  # leaked: stop it here
            from pgserver._commands import pg_ctl
            pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=root / ".gitmem" / "pg",
                   user="pgserver" if os.geteuid() == 0 else None)
        cleanup_dir(root)


def test_a_state_directory_that_cannot_be_written_is_named_with_the_way_out(
        tmp_path: Path) -> None:
    """`.gitmem` read-only (a read-only mount or checkout; simulated here, as root may
    write anywhere, by making its files directories, which no open for writing
    accepts): a command that needs the embedded server or the daemon's files ends
    with one line naming the file and the way out, never a traceback, and starts no
    server; `record` and `verify` need neither."""
    root = tmp_path / "proj"
    gitmem, env = embedded_store(root)
    state = (root / ".gitmem").resolve()
    for name in ("pg.lock", "daemon.log"):
        (state / name).mkdir(parents=True)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*gitmem, *args], env=env, capture_output=True, text=True,
                              timeout=120)

    for args in (["status"], ["acb", "where do we deploy?"]):
        failed = run(*args)
        assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
        assert failed.stderr.splitlines()[-1] == (
            f"Error: cannot write {state / 'pg.lock'}: Is a directory; the embedded "
            f"PostgreSQL keeps the index in {state}: make that directory writable, or "
            "pass --dsn / GITMEM_DSN to index in a PostgreSQL server instead")
    assert not (state / "pg").exists()
    for blocked in ("daemon.log", "gitmem.pid"):  # `start` opens the log, the daemon its pid
        if blocked == "gitmem.pid":
            (state / "daemon.log").rmdir()
            (state / blocked).mkdir()
        failed = run("daemon", "start", "--timeout", "60")
        assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
        assert (f"cannot write {state / blocked}: Is a directory; the daemon keeps its "
                f"socket, pid file and log in {state}: make that directory writable, or "
                "work without a daemon (every command does)") in failed.stderr
    assert run("record", "written all the same").returncode == 0
    assert run("verify").returncode == 0


def test_a_second_store_on_the_same_schema_is_refused_until_it_reindexes(
        cli: Cli, tmp_path: Path) -> None:
    """Two stores pointed at one schema would each read the other's rows until a sync
    (a daemon's reads trust its own watcher): the second is refused, both stores named;
    `gitmem reindex` there makes the index its own, and then the first is refused."""
    cli("record", "the alpha team plans a rocket launch", "--session", "s1")
    assert "rocket launch" in cli("acb", "rocket launch", "--format", "text").stdout
    other = tmp_path / "other"
    init_store(other)
    second = Cli(Config(store=other / "memory", dsn=cli.config.dsn, schema=cli.config.schema))
    second("record", "the beta team builds boats", "--session", "s1")
    mine, theirs = cli.config.store.resolve(), (other / "memory").resolve()
    refused = second("acb", "rocket launch", "--format", "text", ok=False)
    assert refused.exit_code == 1 and "rocket" not in refused.stdout
    assert f"holds the index of {mine}, not of {theirs}" in refused.stderr
    assert "GITMEM_SCHEMA" in refused.stderr and "gitmem reindex" in refused.stderr
    second("reindex")
    bundle = second("acb", "rocket launch boats", "--format", "text").stdout
    assert "beta team builds boats" in bundle and "rocket" not in bundle
    first = cli("status", ok=False)
    assert first.exit_code == 1
    assert f"holds the index of {theirs}, not of {mine}" in first.stderr


def test_a_store_cannot_take_over_an_index_whose_daemon_serves_it(dsn: str, schema: str) -> None:
    """`gitmem reindex` makes another store's index this one's, but not while that
    store's daemon serves it: its reads trust its own watcher and would answer from the
    new store's rows. Once it is stopped, the reindex goes through."""
    with short_store(dsn, schema, "gmown") as first, short_store(dsn, schema, "gmtake") as second:
        taker = Daemon(second)
        with running(first) as owner:
            owner.cli("record", "the alpha team plans a rocket launch")
            refused = taker.cli("reindex", check=False)
            assert refused.returncode == 1
            assert f"its daemon (pid {owner.pid}) serves it" in refused.stderr
            assert f"gitmem --store {first.store.resolve()} daemon stop" in refused.stderr
            assert "rocket launch" in owner.cli("acb", "rocket launch", "--format", "text").stdout
        taker.cli("reindex")
        assert "rocket" not in taker.cli("acb", "rocket launch", "--format", "text").stdout
        assert f"holds the index of {second.store.resolve()}" in Daemon(first).cli(
            "status", check=False).stderr


@pytest.mark.parametrize(("bad_dsn", "reason"), [
    ("postgresql://postgres@127.0.0.1:1/x", "Connection refused"),
    ("not a dsn", 'missing "="'),
    ("postgresql://nobody:hunter2@127.0.0.1:1/x", "Connection refused"),
])
def test_a_wrong_dsn_fails_fast_with_the_reason(cli: Cli, bad_dsn: str, reason: str) -> None:
    import time

    started = time.perf_counter()
    result = cli.runner.invoke(main, ["--dsn", bad_dsn, "status"],
                               env={**cli.env(), "GITMEM_NO_DAEMON": "1"})
    assert result.exit_code == 1
    assert "cannot connect to PostgreSQL" in result.stderr and reason in result.stderr
    assert "hunter2" not in result.output
    assert "Traceback" not in result.output
    assert time.perf_counter() - started < 10  # not the pool's 30 s of retries


def test_writes_citing_events_go_ahead_with_the_database_down(
        cli: Cli, caplog: pytest.LogCaptureFixture) -> None:
    """Writes need no index: a cited event is found in its day file, and one that is
    not is left to `gitmem verify` while the index is out of reach."""
    env = {**cli.env(), "GITMEM_NO_DAEMON": "1", "GITMEM_DSN": "postgresql://x@127.0.0.1:1/x"}

    def record(*args: str) -> Result:
        return cli.runner.invoke(main, ["record", *args], env=env)

    first = record("the reason")
    assert first.exit_code == 0, first.output
    cited = record("because of it", "--ref", first.stdout.strip())
    assert cited.exit_code == 0, cited.output
    ghost = record("of a ghost", "--ref", "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3")
    assert ghost.exit_code == 0
    assert "cannot check whether event ids are recorded" in caplog.text
    assert "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3 is not in the store" in cli("verify", ok=False).output


def test_the_cli_and_the_daemon_lifecycle_import_no_database_or_read_path() -> None:
    """A command a running daemon answers, and `gitmem daemon start`, need click, the
    config and the client: importing psycopg, the index or the read and write paths
    cost each such call 0.3-0.5 s. The public API still loads on first use."""
    heavy = ("psycopg", "tiktoken", "watchdog", "git", "yaml", "gitmem.memory", "gitmem.db",
             "gitmem.acb", "gitmem.records")
    probe = (f"import sys, gitmem.cli, gitmem.daemon\n"
             f"loaded = [m for m in {heavy!r} if m in sys.modules]\n"
             f"assert not loaded, loaded\n"
             f"from gitmem import Memory, load_config\n"
             f"assert 'gitmem.memory' in sys.modules and Memory.__name__ == 'Memory'\n"
             f"print('ok')\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


READ_PATH = {"psycopg", "gitmem.db", "gitmem.acb", "gitmem.context", "gitmem.indexer"}


def test_a_bundle_the_daemon_builds_and_a_write_with_no_daemon_import_no_read_path(
        dsn: str, schema: str) -> None:
    """`gitmem acb` answered by the daemon only renders the bundle, and `gitmem record`
    with no daemon only writes: importing psycopg and the read path cost each call
    0.3-0.45 s (0.63 -> 0.18 s and 0.63 -> 0.33 s a call, docs/performance-log.md)."""
    with short_store(dsn, schema, "gmi") as config, running(config) as daemon:
        def imported(*args: str, **env: str) -> set[str]:
            result = subprocess.run(
                [sys.executable, "-X", "importtime", "-m", "gitmem", "--store",
                 str(config.store), *args], capture_output=True, text=True,
                env={**daemon.env(), **env}, timeout=60)
            assert result.returncode == 0, result.stderr
            return {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                    if line.startswith("import time:")}

        record = imported("record", "the cluster is in Oslo", GITMEM_NO_DAEMON="1")
        assert "gitmem.recorder" in record and not READ_PATH & record
        bundle = imported("acb", "Oslo", "--format", "text")
        assert "gitmem.prompt" in bundle and not READ_PATH & bundle
        assert "tiktoken" not in bundle  # rendering a bundle counts nothing
        assert imported("acb", "Oslo", GITMEM_NO_DAEMON="1") >= READ_PATH  # built here


def test_gitmem_call_where_gitmem_state_is_a_file_says_so(cli: Cli) -> None:
    """It advised `gitmem daemon start`, which is then refused for that file."""
    state = cli.config.store.parent / ".gitmem"
    shutil.rmtree(state, ignore_errors=True)
    state.write_text("")
    result = cli("call", "status", ok=False)
    assert result.exit_code == 1
    assert f"{state} is a file, not a directory; move it away" in result.output
    assert "gitmem daemon start" not in result.output


def test_reindex_names_a_link_to_nothing_and_goes_on(cli: Cli) -> None:
    """Its progress bar's total took the size of every file, and a link to nothing
    ended the command with a traceback before the reindex could name it."""
    (cli.config.store / "views" / "dangling.md").symlink_to("/nonexistent/x.md")
    result = cli("reindex")
    assert "views/dangling.md: cannot be read: a symbolic link to nothing" in result.stderr
    assert "Traceback" not in result.output
