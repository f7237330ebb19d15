"""Commands that write: init, record, decide, task."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from gitmem.cli.base import Context, F, FiniteRange, fail, main, reported, say, via_daemon
from gitmem.errors import FormatError, malformed_json


def _named_directory(_ctx: click.Context, _param: click.Parameter, value: str) -> Path:
    if not value:  # "" would be read as "." (a variable that was meant to hold a path)
        raise click.BadParameter("is empty: name a directory ('.' for this one)")
    return Path(value)


@main.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False),
                callback=_named_directory)
@click.option("--tenant", default=None, help="Default tenant id of a new store [default: "
              "default].")
def init(directory: Path, tenant: str | None) -> None:
    """Create DIRECTORY/memory with default policies and views; idempotent.

    \b
    Example:
      gitmem init ~/projects/agent    # git-inits the directory if needed
    """
    from gitmem.hooks import install
    from gitmem.store import init_store

    with reported():
        report = init_store(directory, "default" if tenant is None else tenant)
        installed = install(report.store)
        kept = json.loads((report.store / "manifest.json").read_text(encoding="utf-8"))
    if tenant is not None and kept.get("default_tenant") != tenant:
        say(f"{report.store / 'manifest.json'} keeps default_tenant "
            f"{kept.get('default_tenant')!r}: --tenant applies to a new store only")
    if report.git_initialized:
        say(f"initialized a git repository in {directory.resolve()}")
    for rel in report.created:
        say(f"created {rel}")
    for message in installed:
        if not message.endswith("up to date"):
            say(f"hook {message}")
    if not report.created:
        say(f"{report.store} is already a gitmem store; nothing changed")
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
        click.option("--ts", default=None, help="RFC 3339 time (default now)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


_FLAGS = {"session_id": "--session", "agent_id": "--agent", "tenant_id": "--tenant",
          "tags": "--tag", "refs": "--ref"}  # the event options' flags, by parameter


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
    from gitmem import records  # the read and write paths load on first use

    name = "<stdin>" if source == "-" else source
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise click.UsageError(f"cannot read {source}: {exc.strerror}") from exc
    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark some editors write
    objs: list[Any] = []
    numbers: list[int] = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        numbers.append(number)
        try:
            objs.append(records.decode_json(line.decode("utf-8")))
        except UnicodeDecodeError as exc:
            raise fail(FormatError(f"not valid UTF-8 at column {exc.start + 1}",
                                    path=name, line=number)) from None
        except ValueError as exc:
            raise fail(malformed_json(exc, path=name, line=number)) from None
        except RecursionError:
            raise fail(FormatError("nests objects and arrays too deep to read; flatten it",
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
def record(obj: Context, /, text: str | None, content_json: str | None, tool: str | None,
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
        given = [_FLAGS.get(name, f"--{name}") for name, value in
                 {**values, "tool": tool}.items() if value not in (None, (), "message")]
        if given:
            raise click.UsageError(f"--json takes every field from its lines; {', '.join(given)} "
                                   "would not apply to them: put the fields in the lines")
        objs, numbers = _read_jsonl(json_source)
        name = "<stdin>" if json_source == "-" else json_source
        with reported():
            answer = via_daemon(obj, "record_events",
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
    with reported():
        answer = via_daemon(obj, "record_event", fields)
        if answer is None:
            with obj.memory() as memory:
                answer = {"event_id": memory.record(fields).id}
    click.echo(answer["event_id"])


_ELSEWHERE = {"decision": "`gitmem decide`", "task_update": "`gitmem task`",
              "summary": "--content JSON (its fields: docs/FORMATS.md)",
              "artifact": "--kind tool_result --tool NAME (a long output becomes an artifact)"}


def _content(kind: str, text: str | None, content_json: str | None,
             tool: str | None) -> dict[str, Any]:
    if tool is not None and (content_json is not None
                             or kind not in ("tool_call", "tool_result")):
        raise click.UsageError("--tool goes with TEXT and --kind tool_call or tool_result; "
                               "it would not be stored")
    if content_json is None and kind in _ELSEWHERE:
        raise click.UsageError(f"a {kind} event is recorded with {_ELSEWHERE[kind]}, not TEXT")
    if content_json is not None:
        from gitmem import records

        if text is not None:  # one would be dropped without a word
            raise click.UsageError("--content replaces TEXT; give one of them")
        try:
            content = records.decode_json(content_json)
        except json.JSONDecodeError as exc:
            raise click.UsageError(f"--content is not JSON: {exc.msg}") from exc
        except ValueError as exc:
            raise click.UsageError(f"--content: {exc}") from exc
        if not isinstance(content, dict):
            raise click.UsageError("--content must be a JSON object")
        return content
    if text is None:
        raise click.UsageError("give TEXT, --content JSON or --json FILE")
    if kind == "tool_result":
        if tool is None:
            raise click.UsageError("--kind tool_result needs --tool NAME: the tool whose "
                                   "output TEXT is")
        return {"tool": tool, "output": text}
    if kind == "tool_call":
        return {"tool": tool or text, "args": {} if tool is None else {"input": text}}
    return {"text": text}


@main.command()
@click.argument("text")
@click.option("--ref", "refs", multiple=True, required=True,
              help="A source id this decision rests on; repeatable, at least one.")
@click.option("--supersedes", multiple=True, help="A decision this one replaces; repeatable.")
@click.option("--rationale", multiple=True, help="A reason; repeatable.")
@click.option("--title", default=None, help="A short title.")
@click.option("--scope", default="project", show_default=True,
              help="project|user|global|team|session")
@click.option("--constraint", "constraints", multiple=True, help="A constraint; repeatable.")
@click.option("--alternative", "alternatives", multiple=True, help="An option not taken.")
@click.option("--consequence", "consequences", multiple=True, help="A consequence.")
@click.option("--confidence", type=FiniteRange(0, 1), default=None, help="0..1")
@click.option("--sensitivity", default=None,
              help="none|low|high (high: channels that suppress it never load it)")
@click.option("--session", "session_id", default=None, help="Session id.")
@click.option("--agent", "agent_id", default=None, help="Agent id.")
@click.option("--tenant", "tenant_id", default=None, help="Tenant.")
@click.option("--ts", default=None, help="RFC 3339 time, e.g. 2026-06-01T12:00:00Z (default now).")
@click.pass_obj
def decide(obj: Context, /, text: str, refs: tuple[str, ...], **options: Any) -> None:
    """Record a decision (decisions/dec_<id>.md plus a decision event); print its id.

    \b
    Example:
      gitmem decide "Use PostgreSQL FTS for retrieval" --ref evt_01J... --rationale "no new service"
    """
    kwargs = {k: v for k, v in options.items() if v not in (None, ())}
    for key in ("supersedes", "rationale", "constraints", "alternatives", "consequences"):
        if key in kwargs:
            kwargs[key] = list(kwargs[key])
    with reported():
        answer = via_daemon(obj, "decide", {"text": text, "refs": list(refs), **kwargs})
        if answer is None:
            with obj.memory() as memory:
                answer = {"decision_id": memory.decide(text, list(refs), **kwargs)
                          .content["decision_id"]}
    click.echo(answer["decision_id"])


@main.command()
@click.argument("title", required=False)
@click.option("--status", default=None,
              help="open|doing|blocked|done|cancelled (a new task: open; an update keeps "
                   "the task's).")
@click.option("--id", "task_id", default=None,
              help="Update this task (it must exist) instead of creating one; what is not "
                   "given stays as it was.")
@click.option("--details", default=None, help="Details (the file's body; \"\" clears them).")
@click.option("--owner", default=None, help="Who owns it (\"\" clears it).")
@click.option("--sensitivity", default=None,
              help="none|low|high (high: channels that suppress it never load it)")
@click.option("--ref", "refs", multiple=True, help="A cited id; repeatable.")
@click.option("--tag", "tags", multiple=True,
              help="A tag; repeatable (an update adds them to the task's).")
@click.option("--session", "session_id", default=None, help="Session id.")
@click.option("--agent", "agent_id", default=None, help="Agent id.")
@click.option("--tenant", "tenant_id", default=None, help="Tenant.")
@click.pass_obj
def task(obj: Context, /, title: str | None, refs: tuple[str, ...], tags: tuple[str, ...],
         **options: Any) -> None:
    """Create or update a task (tasks/tsk_<id>.md plus a task_update event); print its id.

    TITLE is required for a new task; an update (--id) keeps the title unless given.

    \b
    Examples:
      gitmem task "Write the onboarding guide" --owner alice
      gitmem task --id tsk_01J... --status done
    """
    if title is None and options.get("task_id") is None:
        raise click.UsageError("a new task needs a TITLE (or --id TASK to update one)")
    kwargs = {k: v for k, v in options.items() if v is not None}
    if title is not None:
        kwargs["title"] = title
    if refs:
        kwargs["refs"] = list(refs)
    if tags:
        kwargs["tags"] = list(tags)
    with reported():
        if "task_id" in kwargs:  # --id updates: a mistyped id must not make a new task
            from gitmem.store import require_task  # not on every command's import path
            require_task(obj.config().store, kwargs["task_id"])
        answer = via_daemon(obj, "task", kwargs)
        if answer is None:
            with obj.memory() as memory:
                answer = {"task_id": memory.task(**kwargs).content["task_id"]}
    click.echo(answer["task_id"])


@main.command()
@click.argument("to_agent")
@click.argument("task")
@click.option("--from", "from_agent", default=None, help="The agent handing over.")
@click.option("--constraint", "constraints", multiple=True, help="A constraint; repeatable.")
@click.option("--decision", "decisions", multiple=True,
              help="A decision the receiver must follow (dec_...); repeatable.")
@click.option("--file", "required_files", multiple=True, help="A file it needs; repeatable.")
@click.option("--question", "open_questions", multiple=True, help="An open question.")
@click.option("--ref", "refs", multiple=True, help="A cited id; repeatable.")
@click.option("--tenant", "tenant_id", default=None, help="Tenant.")
@click.option("--ts", default=None, help="RFC 3339 time, e.g. 2026-06-01T12:00:00Z (default now).")
@click.pass_obj
def handoff(obj: Context, /, to_agent: str, task: str, **options: Any) -> None:
    """Write a handoff packet (handoffs/hof_<id>.yaml) for TO_AGENT; print its id.

    `gitmem acb --handoff ID` (or build_acb with handoff_id) then loads only the
    packet, its decisions and a little evidence.

    \b
    Example:
      gitmem handoff coder "Fix the flaky deploy test" --from planner --decision dec_01J...
    """
    kwargs = {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()
              if v not in (None, ())}
    with reported():
        answer = via_daemon(obj, "create_handoff", {"to_agent": to_agent, "task": task,
                                                    **kwargs})
        if answer is None:
            with obj.memory() as memory:
                answer = {"handoff_id": memory.create_handoff(to_agent, task, **kwargs).id}
    click.echo(answer["handoff_id"])
