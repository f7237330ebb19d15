"""The `gitmem` command line: parse arguments, call one core function, print.

`base` holds the root group and shared output helpers; each other module
registers one family of commands on it.
"""

from gitmem.cli import daemon, index, records, scenario  # noqa: F401 - registers commands
from gitmem.cli.base import main

__all__ = ["main"]
