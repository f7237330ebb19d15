"""The scenario suite as tests (one per scenarios/*.scenario.yaml), and the harness itself.

Every scenario runs for real: a fresh git repository, its own PostgreSQL schema,
the write path, the index, git. The harness tests cover what a scenario author
hits: malformed files rejected with file, line, step and what is wrong; failing
assertions reported with expected, actual and the ACB excerpt; the report file;
the CLI's exit status.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from gitmem.cli import main
from gitmem.errors import ScenarioError
from gitmem.harness import format_failure, percentile, run_scenario
from gitmem.scenario import load_scenario, parse_duration, resolve_at, run_scenarios, substitute
from tests.daemons import wait_for

SCENARIOS = sorted((Path(__file__).resolve().parent.parent / "scenarios").glob(
    "*.scenario.yaml"))


def test_the_suite_is_complete() -> None:
    """The minimum suite (docs/SCENARIOS.md) is there."""
    ids = {load_scenario(path).id for path in SCENARIOS}
    wanted = {f"SCN-{n:03d}" for n in range(1, 11)} | {"SCN-P1", "SCN-P2", "SCN-P3", "SCN-A1",
                                                        "SCN-G1", "SCN-G2", "SCN-S1"}
    assert wanted <= ids, f"missing scenarios: {sorted(wanted - ids)}"


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name.split(".")[0] for p in SCENARIOS])
def test_scenario(path: Path, dsn: str) -> None:
    """The scenario passes; on failure, every failing assertion is shown in full."""
    result = run_scenario(load_scenario(path), dsn)
    if not result["passed"]:
        pytest.fail("\n\n".join(format_failure(f) for f in result["failures"]), pytrace=False)


# --------------------------------------------------------------------------- malformed files

HEAD = 'id: SCN-T\ntitle: t\nprinciples: [P8]\nnow: "2026-02-01T00:00:00+00:00"\n'


def write(tmp_path: Path, text: str, name: str = "t.scenario.yaml") -> Path:
    """A scenario file with `text`."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("body", "line", "step", "what"), [
    ("steps:\n  - record: {txt: hello}\n", 6, "step 1 (record)", "unknown field 'txt'"),
    ("steps:\n  - record: {text: a}\n  - decide: {text: b}\n", 7, "step 2 (decide)",
     "missing required field 'refs'"),
    ("steps:\n  - record: {text: a}\n  - record: {text: b, refs: [$nope]}\n", 7,
     "step 2 (record)", "$nope is not bound by an earlier step"),
    ("steps:\n  - record: {text: a, channel: secret}\n", 6, "step 1 (record)",
     "field 'channel': expected one of private|public|team|agent"),
    ("steps:\n  - record: {text: a}\n    fly: true\n", 7, "step 1", "unknown key 'fly'"),
    ("steps:\n  - record: {text: a}\n    decide: {text: b, refs: [x]}\n", 6, "step 1",
     "expected exactly one action"),
    ("steps:\n  - acb: {}\n    assertions:\n      - {type: acb_magic}\n", 8, "step 1 (acb)",
     "unknown assertion type 'acb_magic'"),
    ("steps:\n  - acb: {}\n    assertions:\n      - {type: acb_max_tokens}\n", 8,
     "step 1 (acb)", "missing required field 'max'"),
    # the clock's fields cite their own line (they cited the step's)
    ("steps:\n  - record: {text: a}\n    advance: soon\n", 7, "step 1 (record)",
     "field 'advance': expected a duration like 30s"),
    ("steps:\n  - record: {text: a}\n    every: -1m\n", 7, "step 1 (record)",
     "field 'every': must move the clock forward, got '-1m'"),
    ("steps:\n  - record: {text: a}\n    name: n\n    at: \"2026-01-01\"\n", 8,
     "step 1 (record)", "got '2026-01-01'; `at:` also takes `now`, or an offset from the "
     "scenario's now like -35d or +2h"),
    ("steps:\n  - record: {text: a}\n    at: +2x\n", 7, "step 1 (record)",
     "`at:` also takes an RFC 3339 timestamp like 2026-02-09T05:12:33+09:00, or `now`"),
    ("steps:\n  - acb:\n      query: q\n      now: \"2026-03-01\"\n", 8, "step 1 (acb)",
     "field 'now': expected an RFC 3339 timestamp"),
    # a clock moved out of the calendar (an OverflowError traceback ended the whole run)
    ("steps:\n  - record: {text: a}\n    at: \"+99999999999d\"\n", 7, "step 1 (record)",
     "field 'at': '+99999999999d' moves the clock from 2026-02-01T00:00:00"),
    ("steps:\n  - record: {text: a}\n    at: \"-99999999d\"\n", 7, "step 1 (record)",
     "field 'at': '-99999999d' moves the clock from"),
    ("steps:\n  - record: {text: a}\n    name: n\n    at: \"+3000000d\"\n", 8,
     "step 1 (record)", "9998-12-31T23:59:59.999999Z, the range ids and the index can hold"),
    ("steps:\n  - acb: {now: \"+3000000d\"}\n", 6, "step 1 (acb)",
     "field 'now': '+3000000d' moves the clock"),
    ("steps:\n  - record: {text: a}\n    advance: 99999999999d\n", 7, "step 1 (record)",
     "field 'advance': '99999999999d' moves the clock from"),
    ("steps:\n  - record: {text: a}\n    at: \"9998-01-01T00:00:00Z\"\n    every: 1000d\n",
     8, "step 1 (record)", "field 'every': '1000d' moves the clock from 9998-01-01T00:00:00"),
    ("steps:\n  - record: {text: a}\n    at: \"-20500d\"\n", 7, "step 1 (record)",
     "field 'at': '-20500d' moves the clock from 2026-02-01T00:00:00+00:00 outside 1970"),
    ("steps:\n  - git: {rebase: main}\n", 6, "step 1 (git)", "unknown field 'rebase'"),
    ("steps:\n  - daemon: explode\n", 6, "step 1 (daemon)", "expected one of start, stop"),
    ("steps:\n  - record: {text: a}\nassertions:\n  - {type: event_exists, count: many}\n", 8,
     "final assertions", "field 'count': expected an integer"),
    ("steps:\n  - write: {path: ../../etc/passwd, text: x}\n", 6, "step 1 (write)",
     "must be a path inside the store"),
    ("steps:\n  - record: {text: a}\n    repeat: 0\n", 7, "step 1 (record)",
     "field 'repeat': expected 1..100000, got 0"),  # the value was not quoted
    ("steps:\n  - record: {text: a}\n    repeat: 100001\n", 7, "step 1 (record)",
     "field 'repeat': expected 1..100000, got 100001"),
    # a huge backward move is backward (it was "moves the clock ... outside 1970..")
    ("steps:\n  - record: {text: a}\n    advance: -99999999999d\n", 7, "step 1 (record)",
     "field 'advance': must move the clock forward, got '-99999999999d'"),
    ("steps:\n  - task: {status: done}\n", 6, "step 1 (task)",
     "task: missing required field 'title' (a new task needs one; an update gives task_id"),
    ("steps:\n  - acb: {}\n    assertions:\n      - {type: acb_section_contains, section: "
     "rules}\n", 8, "step 1 (acb)", "give contains, id or item_type"),
    # misspelt values: never found, so `present: false` and not-contains passed
    ("steps:\n  - acb: {}\n    assertions:\n      - {type: omission, reason: privacyy, "
     "present: false}\n", 8, "step 1 (acb)",
     "assertion omission: field 'reason': expected one of budget|privacy|"),
    ("steps:\n  - acb: {}\n    assertions:\n      - {type: acb_section_not_contains, "
     "item_type: mesage}\n", 8, "step 1 (acb)", "field 'item_type': expected one of message|"),
    ("steps:\n  - acb: {}\n    assertions:\n      - {type: acb_contains_ref, ref: x, "
     "section: evidence}\n", 8, "step 1 (acb)", "field 'section': expected one of identity|"),
    ("steps:\n  - acb: {}\n    assertions:\n      - {type: conflict_flagged, summary: s, "
     "kind: superseded, present: false}\n", 8, "step 1 (acb)",
     "field 'kind': expected one of unknown_decision|superseded_decision|"),
    # found only when the step ran (and `now` was then named `at`)
    ("steps:\n  - acb: {now: \"2026-03-01\"}\n", 6, "step 1 (acb)", "field 'now':"),
    ("steps:\n  - acb: {max_tokens: -5}\n", 6, "step 1 (acb)",
     "field 'max_tokens': expected a positive integer, got -5"),
])
def test_a_malformed_step_names_file_line_step_and_what(tmp_path: Path, body: str, line: int,
                                                        step: str, what: str) -> None:
    path = write(tmp_path, HEAD + body)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: {step}"), message
    assert what in message, message


