"""A record file's every problem is reported at once, each at its key's line: by the
parsers, `gitmem verify`, the index's status and a task update; a file with one
problem still has exactly one error."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest

from gitmem.client import local_error
from gitmem.documents import (
    parse_decision,
    parse_handoff,
    parse_summary,
    parse_task,
    parse_view,
)
from gitmem.errors import FormatError, RpcError, ValidationError
from gitmem.memory import Memory
from gitmem.rpc import error_object
from tests.conftest import Cli

EVT = "evt_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
DEC = "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
TSK = "tsk_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
SUM = "sum_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
HOF = "hof_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
DEC_PATH = f"decisions/{DEC}.md"
TASK_PATH = f"tasks/{TSK}.md"
SUM_PATH = f"summaries/episode/{SUM}.md"
HOF_PATH = f"handoffs/{HOF}.yaml"

# three mistakes: a bad status (line 4), an unknown key (line 6), confidence 2 (line 7)
THREE_MISTAKES = f"""---
id: {DEC}
ts: 2026-02-09T05:12:33Z
status: maybe
refs: [{EVT}]
colour: red
confidence: 2
---
Use PostgreSQL full-text search.
"""
EXPECTED = [(4, "status", "expected one of active|superseded, got 'maybe'"),
            (6, "colour", "unknown field; expected only id, ts, "),
            (7, "confidence", "expected a number in [0, 1], got 2")]

# two mistakes: a missing title (line 1, where the frontmatter opens), a bad status (line 4)
TWO_MISTAKES_TASK = f"""---
id: {TSK}
ts: 2026-02-09T05:12:33Z
status: later
---
The details.
"""
# two mistakes: refs that are not ids (line 5), an empty body (line 7)
TWO_MISTAKES_SUMMARY = f"""---
id: {SUM}
ts: 2026-02-09T05:12:33Z
scope: episode
refs: [not-an-id]
---

