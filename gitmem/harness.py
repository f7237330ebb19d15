"""Run scenarios: one in a fresh repository and schema, a suite, and the run report.

Steps run in order; a step that fails to run (an unexpected error) ends its
scenario, a failed assertion does not. Every failure names the scenario, the
step, the assertion, what was expected and what was found, and for ACB
assertions an excerpt of the bundle.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import tempfile
import time
import traceback
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitmem import errors
from gitmem.errors import GitmemError, ScenarioError
from gitmem.scenario import Scenario, Step, load_scenario
from gitmem.steps import Run, execute


def _schema_name(scenario_id: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", scenario_id.lower()).strip("_")[:24]
    return f"scn_{slug}_{uuid.uuid4().hex[:8]}"


@contextmanager
def _workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gitmem-scn-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_scenario(scenario: Scenario, dsn: str) -> dict[str, Any]:
    """Run one scenario; its result for the report (passed, failures, timings)."""
    from gitmem.assertions import evaluate

    started = time.perf_counter()
    failures: list[dict[str, Any]] = []
    steps_run = 0
    with _workdir() as workdir:
        run: Run | None = None
        try:
            run = Run(scenario, dsn, workdir, _schema_name(scenario.id))
            for step in scenario.steps:
                steps_run += 1  # a step that fails has run too
                if not _step(run, step, failures):
                    break
                for index, spec in enumerate(step.assertions, start=1):
                    failure = evaluate(run, spec, f"{step.label} assertion {index}")
                    if failure:
                        failures.append(failure)
            else:
                for index, spec in enumerate(scenario.assertions, start=1):
                    failure = evaluate(run, spec, f"final assertion {index}")
                    if failure:
                        failures.append(failure)
        except GitmemError as exc:
            failures.append({"where": "setup", "error": str(exc)})
        finally:
            if run is not None:
                run.close()
    for failure in failures:
        failure.setdefault("scenario", scenario.id)
        failure.setdefault("file", str(scenario.path))
    return _result(scenario, run, failures, steps_run, started)


def _step(run: Run, step: Step, failures: list[dict[str, Any]]) -> bool:
    """Execute a step; False (with a failure recorded) if the scenario cannot go on."""
    try:
        execute(run, step)
    except GitmemError as exc:
        expected = getattr(errors, step.expect_error, None) if step.expect_error else None
        if expected is not None and isinstance(exc, expected):
            return True
        failures.append({"where": step.label, "line": step.line, "error":
                         f"{type(exc).__name__}: {exc}"})
        return False
    except Exception as exc:  # a harness or product bug: report it with its origin
        failures.append({"where": step.label, "line": step.line,
                         "error": f"{type(exc).__name__}: {exc}",
                         "traceback": traceback.format_exc(limit=-4)})
        return False
    if step.expect_error:
        failures.append({"where": step.label, "line": step.line, "assertion": "expect_error",
                         "expected": f"{step.expect_error} raised",
                         "actual": "the step succeeded"})
    return True


def _result(scenario: Scenario, run: Run | None, failures: list[dict[str, Any]],
            steps_run: int, started: float) -> dict[str, Any]:
    builds = run.builds if run is not None else []
    sections: dict[str, int] = {}
    for build in builds:
        for name, count in build["sections"].items():
            sections[name] = max(sections.get(name, 0), count)
    pools = [b["candidate_pool_size"] for b in builds]
    return {
        "id": scenario.id, "title": scenario.title, "file": str(scenario.path),
        "principles": list(scenario.principles), "passed": not failures,
        "failures": failures, "steps": len(scenario.steps), "steps_run": steps_run,
        "duration_ms": round((time.perf_counter() - started) * 1000, 1),
        "acb_builds": len(builds),
        "timings_ms": timing_stats([b["wall_ms"] for b in builds]),
        "build_timings_ms": timing_stats([b["build_ms"] for b in builds]),
        "candidate_pool_size": {"max": max(pools, default=0),
                                "p50": sorted(pools)[len(pools) // 2] if pools else 0},
        "paths": sorted({str(b["path"]) for b in builds}),
        "sections_packed_max": sections,
        "acbs": [{k: v for k, v in b.items() if k != "step"} | {"step": b["step"]}
                 for b in builds[:50]],
    }


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank), 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return round(ordered[rank - 1], 3)


def timing_stats(values: Sequence[float]) -> dict[str, float]:
    """p50, p95 and max (ms) of a list of durations."""
    return {"count": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
            "max": round(max(values), 3) if values else 0.0,
            "mean": round(statistics.fmean(values), 3) if values else 0.0}


# --------------------------------------------------------------------------- the suite

def discover(paths: Sequence[Path]) -> list[Path]:
    """The scenario files named by `paths` (directories: their *.scenario.yaml)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(path.glob("*.scenario.yaml")))
        elif path.exists():
            found.append(path)
        else:
            raise ScenarioError(f"{path}: no such file or directory")
    return found