@pytest.mark.parametrize(("text", "what"), [
    ("id: SCN-T\ntitle: t\nprinciples: [P8]\nsteps: [{sync: true}]\n",
     "missing required field 'now'"),
    (HEAD.replace("[P8]", "[P42]") + "steps: [{sync: true}]\n", "field 'principles'"),
    (HEAD.replace("SCN-T", "scenario one") + "steps: [{sync: true}]\n", "expected SCN-<name>"),
    (HEAD + "steps: []\n", "expected a non-empty list of steps"),
    (HEAD + "steps: [{sync: true}]\nbudget: 5\n", "unknown top-level field 'budget'"),
    (HEAD + "steps:\n  - record: {text: [unclosed\n", "not valid YAML"),
    (HEAD.replace('"2026-02-01T00:00:00+00:00"', '"2026-02-01T00:00:00"')
     + "steps: [{sync: true}]\n", "has no UTC offset"),
    (HEAD.replace('"2026-02-01T00:00:00+00:00"', '"2026-02-01T00:00:00"')
     + "steps: [{sync: true}]\n", ":4: field 'now': timestamp '2026-02-01T00:00:00' has"),
    (HEAD + "setup:\n  views:\n    x.md: 42\nsteps: [{sync: true}]\n", "setup.views.x.md"),
    # `type:` names the assertion, so the item-type filter cannot be a second `type:`
    (HEAD + "steps: [{acb: {}}]\nassertions:\n  - {type: acb_section_contains, contains: a, "
     "type: message}\n", ":7: not valid YAML: the key 'type' is given twice"),
])
def test_a_malformed_file_is_rejected_whole(tmp_path: Path, text: str, what: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError, match=str(path)) as caught:
        load_scenario(path)
    assert what in str(caught.value)


