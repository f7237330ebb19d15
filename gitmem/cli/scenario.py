"""Scenario commands."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import click

from gitmem.cli.base import Context, emit, main, reported, say


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
def scenario_run(obj: Context, paths: tuple[Path, ...], report_dir: Path) -> None:
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
    from gitmem.embedded import embedded_dsn
    from gitmem.errors import ScenarioError
    from gitmem.harness import format_failure
    from gitmem.scenario import run_scenarios

    def show(result: dict[str, Any]) -> None:
        mark = "PASS" if result["passed"] else "FAIL"
        say(f"{mark} {result['id']:<8} {result.get('duration_ms', 0):>8.0f} ms  "
             f"{result.get('title', result.get('file', ''))}")
        for failure in result["failures"]:
            say(format_failure(failure))

    # SIGTERM (a CI job cancelled) ends the run as Ctrl-C does: through each scenario's
    # clean-up (its daemon stopped, its schema dropped, its directory removed)
    signal.signal(signal.SIGTERM, _terminated)
    with reported():
        dsn = obj.dsn_option or embedded_dsn(Path.cwd() / STATE_DIRNAME)
        if not paths and not Path("scenarios").is_dir():
            raise ScenarioError(f"no PATHS given, and no scenarios/ in {Path.cwd()} to run "
                                "by default: pass scenario files or directories")
        report = run_scenarios(list(paths) or [Path("scenarios")], dsn, report_dir,
                               on_result=show)
    emit({"report": report.get("report_path"), "passed": report["passed"],
           "failed": report["failed"], "duration_ms": report["duration_ms"]})
    if report["failed"]:
        raise click.ClickException(f"{report['failed']} of "
                                   f"{report['passed'] + report['failed']} scenario(s) failed")


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
