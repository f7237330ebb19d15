"""The `gitmem` command line: parse arguments, call one core function, print.

Machine output (ids, JSON) goes to stdout; messages for people go to stderr.
Every GitmemError becomes a one-line message and exit status 1; bad flags
exit 2 (click's usage errors).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from gitmem.config import Config, load_config
from gitmem.errors import FormatError, GitmemError
from gitmem.memory import Memory
from gitmem.store import init_store

F = TypeVar("F", bound=Callable[..., Any])


class _Context:
    def __init__(self, store: str | None, dsn: str | None) -> None:
        self.store_option = store
        self.dsn_option = dsn

    def config(self) -> Config:
        return load_config(self.store_option, self.dsn_option)

    @contextmanager
    def memory(self) -> Iterator[Memory]:
        with Memory(self.config(), db_pool_size=2) as memory:
            yield memory


def _via_daemon(obj: _Context, method: str, params: dict[str, Any]) -> Any | None:
    """The daemon's answer when one serves this store, else None (work locally).

    `GITMEM_NO_DAEMON=1` always works locally. An error the daemon answers with
    is raised as the same GitmemError the local work would have raised.
    """
    if os.environ.get("GITMEM_NO_DAEMON"):
        return None
    from gitmem import client
    from gitmem.errors import RpcError

    try:
        return client.call_if_running(obj.config().socket_path, method, params)
    except RpcError as exc:
        raise client.local_error(exc) from None


def _fail(exc: GitmemError) -> click.ClickException:
    return click.ClickException(str(exc))


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except GitmemError as exc:
        raise _fail(exc) from exc


def _emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False))


def _say(message: str) -> None:
    click.echo(message, err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--store", envvar="GITMEM_STORE", metavar="PATH",
              help="The store directory (default: memory/ in the nearest ancestor).")
@click.option("--dsn", envvar="GITMEM_DSN", metavar="DSN",
              help="PostgreSQL DSN (default: an embedded server under .gitmem/).")
@click.option("-v", "--verbose", is_flag=True, help="Log what happens to stderr.")
@click.version_option(package_name="gitmem")
@click.pass_context
def main(ctx: click.Context, store: str | None, dsn: str | None, verbose: bool) -> None:
    """Memory for AI agents that people review like code.

    \b
    Example:
      gitmem init && gitmem record "We deploy on Fridays" && gitmem acb "when do we deploy?"
    """
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    ctx.obj = _Context(store, dsn)


@main.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--tenant", default="default", show_default=True, help="Default tenant id.")
def init(directory: Path, tenant: str) -> None:
    """Create DIRECTORY/memory with default policies and views; idempotent.

    \b
    Example:
      gitmem init ~/projects/agent    # git-inits the directory if needed
    """
    from gitmem.hooks import install

    with _errors():
        report = init_store(directory, tenant)
        installed = install(report.store)
    if report.git_initialized:
        _say(f"initialized a git repository in {directory.resolve()}")
    for rel in report.created:
        _say(f"created {rel}")
    for message in installed:
        if not message.endswith("up to date"):
            _say(f"hook {message}")
    if not report.created:
        _say(f"{report.store} is already a gitmem store; nothing changed")
    click.echo(str(report.store))


def _event_options(func: F) -> F:
    options = [
        click.option("--kind", default="message", show_default=True,
                     help="message|tool_call|tool_result|decision|summary|task_update|artifact"),
        click.option("--channel", default=None, help="private|public|team|agent (default private)"),
        click.option("--session", "session_id", default=None, help="Session id."),
        click.option("--agent", "agent_id", default=None, help="Agent id."),
        click.option("--tenant", "tenant_id", default=None, help="Tenant (default from manifest)."),
        click.option("--actor", default=None, metavar="TYPE:ID",
                     help="Who produced it, e.g. human:alice or tool:shell."),
        click.option("--tag", "tags", multiple=True, help="A tag; repeatable."),
        click.option("--sensitivity", default=None, help="none|low|high|secret"),
        click.option("--ref", "refs", multiple=True, help="A cited id; repeatable."),
        click.option("--ts", default=None, help="ISO-8601 timestamp (default now)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _event_fields(**values: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key in ("kind", "channel", "session_id", "agent_id", "tenant_id", "sensitivity", "ts"):
        if values.get(key) is not None:
            fields[key] = values[key]
    actor = values.get("actor")
    if actor is not None:
        kind, sep, name = actor.partition(":")
        if not sep or not name:
            raise click.UsageError(f"--actor expects TYPE:ID such as human:alice, got {actor!r}")
        fields["actor"] = {"type": kind, "id": name}
    if values.get("tags"):
        fields["tags"] = list(values["tags"])
    if values.get("refs"):
        fields["refs"] = list(values["refs"])
    return fields


def _read_jsonl(source: str) -> tuple[list[Any], list[int]]:
    name = "<stdin>" if source == "-" else source
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise click.UsageError(f"cannot read {source}: {exc.strerror}") from exc
    objs: list[Any] = []
    numbers: list[int] = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        numbers.append(number)
        try:
            objs.append(json.loads(line.decode("utf-8")))
        except UnicodeDecodeError as exc:
            raise _fail(FormatError(f"not valid UTF-8 at column {exc.start + 1}",
                                    path=name, line=number)) from None
        except json.JSONDecodeError as exc:
            raise _fail(FormatError(f"malformed JSON: {exc.msg} at column {exc.colno}",
                                    path=name, line=number)) from None
    return objs, numbers


@main.command()
@click.argument("text", required=False)
@_event_options
@click.option("--content", "content_json", default=None, metavar="JSON",
              help="The content object as JSON (instead of TEXT).")
@click.option("--tool", default=None, help="Tool name (tool_call / tool_result).")
@click.option("--json", "json_source", default=None, metavar="FILE|-",
              help="Record each JSON object of a JSONL stream instead.")
@click.pass_obj
def record(obj: _Context, /, text: str | None, content_json: str | None, tool: str | None,
           json_source: str | None, **values: Any) -> None:
    """Append one event (or a JSONL stream of them); print each new id.

    \b
    Examples:
      gitmem record "We deploy on Fridays" --session s1 --actor human:alice --tag topic:deploy
      gitmem record --kind tool_result --tool fs.read_file "$(cat README.md)"
      gitmem record --json events.jsonl
    """
    if json_source is not None:
        if text is not None or content_json is not None:
            raise click.UsageError("--json replaces TEXT and --content; give one of them")
        objs, numbers = _read_jsonl(json_source)
        name = "<stdin>" if json_source == "-" else json_source
        with _errors():
            answer = _via_daemon(obj, "record_events",
                                 {"events": objs, "source": name, "lines": numbers})
            if answer is None:
                with obj.memory() as memory:
                    answer = {"event_ids": [e.id for e in
                                            memory.record_many(objs, name, numbers)]}
        for event_id in answer["event_ids"]:
            click.echo(event_id)
        return
    fields = _event_fields(**values)
    fields["content"] = _content(fields.get("kind", "message"), text, content_json, tool)
    with _errors():
        answer = _via_daemon(obj, "record_event", fields)
        if answer is None:
            with obj.memory() as memory:
                answer = {"event_id": memory.record(fields).id}
    click.echo(answer["event_id"])


def _content(kind: str, text: str | None, content_json: str | None,
             tool: str | None) -> dict[str, Any]:
    if content_json is not None:
        try:
            content = json.loads(content_json)
        except json.JSONDecodeError as exc:
            raise click.UsageError(f"--content is not JSON: {exc.msg}") from exc
        if not isinstance(content, dict):
            raise click.UsageError("--content must be a JSON object")
        return content
    if text is None:
        raise click.UsageError("give TEXT, --content JSON or --json FILE")
    if kind == "tool_result":
        return {"tool": tool or "tool", "output": text}
    if kind == "tool_call":
        return {"tool": tool or text, "args": {} if tool is None else {"input": text}}
    return {"text": text}


@main.command()
@click.argument("text")
@click.option("--ref", "refs", multiple=True, required=True,
              help="A source id this decision rests on; repeatable, at least one.")
@click.option("--supersedes", multiple=True, help="A decision this one replaces; repeatable.")
@click.option("--rationale", multiple=True, help="A reason; repeatable.")
@click.option("--title", default="", help="A short title.")
@click.option("--scope", default="project", show_default=True, help="project|user|global|team")
@click.option("--constraint", "constraints", multiple=True, help="A constraint; repeatable.")
@click.option("--alternative", "alternatives", multiple=True, help="An option not taken.")
@click.option("--consequence", "consequences", multiple=True, help="A consequence.")
@click.option("--confidence", type=float, default=None, help="0..1")
@click.option("--session", "session_id", default=None, help="Session id.")
@click.option("--agent", "agent_id", default=None, help="Agent id.")
@click.option("--tenant", "tenant_id", default=None, help="Tenant.")
@click.option("--ts", default=None, help="ISO-8601 timestamp (default now).")
@click.pass_obj
def decide(obj: _Context, /, text: str, refs: tuple[str, ...], **options: Any) -> None:
    """Record a decision (decisions/dec_<id>.md plus a decision event); print its id.

    \b
    Example:
      gitmem decide "Use PostgreSQL FTS for retrieval" --ref evt_01J... --rationale "no new service"
    """
    kwargs = {k: v for k, v in options.items() if v not in (None, ())}
    for key in ("supersedes", "rationale", "constraints", "alternatives", "consequences"):
        if key in kwargs:
            kwargs[key] = list(kwargs[key])
    with _errors():
        answer = _via_daemon(obj, "decide", {"text": text, "refs": list(refs), **kwargs})
        if answer is None:
            with obj.memory() as memory:
                answer = {"decision_id": memory.decide(text, list(refs), **kwargs)
                          .content["decision_id"]}
    click.echo(answer["decision_id"])


@main.command()
@click.argument("title")
@click.option("--status", default="open", show_default=True,
              help="open|doing|blocked|done|cancelled")
@click.option("--id", "task_id", default=None, help="Update this task instead of creating one.")
@click.option("--details", default="", help="Details (the file's body).")
@click.option("--owner", default="", help="Who owns it.")
@click.option("--ref", "refs", multiple=True, help="A cited id; repeatable.")
@click.option("--session", "session_id", default=None, help="Session id.")
@click.option("--agent", "agent_id", default=None, help="Agent id.")
@click.option("--tenant", "tenant_id", default=None, help="Tenant.")
@click.pass_obj
def task(obj: _Context, /, title: str, refs: tuple[str, ...], **options: Any) -> None:
    """Create or update a task (tasks/tsk_<id>.md plus a task_update event); print its id.

    \b
    Examples:
      gitmem task "Write the onboarding guide" --owner alice
      gitmem task "Write the onboarding guide" --id tsk_01J... --status done
    """
    kwargs = {k: v for k, v in options.items() if v not in (None, "")}
    if refs:
        kwargs["refs"] = list(refs)
    with _errors():
        answer = _via_daemon(obj, "task", {"title": title, **kwargs})
        if answer is None:
            with obj.memory() as memory:
                answer = {"task_id": memory.task(title, **kwargs).content["task_id"]}
    click.echo(answer["task_id"])


@main.command()
@click.pass_obj
def reindex(obj: _Context) -> None:
    """Drop the index and rebuild it from the files (bulk COPY; progress on a terminal).

    \b
    Example:
      gitmem reindex            # CI: rebuild from a clean checkout
    """
    from gitmem.store import iter_store_files
    with _errors(), obj.memory() as memory:
        total = sum((memory.store / rel).stat().st_size
                    for rel, _ in iter_store_files(memory.store))
        if sys.stderr.isatty():
            with click.progressbar(length=total, label="reindex", file=sys.stderr) as bar:
                report = memory.reindex(bar.update)
        else:
            report = memory.reindex()
    _say(f"indexed {report.files} files, {report.rows} rows, {len(report.errors)} problem(s)")
    for problem in report.errors:
        _say(f"  {_where(problem)}: {problem['message']}")
    _emit(report.to_dict())


def _where(problem: dict[str, Any]) -> str:
    line = f":{problem['line']}" if problem.get("line") else ""
    return f"{problem.get('path', '')}{line}"


@main.command()
@click.pass_obj
def sync(obj: _Context) -> None:
    """Index what changed in the files since the last sync (appends, edits, deletes).

    \b
    Example:
      gitmem sync
    """
    with _errors():
        answer = _via_daemon(obj, "sync", {})
        if answer is None:
            with obj.memory() as memory:
                answer = memory.sync().to_dict()
    _say(f"{len(answer['changed'])} file(s) brought up to date")
    for problem in answer.get("errors", []):
        _say(f"  {_where(problem)}: {problem['message']}")
    _emit(answer)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
def status(obj: _Context, as_json: bool) -> None:
    """Compare the index with the files: which are stale and why; exit 0 either way.

    \b
    Examples:
      gitmem status
      gitmem status --json | jq .stale
    """
    with _errors():
        report = _via_daemon(obj, "status", {})
        if report is None:
            with obj.memory() as memory:
                report = memory.status()
    if as_json:
        _emit(report)
        return
    counts = ", ".join(f"{v} {k}" for k, v in report["index"].items())
    click.echo(f"store   {report['store']}")
    click.echo(f"index   {counts}")
    git = report["git"]
    click.echo(f"git     HEAD {git['head'] or '(none)'}, "
               f"indexed at {git['indexed_head'] or '(none)'}")
    click.echo("state   " + ("clean: the index reflects every file" if report["clean"]
                            else f"{len(report['stale'])} stale file(s)"))
    for item in report["stale"]:
        click.echo(f"  stale   {item['path']}: {item['reason']}")
    for item in report["pending"]:
        click.echo(f"  pending {item['path']}: {item['bytes']} bytes, {item['reason']}")
    for problem in report["errors"]:
        click.echo(f"  error   {_where(problem)}: {problem['message']}")
    for item in report.get("unrecognized", []):
        click.echo(f"  ignored {item['path']}: {item['reason']}")


@main.command(name="acb")
@click.argument("query", required=False, default="")
@click.option("--channel", default="private", show_default=True, help="private|public|team|agent")
@click.option("--session", "session_id", default=None, help="Session id.")
@click.option("--agent", "agent_id", default=None, help="Agent id.")
@click.option("--tenant", "tenant_id", default=None, help="Tenant (default from manifest).")
@click.option("--intent", default="", help="What the call is for (recorded in provenance).")
@click.option("--max-tokens", type=int, default=None, help="Budget (default from budgets.yaml).")
@click.option("--now", default=None, help="Fixed clock, ISO-8601 (default: now).")
@click.option("--handoff", "handoff_id", default=None, help="Build from this handoff packet only.")
@click.option("--format", "fmt", type=click.Choice(["json", "text"]), default="json",
              show_default=True, help="JSON bundle, or the rendered prompt text.")
@click.pass_obj
def acb_command(obj: _Context, /, query: str, fmt: str, **fields: Any) -> None:
    """Build the Active Context Bundle for a question and print it.

    \b
    Examples:
      gitmem acb "Which city hosts the cluster our deployments run on?" --session s1
      gitmem acb --channel public --max-tokens 3000 --format text
    """
    from gitmem.acb import render_text, summarize

    request = {k: v for k, v in fields.items() if v not in (None, "")}
    request["query_text"] = query
    with _errors():
        bundle = _via_daemon(obj, "build_acb", request)
        if bundle is None:
            with obj.memory() as memory:
                bundle = memory.build_acb(request)
    for line in summarize(bundle):
        _say(line)
    if fmt == "text":
        click.echo(render_text(bundle), nl=False)
    else:
        _emit(bundle)


# --------------------------------------------------------------------------- daemon, socket, git

def _daemon_options(func: F) -> F:
    options = [
        click.option("--autocommit/--no-autocommit", default=True, show_default=True,
                     help="Commit the store's changes to git in batches."),
        click.option("--commit-interval", type=click.FloatRange(min=0.1), default=300.0,
                     show_default=True, metavar="SECONDS",
                     help="Commit this long after the first uncommitted change."),
        click.option("--commit-max-events", type=click.IntRange(min=1), default=500,
                     show_default=True, metavar="N",
                     help="...or as soon as N events wait to be committed."),
        click.option("--reconcile-interval", type=click.FloatRange(min=0.1), default=300.0,
                     show_default=True, metavar="SECONDS",
                     help="Full reconcile of index and files this often."),
        click.option("--max-request-bytes", type=click.IntRange(min=1024),
                     default=16 * 1024 * 1024, show_default=True, metavar="N",
                     help="Largest JSON-RPC request line accepted."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _daemon_settings(flags: dict[str, Any]) -> Any:
    from gitmem.daemon import DaemonOptions
    from gitmem.server import ServerOptions

    return DaemonOptions(autocommit=flags["autocommit"], commit_interval=flags["commit_interval"],
                         commit_max_events=flags["commit_max_events"],
                         reconcile_interval=flags["reconcile_interval"],
                         server=ServerOptions(max_request_bytes=flags["max_request_bytes"]))


@main.group()
def daemon() -> None:
    """The daemon: file watcher, incremental index sync and the local socket, one per store.

    \b
    Examples:
      gitmem daemon start && gitmem daemon status
      gitmem daemon stop
    """


@daemon.command("run")
@_daemon_options
@click.pass_obj
def daemon_run(obj: _Context, /, **flags: Any) -> None:
    """Serve this store in the foreground until SIGTERM or Ctrl-C; logs to stderr.

    \b
    Example:
      gitmem daemon run --no-autocommit
    """
    from gitmem import daemon as lifecycle

    logging.getLogger().setLevel(logging.INFO)
    with _errors():
        lifecycle.run(obj.config(), _daemon_settings(flags))


@daemon.command("start")
@_daemon_options
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds to wait until the daemon answers.")
@click.pass_obj
def daemon_start(obj: _Context, /, timeout: float, **flags: Any) -> None:
    """Start the daemon in the background; returns once it answers; prints its pid.

    \b
    Example:
      gitmem daemon start --commit-interval 60
    """
    from gitmem import daemon as lifecycle

    with _errors():
        config = obj.config()
        pid = lifecycle.start(config, _daemon_settings(flags), timeout=timeout)
    _say(f"gitmem daemon {pid} serves {config.store} on {config.socket_path} "
         f"(log: {lifecycle.log_path(config)})")
    click.echo(pid)


@daemon.command("stop")
@click.option("--timeout", type=float, default=30.0, show_default=True,
              help="Seconds to wait for it to exit.")
@click.pass_obj
def daemon_stop(obj: _Context, timeout: float) -> None:
    """Stop the daemon (SIGTERM) and wait until it has exited.

    \b
    Example:
      gitmem daemon stop
    """
    from gitmem import daemon as lifecycle

    with _errors():
        pid = lifecycle.stop(obj.config(), timeout=timeout)
    _say("no daemon was running" if pid is None else f"stopped gitmem daemon {pid}")


@daemon.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
def daemon_status(obj: _Context, as_json: bool) -> None:
    """Whether a daemon serves this store (exit 0) or not (exit 3), and its state.

    \b
    Example:
      gitmem daemon status --json
    """
    from gitmem import daemon as lifecycle

    with _errors():
        report = lifecycle.status(obj.config())
    if as_json:
        _emit(report)
    elif not report["running"]:
        click.echo(f"not running (socket {report['socket']})")
    else:
        info = report.get("daemon") or {}
        watcher = info.get("watcher", {})
        click.echo(f"running  pid {report['pid']}, up {info.get('uptime_s', '?')}s, "
                   f"socket {report['socket']}")
        if "error" in report:
            click.echo(f"error    {report['error']}")
        if watcher:
            db = "ok" if watcher.get("db_ok") is not False else f"down: {watcher['db_error']}"
            click.echo(f"watcher  {watcher['mode']}, {watcher['batches']} batches, "
                       f"{watcher['pending_paths']} pending, database {db}")
            for problem in watcher.get("problems", []):
                click.echo(f"  skipped {problem}")
        click.echo(f"log      {report['log']}")
    if not report["running"]:
        sys.exit(3)


@main.command("call")
@click.argument("method")
@click.argument("params", required=False)
@click.pass_obj
def call(obj: _Context, method: str, params: str | None) -> None:
    """Send one JSON-RPC call to the daemon; print its result as JSON.

    PARAMS is a JSON object, or - to read it from stdin.

    \b
    Examples:
      gitmem call status
      gitmem call build_acb '{"query_text": "how do we deploy?", "session_id": "s1"}'
      echo '{"content": {"text": "hello"}}' | gitmem call record_event -
    """
    from gitmem import client

    value: Any = None
    if params is not None:
        text = sys.stdin.read() if params == "-" else params
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise click.UsageError(f"PARAMS is not JSON: {exc.msg} at column {exc.colno}") \
                from None
    with _errors():
        result = client.call(obj.config().socket_path, method, value)
    _emit(result)


@main.group("hooks")
def hooks_group() -> None:
    """Git hooks: pre-commit checks and a sync after merge, checkout and rewrite.

    \b
    Example:
      gitmem hooks install
    """


@hooks_group.command("install")
@click.pass_obj
def hooks_install(obj: _Context) -> None:
    """Wire gitmem's hooks into this repository (honours core.hooksPath; chains old hooks).

    \b
    Example:
      gitmem hooks install    # idempotent; an existing hook is kept and runs first
    """
    from gitmem.hooks import install

    with _errors():
        messages = install(obj.config().store)
    for message in messages:
        _say(message)


@main.command("hook", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def hook(obj: _Context, name: str, args: tuple[str, ...]) -> None:
    """Run git hook NAME (the shims in .git/hooks call this).

    \b
    Examples:
      gitmem hook pre-commit            # what `git commit` runs
      gitmem hook post-checkout OLD NEW 1
    """
    from gitmem.errors import ConfigError, VerifyError
    from gitmem.hooks import SYNC_HOOKS, run_hook

    try:
        config = obj.config()
    except ConfigError as exc:  # the hooks stay, the store moved: never block git for it
        _say(f"gitmem {name} hook skipped: {exc}")
        return
    try:
        warnings = run_hook(name, args, config)
    except VerifyError as exc:
        _say(f"gitmem pre-commit: {exc}")
        raise click.ClickException("commit refused; fix the files above (or bypass the "
                                   "check once with `git commit --no-verify`)") from exc
    except GitmemError as exc:
        if name in SYNC_HOOKS:  # the git operation already happened: warn, never fail it
            _say(f"gitmem: {exc}")
            return
        raise _fail(exc) from exc
    for warning in warnings:
        _say(warning)


@main.command("verify")
@click.option("--json", "as_json", is_flag=True, help="Print the problems as JSON.")
@click.pass_obj
def verify(obj: _Context, as_json: bool) -> None:
    """Check the whole store: records parse, events files only grow, refs resolve, no secrets.

    Exit 1 with each problem as path:line: message.

    \b
    Example:
      gitmem verify
    """
    from gitmem.policies import load_policies
    from gitmem.verify import verify_tree

    with _errors():
        config = obj.config()
        problems = verify_tree(config.store, load_policies(config.store))
    if as_json:
        _emit([p.to_dict() for p in problems])
    errors = [p for p in problems if p.severity == "error"]
    for problem in problems:
        _say(("" if problem.severity == "error" else f"{problem.severity}: ") + str(problem))
    if errors:
        raise click.ClickException(f"{len(errors)} problem(s) in {config.store}")
    warnings = len(problems) - len(errors)
    _say(f"{config.store}: no problems" + (f" ({warnings} warning(s))" if warnings else ""))


# --------------------------------------------------------------------------- scenarios

@main.group("scenario")
def scenario_group() -> None:
    """Scenarios: stories with measurable assertions, run against real files, git and PostgreSQL.

    \b
    Example:
      gitmem scenario run scenarios/ --report-dir reports
    """


@scenario_group.command("run")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--report-dir", default="reports", show_default=True, metavar="DIR",
              type=click.Path(file_okay=False, path_type=Path),
              help="Where run_<ts>.report.json is written.")
@click.pass_obj
def scenario_run(obj: _Context, paths: tuple[Path, ...], report_dir: Path) -> None:
    """Run scenario files (default: scenarios/); exit 1 if any fails.

    Each runs in a fresh git repository and its own schema of --dsn (else the
    embedded server under ./.gitmem). Progress and failures go to stderr; the
    report's path and counts are printed as JSON on stdout.

    \b
    Examples:
      gitmem scenario run
      gitmem scenario run scenarios/004_supersede.scenario.yaml --report-dir /tmp/reports
    """
    from gitmem.config import STATE_DIRNAME
    from gitmem.db import embedded_dsn
    from gitmem.harness import format_failure
    from gitmem.scenario import run_scenarios

    def show(result: dict[str, Any]) -> None:
        mark = "PASS" if result["passed"] else "FAIL"
        _say(f"{mark} {result['id']:<8} {result.get('duration_ms', 0):>8.0f} ms  "
             f"{result.get('title', result.get('file', ''))}")
        for failure in result["failures"]:
            _say(format_failure(failure))

    with _errors():
        dsn = obj.dsn_option or embedded_dsn(Path.cwd() / STATE_DIRNAME)
        report = run_scenarios(list(paths) or [Path("scenarios")], dsn, report_dir,
                               on_result=show)
    _emit({"report": report.get("report_path"), "passed": report["passed"],
           "failed": report["failed"], "duration_ms": report["duration_ms"]})
    if report["failed"]:
        raise click.ClickException(f"{report['failed']} of "
                                   f"{report['passed'] + report['failed']} scenario(s) failed")