@pytest.mark.parametrize(("now", "what"), [
    ("2026-02-30T10:00:00Z", "'2026-02-30T10:00:00Z' is not a date and time (day is out "
     "of range for month)"),
    ("2026-13-01", "expected an RFC 3339 timestamp"),
    ("2026-02-01 10:00:00Z", "expected an RFC 3339 timestamp"),
])
def test_an_unquoted_now_that_is_no_date_names_file_and_line(tmp_path: Path, now: str,
                                                             what: str) -> None:
    """YAML reads an unquoted `now:` as a timestamp, and an impossible one used to end in
    a ValueError naming no file."""
    path = write(tmp_path, HEAD.replace('"2026-02-01T00:00:00+00:00"', now)
                 + "steps: [{sync: true}]\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value).startswith(f"{path}:4: field 'now': ")
    assert what in str(caught.value)


def test_a_value_yaml_cannot_build_names_file_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + "budget_tokens: 0x_\nsteps: [{sync: true}]\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value).startswith(f"{path}:5: not valid YAML: field 'budget_tokens': "
                                        "'0x_' is not a valid YAML int")


def test_a_malformed_file_fails_the_run_without_running_anything(tmp_path: Path,
                                                                 dsn: str) -> None:
    write(tmp_path, HEAD + "steps:\n  - record: {txt: hello}\n", "a.scenario.yaml")
    report = run_scenarios([tmp_path], dsn, None)
    assert report["failed"] == 1
    failure = report["scenarios"][0]["failures"][0]
    assert "a.scenario.yaml:6: step 1 (record): record: unknown field 'txt'" in failure["error"]
    # its header named nothing: "FAIL  ", the file's id unknown as it did not load
    assert format_failure(failure).splitlines()[0] == "FAIL a.scenario.yaml"