"""


def caught(parse: Callable[[str, str, str], object], text: str, path: str) -> FormatError:
    with pytest.raises(FormatError) as raised:
        parse(text, path, "default")
    return raised.value


def where(problems: list[FormatError]) -> list[tuple[int | None, str | None]]:
    return [(p.line, p.field) for p in problems]


def test_a_decision_with_three_mistakes_names_all_three_in_line_order() -> None:
    err = caught(parse_decision, THREE_MISTAKES, DEC_PATH)
    assert isinstance(err, ValidationError)  # the first, as one error: as before
    assert (err.path, err.line, err.field) == (DEC_PATH, 4, "status")
    assert err.detail == EXPECTED[0][2]
    assert len(err.problems) == 3 and all(p.path == DEC_PATH for p in err.problems)
    for problem, (line, name, detail) in zip(err.problems, EXPECTED, strict=True):
        assert (problem.line, problem.field) == (line, name)
        assert problem.detail.startswith(detail) and problem.others == ()
    assert str(err).splitlines() == [str(p) for p in err.problems]
    assert str(err).splitlines()[0] == (f"{DEC_PATH}:4: field 'status': expected one of "
                                        "active|superseded, got 'maybe'")


def test_a_task_and_a_summary_with_two_mistakes_name_both() -> None:
    task = caught(parse_task, TWO_MISTAKES_TASK, TASK_PATH)
    assert where(task.problems) == [(1, "title"), (4, "status")]
    assert "missing" in task.problems[0].detail and "'later'" in task.problems[1].detail
    summary = caught(parse_summary, TWO_MISTAKES_SUMMARY, SUM_PATH)
    assert where(summary.problems) == [(5, "refs"), (7, "body")]


def test_a_handoff_with_two_mistakes_names_both() -> None:
    text = f"id: {HOF}\nts: 2026-02-09T05:12:33Z\nto_agent: two words\ndecisions: [{EVT}]\n"
    err = caught(parse_handoff, text + "task: x\n", HOF_PATH)
    assert where(err.problems) == [(3, "to_agent"), (4, "decisions")]


def test_a_file_with_one_mistake_has_exactly_one_error_as_before() -> None:
    text = THREE_MISTAKES.replace("status: maybe\n", "").replace("colour: red\n", "")
    err = caught(parse_decision, text, DEC_PATH)
    assert err.others == () and err.problems == [err]
    assert str(err) == f"{DEC_PATH}:5: field 'confidence': expected a number in [0, 1], got 2"


def test_a_file_named_for_another_id_is_one_more_problem_unless_its_id_is_wrong() -> None:
    elsewhere = "decisions/dec_01JKZ3N4Q5R6S7T8V9W0X1Y2ZZ.md"
    err = caught(parse_decision, THREE_MISTAKES, elsewhere)
    assert where(err.problems) == [(2, "id"), (4, "status"), (6, "colour"), (7, "confidence")]
    assert "file name does not match" in err.problems[0].detail
    bad_id = caught(parse_decision, THREE_MISTAKES.replace(DEC, "dec_42"), elsewhere)
    assert where(bad_id.problems)[0] == (2, "id") and len(bad_id.problems) == 4
    assert "ULID" in bad_id.detail  # the id's own problem, not the file name's too


def test_frontmatter_that_does_not_load_stays_one_error() -> None:
    err = caught(parse_decision, THREE_MISTAKES.replace("status: maybe", "status: [maybe"),
                 DEC_PATH)
    assert err.others == () and "broken YAML frontmatter" in err.detail


def test_the_others_survive_pickling_redaction_and_the_rpc_error() -> None:
    """A reindex's workers pickle errors back; a daemon sends a write's error as JSON."""
    err = caught(parse_decision, THREE_MISTAKES, DEC_PATH)
    assert str(pickle.loads(pickle.dumps(err))) == str(err)
    hidden = err.redacted(lambda s: s.replace("maybe", "[REDACTED]"), "memory/" + DEC_PATH)
    assert [p.path for p in hidden.problems] == ["memory/" + DEC_PATH] * 3
    assert "maybe" not in str(hidden)
    error = error_object(err)
    rebuilt = local_error(RpcError(error["code"], error["message"], error["data"]))
    assert isinstance(rebuilt, ValidationError) and str(rebuilt) == str(err)


def test_verify_lists_every_problem_of_a_record_file(cli: Cli) -> None:
    store = cli.config.store
    (store / DEC_PATH).write_text(THREE_MISTAKES)
    (store / TASK_PATH).write_text(TWO_MISTAKES_TASK)
    result = cli("verify", ok=False)
    assert result.exit_code == 1
    for line, name, detail in EXPECTED:
        assert f"memory/{DEC_PATH}:{line}: field '{name}': {detail}" in result.output
    assert f"memory/{TASK_PATH}:1: field 'title'" in result.output
    assert f"memory/{TASK_PATH}:4: field 'status'" in result.output
    listed = json.loads(cli("verify", "--json", ok=False).stdout)
    mine = [(p["line"], p["field"]) for p in listed if p["path"] == f"memory/{DEC_PATH}"]
    assert mine == [(line, name) for line, name, _ in EXPECTED]


def test_status_after_a_sync_lists_every_problem_of_a_record_file(memory: Memory,
                                                                   cli: Cli) -> None:
    store: Path = memory.store
    (store / DEC_PATH).write_text(THREE_MISTAKES)
    (store / SUM_PATH).parent.mkdir(parents=True, exist_ok=True)
    (store / SUM_PATH).write_text(TWO_MISTAKES_SUMMARY)
    memory.sync()
    errors = memory.status()["errors"]
    assert [(e["line"], e["field"]) for e in errors if e["path"] == DEC_PATH] == [
        (line, name) for line, name, _ in EXPECTED]
    assert [(e["line"], e["field"]) for e in errors if e["path"] == SUM_PATH] == [
        (5, "refs"), (7, "body")]
    human = cli("status").stdout
    assert "2 file(s) hold errors" in human
    for line, name, _ in EXPECTED:
        assert f"  error   {DEC_PATH}:{line}: field '{name}'" in human
    memory.reindex()
    assert [e for e in memory.status()["errors"] if e["path"] == DEC_PATH] == [
        e for e in errors if e["path"] == DEC_PATH]


def test_a_task_update_refused_for_a_broken_task_file_names_every_problem(cli: Cli) -> None:
    (cli.config.store / TASK_PATH).write_text(TWO_MISTAKES_TASK)
    result = cli("task", "--id", TSK, "--status", "done", ok=False)
    assert result.exit_code == 1
    assert f"{TASK_PATH}:1: field 'title'" in result.stderr
    assert f"{TASK_PATH}:4: field 'status'" in result.stderr


# three mistakes: an unknown key (line 2), a section no bundle has (line 3), max_tokens 0
# (line 4)
VIEW_MISTAKES = """---
colour: red
section: footer
max_tokens: 0
---
# Runbook

Restart the worker.
"""


def test_a_view_reports_every_problem_of_its_frontmatter() -> None:
    with pytest.raises(FormatError) as caught:
        parse_view(VIEW_MISTAKES, "views/runbook.md", "rules")
    got = [(p.path, p.line, p.field) for p in caught.value.problems]
    assert got == [("views/runbook.md", 2, "colour"), ("views/runbook.md", 3, "section"),
                   ("views/runbook.md", 4, "max_tokens")]
    assert "expected a positive integer, got 0" in str(caught.value)
    one = VIEW_MISTAKES.replace("colour: red\n", "").replace("max_tokens: 0\n", "")
    with pytest.raises(FormatError) as single:
        parse_view(one, "views/runbook.md", "rules")
    assert [(p.line, p.field) for p in single.value.problems] == [(2, "section")]
