"""Commands that read and check: reindex, sync, status, acb, verify."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from gitmem.cli.base import Context, emit, main, reported, say, via_daemon
from gitmem.errors import FormatError


@main.command()
@click.pass_obj
def reindex(obj: Context) -> None:
    """Drop the index and rebuild it from the files (bulk COPY; progress on a terminal).

    \b
    Example:
      gitmem reindex            # CI: rebuild from a clean checkout
    """
    from gitmem.store import iter_store_files
    with reported(), obj.memory() as memory:
        total = sum(map(_size, (memory.store / rel for rel, _ in
                                iter_store_files(memory.store))))
        if sys.stderr.isatty():
            with click.progressbar(length=total, label="reindex", file=sys.stderr) as bar:
                report = memory.reindex(bar.update)
        else:
            report = memory.reindex()
    interrupted(report.to_dict())
    say(f"indexed {report.files} files, {report.rows} rows, {len(report.errors)} problem(s)")
    for problem in report.errors:
        say(f"  {FormatError.from_dict(problem)}")
    emit(report.to_dict())


@main.command()
@click.pass_obj
def sync(obj: Context) -> None:
    """Index what changed in the files since the last sync (appends, edits, deletes).

    \b
    Example:
      gitmem sync
    """
    with reported():
        answer = via_daemon(obj, "sync", {})
        if answer is None:
            with obj.memory() as memory:
                answer = memory.reconcile().to_dict()
    interrupted(answer)
    say(f"{len(answer['changed'])} file(s) brought up to date")
    for problem in answer.get("errors", []):
        say(f"  {FormatError.from_dict(problem)}")
    for item in answer.get("left", []):  # lines a tool took out (gitmem/lost_lines.py)
        say(f"  {item['message']}")
    emit(answer)


def interrupted(answer: dict[str, Any]) -> None:
    """Say what became of the writes a crash interrupted (none, usually)."""
    for item in answer.get("finished", []):
        say(f"  interrupted write: {item['action']} {item['path']}: {item['reason']}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
def status(obj: Context, as_json: bool) -> None:
    """Compare the index with the files: which are stale and why; exit 0 either way.

    \b
    Examples:
      gitmem status
      gitmem status --json | jq .stale
    """
    with reported():
        report = via_daemon(obj, "status", {})
        if report is None:
            with obj.memory() as memory:
                report = memory.status()
    if as_json:
        emit(report)
        return
    counts = ", ".join(f"{v} {k}" for k, v in report["index"].items())
    click.echo(f"store   {report['store']}")
    click.echo(f"index   {counts}")
    git = report["git"]
    synced = git["indexed_head"]
    click.echo(f"git     HEAD {git['head'] or '(no commit yet)'}, last full sync at "
               + (synced or ("no commit (before the first)" if synced == "" else "(never)")))
    broken = len({p.get("path") for p in report["errors"]})
    left_out = (f"; {broken} file(s) hold errors, left out of it as listed below"
                if broken else "")
    click.echo("state   " + ("clean: the index reflects every file" if report["clean"]
                            else f"{len(report['stale'])} stale file(s)") + left_out)
    for item in report["stale"]:
        click.echo(f"  stale   {item['path']}: {item['reason']}")
    for item in report["pending"]:
        click.echo(f"  pending {item['path']}: {item['bytes']} bytes, {item['reason']}")
    for problem in report["errors"]:
        click.echo(f"  error   {FormatError.from_dict(problem)}")
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
@click.option("--now", default=None, help="Fixed clock, RFC 3339 (default: now).")
@click.option("--handoff", "handoff_id", default=None, help="Build from this handoff packet only.")
@click.option("--format", "fmt", type=click.Choice(["json", "text"]), default="json",
              show_default=True, help="JSON bundle, or the rendered prompt text.")
@click.pass_obj
def acb_command(obj: Context, /, query: str, fmt: str, **fields: Any) -> None:
    """Build the Active Context Bundle for a question and print it.

    \b
    Examples:
      gitmem acb "Which city hosts the cluster our deployments run on?" --session s1
      gitmem acb --channel public --max-tokens 3000 --format text
    """
    from gitmem.prompt import render_text, summarize  # not the read path: the daemon's

    request = {k: v for k, v in fields.items() if v is not None}  # "" is refused, not dropped
    request["query_text"] = query
    with reported():
        bundle = via_daemon(obj, "build_acb", request)
        if bundle is None:
            with obj.memory() as memory:
                bundle = memory.build_acb(request)
    used = bundle["provenance"]["budget"]["max_tokens"]
    if request.get("max_tokens", used) > used:
        say(f"--max-tokens {request['max_tokens']} is above budgets.yaml's "
            f"acb_total_max_tokens: the bundle's budget is {used} tokens")
    for line in summarize(bundle):
        say(line)
    if fmt == "text":
        click.echo(render_text(bundle), nl=False)
    else:
        emit(bundle)



@main.command("verify")
@click.option("--json", "as_json", is_flag=True, help="Print the problems as JSON.")
@click.option("--since", metavar="REV", default=None,
              help="Events files must only grow since where HEAD left REV (their merge "
                   "base), not only since HEAD: what a pull request into REV adds.")
@click.pass_obj
def verify(obj: Context, as_json: bool, since: str | None) -> None:
    """Check the whole store: records parse, events files only grow, refs resolve, no secrets.

    Exit 1 with each problem as path:line: message. At the top of a repository whose
    stores live in subdirectories (a fresh clone in CI), every store it holds.

    \b
    Examples:
      gitmem verify
      gitmem verify --since origin/main    # in CI, on a pull request's checkout
    """
    from gitmem.verify import verify_tree

    with reported():
        stores = obj.stores()
        found = [(store, verify_tree(store, since=since)) for store in stores]
    if as_json:  # the list once, for machines; the exit status says whether it failed
        emit([{**p.to_dict(), "store": str(store)} for store, problems in found
              for p in problems])
    failed = []
    for store, problems in found:
        errors = sum(p.severity == "error" for p in problems)
        if not as_json:
            for problem in problems:
                say(("" if problem.severity == "error" else f"{problem.severity}: ")
                    + str(problem))
        if errors:
            failed.append(f"{errors} problem(s) in {store}")
        else:
            warnings = len(problems) - errors
            say(f"{store}: no problems" + (f" ({warnings} warning(s))" if warnings else ""))
    if failed:
        raise click.ClickException("; ".join(failed))


def _size(path: Path) -> int:
    """A file's size for the progress bar; 0 for a link to nothing or a loop of links
    (the reindex names them, and skips them)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