# --------------------------------------------------------------------------- failures

FAILING = HEAD + """defaults: {session: s1}
steps:
  - record: {text: "We ship on Fridays."}
    as: e1
  - acb: {query: "when do we ship?", session: s2}
    assertions:
      - {type: acb_contains_ref, ref: $e1}
      - {type: acb_section_contains, section: retrieved_evidence, contains: "Mondays"}
      - {type: acb_max_tokens, max: 10}
assertions:
  - {type: event_exists, where: {contains: Fridays}, count: 2}
"""


def test_a_failing_assertion_reports_expected_actual_and_the_acb(tmp_path: Path,
                                                                 dsn: str) -> None:
    result = run_scenario(load_scenario(write(tmp_path, FAILING)), dsn)
    assert not result["passed"]
    assert [f["where"] for f in result["failures"]] == [
        "step 2 (acb) assertion 2", "step 2 (acb) assertion 3", "final assertion 1"]
    contains, tokens, exists = result["failures"]
    assert contains["scenario"] == "SCN-T" and contains["assertion"] == "acb_section_contains"
    assert "matching {'section': 'retrieved_evidence', 'contains': 'Mondays'}" in \
        contains["expected"]
    assert contains["actual"] == "0 item(s)"
    assert contains["excerpt"]["sections"]["retrieved_evidence"][0].endswith(
        "[message] 'user: We ship on Fridays.'")
    assert tokens["expected"] == "token_used_est <= 10" and tokens["actual"] > 10
    assert exists["actual"] == 1 and "count': 2" in exists["expected"]
    text = format_failure(contains)
    for part in ("FAIL SCN-T step 2 (acb) assertion 2: acb_section_contains", "expected:",
                 "actual:", "ACB excerpt", "retrieved_evidence: 1 item(s)", "We ship on Fridays"):
        assert part in text, text


def test_a_step_that_errors_ends_the_scenario_and_names_the_step(tmp_path: Path,
                                                                 dsn: str) -> None:
    text = HEAD + """steps:
  - record: {text: a}
    as: e1
  - decide: {text: b, refs: [$e1], supersedes: ["dec_01KGE00000000000000000000X"]}
  - record: {text: never}
assertions:
  - {type: event_exists, where: {contains: never}}
"""
    result = run_scenario(load_scenario(write(tmp_path, text)), dsn)
    assert result["steps_run"] == 2  # the step that failed ran; the third did not
    [failure] = result["failures"]
    assert failure["where"] == "step 2 (decide)" and failure["line"] == 8
    assert "ValidationError" in failure["error"] and "supersedes" in failure["error"]


