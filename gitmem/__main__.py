"""`python -m gitmem`: the command line, for hooks and machines without `gitmem` on PATH."""

from gitmem.cli import main

main(prog_name="gitmem")
