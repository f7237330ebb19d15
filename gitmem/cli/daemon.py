"""Commands of the daemon, the socket and git: daemon, call, hooks, hook."""

from __future__ import annotations

import json
import logging
import sys
from typing import TYPE_CHECKING, Any

import click

from gitmem.cli.base import LOG_FORMAT, Context, F, FiniteRange, emit, fail, main, reported, say
from gitmem.errors import GitmemError, json_problem

if TYPE_CHECKING:
    from gitmem.config import Config


_SECONDS = FiniteRange(min=0, min_open=True)  # a wait of no time cannot succeed (`start`
# would give up on a daemon it just spawned)


def _served(obj: Context) -> Config:
    """The store's config; for a store moved or deleted under its daemon (no manifest
    there any more), the config of where it was, while a daemon still serves that place:
    `daemon stop` and `status` reach it by its pid file and socket."""
    from pathlib import Path

    from gitmem import daemon as lifecycle
    from gitmem.config import Config
    from gitmem.errors import ConfigError

    try:
        return obj.config()
    except ConfigError:
        gone = Config(store=Path(obj.store_option or "memory").resolve())
        if lifecycle.running_pid(gone) is None:
            raise
        return gone


def _daemon_options(func: F) -> F:
    options = [
        click.option("--autocommit/--no-autocommit", default=True, show_default=True,
                     help="Commit the store's changes to git in batches."),
        click.option("--commit-interval", type=FiniteRange(min=0.1), default=300.0,
                     show_default=True, metavar="SECONDS",
                     help="Commit this long after the first uncommitted change."),
        click.option("--commit-max-events", type=click.IntRange(min=1), default=500,
                     show_default=True, metavar="N",
                     help="...or as soon as N events wait to be committed."),
        click.option("--reconcile-interval", type=FiniteRange(min=0.1), default=300.0,
                     show_default=True, metavar="SECONDS",
                     help="Full reconcile of index and files this often."),
        click.option("--max-request-bytes", type=click.IntRange(min=1024),
                     default=16 * 1024 * 1024, show_default=True, metavar="N",
                     help="Largest JSON-RPC request line accepted."),
        click.option("--index-process/--no-index-process", default=True, show_default=True,
                     help="Index in a process of its own (the daemon's threads keep "
                          "its core); --no-index-process indexes in the daemon."),
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
                         index_process=flags["index_process"],
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
def daemon_run(obj: Context, /, **flags: Any) -> None:
    """Serve this store in the foreground until SIGTERM or Ctrl-C; logs to stderr.

    \b
    Example:
      gitmem daemon run --no-autocommit
    """
    from gitmem import daemon as lifecycle

    logging.getLogger().setLevel(logging.INFO)
    for handler in logging.getLogger().handlers:  # its log: each line with time and source
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
    with reported():
        lifecycle.run(obj.config(), _daemon_settings(flags))


@daemon.command("start")
@_daemon_options
@click.option("--timeout", type=_SECONDS, default=60.0, metavar="SECONDS", show_default=True,
              help="Seconds to wait until the daemon answers.")
@click.pass_obj
def daemon_start(obj: Context, /, timeout: float, **flags: Any) -> None:
    """Start the daemon in the background; returns once it answers; prints its pid.

    \b
    Example:
      gitmem daemon start --commit-interval 60
    """
    from gitmem import daemon as lifecycle

    with reported():
        config = obj.config()
        pid = lifecycle.start(config, _daemon_settings(flags), timeout=timeout)
    say(f"gitmem daemon {pid} serves {config.store} on {config.socket_path} "
         f"(log: {lifecycle.log_path(config)})")
    click.echo(pid)


@daemon.command("stop")
@click.option("--timeout", type=_SECONDS, default=30.0, metavar="SECONDS", show_default=True,
              help="Seconds to wait for it to exit.")
@click.pass_obj
def daemon_stop(obj: Context, timeout: float) -> None:
    """Stop the daemon (SIGTERM) and wait until it has exited.

    \b
    Example:
      gitmem daemon stop
    """
    from gitmem import daemon as lifecycle

    with reported():
        pid = lifecycle.stop(_served(obj), timeout=timeout)
    say("no daemon was running" if pid is None else f"stopped gitmem daemon {pid}")


@daemon.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
def daemon_status(obj: Context, as_json: bool) -> None:
    """Whether a daemon serves this store (exit 0), runs but does not answer (exit 1,
    saying why), or does not run (exit 3), and its state.

    \b
    Example:
      gitmem daemon status --json
    """
    from gitmem import daemon as lifecycle
    from gitmem.lost_lines import LEFT
    from gitmem.problems import NOT_APPLIED

    with reported():
        report = lifecycle.status(_served(obj))
    if as_json:
        emit(report)
    elif report.get("finishing"):
        click.echo(report["message"])
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
            running = watcher.get("batch_running_s")
            busy = f", a batch running for {running:.1f}s" if running is not None else ""
            click.echo(f"watcher  {watcher['mode']}, {watcher['batches']} batches, "
                       f"{watcher['pending_paths']} pending{busy}, database {db}")
            for problem in watcher.get("problems", []):
                shown = problem if problem.startswith((NOT_APPLIED, LEFT)) else f"skipped {problem}"
                click.echo(f"  {shown}")
        committer = info.get("autocommit") or {}
        if committer.get("enabled"):
            waiting = (f", waiting: {committer['last_skipped']}"
                       if committer.get("last_skipped") else "")
            click.echo(f"autocommit  {committer.get('commits', 0)} commits{waiting}")
            for problems in (committer.get("held_back") or {}).values():
                for problem in problems:
                    click.echo(f"  not committed: {problem}")
        click.echo(f"log      {report['log']}")
    if not report["running"]:
        sys.exit(3)
    if "error" in report:
        sys.exit(1)


@main.command("call")
@click.argument("method")
@click.argument("params", required=False)
@click.pass_obj
def call(obj: Context, method: str, params: str | None) -> None:
    """Send one JSON-RPC call to the daemon; print its result as JSON.

    PARAMS is a JSON object, or - to read it from stdin.

    \b
    Examples:
      gitmem call status
      gitmem call build_acb '{"query_text": "how do we deploy?", "session_id": "s1"}'
      echo '{"content": {"text": "hello"}}' | gitmem call record_event -
    """
    from gitmem import client
    from gitmem.records import decode_json  # as the daemon reads it: each key once

    value: Any = None
    if params is not None:
        try:
            text = sys.stdin.buffer.read().decode() if params == "-" else params
        except UnicodeDecodeError as exc:
            raise click.UsageError(f"PARAMS from stdin is not UTF-8: byte "
                                   f"{exc.object[exc.start]:#04x} at offset {exc.start}") from None
        try:
            value = decode_json(text)
        except json.JSONDecodeError as exc:
            raise click.UsageError(f"PARAMS is not JSON: {exc.msg} at column {exc.colno}") \
                from None
        except ValueError as exc:  # an integer json.loads refuses
            raise click.UsageError(f"PARAMS: {json_problem(exc)}") from None
    with reported():
        config = obj.config()
        result = client.ask(config.socket_path, method, value, serving=config,
                            same_index=obj.names_an_index)
    emit(result)


@main.group("hooks")
def hooks_group() -> None:
    """Git hooks: pre-commit checks and a sync after merge, checkout and rewrite.

    \b
    Example:
      gitmem hooks install
    """


@hooks_group.command("install")
@click.pass_obj
def hooks_install(obj: Context) -> None:
    """Wire gitmem's hooks into this repository (honours core.hooksPath; chains old hooks).

    \b
    At the top of a repository whose stores live in subdirectories (a fresh clone),
    the hooks guard every store it holds.

    \b
    Example:
      gitmem hooks install    # idempotent; an existing hook is kept and runs first
    """
    from gitmem.hooks import install

    with reported():
        stores = obj.stores()
        messages = dict.fromkeys(m for store in stores for m in install(store))
    for message in messages:
        say(message)


@hooks_group.command("uninstall")
@click.pass_obj
def hooks_uninstall(obj: Context) -> None:
    """Take gitmem's hooks out of this repository, putting back the hooks they kept.

    \b
    Example:
      gitmem hooks uninstall    # NAME.pre-gitmem becomes NAME again
    """
    from gitmem.hooks import uninstall

    with reported():
        stores = obj.stores()
        messages = dict.fromkeys(m for store in stores for m in uninstall(store))
    for message in messages:
        say(message)


@main.command("hook", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def hook(obj: Context, name: str, args: tuple[str, ...]) -> None:
    """Run git hook NAME (the shims in .git/hooks call this).

    \b
    Examples:
      gitmem hook pre-commit            # what `git commit` runs
      gitmem hook post-checkout OLD NEW 1
    """
    from gitmem.config import load_config
    from gitmem.errors import ConfigError
    from gitmem.hooks import hook_stores

    # git runs hooks at the top of the work tree: the stores `hooks install` recorded
    # (a store in a subdirectory is not found by looking upward from there)
    stores = [] if obj.store_option else hook_stores()
    if not stores:
        try:
            configs = [obj.config()]
        except ConfigError as exc:  # the hooks stay, the store moved: never block git for it
            say(f"gitmem {name} hook skipped: {exc}")
            return
    else:
        configs = []
        for store in stores:
            try:
                configs.append(load_config(str(store), obj.dsn_option))
            except ConfigError as exc:
                say(f"gitmem {name} hook skipped {store}: {exc}")
    for config in configs:
        _run_hook(name, args, config)


def _run_hook(name: str, args: tuple[str, ...], config: Config) -> None:
    from gitmem.errors import VerifyError
    from gitmem.hooks import SYNC_HOOKS, run_hook

    try:
        warnings = run_hook(name, args, config)
    except VerifyError as exc:
        say(f"gitmem {name}: {exc}")
        what = "merge" if name == "pre-merge-commit" else "commit"
        raise click.ClickException(f"{what} refused; fix the files above (or bypass the "
                                   f"check once with `git {what} --no-verify`)") from exc
    except GitmemError as exc:
        if name in SYNC_HOOKS:  # the git operation already happened: warn, never fail it
            say(f"gitmem: {exc}")
            return
        raise fail(exc) from exc
    for warning in warnings:
        say(warning)