def test_a_clock_moved_out_of_the_calendar_fails_its_step_in_one_line(tmp_path: Path,
                                                                       dsn: str) -> None:
    """Each step's move fits the calendar, together they do not: the step that leaves it
    fails, named, without a traceback (an OverflowError's was shown)."""
    text = HEAD + """steps:
  - record: {text: a}
    advance: 2000000d
  - record: {text: b}
    advance: 2000000d
  - record: {text: c}
    at: "9998-12-30T00:00:00Z"
    every: 1d
    repeat: 3
"""
    result = run_scenario(load_scenario(write(tmp_path, text)), dsn)
    [failure] = result["failures"]
    assert failure["where"] == "step 2 (record)" and failure["line"] == 8
    # the value as the file wrote it (it was '1.728e+11s'), at the field's own line
    assert failure["error"].startswith(f"ScenarioError: {tmp_path / 't.scenario.yaml'}:9: "
                                       "step 2 (record): field 'advance': '2000000d' moves "
                                       "the clock from 7501-"), failure["error"]
    assert "traceback" not in failure and "\n" not in failure["error"]
    text = text.replace("    advance: 2000000d\n", "")
    [failure] = run_scenario(load_scenario(write(tmp_path, text)), dsn)["failures"]
    assert failure["where"] == "step 3 (record)" and (  # it was '86400s'
        ":10: step 3 (record): field 'every': '1d' for each of its 3 writes moves the clock "
        "from 9998-12-30T00:00:00+00:00 outside 1970") in failure["error"], failure["error"]
    assert "write 3 of 3 would be 1d after 9998-12-31T00:00:00" in failure["error"]
    assert "traceback" not in failure
    text = text.replace("repeat: 3", "repeat: 2")  # both writes in range: the tick after
    assert run_scenario(load_scenario(write(tmp_path, text)), dsn)["failures"] == []  # is no write


def test_a_clock_move_out_of_range_quotes_the_file(tmp_path: Path, dsn: str) -> None:
    """`advance: 6h` that leaves the range at run time was quoted back as '21600s'."""
    text = HEAD + """steps:
  - record: {text: a}
    at: "9998-12-31T18:00:00Z"
  - record: {text: b}
    advance: 6h
"""
    [failure] = run_scenario(load_scenario(write(tmp_path, text)), dsn)["failures"]
    assert failure["error"] == (
        f"ScenarioError: {tmp_path / 't.scenario.yaml'}:9: step 2 (record): field 'advance': "
        "'6h' moves the clock from 9998-12-31T18:00:01+00:00 outside 1970-01-01T00:00:00Z .. "
        "9998-12-31T23:59:59.999999Z, the range ids and the index can hold")


def test_the_default_tick_out_of_range_is_not_blamed_on_every(tmp_path: Path,
                                                              dsn: str) -> None:
    """A step with no `every:` whose writes (1 s apart, the default) leave the range was
    refused as "field 'every': '1s' moves the clock", a field the file does not have."""
    path = tmp_path / "t.scenario.yaml"
    text = HEAD + """steps:
  - record: {text: "a {i}"}
    at: "9998-12-31T23:59:58Z"
    repeat: 3
"""
    [failure] = run_scenario(load_scenario(write(tmp_path, text)), dsn)["failures"]
    assert failure["error"] == (
        f"ScenarioError: {path}:6: step 1 (record): its 3 writes at 1 s each (the default: "
        "the step has no `every:`) move the clock from 9998-12-31T23:59:58+00:00 outside "
        "1970-01-01T00:00:00Z .. 9998-12-31T23:59:59.999999Z, the range ids and the index can "
        "hold: write 3 of 3 would be 1 s after 9998-12-31T23:59:59+00:00")
    # an earlier step's last tick left the range: the refused write's step, and that one
    text = HEAD + """steps:
  - record: {text: a}
    at: "9998-12-31T23:59:59Z"
  - acb: {query: a}
  - decide: {text: b, refs: [x]}
"""
    [failure] = run_scenario(load_scenario(write(tmp_path, text)), dsn)["failures"]
    assert failure["where"] == "step 3 (decide)" and "'every'" not in failure["error"]
    assert failure["error"].startswith(f"ScenarioError: {path}:9: step 3 (decide): its write "
                                       "would be outside 1970"), failure["error"]
    assert failure["error"].endswith(
        ": step 1 (record) (line 6) moved the clock past its end after its last write, at "
        "9998-12-31T23:59:59+00:00, by 1 s, the default tick (it has no `every:`); give this "
        "step an `at:`"), failure["error"]
    text = HEAD + """steps:
  - record: {text: a}
    at: "9998-12-31T23:00:00Z"
  - record: {text: b}
    every: 90m
  - decide: {text: c, refs: [x]}
"""
    [failure] = run_scenario(load_scenario(write(tmp_path, text)), dsn)["failures"]
    assert failure["error"].startswith(f"ScenarioError: {path}:10: step 3 (decide):")
    assert failure["error"].endswith(
        "step 2 (record) (line 8) moved the clock past its end after its last write, at "
        "9998-12-31T23:00:01+00:00, by its `every: 90m` (line 9); give this step an `at:`"
    ), failure["error"]