def format_failure(failure: Mapping[str, Any]) -> str:
    """A failure record as text for people: where, what was expected, what was found."""
    where = failure.get("where", "")
    what = failure.get("assertion", "")
    head = " ".join(part for part in ("FAIL", failure.get("scenario", ""), where) if part) + (
        f": {what}" if what else "")
    lines = [head]
    if failure.get("name"):
        lines.append(f"  ({failure['name']})")
    if failure.get("file"):
        line = f":{failure['line']}" if failure.get("line") else ""
        lines.append(f"  file:     {failure['file']}{line}")
    if failure.get("params"):
        lines.append(f"  params:   {json.dumps(failure['params'], ensure_ascii=False)}")
    for key in ("expected", "actual", "error"):
        if key in failure:
            value = failure[key]
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            lines.append(f"  {key + ':':<9} {text}")
    excerpt = failure.get("excerpt")
    if excerpt:
        lines.append(f"  ACB excerpt ({excerpt['acb_id']}, {excerpt['token_used_est']} tokens, "
                     f"path {excerpt['path']}):")
        for name, items in excerpt["sections"].items():
            lines.append(f"    {name}: {len(items)} item(s)")
            lines += [f"      {item}" for item in items[:12]]
            if len(items) > 12:
                lines.append(f"      ... {len(items) - 12} more")
        for entry in excerpt["omissions"]:
            lines.append(f"    omission: {json.dumps(entry, ensure_ascii=False)}")
    if failure.get("traceback"):
        lines.append("  " + failure["traceback"].replace("\n", "\n  "))
    return "\n".join(lines)


def run_suite(paths: Sequence[Path | str], dsn: str, report_dir: Path | str | None,
                  *, on_result: Any = None) -> dict[str, Any]:
    """Run every scenario named by `paths`; write and return the run report.

    Malformed files fail the run as scenarios of their own (they are never
    half-run). `on_result(result)` is called after each scenario.
    """
    started = datetime.now(UTC)
    clock = time.perf_counter()
    results: list[dict[str, Any]] = []
    files = discover([Path(p) for p in paths])
    directory = None if report_dir is None else _report_directory(Path(report_dir))
    for path in files:
        try:
            scenario = load_scenario(path)
        except ScenarioError as exc:
            result: dict[str, Any] = {"id": path.name, "file": str(path), "passed": False,
                                      "failures": [{"scenario": path.name,
                                                    "error": str(exc)}]}
        else:
            result = run_scenario(scenario, dsn)
        results.append(result)
        if on_result is not None:
            on_result(result)
    report = {
        "run_id": "run_" + started.strftime("%Y%m%dT%H%M%S%fZ"),
        "started": started.isoformat(timespec="seconds"),
        "duration_ms": round((time.perf_counter() - clock) * 1000, 1),
        "passed": sum(1 for r in results if r["passed"]),
        "failed": sum(1 for r in results if not r["passed"]),
        "scenarios": results,
    }
    if directory is not None:
        target = directory / f"{report['run_id']}.report.json"
        try:
            target.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n",
                              encoding="utf-8")
        except OSError as exc:
            raise ScenarioError(f"cannot write the report {target}: {exc.strerror or exc}"
                                ) from None
        report["report_path"] = str(target)
    return report


def _report_directory(directory: Path) -> Path:
    """The report's directory, made before any scenario runs: one that cannot be made
    would lose the report only after minutes of scenarios."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError(f"cannot make the report directory {directory}: "
                            f"{exc.strerror or exc}; pass --report-dir a directory you can "
                            "write") from None
    return directory
