"""Shared pieces of the `gitmem` command line: the root group, its context, output.

Machine output (ids, JSON) goes to stdout; messages for people go to stderr.
Every GitmemError becomes a one-line message and exit status 1; bad flags
exit 2 (click's usage errors).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gitmem.config import Config, load_config
from gitmem.errors import GitmemError

if TYPE_CHECKING:
    from gitmem.memory import Memory

F = TypeVar("F", bound=Callable[..., Any])
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # -v, and the daemon's log


class FiniteRange(click.FloatRange):
    """A float in a range, and finite: click's range lets NaN through (no comparison
    fails for it: `daemon stop --timeout nan` stopped the daemon, then advised `kill -9`;
    `--reconcile-interval nan` spun an idle daemon at 70% of a core; `decide --confidence
    nan` failed naming a JSON problem, not the option), and infinity where it has no top."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)  # finite first: inf > 1 says less
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number in the range "
                      f"{self._describe_range()}.", param, ctx)
        return super().convert(number, param, ctx)


class Context:
    def __init__(self, store: str | None, dsn: str | None) -> None:
        self.store_option = store
        self.dsn_option = dsn

    def config(self) -> Config:
        return load_config(self.store_option, self.dsn_option)

    @property
    def names_an_index(self) -> bool:
        """Whether the command asks for an index of its own (a DSN, a schema): a daemon
        must be serving that one to be asked."""
        return bool(self.dsn_option or os.environ.get("GITMEM_SCHEMA"))

    def stores(self) -> list[Path]:
        """The stores a command over every store works on (verify, hooks): the one
        named or found, else each the repository at hand holds (config.stores_here)."""
        from gitmem.config import stores_here

        return stores_here(self.store_option) or [self.config().store]

    @contextmanager
    def memory(self) -> Iterator[Memory]:
        """The store, worked on in this process (imported here: a call the daemon
        answers never needs the read and write paths)."""
        from gitmem.memory import Memory

        with Memory(self.config(), db_pool_size=2) as memory:
            yield memory


def via_daemon(obj: Context, method: str, params: dict[str, Any]) -> Any | None:
    """The daemon's answer when one serves this store, else None (work locally).

    A daemon is asked only once it has answered a status probe (which store and index
    it serves) within `client.STATUS_TIMEOUT`. `GITMEM_NO_DAEMON=1` always works
    locally. An error the daemon answers with is raised as the same GitmemError the
    local work would have raised.
    """
    if os.environ.get("GITMEM_NO_DAEMON", "").lower() not in ("", "0", "false", "no"):
        return None
    from gitmem import client
    from gitmem.errors import RpcError

    config = obj.config()
    try:
        answer = client.call_if_running(config.socket_path, method, params, serving=config,
                                        same_index=obj.names_an_index)
    except RpcError as exc:
        raise client.local_error(exc) from None
    logging.getLogger("gitmem.cli").debug(
        "%s: %s", method, f"no daemon answers on {config.socket_path}: done in this process"
        if answer is None else f"answered by the daemon on {config.socket_path}")
    return answer


def fail(exc: GitmemError) -> click.ClickException:
    return click.ClickException(str(exc))


@contextmanager
def reported() -> Iterator[None]:
    try:
        yield
    except GitmemError as exc:
        raise fail(exc) from exc


def emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False))


def say(message: str) -> None:
    click.echo(message, err=True)


def _redactor(ctx: click.Context) -> Callable[[str], str]:
    """What a failure's message goes through: the store's privacy policy, else (no store,
    or its policy does not load) the one `gitmem init` writes. The root's options name
    the store before its callback has run (a command name is looked up first)."""
    from gitmem.errors import FormatError
    from gitmem.policies import POLICY_FILES, parse_privacy, shipped_privacy
    from gitmem.regular_files import read_regular

    obj = ctx.obj if isinstance(ctx.obj, Context) else Context(ctx.params.get("store"),
                                                                ctx.params.get("dsn"))
    try:
        path = obj.config().store / POLICY_FILES[1]
        problems: list[FormatError] = []
        text = read_regular(path).decode("utf-8")  # a FIFO there: the shipped policy
        privacy = parse_privacy(text, POLICY_FILES[1], problems)
        if not problems:
            return privacy.redact_message
    except (GitmemError, OSError, UnicodeDecodeError):
        pass
    return shipped_privacy().redact_message


class _Root(click.Group):
    """The root group: the message a command fails with, click's own included, quotes
    no value a redaction pattern matches (an option's value may be a secret)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            # click shows `message` as it stands (a usage error with its hint): set it
            exc.message = _redactor(ctx)(exc.message)  # type: ignore[misc]
            raise


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
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
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,  # a plain line
                        format=LOG_FORMAT if verbose else "gitmem: %(message)s",  # unless -v
                        stream=sys.stderr)
    if verbose:  # gitmem's own steps too (what a daemon logs at INFO stays quieter)
        logging.getLogger("gitmem").setLevel(logging.DEBUG)
    ctx.obj = Context(store, dsn)