def test_decision_assertions_look_in_the_scenarios_tenant(tmp_path: Path, dsn: str) -> None:
    """With `defaults.tenant` (SCENARIOS.md's own example), decision_active and
    decision_superseded looked in the manifest's tenant and found no such decision."""
    text = HEAD + """defaults: {tenant: acme}
steps:
  - record: {text: "The billing cron runs at midnight UTC"}
    as: e1
  - decide: {text: "Cron at midnight.", refs: [$e1]}
    as: d1
  - decide: {text: "Cron at 01:00.", refs: [$e1], supersedes: [$d1]}
    as: d2
assertions:
  - {type: decision_active, decision: $d2}
  - {type: decision_superseded, decision: $d1, by: $d2}
  - {type: decision_active, decision: $d2, tenant: default}
"""
    result = run_scenario(load_scenario(write(tmp_path, text)), dsn)
    [failure] = result["failures"]  # only the one that asks another tenant
    assert failure["where"] == "final assertion 3"
    assert failure["actual"] == "no such decision"


def test_expect_error_fails_when_nothing_is_refused(tmp_path: Path, dsn: str) -> None:
    text = HEAD + "steps:\n  - record: {text: harmless}\n    expect_error: PrivacyError\n"
    result = run_scenario(load_scenario(write(tmp_path, text)), dsn)
    [failure] = result["failures"]
    assert failure["expected"] == "PrivacyError raised"
    assert failure["actual"] == "the step succeeded"


def test_index_equivalent_requires_committed_memory(tmp_path: Path, dsn: str) -> None:
    text = HEAD + "steps:\n  - record: {text: a}\nassertions:\n  - {type: index_equivalent}\n"
    [failure] = run_scenario(load_scenario(write(tmp_path, text)), dsn)["failures"]
    assert "git: commit" in failure["expected"]
    assert any("events/" in line for line in failure["actual"])


ITEM_TYPES = HEAD + """defaults: {session: s1}
steps:
  - record: {text: "We deploy with Helm charts."}
    as: e1
  - decide: {text: "Deploy with Helm.", refs: [$e1]}
  - acb: {query: "how do we deploy with helm?"}
assertions:
  - {type: acb_section_contains, item_type: decision, contains: Helm, count: 1}
  - {type: acb_section_not_contains, item_type: decision, contains: "We deploy"}
  - {type: item_max_tokens, max: 1, item_type: handoff}
  - {type: acb_section_contains, item_type: message, contains: "Deploy with Helm."}
  - {type: acb_section_not_contains, item_type: decision, contains: Helm}
  - {type: item_max_tokens, max: 1, item_type: decision}
"""


def test_item_type_filters_acb_items_by_their_type(tmp_path: Path, dsn: str) -> None:
    """The first three hold, the last three fail, only by the type of the items."""
    result = run_scenario(load_scenario(write(tmp_path, ITEM_TYPES)), dsn)
    assert [f["where"] for f in result["failures"]] == [
        "final assertion 4", "final assertion 5", "final assertion 6"], result["failures"]
    message, decision, size = result["failures"]
    assert message["expected"] == (">= 1 item(s) matching {'contains': 'Deploy with Helm.', "
                                   "'item_type': 'message'}")
    assert [ref[:4] for ref in decision["actual"]] == ["dec_"]
    assert [ref[:4] for ref in size["actual"]] == ["dec_"]


