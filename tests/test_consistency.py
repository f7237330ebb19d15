"""consistency: a summary checked against the decisions and records it cites (SCN-009)."""

from __future__ import annotations

from datetime import UTC, datetime

from gitmem.consistency import (
    NO_SESSION,
    SummaryFacts,
    check_tree,
    describe,
    load_tree,
    summary_conflicts,
)
from gitmem.context import TenantDecisions, resolve_decisions
from gitmem.memory import Memory

DAY = datetime(2026, 2, 1, tzinfo=UTC)


def chain(*rows: tuple[str, int, list[str], str]) -> TenantDecisions:
    """Decisions (id, day, supersedes, status) with chains resolved."""
    return resolve_decisions([
        {"decision_id": d, "ts": DAY.replace(day=day), "supersedes": sup, "status": status}
        for d, day, sup, status in rows])


def test_a_summary_stating_a_superseded_decision_names_its_successor() -> None:
    decisions = chain(("dec_a", 1, [], "active"), ("dec_b", 2, ["dec_a"], "active"),
                      ("dec_c", 3, ["dec_b"], "active"))
    facts = SummaryFacts("sum_1", "s1", "session", ("dec_a", "dec_c"), ("evt_1",),
                         DAY.replace(day=5))
    assert summary_conflicts(facts, decisions, {"evt_1": "s1"}) == [
        {"kind": "superseded_decision", "decision": "dec_a", "superseded_by": "dec_c",
         "stale": False}]


def test_a_summary_overtaken_by_a_later_decision_is_stale_not_wrong(memory: Memory) -> None:
    decisions = chain(("dec_a", 1, [], "active"), ("dec_b", 3, ["dec_a"], "active"))
    written_before = SummaryFacts("sum_1", "s1", "session", ("dec_a",), (), DAY.replace(day=2))
    [conflict] = summary_conflicts(written_before, decisions, {})
    assert conflict["stale"] is True
    assert "it was current when the summary was written" in describe(conflict)
    written_after = SummaryFacts("sum_2", "s1", "session", ("dec_a",), (), DAY.replace(day=4))
    assert summary_conflicts(written_after, decisions, {})[0]["stale"] is False


def test_a_decision_retired_by_hand_has_no_successor() -> None:
    decisions = chain(("dec_a", 1, [], "superseded"))
    facts = SummaryFacts("sum_1", "s1", "session", ("dec_a",), ("evt_1",))
    [conflict] = summary_conflicts(facts, decisions, {"evt_1": "s1"})
    assert conflict == {"kind": "superseded_decision", "decision": "dec_a",
                        "superseded_by": None, "stale": True}
    assert describe(conflict).startswith("states dec_a as current, but it is superseded;")


def test_unknown_decisions_missing_refs_and_other_sessions_are_named() -> None:
    facts = SummaryFacts("sum_1", "s1", "session", ("dec_x",),
                         ("evt_gone", "evt_other", "dec_a", "evt_mine"))
    known = {"evt_other": "s2", "dec_a": NO_SESSION, "evt_mine": "s1"}
    assert summary_conflicts(facts, chain(("dec_a", 1, [], "active")),
                             known) == [
        {"kind": "unknown_decision", "decision": "dec_x"},
        {"kind": "missing_ref", "ref": "evt_gone"},
        {"kind": "foreign_session_ref", "ref": "evt_other", "session": "s2"}]


def test_an_episode_summary_may_span_sessions() -> None:
    facts = SummaryFacts("sum_1", "s1", "episode", (), ("evt_other",))
    assert summary_conflicts(facts, chain(), {"evt_other": "s2"}) == []


def test_check_tree_reports_the_file_line_and_field(memory: Memory) -> None:
    e1 = memory.record({"content": {"text": "Deploy with Ansible"}, "session_id": "s1"}).id
    d1 = memory.decide("Deploy with Ansible", [e1]).content["decision_id"]
    stale = memory.record({"kind": "summary", "session_id": "s1", "refs": [e1],
                           "content": {"text": "We deploy with Ansible", "decisions": [d1]}})
    assert check_tree(memory.store, "default") == []
    d2 = memory.decide("Deploy with Helm", [e1], supersedes=[d1]).content["decision_id"]
    [problem] = check_tree(memory.store, "default")
    summary_id = stale.content["summary_id"]
    assert problem.path == f"summaries/session/{summary_id}.md"
    assert problem.field == "decisions" and problem.line is not None
    text = (memory.store / problem.path).read_text().splitlines()[problem.line - 1]
    assert text.startswith("decisions:")
    assert f"superseded by {d2}" in str(problem)
    assert problem.severity == "warning"  # right when written: stale, not wrong
    assert set(load_tree(memory.store, "default").decisions) == {d1, d2}
