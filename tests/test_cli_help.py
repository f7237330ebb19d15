"""Every command's help shows an example (STYLE 7)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from gitmem.cli import main


def commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = [prefix]
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += commands(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


@pytest.mark.parametrize("path", commands(main), ids=lambda p: " ".join(p) or "gitmem")
def test_help_has_an_example(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output, f"`gitmem {' '.join(path)} --help` shows no example"


def test_the_daemon_commands_exist() -> None:
    names = {" ".join(p) for p in commands(main)}
    assert {"daemon run", "daemon start", "daemon stop", "daemon status", "call",
            "hooks install", "hook", "verify"} <= names