TASK_UPDATE = HEAD + """steps:
  - task: {title: "Write the Helm chart"}
    as: t1
  - task: {task_id: $t1, status: doing, owner: ana}
  - acb: {}
assertions:
  - {type: acb_section_contains, section: task_state, id: $t1, count: 1,
     contains: "Task [doing] Write the Helm chart"}
  - {type: acb_section_not_contains, section: task_state, contains: "Task [open]"}
"""


def test_a_task_update_needs_no_title_and_keeps_it(tmp_path: Path, dsn: str) -> None:
    """`task: {task_id, status}` loads (as the CLI and the RPC allow) and the title stays."""
    result = run_scenario(load_scenario(write(tmp_path, TASK_UPDATE)), dsn)
    assert result["passed"], result["failures"]



PASSING = HEAD + """steps:
  - repeat: 3
    record: {text: "note {i} about invoices"}
    as: notes
  - acb: {query: invoices, session: elsewhere}
    assertions:
      - {type: acb_contains_ref, ref: "$notes[2]"}
      - {type: acb_build_latency_p95_ms, max: 5000, runs: 3}
"""


def test_the_report_has_timings_pools_and_sections(tmp_path: Path, dsn: str) -> None:
    write(tmp_path, PASSING, "ok.scenario.yaml")
    report = run_scenarios([tmp_path], dsn, tmp_path / "reports")
    saved = json.loads(Path(report["report_path"]).read_text())
    assert Path(report["report_path"]).name.startswith("run_")
    assert saved["passed"] == 1 and saved["failed"] == 0
    [result] = saved["scenarios"]
    assert result["id"] == "SCN-T" and result["passed"] and result["acb_builds"] == 4
    assert set(result["timings_ms"]) >= {"p50", "p95", "max"}
    assert result["candidate_pool_size"]["max"] >= 3
    assert result["sections_packed_max"]["retrieved_evidence"] == 3
    assert result["paths"] == ["retrieval"]


def test_each_run_gets_a_fresh_repository_and_schema_and_leaves_neither(
        tmp_path: Path, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario_id = f"SCN-ISO{uuid.uuid4().hex[:8].upper()}"
    text = PASSING.replace("SCN-T", scenario_id) + (
        "assertions:\n  - {type: event_exists, where: {contains: invoices}, count: 3}\n")
    scenario = load_scenario(write(tmp_path, text))
    workdirs = tmp_path / "tmp"
    workdirs.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(workdirs))
    first, second = run_scenario(scenario, dsn), run_scenario(scenario, dsn)
    assert first["passed"] and second["passed"], (first["failures"], second["failures"])
    assert first["candidate_pool_size"] == second["candidate_pool_size"]  # no shared index
    assert list(workdirs.glob("gitmem-*")) == []  # the repository and the clone are gone
    with psycopg.connect(dsn, autocommit=True) as conn:
        left = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE %s",
                            (f"scn_{scenario_id.lower().replace('-', '_')}%",)).fetchall()
    assert left == []


def test_cli_runs_scenarios_and_exits_1_on_a_failure(tmp_path: Path, dsn: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    write(tmp_path, PASSING, "a.scenario.yaml")
    ok = runner.invoke(main, ["--dsn", dsn, "scenario", "run", str(tmp_path),
                              "--report-dir", str(tmp_path / "r")])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["passed"] == 1
    write(tmp_path, FAILING.replace("SCN-T", "SCN-F"), "b.scenario.yaml")
    bad = runner.invoke(main, ["--dsn", dsn, "scenario", "run", str(tmp_path),
                               "--report-dir", str(tmp_path / "r")])
    assert bad.exit_code == 1
    assert "FAIL SCN-F step 2 (acb) assertion 2: acb_section_contains" in bad.stderr
    assert "1 of 2 scenario(s) failed" in bad.stderr
    missing = runner.invoke(main, ["--dsn", dsn, "scenario", "run", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "no such file or directory" in missing.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)  # no scenarios/ to default to
    none = runner.invoke(main, ["--dsn", dsn, "scenario", "run"])
    assert none.exit_code == 1 and "no PATHS given, and no scenarios/ in" in none.stderr


def test_a_report_dir_that_cannot_be_made_fails_before_any_scenario_runs(
        tmp_path: Path, dsn: str) -> None:
    """Every scenario ran, and then `--report-dir` ended the run in a traceback."""
    write(tmp_path, PASSING, "a.scenario.yaml")
    afile = tmp_path / "afile"
    afile.write_text("", encoding="utf-8")
    for where, reason in ((afile / "sub", "Not a directory"),
                          (Path("/proc/nope"), "No such file or directory")):
        result = CliRunner().invoke(main, ["--dsn", dsn, "scenario", "run",
                                           str(tmp_path / "a.scenario.yaml"),
                                           "--report-dir", str(where)])
        assert result.exit_code == 1, result.output
        assert result.stderr.splitlines() == [
            f"Error: cannot make the report directory {where}: {reason}; pass --report-dir "
            "a directory you can write"]
        assert result.stdout == ""


def test_a_run_ended_with_sigterm_leaves_no_schema_or_directory(tmp_path: Path,
                                                               dsn: str) -> None:
    """A cancelled CI job's SIGTERM ended the process at once: its scenario's schema and
    directory stayed behind."""
    scenario_id = f"SCN-TERM{uuid.uuid4().hex[:8].upper()}"
    write(tmp_path, HEAD.replace("SCN-T", scenario_id) + "steps:\n  - record: {text: turn}\n"
          "  - acb: {query: turn}\n    repeat: 100000\n")  # minutes of builds
    workdirs = tmp_path / "tmp"
    workdirs.mkdir()
    env = {**os.environ, "TMPDIR": str(workdirs)}
    proc = subprocess.Popen([sys.executable, "-m", "gitmem", "--dsn", dsn, "scenario", "run",
                             str(tmp_path / "t.scenario.yaml"), "--report-dir",
                             str(tmp_path / "r")], env=env, stderr=subprocess.PIPE, text=True)
    pattern = f"scn_{scenario_id.lower().replace('-', '_')}%"
    with psycopg.connect(dsn, autocommit=True) as conn:
        def schemas() -> list[Any]:
            return conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE %s",
                                (pattern,)).fetchall()
        wait_for(lambda: bool(schemas()) and any(workdirs.glob("gitmem-scn-*")), timeout=60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
        assert schemas() == []
    assert list(workdirs.glob("gitmem-*")) == []


# --------------------------------------------------------------------------- pure helpers

def test_substitute_resolves_names_lists_indexes_and_i() -> None:
    bindings = {"e1": "evt_A", "notes": ["evt_B", "evt_C"]}
    assert substitute({"refs": ["$e1", "$notes"], "ref": "$notes[-1]",
                       "path": "decisions/${e1}.md", "text": "turn {i}"}, bindings, 7) == {
        "refs": ["evt_A", "evt_B", "evt_C"], "ref": "evt_C", "path": "decisions/evt_A.md",
        "text": "turn 7"}
    with pytest.raises(ScenarioError, match=r"\$e1\[0\]: \$e1 is not a list"):
        substitute("$e1[0]", bindings)


def test_the_story_clock() -> None:
    now = datetime(2026, 2, 1, tzinfo=UTC)
    assert parse_duration("90m") == 5400 and parse_duration("-2w") == -1209600
    assert resolve_at("-21d", now) == datetime(2026, 1, 11, tzinfo=UTC)
    assert resolve_at("now", now) == now
    assert resolve_at("2026-01-01T00:00:00+00:00", now).year == 2026
    assert percentile([5, 1, 3, 2, 4], 50) == 3 and percentile([], 95) == 0.0
