"""build_acb: one test per rule of issue 3, on a real store and PostgreSQL."""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from gitmem import context, tokens
from gitmem.config import Config
from gitmem.context import ContextCache, TenantDecisions, resolve_decisions
from gitmem.errors import ValidationError
from gitmem.memory import Memory
from gitmem.packing import within_caps
from gitmem.prompt import ARTIFACT_NOTE, GAP_NOTE, render_text
from gitmem.records import content_hash
from gitmem.rows import CHUNK_COLUMNS, parse_file
from gitmem.sections import chunk_order
from tests.conftest import Cli, git

NOW = "2026-03-01T12:00:00+00:00"


def say(memory: Memory, text: str, *, ts: str = "2026-03-01T10:00:00+00:00", **fields: Any) -> str:
    """Record a message; its event id. Unless given a session, in one of its own: a bundle
    asked for in an event's session shows it as a turn of its recent window (in its place
    in the conversation), not as retrieved evidence."""
    fields.setdefault("session_id", "earlier")
    return memory.record({"content": {"text": text}, "ts": ts, **fields}).id


def section(acb: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The items of one section."""
    return next(s["items"] for s in acb["sections"] if s["name"] == name)


def all_items(acb: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for s in acb["sections"] for item in s["items"]]


def texts(acb: dict[str, Any]) -> str:
    return "\n".join(item["text"] for item in all_items(acb))


def omitted(acb: dict[str, Any], reason: str) -> list[str]:
    return [c for o in acb["omissions"] if o["reason"] == reason for c in o["candidates"]]


def test_sections_come_in_priority_order_with_item_fields(memory: Memory) -> None:
    evt = say(memory, "The release train leaves every Tuesday", session_id="s0")
    acb = memory.build_acb({"session_id": "s1", "now": NOW, "query_text": "release train"})
    assert [s["name"] for s in acb["sections"]] == [
        "identity", "rules", "task_state", "relevant_decisions", "retrieved_evidence",
        "recent_window", "tool_state"]
    item = section(acb, "retrieved_evidence")[0]
    assert item["id"] == evt and evt in item["refs"]
    assert item["source"] == "events/2026-03/2026-03-01.jsonl:1"
    assert item["token_est"] == tokens.count(item["text"])
    assert 0 < item["score"] <= 1
    view = section(acb, "identity")[0]
    assert view["source"] == "views/identity.md#identity" and view["type"] == "view"


def test_a_budget_above_the_policy_total_is_capped_and_says_so(memory: Memory) -> None:
    budget = memory.build_acb({"max_tokens": 10**8, "now": NOW})["provenance"]["budget"]
    total = memory.policies.budgets.total
    assert (budget["max_tokens"], budget["requested_max_tokens"]) == (total, 10**8)
    default = memory.build_acb({"now": NOW})["provenance"]["budget"]
    assert (default["max_tokens"], default["requested_max_tokens"]) == (total, None)


def test_request_fields_are_validated(memory: Memory) -> None:
    with pytest.raises(ValidationError, match="max_tokens"):
        memory.build_acb({"max_tokens": "lots"})
    with pytest.raises(ValidationError, match="channel"):
        memory.build_acb({"channel": "everyone"})
    with pytest.raises(ValidationError, match="unknown field"):
        memory.build_acb({"query": "typo for query_text"})
    with pytest.raises(ValidationError, match="now"):
        memory.build_acb({"now": "yesterday"})


def test_a_field_given_as_null_takes_its_default(memory: Memory) -> None:
    """FORMATS, "Defaults": a field left out or null takes its default (channel
    `private`, which loads private events: the public one would not)."""
    say(memory, "The wire transfer limit is 250000 EUR", channel="private")
    asked = {"query_text": "wire transfer limit", "now": NOW}
    left_out = memory.build_acb(asked)
    null = memory.build_acb({**asked, **dict.fromkeys(
        ("tenant_id", "session_id", "agent_id", "channel", "intent", "max_tokens",
         "handoff_id"))})
    assert null["acb_id"] == left_out["acb_id"] and "250000 EUR" in texts(null)
    assert null["provenance"]["filters"]["channel"] == "private"


@pytest.mark.parametrize("field", ["tenant_id", "session_id", "agent_id", "channel",
                                   "handoff_id"])
@pytest.mark.parametrize("value", ["", "bad tenant!"])
def test_a_name_given_empty_or_invalid_is_refused_never_read_as_the_default(
        memory: Memory, field: str, value: str) -> None:
    """An agent whose tenant variable is unset must not get the default tenant's
    memory: a name left out takes its default, a name given must be one."""
    say(memory, "The wire transfer limit is 250000 EUR")
    with pytest.raises(ValidationError) as caught:
        memory.build_acb({field: value, "query_text": "wire transfer limit", "now": NOW})
    assert caught.value.field == field
    if field == "tenant_id":
        with pytest.raises(ValidationError, match="tenant_id"):
            memory.query_decisions(value)
        with pytest.raises(ValidationError, match="tenant_id"):
            memory.get_artifact("art_" + "0" * 64, value)


def test_public_channel_never_shows_preferences_or_sensitive_events(memory: Memory) -> None:
    public_ok = say(memory, "Public roadmap: the cluster migration ships in May", channel="public")
    high = say(memory, "Alice's salary review and the cluster budget", channel="public",
               sensitivity="high")
    acb = memory.build_acb({"channel": "public", "session_id": "earlier", "now": NOW,
                            "query_text": "cluster"})
    rendered = json.dumps(acb["sections"])
    assert "views/preferences.md" not in rendered and "salary" not in rendered
    assert public_ok in rendered
    assert "views/preferences.md" in omitted(acb, "privacy")
    assert high in omitted(acb, "privacy")
    assert "salary" not in json.dumps(acb["omissions"])  # ids only, never text
    private = memory.build_acb({"channel": "private", "now": NOW, "query_text": "cluster"})
    assert high in json.dumps(private["sections"])


def test_public_channel_does_not_load_private_channel_events(memory: Memory) -> None:
    private_evt = say(memory, "Private chat about the cluster password rotation")
    acb = memory.build_acb({"channel": "public", "session_id": "earlier", "now": NOW,
                            "query_text": "cluster rotation"})
    assert private_evt not in json.dumps(acb["sections"])
    assert private_evt in omitted(acb, "privacy")


def test_a_channel_privacy_yaml_gives_no_rule_fails_closed(memory: Memory,
                                                             cli: Cli) -> None:
    """Its block deleted, `public` loads public events only, nothing high: not every
    channel's, as a missing `load_event_channels` means in a rule that is there; and
    verify warns about it."""
    private_evt = say(memory, "Private note: the merger closes on Friday")
    team_evt = say(memory, "Team note: the merger paperwork is ready", channel="team")
    public_evt = say(memory, "Public note: the merger was announced", channel="public")
    privacy = memory.store / "policies" / "privacy.yaml"
    text = privacy.read_text()
    start = text.index("    public:\n")
    end = text.index("    private:\n")
    privacy.write_text(text[:start] + text[end:])
    memory.sync()
    acb = memory.build_acb({"channel": "public", "now": NOW, "query_text": "merger"})
    shown = json.dumps(acb["sections"])
    assert public_evt in shown and private_evt not in shown and team_evt not in shown
    assert "views/preferences.md" in omitted(acb, "privacy")  # sensitivity: high
    [warning] = [line for line in cli("verify").output.splitlines()
                 if line.startswith("warning:")]
    assert "field 'load.channel_rules': channel 'public' has no rule" in warning


def test_a_pinned_decision_once_superseded_is_never_shown(memory: Memory) -> None:
    """Pinned, it was in every bundle; superseded (by another decision, or retired by
    hand), it is not current, and only its successor shows."""
    evt = say(memory, "We talked about the database engine")
    mongo = memory.decide("Use MongoDB as the primary database", [evt], tags=["pinned"])
    mongo_id = mongo.content["decision_id"]
    request = {"now": NOW, "query_text": "which database"}
    assert mongo_id in json.dumps(memory.build_acb(request)["sections"])
    postgres = memory.decide("Use PostgreSQL as the primary database", [evt],
                             supersedes=[mongo_id]).content["decision_id"]
    for acb in (memory.build_acb(request), memory.build_acb({"now": NOW})):
        shown = [i["id"] for s in acb["sections"] for i in s["items"]]
        assert mongo_id not in shown and postgres in shown
        assert mongo_id in omitted(acb, "superseded")
    redis = memory.decide("Use Redis for the cache", [evt], tags=["pinned"])
    path = memory.store / "decisions" / f"{redis.content['decision_id']}.md"
    path.write_text(path.read_text().replace("---\n", "---\nstatus: superseded\n", 1))
    acb = memory.build_acb({"now": NOW})
    assert redis.content["decision_id"] not in json.dumps(acb["sections"])


def test_superseded_decision_never_appears_and_chain_resolves(memory: Memory) -> None:
    evt = say(memory, "Which database backs the session cache?")
    first = memory.decide("Use Redis for the session cache", [evt])
    second = memory.decide("Use PostgreSQL unlogged tables for the session cache", [evt],
                           supersedes=[first.content["decision_id"]])
    third = memory.decide("Use PostgreSQL with a TTL sweeper for the session cache", [evt],
                          supersedes=[second.content["decision_id"]])
    acb = memory.build_acb({"now": NOW, "query_text": "session cache database"})
    ids = [i["id"] for i in section(acb, "relevant_decisions")]
    assert third.content["decision_id"] in ids
    assert first.content["decision_id"] not in ids
    assert second.content["decision_id"] not in ids
    assert "Redis" not in texts(acb)
    assert {first.content["decision_id"], second.content["decision_id"]} <= set(
        omitted(acb, "superseded"))
    decision = next(i for i in section(acb, "relevant_decisions")
                    if i["id"] == third.content["decision_id"])
    assert decision["refs"] == [evt] and decision["source"].startswith("decisions/")


def test_decision_superseded_by_status_edit_is_inactive(memory: Memory) -> None:
    evt = say(memory, "Decide the log format")
    dec = memory.decide("Logs are plain text", [evt]).content["decision_id"]
    path = memory.store / "decisions" / f"{dec}.md"
    path.write_text(path.read_text().replace("status: active", "status: superseded"))
    acb = memory.build_acb({"now": NOW, "query_text": "log format"})
    assert dec not in [i["id"] for i in section(acb, "relevant_decisions")]


def test_the_decisions_cache_reads_changed_files_only_and_matches_a_fresh_read(
        memory: Memory) -> None:
    """After the first read, a written, edited or deleted decision file is re-read alone
    into the kept rows, and the chains come out as a whole read gives them."""
    evt = say(memory, "Which queue do the workers use?")
    first = memory.decide("Use RabbitMQ for the workers", [evt]).content["decision_id"]
    second = memory.decide("Use NATS for the workers", [evt],
                           supersedes=[first]).content["decision_id"]
    other = memory.decide("Workers retry three times", [evt]).content["decision_id"]
    memory.sync()
    cache = memory.cache

    def same_as_a_fresh_read() -> TenantDecisions:
        got = cache.decisions("default")
        fresh = ContextCache(lambda: memory.db).decisions("default")
        assert list(got.by_id) == list(fresh.by_id)
        assert [r["decision_id"] for r in got.active] == [r["decision_id"] for r in fresh.active]
        assert got.superseded_by == fresh.superseded_by
        assert got.superseded_at == fresh.superseded_at
        return got

    kept = same_as_a_fresh_read().by_id[other]
    third = memory.decide("Use Kafka for the workers", [evt],
                          supersedes=[second]).content["decision_id"]
    memory.sync()
    chain = same_as_a_fresh_read()
    assert chain.by_id[other] is kept  # not read again
    assert chain.latest(first) == third and chain.superseded_by[second] == third
    path = memory.store / "decisions" / f"{third}.md"  # retired by hand: no successor
    path.write_text(path.read_text().replace("status: active", "status: superseded"))
    memory.sync()
    chain = same_as_a_fresh_read()
    assert not chain.latest(first) and chain.by_id[other] is kept
    (memory.store / "decisions" / f"{other}.md").unlink()
    memory.sync()
    assert other not in same_as_a_fresh_read().by_id


def test_chains_end_at_their_newest_active_successor_and_loops_at_none() -> None:
    day = datetime(2026, 2, 1, tzinfo=UTC)
    rows = [{"decision_id": f"dec_{d}", "ts": day.replace(day=n), "status": status,
             "supersedes": [f"dec_{x}" for x in sup]}
            for d, n, sup, status in [
                ("a", 1, "", "active"), ("b", 2, "a", "active"), ("c", 3, "b", "active"),
                ("d", 1, "", "active"), ("e", 2, "d", "active"), ("f", 3, "d", "active"),
                ("g", 1, "hj", "active"), ("h", 2, "g", "active"), ("j", 1, "", "active"),
                ("k", 1, "", "active"), ("l", 2, "k", "superseded"), ("m", 4, "x", "active")]]
    rows.sort(key=lambda r: (r["ts"], r["decision_id"]), reverse=True)
    chains = resolve_decisions(rows)
    assert [r["decision_id"] for r in chains.active] == ["dec_m", "dec_f", "dec_c", "dec_e"]
    assert chains.superseded_by == {
        "dec_a": "dec_c", "dec_b": "dec_c",   # followed to the end
        "dec_d": "dec_f",                     # two successors: the newer one
        "dec_g": "", "dec_h": "", "dec_j": "",  # a loop, and what leads into it
        "dec_k": "", "dec_l": ""}             # ends in a decision retired by hand
    assert chains.superseded_at["dec_k"] == day.replace(day=2) and "dec_l" not in (
        chains.superseded_at)
    assert chains.latest("dec_a") == "dec_c" and chains.latest("dec_x") is None


def test_the_tasks_cache_reads_changed_files_only_and_matches_a_fresh_read(
        memory: Memory) -> None:
    """After the first read, a created, closed, reopened or deleted task file is re-read
    alone into the kept rows, in the order a whole read gives."""
    first = memory.task("Write the runbook", ts="2026-02-01T10:00:00+00:00").content["task_id"]
    second = memory.task("Rotate the keys", status="doing",
                         ts="2026-02-02T10:00:00+00:00").content["task_id"]
    third = memory.task("Move the staging cluster", status="blocked",
                        ts="2026-02-03T10:00:00+00:00").content["task_id"]
    memory.sync()
    cache = memory.cache

    def same_as_a_fresh_read() -> list[str]:
        got = cache.open_tasks("default")
        fresh = ContextCache(lambda: memory.db).open_tasks("default")
        assert [r["task_id"] for r in got.rows] == [r["task_id"] for r in fresh.rows]
        assert got.ids == fresh.ids
        assert {k: [r["task_id"] for r in v] for k, v in got.by_session.items()} == {
            k: [r["task_id"] for r in v] for k, v in fresh.by_session.items()}
        return [r["task_id"] for r in got.rows]

    assert same_as_a_fresh_read() == [second, third, first]  # doing, blocked, open
    kept = next(r for r in cache.open_tasks("default").rows if r["task_id"] == first)
    fourth = memory.task("Write the postmortem", status="doing",
                         ts="2026-02-04T10:00:00+00:00").content["task_id"]
    memory.task("Rotate the keys", task_id=second, status="done",
                ts="2026-02-05T10:00:00+00:00")
    memory.sync()
    assert same_as_a_fresh_read() == [fourth, third, first]
    assert next(r for r in cache.open_tasks("default").rows
                if r["task_id"] == first) is kept  # not read again
    memory.task("Rotate the keys", task_id=second, status="open",
                ts="2026-02-06T10:00:00+00:00")
    (memory.store / "tasks" / f"{third}.md").unlink()
    memory.sync()
    assert same_as_a_fresh_read() == [fourth, second, first]


def test_a_tenants_cached_decisions_and_tasks_survive_another_tenants_writes(
        memory: Memory) -> None:
    """A decision or task of one tenant changed: another tenant's chains and task lists
    stay as they were (not read again: the sync names the tenants of the file's rows,
    and the other tenant's kept rows are not of that file); a file moved between
    tenants leaves one and joins the other."""
    evt = say(memory, "Which queue do the workers use?")
    mine = memory.decide("Use NATS for the workers", [evt]).content["decision_id"]
    task = memory.task("Write the runbook").content["task_id"]
    other = say(memory, "Which cloud?", tenant_id="acme")
    memory.decide("Use one region", [other], tenant_id="acme")
    memory.task("Move the staging cluster", tenant_id="acme")
    memory.sync()
    cache = memory.cache
    chains, tasks = cache.decisions("default"), cache.open_tasks("default")
    assert cache.decisions("acme").by_id and cache.open_tasks("acme").rows
    memory.decide("Use two regions", [other], tenant_id="acme")
    memory.task("Rotate the keys", tenant_id="acme")
    memory.sync()
    assert "default" not in cache._decisions.changed and "default" not in cache._tasks.changed
    assert cache._tasks.changed["acme"] and cache._decisions.changed["acme"]
    assert cache.decisions("default") is chains and cache.open_tasks("default") is tasks
    assert len(cache.decisions("acme").active) == 2 and len(cache.open_tasks("acme").rows) == 2
    for kind, name in (("decisions", mine), ("tasks", task)):
        path = memory.store / kind / f"{name}.md"
        path.write_text(path.read_text().replace("tenant_id: default", "tenant_id: acme"))
    memory.sync()
    assert mine not in cache.decisions("default").by_id and mine in cache.decisions("acme").by_id
    assert not cache.open_tasks("default").rows
    assert task in [r["task_id"] for r in cache.open_tasks("acme").rows]


def test_a_tenants_bundle_outlives_another_tenants_task_and_decision_writes(
        memory: Memory) -> None:
    """A fast-path bundle is packed again only when its own tenant's open tasks or
    decisions changed: another tenant's writes leave it as it was; its own, or a task
    file moved to it by hand, show in its next answer."""
    say(memory, "hello", session_id="s1")
    say(memory, "hello from acme", session_id="s9", tenant_id="acme")
    request = {"session_id": "s1", "now": NOW}
    key = ("default", "s1")

    def packed() -> Any:
        return next(b for k, (b, _) in memory.cache._bundles.items() if k[:2] == key)

    first = memory.build_acb(request)
    before = packed()
    evt = say(memory, "Which cloud?", tenant_id="acme", session_id="s9")
    memory.decide("Use one region", [evt], tenant_id="acme")
    theirs = memory.task("Move the staging cluster", tenant_id="acme").content["task_id"]
    assert memory.build_acb(request)["sections"] == first["sections"]
    assert packed() is before
    mine = memory.task("Write the runbook").content["task_id"]
    assert [i["id"] for i in section(memory.build_acb(request), "task_state")] == [mine]
    assert packed() is not before
    path = memory.store / "tasks" / f"{theirs}.md"
    path.write_text(path.read_text().replace("tenant_id: acme", "tenant_id: default"))
    assert {i["id"] for i in section(memory.build_acb(request), "task_state")} == {mine, theirs}
    assert not section(memory.build_acb({"session_id": "s9", "tenant_id": "acme",
                                         "now": NOW}), "task_state")


def test_a_bundle_with_a_summary_is_packed_again_after_any_task_write(memory: Memory) -> None:
    """A packed summary's conflicts cite records of any status: a task written done
    (not among the open tasks) still changes them."""
    from gitmem import ids
    from gitmem.documents import Summary, Task, summary_to_text, task_to_text
    done = ids.new_id("tsk", datetime(2026, 3, 1, 9, tzinfo=UTC))
    summary_id = ids.new_id("sum", datetime(2026, 3, 1, 10, tzinfo=UTC))
    # written by hand: the write path refuses a ref to a record that does not exist
    (memory.store / "summaries" / "session").mkdir(parents=True, exist_ok=True)
    (memory.store / "summaries" / "session" / f"{summary_id}.md").write_text(summary_to_text(
        Summary(id=summary_id, ts="2026-03-01T10:00:00+00:00", tenant_id="default",
                scope="session", refs=(done,), text="The rollout checklist is finished",
                session_id="s1", tags=("pinned",))))
    request = {"session_id": "s1", "now": NOW}

    def conflicts() -> list[dict[str, Any]]:
        [item] = [i for i in all_items(memory.build_acb(request)) if i["id"] == summary_id]
        return list(item.get("conflicts", []))
    assert conflicts() == [{"kind": "missing_ref", "ref": done}]
    # by hand: the write path creates a task under a minted id only
    (memory.store / "tasks").mkdir(exist_ok=True)
    (memory.store / "tasks" / f"{done}.md").write_text(task_to_text(Task(
        id=done, ts="2026-03-01T09:00:00+00:00", tenant_id="default", status="done",
        title="Finish the rollout checklist")))
    assert conflicts() == []


def test_a_retrieved_summary_carries_its_conflicts(memory: Memory) -> None:
    """A summary that retrieval finds (not pinned) is checked as a pinned one is: its
    conflicts are those of the index, and change with it."""
    from gitmem import ids
    from gitmem.documents import Summary, Task, summary_to_text, task_to_text
    done = ids.new_id("tsk", datetime(2026, 3, 1, 9, tzinfo=UTC))
    summary_id = ids.new_id("sum", datetime(2026, 3, 1, 10, tzinfo=UTC))
    evt = say(memory, "The zeppelin hangar needs a new roof", session_id="s1")
    (memory.store / "summaries" / "session").mkdir(parents=True, exist_ok=True)
    (memory.store / "summaries" / "session" / f"{summary_id}.md").write_text(summary_to_text(
        Summary(id=summary_id, ts="2026-03-01T10:00:00+00:00", tenant_id="default",
                scope="session", refs=(evt, done), text="The zeppelin hangar roof is done",
                session_id="s1")))
    request = {"session_id": "s2", "now": NOW, "query_text": "zeppelin hangar roof"}

    def conflicts() -> tuple[list[dict[str, Any]], list[str]]:
        acb = memory.build_acb(request)
        [item] = [i for i in section(acb, "retrieved_evidence") if i["id"] == summary_id]
        return list(item.get("conflicts", [])), omitted(acb, "conflict")
    assert conflicts() == ([{"kind": "missing_ref", "ref": done}], [summary_id])
    # by hand: the write path creates a task under a minted id only
    (memory.store / "tasks").mkdir(exist_ok=True)
    (memory.store / "tasks" / f"{done}.md").write_text(task_to_text(Task(
        id=done, ts="2026-03-01T09:00:00+00:00", tenant_id="default", status="done",
        title="Replace the hangar roof")))
    assert conflicts() == ([], [])


def test_a_fill_is_kept_unless_its_own_session_changed_meanwhile(memory: Memory) -> None:
    """New events of another session while a bundle or a window is filled: it is kept;
    of its own session (or a pinned one of its tenant, for a bundle): it is not."""
    cache = ContextCache(lambda: memory.db)
    key = ("default", "s1", "agent", "private", 0)

    def build(*forget: tuple[str, str], pinned: bool = False) -> Any:
        def make() -> object:
            cache.forget_sessions(set(forget), pinned=pinned)
            return object()
        return make

    kept = cache.bundle(key, build(("default", "s2"), ("acme", "s1")))
    assert cache.bundle(key, build()) is kept
    cache.invalidate(["tasks/tsk_x.md"])
    first = cache.bundle(key, build(("default", "s1")))
    assert cache.bundle(key, build()) is not first
    cache.invalidate(["tasks/tsk_x.md"])
    first = cache.bundle(key, build(("default", "s2"), pinned=True))
    assert cache.bundle(key, build()) is not first
    window = cache.session("recent", "default", "s1", 10)
    assert cache.session("recent", "default", "s1", 10) is window
    cache.forget_sessions({("default", "s1")}, pinned=False)
    assert cache.session("recent", "default", "s1", 10) is not window


def test_decisions_are_ranked_by_relevance(memory: Memory) -> None:
    evt = say(memory, "context")
    memory.decide("Deploys happen on Tuesdays from the blue cluster", [evt],
                  ts="2026-02-01T00:00:00+00:00")
    for n in range(5):
        memory.decide(f"Unrelated policy number {n} about office plants", [evt],
                      ts=f"2026-02-2{n}T00:00:00+00:00")
    acb = memory.build_acb({"now": NOW, "query_text": "when do deploys happen"})
    first = section(acb, "relevant_decisions")[0]
    assert "Tuesdays" in first["text"] and first["score"] > 0


@pytest.mark.parametrize("budget", [65000, 3000, 800])
def test_caps_hold(memory: Memory, budget: int) -> None:
    filler = " ".join(["the deploy pipeline and the cluster budget"] * 40)
    memory.record_many([{"content": {"text": f"{n} {filler}"}, "session_id": "s1",
                         "ts": f"2026-02-{1 + n % 28:02d}T10:00:00+00:00"} for n in range(300)])
    acb = memory.build_acb({"session_id": "s1", "now": NOW, "max_tokens": budget,
                            "query_text": "deploy pipeline cluster"})
    budgets = memory.policies.budgets
    scale = budget / budgets.total
    available = budget - int(budgets.reserve * scale)
    assert acb["token_used_est"] <= available
    assert acb["budget_tokens"] == budget
    for s in acb["sections"]:
        assert within_caps(s, budgets.sections[s["name"]].max_tokens)
    assert tokens.count(render_text(acb)) <= available
    assert omitted(acb, "budget")


@pytest.mark.parametrize("budget", [300, 1000, 1500])
def test_pinned_views_are_packed_at_small_budgets(memory: Memory, budget: int) -> None:
    """The identity section's cap scaled to a small budget (1,200 x 1,500 / 65,000 = 27
    tokens) is smaller than the pinned identity view: pinned items fill up to the
    policy's own cap while the whole budget has room."""
    say(memory, "the deploy pipeline runs on the blue cluster", session_id="s1")
    views = memory.store / "views"
    (views / "identity.md").write_text(
        "---\nsection: identity\npinned: true\n---\n# Identity\n\n"
        "You are the release assistant of the platform team. You answer with the "
        "commands to run, the cluster they run on and the person to ask.\n")
    (views / "style.md").write_text(
        "---\nsection: identity\n---\n# Style\n\nShort answers.\n")
    memory.sync()
    acb = memory.build_acb({"session_id": "s1", "now": NOW, "max_tokens": budget,
                            "query_text": "deploy pipeline"})
    identity = section(acb, "identity")
    assert [i["id"] for i in identity if i.get("pinned")] == ["views/identity.md#identity"]
    assert "views/identity.md#identity" not in omitted(acb, "budget")
    budgets = memory.policies.budgets
    scale = budget / budgets.total
    assert identity[0]["token_est"] > int(budgets.sections["identity"].max_tokens * scale)
    for s in acb["sections"]:
        assert within_caps(s, budgets.sections[s["name"]].max_tokens)
    assert acb["token_used_est"] <= budget - int(budgets.reserve * scale)


def test_five_identical_events_appear_once(memory: Memory) -> None:
    ids = [say(memory, "The staging database is read-only until Friday", session_id="s1",
               ts=f"2026-03-01T0{n}:00:00+00:00") for n in range(5)]
    acb = memory.build_acb({"session_id": "s2", "now": NOW, "query_text": "staging database"})
    shown = [i for i in all_items(acb) if "read-only until Friday" in i["text"]]
    assert len(shown) == 1
    assert set(ids) - {shown[0]["id"]} == set(omitted(acb, "duplicate"))


def test_a_line_stating_another_events_hash_is_not_its_duplicate(memory: Memory) -> None:
    """Duplicates are the same content: a line appended by hand (or by a merge without
    the hooks) whose `hash` is another event's is not hidden as that event's copy, with
    or without a reindex; two lines of the same content still appear once."""
    first = say(memory, "the llama eats hay", session_id="s1")
    day = memory.store / "events" / "2026-03" / "2026-03-01.jsonl"
    stated = json.loads(day.read_text().splitlines()[0])["hash"]
    forged = {**json.loads(day.read_text().splitlines()[0]),
              "id": "evt_01JNAZQ0000000000000000001", "ts": "2026-03-01T11:00:00+00:00",
              "content": {"text": "the llama is allergic to penicillin"}}
    assert forged["hash"] == stated != content_hash("message", forged["content"])
    copy = {**forged, "id": "evt_01JNAZQ0000000000000000002", "ts": "2026-03-01T12:00:00+00:00",
            "content": {"text": "the llama eats hay"}, "hash": stated}
    with day.open("a") as handle:
        handle.write(json.dumps(forged) + "\n" + json.dumps(copy) + "\n")
    for _ in range(2):
        acb = memory.build_acb({"session_id": "s3", "now": NOW, "query_text": "llama"})
        shown = [i["id"] for i in section(acb, "retrieved_evidence")]
        assert forged["id"] in shown and "allergic to penicillin" in texts(acb)
        assert len({first, copy["id"]} & set(shown)) == 1
        assert omitted(acb, "duplicate") == sorted({first, copy["id"]} - set(shown))
        memory.reindex()


def alice_answers(memory: Memory) -> list[str]:
    """A session where alice answers "no", "yes", "no" to three questions: its ids."""
    alice = {"type": "human", "id": "alice"}
    turns = [("Should I delete the production database?", None), ("no", alice),
             ("Should I restart the workers?", None), ("yes", alice),
             ("Should I drop the legacy_orders table?", None), ("no", alice)]
    return [say(memory, text, session_id="c1", ts=f"2026-03-01T10:0{n}:00+00:00",
                **({"actor": actor} if actor else {})) for n, (text, actor) in enumerate(turns)]


@pytest.mark.parametrize("query", ["", "what did alice approve?"])
def test_the_recent_window_keeps_every_turn_in_order(memory: Memory, query: str) -> None:
    """Two answers "no" are two events: the second is not a duplicate of the first (else
    the remaining "yes" would read as approving the delete), and a turn retrieval found
    is shown once, in its place in the transcript."""
    ids = alice_answers(memory)
    acb = memory.build_acb({"session_id": "c1", "now": NOW, "query_text": query})
    assert [i["id"] for i in section(acb, "recent_window")] == ids
    assert [i["text"] for i in section(acb, "recent_window")][1::2] == [
        "alice: no", "alice: yes", "alice: no"]
    assert not section(acb, "retrieved_evidence")
    assert not omitted(acb, "duplicate") and not omitted(acb, "budget")
    shown = [i["id"] for i in all_items(acb)]
    assert len(shown) == len(set(shown))
    if query:  # the turns the question matched (alice's), packed as evidence first
        scored = {i["id"] for i in section(acb, "recent_window") if "score" in i}
        assert ids[3] in scored and scored <= set(ids[1::2])
        assert acb["provenance"]["retrieved"] == 3


@pytest.mark.parametrize("query", ["", "turn"])
def test_turns_at_the_same_instant_read_in_the_order_they_were_written(
        memory: Memory, query: str) -> None:
    """Ids minted by two processes have no order: turns recorded at one ts (a script's,
    an import's) came out shuffled, and a window cut kept a random few of them."""
    from tests.daemons import append, event_line

    day = memory.store / "events" / "2026-03" / "2026-03-01.jsonl"
    for n in range(1, 7):  # each id smaller than the one before
        append(day, event_line("eq", f"turn {n}", number=100 - n)[1])
    memory.sync()
    acb = memory.build_acb({"session_id": "eq", "now": NOW, "query_text": query})
    assert [i["text"] for i in section(acb, "recent_window")] == [
        f"alice: turn {n}" for n in range(1, 7)]
    budgets = memory.store / "policies" / "budgets.yaml"
    budgets.write_text(budgets.read_text().replace("recent_window_events: 40",
                                                   "recent_window_events: 3"))
    acb = memory.build_acb({"session_id": "eq", "now": NOW})
    assert [i["text"] for i in section(acb, "recent_window")] == [
        f"alice: turn {n}" for n in (4, 5, 6)]


def test_every_word_of_a_long_one_line_message_finds_it(memory: Memory) -> None:
    """Chunks of a line with no line breaks were cut inside words, which then matched
    no query."""
    words = [f"{chr(97 + n % 26)}{'qzxv' * 2}{n:04d}word" for n in range(1500)]
    event = say(memory, " ".join(words), session_id="long")
    memory.sync()
    rows = memory.db.fetchall("event_chunks", {"tenant": "default", "ids": [event]})
    chunks = [r["text"] for r in sorted(rows, key=lambda r: chunk_order(r["chunk_id"]))]
    edges = {w for text in chunks[1:] for w in (text.split(" ")[0],)} | {
        text.split(" ")[-1] for text in chunks[:-1]}
    assert len(chunks) > 5 and edges <= set(words)  # every chunk begins and ends a word
    for word in sorted(edges):
        acb = memory.build_acb({"session_id": "other", "now": NOW, "query_text": word})
        assert {i["source_id"] for i in section(acb, "retrieved_evidence")} == {event}, word


@pytest.mark.parametrize(("written", "asked"), [
    ("\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd \u05e2\u05d5\u05dc\u05dd",  # with points
     "\u05e9\u05dc\u05d5\u05dd"),
    ("\u0643\u064e\u062a\u064e\u0628\u064e \u0627\u0644\u0631\u0633\u0627\u0644\u0629",
     "\u0643\u062a\u0628"),  # with harakat
    ("the soft\u00adhyphen rule", "softhyphen"),
])
def test_marks_most_text_leaves_out_do_not_keep_a_word_from_being_found(
        memory: Memory, written: str, asked: str) -> None:
    event = say(memory, written, session_id="marks")
    acb = memory.build_acb({"session_id": "other", "now": NOW, "query_text": asked})
    assert [i["source_id"] for i in section(acb, "retrieved_evidence")] == [event]


def test_a_retrieved_copy_of_a_turn_gives_way_to_the_turn(memory: Memory) -> None:
    elsewhere = say(memory, "The staging database is read-only until Friday", session_id="s9",
                    ts="2026-03-01T11:00:00+00:00")
    turn = say(memory, "The staging database is read-only until Friday", session_id="s1")
    acb = memory.build_acb({"session_id": "s1", "now": NOW, "query_text": "staging database"})
    assert [i["id"] for i in section(acb, "recent_window")] == [turn]
    assert not section(acb, "retrieved_evidence")
    assert omitted(acb, "duplicate") == [elsewhere]
    assert acb["token_used_est"] == sum(s["token_est"] for s in acb["sections"])


def test_a_turn_the_recent_window_has_no_room_for_stays_evidence(memory: Memory) -> None:
    budgets = memory.store / "policies" / "budgets.yaml"
    budgets.write_text(budgets.read_text().replace(
        "recent_window:      {max_tokens: 12000", "recent_window:      {max_tokens: 40"))
    long_turn = say(memory, "The staging database is read-only until Friday because "
                    + "the migration of the invoices table runs all week " * 3,
                    session_id="s1", ts="2026-03-01T09:00:00+00:00")
    latest = say(memory, "ok", session_id="s1")
    acb = memory.build_acb({"session_id": "s1", "now": NOW, "query_text": "staging database"})
    assert [i["id"] for i in section(acb, "retrieved_evidence")] == [long_turn]
    assert [i["id"] for i in section(acb, "recent_window")] == [latest]
    assert long_turn not in omitted(acb, "budget")  # shown, as evidence
    assert all(s["token_est"] <= memory.policies.budgets.sections[s["name"]].max_tokens
               for s in acb["sections"])


def test_huge_tool_output_yields_only_its_excerpt(memory: Memory) -> None:
    big = "".join(f"line {n}: build log output with deploy details\n" for n in range(25000))
    assert len(big) > 1_000_000
    evt = memory.record({"kind": "tool_result", "session_id": "s1", "ts": NOW,
                         "content": {"tool": "shell", "path": "build.log", "output": big}})
    acb = memory.build_acb({"session_id": "s1", "now": NOW, "query_text": "build log deploy"})
    rendered = texts(acb)
    limit = memory.policies.budgets.max_excerpt_bytes
    assert "line 0:" in rendered and "line 12500:" not in rendered  # the middle is cut
    assert "line 24999:" in rendered  # the end, where an error would be, is kept
    assert len(rendered.encode()) < limit + 20000
    entry = next(o for o in acb["omissions"] if o["reason"] == "truncated_tool_output")
    assert entry["candidates"] == [evt.id]
    assert entry["artifact_id"] == evt.content["artifact_id"]
    assert memory.get_artifact(entry["artifact_id"]) == big.encode()


def test_retrieved_tool_output_names_its_artifact(memory: Memory) -> None:
    big = "".join(f"line {n}: migration log of the ledger shards\n" for n in range(2000))
    evt = memory.record({"kind": "tool_result", "session_id": "s1", "ts": NOW,
                         "content": {"tool": "shell", "path": "migrate.log", "output": big}})
    acb = memory.build_acb({"session_id": "s2", "now": NOW,
                            "query_text": "ledger shards migration log"})
    evidence = {i["id"].partition("#")[0] for i in section(acb, "retrieved_evidence")}
    assert evt.id in evidence  # found by retrieval, not as this session's tool state
    entry = next(o for o in acb["omissions"] if o["reason"] == "truncated_tool_output")
    assert entry["candidates"] == [evt.id]
    assert entry["artifact_id"] == evt.content["artifact_id"]


def test_pinned_view_appears_for_unrelated_query(memory: Memory) -> None:
    (memory.store / "views" / "oncall.md").write_text(
        "---\nsection: rules\npinned: true\n---\n# On call\n\nPage Dana for database outages.\n")
    acb = memory.build_acb({"now": NOW, "query_text": "what colour is the logo"})
    assert any("Page Dana" in i["text"] for i in section(acb, "rules"))


def test_pinned_event_is_included_regardless_of_score(memory: Memory) -> None:
    pinned = say(memory, "Never deploy during the quarterly audit", tags=["pinned"],
                 ts="2026-01-02T00:00:00+00:00")
    acb = memory.build_acb({"now": NOW, "query_text": "logo colour"})
    item = next(i for i in section(acb, "retrieved_evidence") if i["id"] == pinned)
    assert item["pinned"] is True


def test_a_long_pinned_event_is_kept_from_its_start_in_reading_order(memory: Memory) -> None:
    """Its chunks were taken in the order of their ids as strings (#1, #10, #11, ...,
    #2): under a budget the agent got paragraph 1, then 10 on, and nothing between."""
    text = "\n\n".join(f"PARA{n:02d} " + " ".join(f"word{n * 1000 + j}" for j in range(300))
                       for n in range(1, 16))
    pinned = say(memory, text, tags=["pinned"], ts="2026-01-02T00:00:00+00:00")
    full = [i["id"] for i in section(memory.build_acb({"now": NOW, "session_id": "s2"}),
                                     "retrieved_evidence")]
    parts = [int(i.partition("#")[2]) for i in full if i.startswith(pinned)]
    assert len(parts) > 10 and parts == list(range(1, len(parts) + 1))
    small = memory.build_acb({"now": NOW, "session_id": "s2", "max_tokens": 5000})
    kept = [int(i["id"].partition("#")[2]) for i in section(small, "retrieved_evidence")
            if i["id"].startswith(pinned)]
    assert kept and kept == list(range(1, len(kept) + 1))  # a start, with no holes


def test_room_the_recent_window_takes_from_the_evidence_goes_to_what_it_left_out(
        memory: Memory) -> None:
    """At the whole budget (no second pass), the window took this session's turns out of
    the evidence after it had filled, and the ~10,000 tokens they left stayed empty
    while 36 pinned chunks were left out for budget. (The window takes a turn whole: this
    session's is one of a few chunks, another session's fills the evidence.)"""
    def text(paragraphs: range) -> str:
        return "\n\n".join(f"PARA{n:02d} " + " ".join(f"word{n * 1000 + j}" for j in range(300))
                           for n in paragraphs)

    pinned = say(memory, text(range(1, 5)), tags=["pinned"], session_id="s1",
                 ts="2026-03-01T09:00:00+00:00")
    say(memory, text(range(5, 55)), tags=["pinned"], session_id="s0")
    acb = memory.build_acb({"now": NOW, "session_id": "s1"})
    evidence = next(s for s in acb["sections"] if s["name"] == "retrieved_evidence")
    cap = memory.policies.budgets.sections["retrieved_evidence"].max_tokens
    window = [i["id"] for i in section(acb, "recent_window")]
    assert len(window) > 1 and all(i.startswith(pinned) for i in window)  # taken out of it
    assert not [i for i in evidence["items"] if i["id"].startswith(pinned)]
    left_out = [c for o in acb["omissions"] if o["reason"] == "budget" for c in o["candidates"]]
    chunk = max(i["token_est"] for i in evidence["items"])
    assert left_out and cap - chunk - 20 < evidence["token_est"] <= cap


def test_paraphrased_question_finds_the_fact(memory: Memory) -> None:
    fact = say(memory, "Our deploy pipeline runs on the blue cluster in Frankfurt",
               ts="2026-02-01T09:00:00+00:00")
    for n in range(40):
        say(memory, f"Standup note {n}: reviewed tickets, fixed flaky tests, lunch at noon",
            ts=f"2026-02-{1 + n % 27:02d}T11:00:00+00:00")
    acb = memory.build_acb({"now": NOW, "query_text":
                            "Which city hosts the cluster our deployments run on?"})
    evidence = section(acb, "retrieved_evidence")
    assert evidence and evidence[0]["id"] == fact


def test_or_semantics_and_rare_terms_outweigh_common_ones(memory: Memory) -> None:
    rare = say(memory, "The kafka consumer lag alarm fired", ts="2026-01-10T00:00:00+00:00")
    for n in range(60):
        say(memory, f"The alarm for service {n} is fine", ts="2026-02-28T00:00:00+00:00")
    acb = memory.build_acb({"now": NOW, "query_text": "why did the kafka alarm fire?"})
    assert section(acb, "retrieved_evidence")[0]["id"] == rare
    terms = {t["term"]: t["idf"] for t in acb["provenance"]["query_terms"]}
    assert terms["kafka"] > terms["alarm"]


def test_quoted_phrase_is_kept(memory: Memory) -> None:
    exact = say(memory, "We moved the blue cluster to the new region")
    say(memory, "The cluster is blue-green deployed; blue is idle", ts=NOW)
    acb = memory.build_acb({"now": NOW, "query_text": '"blue cluster"'})
    assert acb["provenance"]["query_terms"][0]["phrase"] is True
    assert section(acb, "retrieved_evidence")[0]["id"] == exact


def test_a_quoted_phrase_keeps_the_place_of_its_stopwords(memory: Memory) -> None:
    """PostgreSQL gives a stopword a position of its own: 'near the office' has 'offic'
    two places after 'near', as the query's phrase must."""
    exact = say(memory, "We met at the cafe near the office", ts="2026-02-01T10:00:00+00:00")
    say(memory, "The office is near the river, not the cafe", ts=NOW)
    acb = memory.build_acb({"now": NOW, "query_text": '"near the office"'})
    phrase = acb["provenance"]["query_terms"][0]
    assert phrase["phrase"] is True and phrase["query"].endswith("'near' <2> 'offic'")
    assert section(acb, "retrieved_evidence")[0]["id"] == exact


def test_provenance_names_the_terms_retrieval_left_out_and_why(memory: Memory) -> None:
    words = [f"w{n}x" for n in range(14)]
    say(memory, " ".join(words))
    say(memory, " ".join(words[:12]))  # the last two are the rarest, then the first 10
    acb = memory.build_acb({"now": NOW, "query_text": " ".join([*words, "zzyzx"])})
    prov = acb["provenance"]
    assert len(prov["query_terms"]) == 12
    assert prov["terms_not_searched"] == [
        {"term": "w10x", "why": "past the 12 rarest terms"},
        {"term": "w11x", "why": "past the 12 rarest terms"},
        {"term": "zzyzx", "why": "no chunk of the tenant holds it"}]
    nothing = memory.build_acb({"now": NOW, "query_text": "zzyzx"})["provenance"]
    assert nothing["query_terms"] == [] and nothing["retrieved"] == 0
    assert nothing["terms_not_searched"] == [{"term": "zzyzx",
                                              "why": "no chunk of the tenant holds it"}]


def test_actor_names_and_tags_are_searchable(memory: Memory) -> None:
    by_alice = say(memory, "I will take the migration", actor={"type": "human", "id": "alice"})
    tagged = say(memory, "Rotate the certificates", tags=["project:zephyr"])
    acb = memory.build_acb({"now": NOW, "query_text": "what did alice say"})
    assert section(acb, "retrieved_evidence")[0]["id"] == by_alice
    acb = memory.build_acb({"now": NOW, "query_text": "zephyr"})
    assert section(acb, "retrieved_evidence")[0]["id"] == tagged


@pytest.mark.parametrize(("stored", "asked"), [
    ("Lunch meeting at the café near the station", "cafe"),
    ("Lunch meeting at the cafe near the station", "café"),
    ("Les décisions du comité sont publiées le lundi", "decisions"),
    ("Die Straße nach Łódź ist gesperrt", "strasse lodz"),
    ("\uff26\uff35\uff2c\uff2c\uff37\uff29\uff24\uff34\uff28 letters in a note",
     "fullwidth"),  # full-width Latin
])
def test_a_word_is_found_with_or_without_its_accents(memory: Memory, stored: str,
                                                      asked: str) -> None:
    fact = say(memory, stored)
    say(memory, "An unrelated note about the weather")
    acb = memory.build_acb({"now": NOW, "query_text": asked})
    assert [i["id"] for i in section(acb, "retrieved_evidence")] == [fact]
    assert stored in section(acb, "retrieved_evidence")[0]["text"]  # shown as written


@pytest.mark.parametrize(("stored", "asked"), [
    ("我们决定使用PostgreSQL作为索引", "决定"),
    ("我们决定使用PostgreSQL作为索引", "使用 postgresql"),
    ("データベースのバックアップは毎晩です", "バックアップ"),
    ("팀은 데이터베이스를 매일 백업합니다", "데이터베이스"),
    ("今日は雨です", "雨"),                 # a word of one character
    ("我们决定用猫", "猫"),
])
def test_a_word_inside_unspaced_text_is_found(memory: Memory, stored: str, asked: str) -> None:
    fact = say(memory, stored)
    say(memory, "我们明天开会。会議は明日です。")
    acb = memory.build_acb({"now": NOW, "query_text": asked})
    assert [i["id"] for i in section(acb, "retrieved_evidence")] == [fact]
    assert section(acb, "retrieved_evidence")[0]["text"] == f"user: {stored}"


def test_the_end_of_a_long_tool_output_is_kept_and_found(memory: Memory) -> None:
    """A test run's failure is its last line: the excerpt keeps the output's head and
    its tail, and says which lines it cut and which artifact holds them."""
    output = "".join(f"test_case_{i} PASSED\n" for i in range(1, 601))
    output += "test_refund_rounding FAILED: AssertionError: expected 1999 got 2000\n"
    evt = memory.record({"kind": "tool_result", "ts": "2026-03-01T10:00:05+00:00",
                         "content": {"tool": "pytest", "output": output}}).id
    acb = memory.build_acb({"now": NOW, "query_text": "which test failed? refund rounding"})
    found = [i for i in section(acb, "retrieved_evidence") if i["id"].startswith(evt)]
    assert found and "test_refund_rounding FAILED" in found[0]["text"]
    shown = texts(acb)
    assert "lines cut (lines" in shown and "of 601); the whole output is artifact art_" in shown


COMPOUNDS = ("Prod DB is db-prod-7.internal; on-call is oncall@acme.example.com, dashboard "
             "https://grafana.acme.example.com/d/latency-p99")
TRACE = ("crash was psycopg.errors.UniqueViolation in billing/invoice_calc.py, raised by "
         "RateLimiterMiddleware")


@pytest.mark.parametrize(("stored", "asked"), [
    (COMPOUNDS, "oncall"), (COMPOUNDS, "acme.example.com"), (COMPOUNDS, "grafana"),
    (COMPOUNDS, "latency-p99"), (COMPOUNDS, "db-prod-7.internal"),
    (TRACE, "UniqueViolation"), (TRACE, "psycopg"), (TRACE, "invoice_calc.py"),
    (TRACE, "invoice_calc"), (TRACE, "rate limiter middleware"),
    (TRACE, "errors.UniqueViolation"),
])
def test_a_part_of_a_compound_word_is_found(memory: Memory, stored: str, asked: str) -> None:
    """Hosts, addresses, URLs, paths, dotted and CamelCase names are single tokens
    to the parser; their parts are found too, and the compound inside a longer one."""
    fact = say(memory, stored)
    say(memory, "An unrelated note: the weather is fine, ok.computer said so")
    acb = memory.build_acb({"now": NOW, "query_text": asked})
    assert [i["id"] for i in section(acb, "retrieved_evidence")] == [fact]
    assert section(acb, "retrieved_evidence")[0]["text"] == f"user: {stored}"  # as written


@pytest.mark.parametrize(("stored", "asked"), [
    ("Bug JIRA-4521: the invoice total is off by a cent", "what is ticket 4521 about"),
    ("Bug JIRA-4521: the invoice total is off by a cent", "JIRA-4521"),
    ("Ticket 8812 tracks the login timeout", "OPS-8812"),
])
def test_a_ticket_number_is_found_with_or_without_its_project(memory: Memory, stored: str,
                                                              asked: str) -> None:
    """PostgreSQL reads `JIRA-4521` as `jira` and `-4521`: asked `ticket 4521`, only
    another ticket's text matched (on `ticket`), and `OPS-8812` did not find 8812."""
    fact = say(memory, stored)
    other = say(memory, "Ticket 7730 tracks the signup form")
    for n, what in enumerate(["the export", "a typo", "the cache", "dark mode"]):
        say(memory, f"Ticket {6100 + n} tracks {what}")  # `ticket` is a common word
    acb = memory.build_acb({"now": NOW, "query_text": asked})
    found = [i["id"] for i in section(acb, "retrieved_evidence")]
    assert found[0] == fact and (other not in found or found.index(other) > 0)


@pytest.mark.parametrize(("stored", "asked"), [
    ("Release v2.3.1 fixes the login timeout", "what changed in 2.3.1"),
    ("Release 2.3.1 fixes the login timeout", "what changed in v2.3.1"),
    ("Release v2.3.1 fixes the login timeout", "V2.3.1"),
])
def test_a_version_is_found_with_or_without_its_v(memory: Memory, stored: str,
                                                  asked: str) -> None:
    """PostgreSQL reads `v2.3.1` as one token and `2.3.1` as another: neither found the
    other, and `changed` matched another release's note instead."""
    fact = say(memory, stored)
    other = say(memory, "Release v2.3.2 changed the export format")
    acb = memory.build_acb({"now": NOW, "query_text": asked})
    found = [i["id"] for i in section(acb, "retrieved_evidence")]
    assert found[0] == fact and (other not in found or found.index(other) > 0)


def test_a_compound_in_a_query_is_asked_as_the_phrase_of_its_parts(memory: Memory) -> None:
    """`invoice_calc.py` finds the path that holds it, not a text with its words apart."""
    fact = say(memory, "the bug is in billing/invoice_calc.py line 40")
    say(memory, "the invoice is late; calc the py total")  # the parts, not together
    acb = memory.build_acb({"now": NOW, "query_text": "invoice_calc.py"})
    assert [i["id"] for i in section(acb, "retrieved_evidence")] == [fact]
    terms = acb["provenance"]["query_terms"]
    assert {"term": "invoice_calc.py", "phrase": True} in [
        {k: t[k] for k in ("term", "phrase")} for t in terms]


def test_a_quoted_phrase_in_unspaced_text_is_found_and_shown_as_asked(memory: Memory) -> None:
    fact = say(memory, "我们决定使用PostgreSQL作为索引")
    say(memory, "使用说明, 先决条件")  # the same characters, not the phrase
    acb = memory.build_acb({"now": NOW, "query_text": '"决定使用"'})
    assert section(acb, "retrieved_evidence")[0]["id"] == fact
    phrase = acb["provenance"]["query_terms"][0]
    assert phrase["phrase"] is True and phrase["term"] == "决定使用"


def test_a_word_too_long_for_postgresql_is_indexed_in_pieces_and_found(memory: Memory) -> None:
    """PostgreSQL refuses a lexeme over 2,047 bytes; with the tenant's tag added, a word
    of 2,044 letters (few tokens: one chunk) failed the whole file's indexing."""
    blob = "a" * 2044
    long_one = say(memory, f"the key is {blob} end")
    other = say(memory, "a plain note about the weather")
    memory.sync()
    assert memory.status()["stale"] == []
    acb = memory.build_acb({"now": NOW, "query_text": "weather"})
    assert section(acb, "retrieved_evidence")[0]["id"] == other
    acb = memory.build_acb({"now": NOW, "query_text": blob})
    assert [i["id"] for i in section(acb, "retrieved_evidence")] == [long_one]
    assert memory.query_decisions(query_text="b" * 2100) == []  # no "word is too long"


def test_folding_does_not_join_words_that_differ(memory: Memory) -> None:
    gakkou = say(memory, "がっこう")   # school: the voicing mark makes another word
    kakkou = say(memory, "かっこう")   # cuckoo
    for asked, found in (("がっ", [gakkou]), ("かっ", [kakkou])):
        acb = memory.build_acb({"now": NOW, "query_text": asked})
        assert [i["id"] for i in section(acb, "retrieved_evidence")] == found
    acb = memory.build_acb({"now": NOW, "query_text": "がっこう"})  # pairs in common, ranked
    assert [i["id"] for i in section(acb, "retrieved_evidence")] == [gakkou, kakkou]


def test_retrieval_is_bounded(memory: Memory) -> None:
    memory.record_many([{"content": {"text": f"deploy note {n} about the pipeline"},
                         "ts": f"2026-02-{1 + n % 28:02d}T{n % 24:02d}:00:00+00:00"}
                        for n in range(2600)])
    acb = memory.build_acb({"now": NOW, "query_text": "deploy pipeline"})
    prov = acb["provenance"]
    assert 0 < prov["candidate_pool_size"] <= 2000
    assert prov["retrieved"] <= 200
    assert len(section(acb, "retrieved_evidence")) <= 200


def test_recent_window_and_tool_state_are_the_sessions_own(memory: Memory) -> None:
    mine = say(memory, "hello from my session", session_id="mine")
    other = say(memory, "hello from elsewhere", session_id="other")
    tool = memory.record({"kind": "tool_result", "session_id": "mine", "ts": NOW,
                          "content": {"tool": "ls", "output": "README.md\nsetup.py\n"}}).id
    acb = memory.build_acb({"session_id": "mine", "now": NOW})
    assert [i["id"] for i in section(acb, "recent_window")] == [mine]
    assert [i["id"] for i in section(acb, "tool_state")] == [tool]
    assert other not in json.dumps(acb["sections"])
    assert acb["provenance"]["path"] == "fast"


def test_catch_up_on_read_sees_a_line_appended_by_hand(memory: Memory) -> None:
    say(memory, "first", session_id="s1")
    memory.build_acb({"session_id": "s1", "now": NOW})  # index and cache are warm
    written = memory.record({"content": {"text": "appended by hand"}, "session_id": "s1",
                             "ts": "2026-03-01T11:00:00+00:00"})
    path = memory.store / "events" / "2026-03" / "2026-03-01.jsonl"
    line = written.to_line().replace(written.id, written.id[:-1] + "Z")
    with path.open("a") as handle:
        handle.write(line)
    acb = memory.build_acb({"session_id": "s1", "now": NOW})
    assert written.id[:-1] + "Z" in [i["id"] for i in section(acb, "recent_window")]


def test_task_state_shows_open_tasks_only(memory: Memory) -> None:
    open_task = memory.task("Write the migration guide", session_id="s1").content["task_id"]
    done = memory.task("Ship 1.0").content["task_id"]
    memory.task("Ship 1.0", task_id=done, status="done")
    acb = memory.build_acb({"session_id": "s1", "now": NOW})
    ids = [i["id"] for i in section(acb, "task_state")]
    assert ids == [open_task]


def test_a_finished_task_the_question_matches_is_retrieved_with_its_status(
        memory: Memory) -> None:
    """task_state holds open tasks only; one done or cancelled is memory too, and a
    question about it finds it as evidence, its status in its text. An open task the
    question matches is shown once, in task_state."""
    done = memory.task("Rotate the staging TLS certificates", owner="bob").content["task_id"]
    memory.task(task_id=done, status="done", details="rotated on Nov 20, new expiry 2027-11-20")
    dropped = memory.task("Rotate the staging TLS certificates by hand").content["task_id"]
    memory.task(task_id=dropped, status="cancelled")
    still = memory.task("Rotate the production TLS certificates").content["task_id"]
    acb = memory.build_acb({"now": NOW, "query_text":
                            "Did we rotate the staging TLS certificates? When do they expire?"})
    assert [i["id"] for i in section(acb, "task_state")] == [still]
    evidence = {i["id"]: i for i in section(acb, "retrieved_evidence")}
    assert set(evidence) == {done, dropped}
    assert evidence[done]["type"] == "task" and evidence[done]["text"] == (
        "Task [done] Rotate the staging TLS certificates (owner: bob)\n"
        "rotated on Nov 20, new expiry 2027-11-20")
    assert evidence[done]["source"] == f"tasks/{done}.md:1" and evidence[done]["score"] > 0
    assert evidence[dropped]["text"].startswith("Task [cancelled] ")
    assert not acb["omissions"]


def test_tasks_left_out_are_listed_by_reason_whatever_their_number(memory: Memory) -> None:
    mine = {memory.task(f"Own step {n}", session_id="s1").content["task_id"] for n in range(3)}
    others = [memory.task(f"Backlog item {n} of the quarterly platform roadmap",
                          session_id="s2", sensitivity="high" if n % 10 == 0 else "low"
                          ).content["task_id"] for n in range(250)]
    high = {t for n, t in enumerate(others) if n % 10 == 0}
    acb = memory.build_acb({"session_id": "s1", "channel": "team", "now": NOW,
                            "max_tokens": 400})
    shown = [i["id"] for i in section(acb, "task_state")]
    assert set(shown[:3]) == mine and 3 < len(shown) < 100  # this session's first
    assert not high & set(shown)
    budget = sorted(set(others) - high - set(shown))
    entries = {o["reason"]: o for o in acb["omissions"]}
    assert entries["budget"]["candidates"] == budget[:200]
    assert entries["budget"]["count"] == len(budget) > 200
    assert [i for i in entries["privacy"]["candidates"] if i in high] == sorted(high)
    assert "count" not in entries["privacy"]  # 25 tasks, and the preferences view
    private = memory.build_acb({"session_id": "s1", "channel": "private", "now": NOW,
                                "max_tokens": 3000})
    assert not high & set(omitted(private, "privacy"))


def test_policy_hashes_and_scoring_in_provenance(memory: Memory) -> None:
    acb = memory.build_acb({"now": NOW, "query_text": "anything"})
    prov = acb["provenance"]
    assert set(prov["policy_hashes"]) == {"manifest.json", "policies/budgets.yaml",
                                          "policies/privacy.yaml", "policies/channels.yaml"}
    assert prov["scoring"] == {"alpha": 0.7, "beta": 0.2, "gamma": 0.1,
                               "recency_tau_days": 14.0}
    assert prov["timings_ms"]["total"] > 0
    budgets = memory.store / "policies" / "budgets.yaml"
    budgets.write_text(budgets.read_text().replace("alpha: 0.7", "alpha: 0.8"))
    changed = memory.build_acb({"now": NOW, "query_text": "anything"})
    assert changed["provenance"]["scoring"]["alpha"] == 0.8
    assert (changed["provenance"]["policy_hashes"]["policies/budgets.yaml"]
            != prov["policy_hashes"]["policies/budgets.yaml"])


def test_a_handoff_decision_the_tenant_cannot_see_is_omitted_as_unknown(
        memory: Memory) -> None:
    """A handed-over decision of another tenant, or of nobody (a hand-edited packet), was
    listed as `superseded`: it is no decision of the tenant's, and both say `unknown`."""
    b_evt = say(memory, "b's reasons", tenant_id="b")
    b_dec = memory.decide("b's decision", [b_evt], tenant_id="b").content["decision_id"]
    evt = say(memory, "our reasons", tenant_id="a")
    old = memory.decide("Our first decision", [evt], tenant_id="a").content["decision_id"]
    new = memory.decide("Our decision", [evt], supersedes=[old],
                        tenant_id="a").content["decision_id"]
    packet = memory.create_handoff("coder", "Carry on", decisions=[old], tenant_id="a")
    ghost = "dec_01JKZ3N4Q5R6S7T8V9W0X1Y2Z3"
    path = memory.store / "handoffs" / f"{packet.id}.yaml"
    path.write_text(path.read_text().replace(f"- {old}", f"- {old}\n- {b_dec}\n- {ghost}"))
    memory.sync()
    acb = memory.build_acb({"agent_id": "coder", "handoff_id": packet.id, "now": NOW,
                            "tenant_id": "a"})
    assert [i["id"] for i in section(acb, "relevant_decisions")] == [new]
    assert omitted(acb, "superseded") == [old]
    assert omitted(acb, "unknown") == sorted([b_dec, ghost])
    assert "b's decision" not in json.dumps(acb)


def test_handoff_loads_only_packet_decisions_and_evidence(memory: Memory) -> None:
    evt = say(memory, "The layout refactor must keep events append-only", session_id="s1")
    noise = say(memory, "Unrelated chatter about lunch", session_id="s1")
    dec = memory.decide("Keep the events layout", [evt]).content["decision_id"]
    packet = memory.create_handoff("implementer", "Refactor memory layout", decisions=[dec],
                                   refs=[evt], from_agent="planner",
                                   open_questions=["Do we store secrets?"])
    acb = memory.build_acb({"agent_id": "implementer", "handoff_id": packet.id, "now": NOW,
                            "session_id": "s1"})
    assert [s["name"] for s in acb["sections"]] == [
        "handoff", "relevant_decisions", "retrieved_evidence"]
    assert "Refactor memory layout" in section(acb, "handoff")[0]["text"]
    assert [i["id"] for i in section(acb, "relevant_decisions")] == [dec]
    assert [i["id"] for i in section(acb, "retrieved_evidence")] == [evt]
    assert noise not in json.dumps(acb)
    with pytest.raises(ValidationError, match="addressed to agent"):
        memory.build_acb({"agent_id": "someone-else", "handoff_id": packet.id})
    path = memory.store / "handoffs" / f"{packet.id}.yaml"
    path.write_text(path.read_text().replace("to_agent:", "to_agent: [", 1))  # broken YAML
    memory.sync()
    with pytest.raises(ValidationError) as caught:
        memory.build_acb({"agent_id": "implementer", "handoff_id": packet.id})
    assert f"no handoff {packet.id} for tenant default" in str(caught.value)
    assert "`gitmem status`" in str(caught.value) and caught.value.field == "handoff_id"
    assert any(e["path"] == f"handoffs/{packet.id}.yaml" for e in memory.status()["errors"])


def test_handoff_evidence_keeps_to_the_channel_rules(memory: Memory) -> None:
    private = say(memory, "The CEO's home address is 12 Elm St", session_id="s1")
    public = say(memory, "Public note about the release", session_id="s1", channel="public")
    packet = memory.create_handoff("bot2", "continue the release", refs=[private, public])
    for channel in ("public", "team"):
        acb = memory.build_acb({"agent_id": "bot2", "handoff_id": packet.id, "now": NOW,
                                "channel": channel})
        assert [i["id"] for i in section(acb, "retrieved_evidence")] == [public]
        assert "Elm St" not in texts(acb) and private in omitted(acb, "privacy")
    acb = memory.build_acb({"agent_id": "bot2", "handoff_id": packet.id, "now": NOW,
                            "channel": "private"})
    assert {i["id"] for i in section(acb, "retrieved_evidence")} == {private, public}


def test_summary_keeps_its_events_channel(memory: Memory) -> None:
    evt = say(memory, "User said their lawyer is Saul Goodman", session_id="s1")
    summary = memory.record({"kind": "summary", "session_id": "s1", "refs": [evt],
                             "ts": "2026-03-01T10:05:00+00:00",
                             "content": {"text": "The user's lawyer is Saul Goodman"}})
    summary_id = summary.content["summary_id"]
    path = memory.store / "summaries" / "session" / f"{summary_id}.md"
    assert "channel: private" in path.read_text()
    public = memory.build_acb({"channel": "public", "now": NOW, "query_text": "lawyer Goodman"})
    assert "Goodman" not in texts(public)
    assert summary_id not in omitted(public, "privacy")  # a match is never named
    private = memory.build_acb({"channel": "private", "now": NOW, "query_text": "lawyer Goodman"})
    assert summary_id in [i["id"] for i in section(private, "retrieved_evidence")]


def test_an_item_packed_is_never_listed_as_left_out(memory: Memory) -> None:
    for text in ("wombatcode launch plan is ready", "second wombatcode note for the team"):
        say(memory, text, tags=["pinned"])
    acb = memory.build_acb({"session_id": "s2", "now": NOW, "max_tokens": 100,
                            "query_text": "wombatcode"})
    packed = {i["id"] for i in all_items(acb)}
    assert any(i.get("pinned") for i in section(acb, "retrieved_evidence"))
    assert not packed & {c for o in acb["omissions"] for c in o["candidates"]}


def test_same_request_gives_the_same_acb(memory: Memory) -> None:
    for n in range(20):
        say(memory, f"note {n} on the cache eviction policy", session_id="s1",
            ts=f"2026-02-{1 + n:02d}T00:00:00+00:00")
    request = {"session_id": "s1", "now": NOW, "query_text": "cache eviction"}
    first, second = memory.build_acb(request), memory.build_acb(request)
    for key in ("acb_id", "sections", "omissions"):
        assert first[key] == second[key]


def test_same_acb_after_reindex_from_a_fresh_clone(config: Config, tmp_path: Path,
                                                   dsn: str, schema: str) -> None:
    with Memory(config) as memory:
        evt = say(memory, "The cache uses LRU eviction", session_id="s1")
        memory.decide("Evict least recently used entries", [evt])
        for n in range(10):
            say(memory, f"cache note {n}", session_id="s1", ts=f"2026-02-1{n}T00:00:00+00:00")
        request = {"session_id": "s1", "now": NOW, "query_text": "cache eviction"}
        original = memory.build_acb(request)
    root = config.store.parent
    git(root, "add", "-A")
    git(root, "commit", "-qm", "memory")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(root), str(clone))
    other = Config(store=clone / "memory", dsn=dsn, schema=schema + "_clone")
    try:
        with Memory(other) as cloned:
            cloned.reindex()
            again = cloned.build_acb(request)
        for key in ("acb_id", "sections", "omissions"):
            assert again[key] == original[key]
    finally:
        with Memory(other) as cloned:
            cloned.db.drop_schema()
        shutil.rmtree(clone)


def test_cli_acb_json_and_text(cli: Cli, memory: Memory) -> None:
    say(memory, "The on-call rotation changes on Mondays", session_id="s0")
    result = cli("acb", "when does on-call change?", "--session", "s1", "--now", NOW)
    bundle = json.loads(result.stdout)
    assert bundle["acb_id"].startswith("acb_")
    assert "Mondays" in json.dumps(bundle["sections"])
    text = cli("acb", "when does on-call change?", "--session", "s1", "--format", "text").stdout
    assert "## Retrieved evidence" in text and "Mondays" in text
    bad = cli("acb", "--max-tokens", "0", ok=False)
    assert bad.exit_code == 1 and "max_tokens" in bad.output
    capped = cli("acb", "--max-tokens", "999999999999")
    assert json.loads(capped.stdout)["budget_tokens"] == 65000
    assert ("--max-tokens 999999999999 is above budgets.yaml's acb_total_max_tokens: the "
            "bundle's budget is 65000 tokens") in capped.stderr
    assert "above budgets.yaml" not in cli("acb", "--max-tokens", "3000").stderr


def test_a_view_loads_into_any_section_it_names(memory: Memory) -> None:
    (memory.store / "views" / "runbook.md").write_text(
        "---\nsection: retrieved_evidence\npinned: true\n---\n# Runbook\n\nRestart with make up.\n")
    acb = memory.build_acb({"now": NOW})
    assert [i["id"] for i in section(acb, "retrieved_evidence")] == ["views/runbook.md#runbook"]


@pytest.mark.parametrize("name", ["recent_window", "tool_state"])
def test_a_view_in_a_section_of_events_leads_it(memory: Memory, name: str) -> None:
    """The transcript's sections sort their items by time; a view loaded there has
    none, and comes first, its chunks in their order."""
    (memory.store / "views" / "notes.md").write_text(
        f"---\nsection: {name}\npinned: true\n---\n# Zeta\n\nAlways remember the walrus."
        "\n\n# Alpha\n\nAnd the carpenter.\n")
    say(memory, "hello there", session_id="s1")
    memory.record({"kind": "tool_result", "session_id": "s1",
                   "content": {"tool": "fs.read_file", "path": "a.md", "output": "ok"}})
    acb = memory.build_acb({"session_id": "s1", "now": NOW})
    ids = [i["id"] for i in section(acb, name)]
    assert ids[:2] == ["views/notes.md#zeta", "views/notes.md#alpha"] and len(ids) > 2


def test_tool_state_keeps_whole_results_head_first(memory: Memory) -> None:
    long_output = "\n\n".join(f"paragraph {n}: " + "word " * 300 for n in range(12))
    for n in range(3):
        memory.record({"kind": "tool_result", "session_id": "s1",
                       "ts": f"2026-03-01T0{n}:00:00+00:00",
                       "content": {"tool": "fs.read_file", "path": f"file{n}.md",
                                   "output": f"small output {n}"}})
    big = memory.record({"kind": "tool_result", "session_id": "s1",
                         "ts": "2026-03-01T05:00:00+00:00",
                         "content": {"tool": "fs.read_file", "path": "BIG.md",
                                     "output": long_output}})
    acb = memory.build_acb({"session_id": "s1", "now": NOW})
    tools = section(acb, "tool_state")
    ids = [i["id"] for i in tools]
    assert f"{big.id}#1" in ids and tools[-1]["id"].startswith(big.id)
    head = next(i for i in tools if i["id"] == f"{big.id}#1")
    assert head["text"].startswith("[fs.read_file result BIG.md]")
    assert sum(i["text"].startswith("[fs.read_file result file") for i in tools) == 3


def test_tool_state_shows_a_cut_results_head_and_its_end(memory: Memory) -> None:
    """A test run's output, longer than the section: its first chunk (the tool and the
    head) and its last (where the failure is) are shown, the chunks after the head in
    order as far as they fit, and only those between are left out."""
    lines = "".join(f"line {n:04d}: value={n * 7}\n" for n in range(1, 2000))
    lines += "FAILED tests/test_totals.py::test_sum - AssertionError: 13993 != 13994\n"
    big = memory.record({"kind": "tool_result", "session_id": "s1",
                         "content": {"tool": "pytest", "path": "tests", "output": lines}})
    acb = memory.build_acb({"session_id": "s1", "now": NOW})
    tools = section(acb, "tool_state")
    parts = [int(i["id"].partition("#")[2]) for i in tools]  # in reading order
    left_out = omitted(acb, "budget")
    assert left_out and all(i.startswith(big.id) for i in left_out)
    left = sorted(int(i.partition("#")[2]) for i in left_out)
    last = max(parts + left)
    assert parts[0] == 1 and parts[-1] == last and parts == sorted(parts)
    head = parts[:-1]
    assert head == list(range(1, len(head) + 1))  # one hole at most: before the end
    assert left == list(range(len(head) + 1, last))
    assert tools[0]["text"].startswith("[pytest result tests]")
    assert tools[-1]["text"].endswith("AssertionError: 13993 != 13994")
    # the hole is marked where it is (not after the end, as if the output were cut after
    # the error), in the text and in the JSON
    text, artifact = render_text(acb), big.content["artifact_id"]
    assert tools[len(head) - 1]["text"] + "\n" + GAP_NOTE.format(artifact) in text
    assert ARTIFACT_NOTE.format(artifact) not in text and text.count(artifact) == 1
    assert tools[-1]["gap_before"] == [f"{big.id}#{n}" for n in left]
    assert all("gap_before" not in i for i in tools[:-1])
    assert within_caps(acb["sections"][-1], memory.policies.budgets.sections[
        "tool_state"].max_tokens)


def test_tool_state_shows_no_middle_of_an_output_whose_head_does_not_fit(
        memory: Memory) -> None:
    """Newer results leave less room than an older output's first chunk: none of its
    chunks is shown, not a shorter one from its middle without the head that says
    which tool and path it came from."""
    paragraphs = ["alpha " * 480, "beta " * 150, "gamma " * 480, "delta " * 150, "omega " * 480]
    big = memory.record({"kind": "tool_result", "session_id": "s1",
                         "ts": "2026-03-01T01:00:00+00:00",
                         "content": {"tool": "fs.read_file", "path": "OLD.md",
                                     "output": "\n\n".join(paragraphs)}})
    for n, words in enumerate([540, 540, 340]):  # room for its second chunk, not its first
        memory.record({"kind": "tool_result", "session_id": "s1",
                       "ts": f"2026-03-01T02:0{n}:00+00:00",
                       "content": {"tool": "fs.read_file", "path": f"new{n}.md",
                                   "output": f"newer {n} " + "filler " * words}})
    acb = memory.build_acb({"session_id": "s1", "now": NOW})
    tools = section(acb, "tool_state")
    assert [i["id"] for i in tools if i["id"].startswith("evt")] and \
        not [i["id"] for i in tools if i["id"].startswith(big.id)]
    budget = omitted(acb, "budget")
    assert f"{big.id}#1" in budget and f"{big.id}#2" in budget


def test_pinned_evidence_comes_after_the_ranked_and_always_fits(memory: Memory) -> None:
    pinned = say(memory, "Never deploy during the quarterly audit", tags=["pinned"],
                 ts="2026-01-02T00:00:00+00:00")
    for n in range(60):
        say(memory, f"cache eviction note {n}: " + "the cache evicts the coldest entries " * 8,
            ts=f"2026-02-{1 + n % 28:02d}T10:00:00+00:00")
    acb = memory.build_acb({"now": NOW, "query_text": "cache eviction", "max_tokens": 3000})
    evidence = section(acb, "retrieved_evidence")
    assert evidence[-1]["id"] == pinned and evidence[-1]["pinned"] is True
    assert "score" in evidence[0] and len(evidence) > 2
    assert omitted(acb, "budget")  # the ranked evidence was cut, the pinned item was not


def test_fast_path_bundle_is_reused_until_the_files_change(memory: Memory) -> None:
    say(memory, "first words", session_id="s1")
    request = {"session_id": "s1", "now": NOW}
    first = memory.build_acb(request)
    again = memory.build_acb(request)
    assert again["sections"] == first["sections"] and again["acb_id"] == first["acb_id"]
    again["sections"][0]["items"].clear()  # a caller's change stays with the caller
    assert memory.build_acb(request)["sections"] == first["sections"]
    later = say(memory, "second words", session_id="s1", ts="2026-03-01T11:00:00+00:00")
    fresh = memory.build_acb(request)
    assert later in [i["id"] for i in section(fresh, "recent_window")]
    assert fresh["acb_id"] != first["acb_id"]  # the id follows the bundle's content
    other_clock = memory.build_acb({**request, "now": "2026-03-02T09:00:00+00:00"})
    assert other_clock["sections"] == fresh["sections"]  # the same cached bundle, ...
    assert other_clock["acb_id"] != fresh["acb_id"]  # ... but another request
    budgets = memory.store / "policies" / "budgets.yaml"
    budgets.write_text(budgets.read_text().replace(
        "recent_window:      {max_tokens: 12000", "recent_window:      {max_tokens: 9"))
    assert section(memory.build_acb(request), "recent_window") == []


def test_a_retrieval_builds_first_sections_are_packed_once_until_its_tasks_change(
        memory: Memory) -> None:
    """Identity, rules and task_state are the same for every question of a session:
    packed once per request key and kept, with the bundles' rules for dropping them.
    A kept prefix gives the same ACB as a fresh pack, its items are not the caller's
    to change, and the tenant's own task writes (not another tenant's) pack it again."""
    say(memory, "The release train leaves every Tuesday", session_id="s1")
    first_task = memory.task("Write the release notes", session_id="s1").content["task_id"]
    say(memory, "hello from acme", session_id="s9", tenant_id="acme")
    request = {"session_id": "s1", "now": NOW, "query_text": "release train"}

    def kept() -> Any:
        return next(p for k, (p, _) in memory.cache._prefixes.items() if k[:2] == ("default", "s1"))

    first = memory.build_acb(request)
    prefix = kept()
    assert [s for s in prefix.sections] == ["identity", "rules", "task_state"]
    again = memory.build_acb(request)
    assert kept() is prefix and "task_state" not in again["provenance"]["timings_ms"]
    assert again["acb_id"] == first["acb_id"] and again["sections"] == first["sections"]
    assert again["omissions"] == first["omissions"]
    section(again, "task_state")[0]["text"] = "changed by the caller"
    assert memory.build_acb(request)["sections"] == first["sections"]
    encoded = memory.build_acb(request, encoded=True)  # the daemon's: items not copied
    assert encoded["acb_id"] == first["acb_id"]
    assert orjson.loads(orjson.dumps(encoded["sections"])) == first["sections"]
    memory.cache.invalidate()  # everything packed afresh: the same bundle
    assert memory.build_acb(request)["acb_id"] == first["acb_id"]
    prefix = kept()
    memory.task("Move the staging cluster", tenant_id="acme")
    assert memory.build_acb(request)["acb_id"] == first["acb_id"] and kept() is prefix
    second_task = memory.task("Book the release room", session_id="s1").content["task_id"]
    fresh = memory.build_acb(request)
    assert {i["id"] for i in section(fresh, "task_state")} == {first_task, second_task}
    assert kept() is not prefix and fresh["acb_id"] != first["acb_id"]
    public = memory.build_acb({**request, "channel": "public"})  # a key of its own
    assert "views/preferences.md" not in orjson.dumps(public["sections"]).decode()


def test_kept_prefixes_are_bounded_least_recently_used_first_out(
        memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context, "PREFIX_ENTRIES", 2)
    say(memory, "The release train leaves every Tuesday", session_id="s1")
    for session in ("s1", "s2", "s1", "s3"):
        memory.build_acb({"session_id": session, "now": NOW, "query_text": "release"})
    assert [key[1] for key in memory.cache._prefixes] == ["s1", "s3"]


def test_a_matching_question_brings_its_answer(memory: Memory) -> None:
    question = say(memory, "Where did we end up hosting the search cluster for invoicing?",
                   session_id="s1", ts="2026-02-01T10:00:00+00:00")
    answer = say(memory, "It moved to Fastly, region eu-west-1, during the last sprint.",
                 session_id="s1", ts="2026-02-01T10:01:00+00:00",
                 actor={"type": "human", "id": "bob"})
    say(memory, "Unrelated: lunch is at noon", session_id="s1", ts="2026-02-01T10:02:00+00:00")
    acb = memory.build_acb({"now": NOW, "query_text": "Which provider runs search for invoicing?"})
    ids = [i["id"] for i in section(acb, "retrieved_evidence")]
    assert ids[:2] == [question, answer]
    assert section(acb, "retrieved_evidence")[1]["reply_to"] == question


def test_cached_bundles_share_one_copy_of_their_common_sections(memory: Memory) -> None:
    """Bundles sent as JSON are the exact encoding of their sections, in pieces: the
    tenant's open tasks are one bytes object in the bundles of two sessions without
    tasks of their own; each session's recent turns are its own."""
    tasks = [memory.task(f"Rotate the staging certificates, step {n}").content["task_id"]
             for n in range(3)]
    for session in ("a", "b"):
        say(memory, f"hello from {session}", session_id=session)
    pieces = {}
    for session in ("a", "b"):
        request = {"session_id": session, "now": NOW}
        plain = memory.build_acb(request)
        encoded = memory.build_acb(request, encoded=True)
        assert orjson.dumps(encoded["sections"]) == orjson.dumps(plain["sections"])
        [bundle] = [b for k, (b, _) in memory.cache._bundles.items() if k[1] == session]
        pieces[session] = {orjson.loads(p)["name"]: p for p in bundle.pieces()
                           if p.startswith(b'{"name"')}
    assert [i["id"] for i in orjson.loads(pieces["a"]["task_state"])["items"]] == tasks[::-1]
    assert pieces["a"]["task_state"] is pieces["b"]["task_state"]
    assert pieces["a"]["recent_window"] != pieces["b"]["recent_window"]


def test_kept_encodings_take_their_length_not_orjsons_buffer() -> None:
    """orjson's bytes keep the buffer it grew (4 KB at least); what a bundle keeps is
    an exact copy."""
    import tracemalloc

    from gitmem.packing import _kept
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [_kept(orjson.dumps({"name": "rules", "n": n})) for n in range(100)]
        traced = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert traced < 100 * 200, traced  # 100 pieces of ~25 bytes, not 100 x 4 KB
    assert kept[7] == orjson.dumps({"name": "rules", "n": 7})


def test_shared_section_encodings_stay_bounded_by_the_bundles_kept(
        memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bundles dropped (new lines of their session) leave encodings nobody holds; the
    next bundle kept past the limit rebuilds the table from the bundles alive."""
    import gitmem.context
    monkeypatch.setattr(gitmem.context, "PIECES_SLACK", 5)
    for n in range(6):
        say(memory, f"first turn of session {n}", session_id=f"s{n}")
        memory.build_acb({"session_id": f"s{n}", "now": NOW}, encoded=True)
    assert sum(b"first turn" in p for p in memory.cache._pieces) == 6
    for n in range(6):  # their bundles are dropped
        say(memory, f"second turn of session {n}", session_id=f"s{n}",
            ts="2026-03-01T10:30:00+00:00")
    say(memory, "a quiet session", session_id="quiet")
    memory.cache._pieces_limit = 5  # as after a rebuild with few bundles alive
    memory.build_acb({"session_id": "quiet", "now": NOW}, encoded=True)
    alive = {p for b, _ in memory.cache._bundles.values() for p in b.pieces()}
    assert [k[1] for k in memory.cache._bundles] == ["quiet"]
    assert memory.cache._pieces and set(memory.cache._pieces) <= alive
    assert not any(b"first turn" in p for p in memory.cache._pieces)


def test_new_lines_refresh_their_own_session_and_pinned_ones_every_session(
        memory: Memory) -> None:
    say(memory, "hello from a", session_id="a")
    say(memory, "hello from b", session_id="b")
    before_b = memory.build_acb({"session_id": "b", "now": NOW})
    memory.build_acb({"session_id": "a", "now": NOW})
    new_a = say(memory, "more from a", session_id="a", ts="2026-03-01T11:00:00+00:00")
    assert new_a in [i["id"] for i in section(memory.build_acb(
        {"session_id": "a", "now": NOW}), "recent_window")]
    assert memory.build_acb({"session_id": "b", "now": NOW})["sections"] == before_b["sections"]
    pinned = say(memory, "Always page Dana first", session_id="a", tags=["pinned"],
                 ts="2026-03-01T11:30:00+00:00")
    assert pinned in [i["id"] for i in section(memory.build_acb(
        {"session_id": "b", "now": NOW}), "retrieved_evidence")]


def test_a_bundle_sent_as_json_reads_back_the_same_and_stays_usable(memory: Memory) -> None:
    """A cached fast-path bundle encoded for an answer (its items then kept as JSON
    only) gives the same sections and omissions as plain lists, before and after, and
    a caller may change what it got without changing the next answer."""
    say(memory, "The canary runs in Frankfurt", session_id="s1")
    say(memory, "Not for the public channel", session_id="s1", sensitivity="high")
    request = {"session_id": "s1", "channel": "public", "now": NOW}

    def content(acb: dict[str, Any]) -> dict[str, Any]:  # as a client reads the answer
        return {k: v for k, v in json.loads(orjson.dumps(acb)).items() if k != "provenance"}

    plain = memory.build_acb(request)
    assert plain["omissions"] and plain["sections"][0]["items"]
    assert content(memory.build_acb(request, encoded=True)) == content(plain)
    again = memory.build_acb(request)
    assert again["sections"] == plain["sections"] and again["omissions"] == plain["omissions"]
    again["sections"][0]["items"].clear()
    assert memory.build_acb(request)["sections"] == plain["sections"]
    assert content(memory.build_acb(request, encoded=True)) == content(plain)


@pytest.mark.parametrize("field", ["query_text", "session_id", "tenant_id", "handoff_id"])
@pytest.mark.parametrize(("bad", "why"), [("hel\x00lo", "NUL character"),
                                          ("\ud800 hello", "lone surrogate")])
def test_request_text_that_no_stored_text_holds_is_refused(memory: Memory, field: str,
                                                           bad: str, why: str) -> None:
    with pytest.raises(ValidationError, match=why) as caught:
        memory.build_acb({field: bad, "now": NOW})
    assert caught.value.field == field


def test_decision_queries_refuse_text_no_stored_text_holds(memory: Memory) -> None:
    for field, params, why in (("query_text", {"query_text": "a\x00b"}, "NUL character"),
                               ("tenant_id", {"tenant_id": "\ud800"}, "expected a name")):
        with pytest.raises(ValidationError, match=why) as caught:
            memory.query_decisions(**params)
        assert caught.value.field == field


def test_decision_queries_keep_to_the_channel_asked_for(memory: Memory) -> None:
    evt = say(memory, "Who reviews the salaries?")
    high = memory.decide("Dana reviews the salaries", [evt], sensitivity="high")
    plain = memory.decide("Reviews happen in March", [evt])
    ids = {c: [d["decision_id"] for d in memory.query_decisions(channel=c)]
           for c in ("private", "public", None)}
    assert ids["public"] == [plain.content["decision_id"]]
    assert set(ids["private"]) == set(ids[None]) == {high.content["decision_id"],
                                                     plain.content["decision_id"]}
    with pytest.raises(ValidationError) as caught:
        memory.query_decisions(channel="radio")
    assert caught.value.field == "channel"


def test_the_bundle_is_the_same_whatever_the_servers_time_zone(
        config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reply is a question's next turn within a day, and a day in New York on the
    night clocks go forward is 23 hours: the index works in UTC whatever zone the
    server or the client's libpq environment (PGTZ) sets, so the same request on the
    same files gives the same bundle (P7), and decisions' times read in UTC."""
    with Memory(config) as memory:
        question = say(memory, "Where does the blue cluster run these days?", session_id="s1",
                       ts="2026-03-07T12:00:00+00:00")
        say(memory, "It moved to Frankfurt last week.", session_id="s1",
            ts="2026-03-08T11:30:00+00:00")  # 23.5 hours later, over New York's DST change
        memory.decide("Run the blue cluster in Frankfurt", [question],
                      ts="2026-03-08T06:30:00+00:00")
    request = {"now": "2026-03-09T00:00:00+00:00", "query_text": "blue cluster",
               "session_id": "s2"}
    found = {}
    for zone in ("UTC", "America/New_York"):
        monkeypatch.setenv("PGTZ", zone)
        with Memory(config) as memory:
            with memory.db.connection() as conn:
                assert conn.execute("SHOW TimeZone").fetchone() == {"TimeZone": "UTC"}
            acb = memory.build_acb(request)
            replies = [i for i in section(acb, "retrieved_evidence") if i.get("reply_to")]
            assert [i["reply_to"] for i in replies] == [question]
            [decision] = memory.query_decisions()
            assert decision["ts"] == "2026-03-08T06:30:00+00:00"
            found[zone] = acb
    assert found["UTC"]["acb_id"] == found["America/New_York"]["acb_id"]


def test_a_secret_on_disk_is_never_served(memory: Memory) -> None:
    """The write path redacts what it writes; what reaches the files another way (a line
    appended by hand, a record edited, a pattern added since) is redacted by the index,
    so no ACB shows it on any channel, and a search for it finds nothing."""
    from tests.daemons import append, event_line

    _, leaked = event_line("s1", "my password: hunter2hunter2 for the lynx server",
                           channel="public", number=7)
    append(memory.store / "events" / "2026-03" / "2026-03-01.jsonl", leaked)
    _, codename = event_line("s1", "the lynx server runs release LYNX-4242", number=8)
    append(memory.store / "events" / "2026-03" / "2026-03-01.jsonl", codename)
    decision = memory.decide("Rotate the lynx server's keys", [say(memory, "keys")],
                             ts="2026-03-01T10:00:00+00:00").content["decision_id"]
    path = memory.store / "decisions" / f"{decision}.md"
    path.write_text(path.read_text().replace("Rotate the lynx server's keys",
                                             "Rotate the lynx keys; api_key=abcd1234efgh5678"))
    memory.sync()
    shown = json.dumps([memory.build_acb({"query_text": "lynx server keys", "channel": c,
                                          "session_id": "s1", "now": NOW})["sections"]
                        for c in ("public", "private")])
    assert "hunter2hunter2" not in shown and "abcd1234efgh5678" not in shown
    assert "alice: my [REDACTED] for the lynx server" in shown
    assert "Rotate the lynx keys; [REDACTED]" in shown
    assert "LYNX-4242" in shown  # no pattern for it yet
    missed = memory.build_acb({"query_text": "hunter2hunter2", "now": NOW})
    assert missed["provenance"]["retrieved"] == 0
    # a pattern added to the policy: the rows are made again, the old line redacted
    privacy = memory.store / "policies" / "privacy.yaml"
    privacy.write_text(privacy.read_text().replace(
        "  redact_patterns:\n", "  redact_patterns:\n    - 'LYNX-[0-9]{4}'\n"))
    report = memory.sync()
    assert any("rows were made under other policies (redaction" in item["reason"]
               for item in report.changed)
    shown = json.dumps(memory.build_acb({"query_text": "lynx server release", "now": NOW,
                                         "session_id": "s1"})["sections"])
    assert "LYNX-4242" not in shown and "runs release [REDACTED]" in shown


def test_secrets_in_names_headings_and_keys_written_by_hand_are_never_served(
        memory: Memory) -> None:
    """Names (actor, session, tags) are never redacted on write, which refuses a secret
    there; what reaches the files another way is redacted where it is served, and is
    not searchable. A key named a secret after the fact applies to what is indexed."""
    from tests.daemons import append, event_line

    key = "sk-" + "Q" * 30
    _, named = event_line("s1", "deploy notes for the kestrel cluster", number=9,
                          actor={"type": "human", "id": key}, tags=[f"proj:{key}"])
    _, call = event_line("s1", "", number=10, kind="tool_call",
                         content={"tool": "unlock", "args": {"pinCode": "98765432"}})
    call = call.replace(json.loads(call)["hash"], content_hash(
        "tool_call", {"tool": "unlock", "args": {"pinCode": "98765432"}}))
    day = memory.store / "events" / "2026-03" / "2026-03-01.jsonl"
    append(day, named + call)
    glossary = memory.store / "views" / "glossary.md"
    glossary.write_text(glossary.read_text() + f"\n## Key {key}\n\nRotate it monthly.\n")
    memory.sync()
    acb = memory.build_acb({"query_text": "kestrel cluster unlock", "now": NOW,
                            "session_id": "s1"})
    assert key not in json.dumps(acb) and "98765432" in json.dumps(acb)  # no key rule yet
    assert memory.build_acb({"query_text": key, "now": NOW})["provenance"]["retrieved"] == 0
    privacy = memory.store / "policies" / "privacy.yaml"
    privacy.write_text(privacy.read_text().replace("|authorization)", "|authorization|pin ?code)"))
    memory.sync()
    acb = memory.build_acb({"query_text": "kestrel cluster unlock", "now": NOW,
                            "session_id": "s1"})
    assert "98765432" not in json.dumps(acb) and "unlock" in json.dumps(acb)


def test_a_channel_cannot_tell_whether_text_it_may_not_load_holds_a_word(
        memory: Memory) -> None:
    """What a request on the public channel gets back must not depend on the words of
    what it may not load: no omission names a hidden match, the pool counts what the
    channel may load, and no statistic that counts hidden rows (a word's IDF, what a
    lane expected or matched) is shown."""
    say(memory, "The patient diagnosis is leukemia", session_id="s1", sensitivity="high")
    say(memory, "Public launch note", session_id="s3", channel="public")

    def asked(word: str, channel: str = "public") -> dict[str, Any]:
        acb = memory.build_acb({"channel": channel, "session_id": "s2", "now": NOW,
                                "query_text": word})
        prov = acb["provenance"]
        return {"omissions": acb["omissions"], "pool": prov["candidate_pool_size"],
                "retrieved": prov["retrieved"], "lanes": prov.get("lanes"),
                "unsearched": prov.get("terms_not_searched"),
                "terms": [{k: v for k, v in t.items() if k != "query"}
                          for t in prov["query_terms"]]}

    words = ("zzzunknownword", "leukemia", "zzzunknownword")  # the first warms the caches
    timings = {w: set(memory.build_acb({"channel": "public", "session_id": "s2", "now": NOW,
                                        "query_text": w})["provenance"]["timings_ms"])
               for w in words}
    assert timings["leukemia"] == timings["zzzunknownword"]  # no phase a match alone runs
    hidden, unknown = asked("leukemia"), asked("zzzunknownword")
    assert hidden["terms"] == [{"term": "leukemia", "phrase": False}]
    assert unknown["terms"] == [{"term": "zzzunknownword", "phrase": False}]
    del hidden["terms"], unknown["terms"]
    assert hidden == unknown == {"omissions": unknown["omissions"], "pool": 0,
                                 "retrieved": 0, "lanes": None, "unsearched": None}
    launch = memory.build_acb({"channel": "public", "session_id": "s2", "now": NOW,
                               "query_text": "launch"})
    assert section(launch, "retrieved_evidence") and all(  # a score counts hidden rows
        "score" not in item for s in launch["sections"] for item in s["items"])
    private = memory.build_acb({"channel": "private", "now": NOW, "query_text": "leukemia"})
    assert private["provenance"]["query_terms"][0]["idf"] > 0 and private["provenance"]["lanes"]
    assert "leukemia" in texts(private)


def test_a_summary_conflict_does_not_name_the_session_of_a_hidden_event(
        memory: Memory) -> None:
    hidden = say(memory, "the diagnosis is leukemia", session_id="patient-7",
                 sensitivity="high")
    summary = memory.record({"kind": "summary", "channel": "public", "session_id": "notes",
                             "refs": [hidden], "ts": "2026-03-01T11:00:00+00:00",
                             "content": {"text": "Summary of the ward round"}})
    acb = memory.build_acb({"channel": "public", "session_id": "notes", "now": NOW,
                            "query_text": "ward round summary"})
    [item] = [i for i in all_items(acb) if i["id"] == summary.content["summary_id"]]
    assert item["conflicts"] == [{"kind": "foreign_session_ref", "ref": hidden}]
    assert "patient-7" not in json.dumps(acb) and "leukemia" not in json.dumps(acb)


def test_a_bundle_never_names_another_tenants_record_files(memory: Memory) -> None:
    """The catch-up's files were listed in provenance.index_state: a record's file is
    named for its id, so alpha's bundle told beta's new decision, task and handoff ids."""
    say(memory, "alpha turn", tenant_id="alpha", session_id="s1")
    memory.build_acb({"tenant_id": "alpha", "session_id": "s1", "now": NOW})
    beta = say(memory, "beta turn", tenant_id="beta", session_id="s1")
    dec = memory.decide("beta confidential", [beta], tenant_id="beta").content["decision_id"]
    task = memory.task("beta task", tenant_id="beta").content["task_id"]
    packet = memory.create_handoff("coder", "beta handoff", tenant_id="beta").id
    acb = memory.build_acb({"tenant_id": "alpha", "session_id": "s1", "now": NOW})
    shown = json.dumps(acb)
    assert not any(i in shown for i in (dec, task, packet))
    assert acb["provenance"]["index_state"]["caught_up_files"]  # the shared day file


def test_a_hidden_answer_to_a_matching_question_is_not_named(memory: Memory) -> None:
    """A public question's private answer was named among the privacy omissions only
    when the question matched the query: a public caller learnt which questions have a
    hidden answer, and when it was given (its id holds the time)."""
    say(memory, "What is the vault combination?", session_id="s9", channel="public",
        ts="2026-02-01T10:00:00+00:00")
    answer = say(memory, "The vault combination is 9931", session_id="s9",
                 channel="private", ts="2026-02-01T10:01:00+00:00")
    omissions = {}
    for query in ("vault combination", "weather"):
        acb = memory.build_acb({"session_id": "other", "channel": "public", "now": NOW,
                                "query_text": query})
        assert answer not in [i["id"] for i in all_items(acb)]
        omissions[query] = omitted(acb, "privacy")
    assert answer not in omissions["vault combination"]
    assert omissions["vault combination"] == omissions["weather"]
    acb = memory.build_acb({"session_id": "other", "channel": "private", "now": NOW,
                            "query_text": "vault combination"})
    assert answer in [i["id"] for i in section(acb, "retrieved_evidence")]  # where it may


def test_decisions_a_channel_may_not_load_take_no_visible_ones_place(memory: Memory) -> None:
    """`decisions_max` counted the hidden decisions first: on the public channel the
    newest high one took the only place, and no decision was shown."""
    evt = say(memory, "base event", channel="public")
    plain = memory.decide("Deploy on Fridays", [evt]).content["decision_id"]
    high = memory.decide("The acquisition target is Initech", [evt],
                         sensitivity="high").content["decision_id"]
    budgets = memory.store / "policies" / "budgets.yaml"
    budgets.write_text(budgets.read_text().replace("decisions_max: 100", "decisions_max: 1"))
    shown = {c: [i["id"] for i in section(memory.build_acb(
        {"channel": c, "now": NOW}), "relevant_decisions")] for c in ("public", "private")}
    assert shown == {"public": [plain], "private": [high]}


def test_a_secret_in_the_query_or_intent_is_neither_shown_nor_searched(memory: Memory) -> None:
    say(memory, "The payments api fails with a 502 after the deploy")
    secret, word = "sk-QUERYSECRETAAAABBBBCCCC99", "querypw77"
    acb = memory.build_acb({"now": NOW, "query_text": f"why does {secret} fail with "
                            f"password={word}", "intent": "debug api_key=intentsecret55"})
    shown = json.dumps(acb)
    assert secret not in shown and word not in shown and "intentsecret55" not in shown
    provenance = acb["provenance"]
    assert provenance["query_text"] == "why does [REDACTED] fail with [REDACTED]"
    assert provenance["intent"] == "debug [REDACTED]"
    assert {t["term"] for t in provenance["query_terms"]} >= {"fail"}
    assert not {"redact", "redacted"} & {t["term"] for t in provenance["query_terms"]}
    assert section(acb, "retrieved_evidence")  # the rest of the question still searches


@pytest.mark.parametrize("redaction", ["", "x"])
def test_the_query_searched_keeps_the_words_the_redaction_string_is_part_of(
        memory: Memory, redaction: str) -> None:
    """The query was searched with every occurrence of the redaction string taken out:
    with `redaction: ""` nothing was searched at all, with "x" no word holding an x."""
    privacy = memory.store / "policies" / "privacy.yaml"
    privacy.write_text(privacy.read_text().replace('redaction: "[REDACTED]"',
                                                   f'redaction: "{redaction}"'))
    event = say(memory, "Fix the xylophone deploy on fridays")
    acb = memory.build_acb({"now": NOW, "query_text": "fix the xylophone deploy "
                            "password=hunter22"})
    terms = {t["term"] for t in acb["provenance"]["query_terms"]}
    assert {"fix", "xylophone", "deploy"} <= terms and "hunter22" not in json.dumps(acb)
    assert event in [i["id"] for i in section(acb, "retrieved_evidence")]


def test_the_redaction_string_in_a_query_is_not_searched(memory: Memory) -> None:
    """A bundle's text pasted back into a query searched "redacted", which every row that
    held a secret holds."""
    say(memory, "deploy notes: token: abc123 for the staging cluster")
    say(memory, "the vault password: hunter2 was rotated")
    acb = memory.build_acb({"now": NOW, "query_text": "what is the [REDACTED] value"})
    assert acb["provenance"]["query_text"] == "what is the [REDACTED] value"
    assert not {"redact", "redacted"} & {t["term"].lower()
                                         for t in acb["provenance"]["query_terms"]}
    assert section(acb, "retrieved_evidence") == []


def test_every_omission_reason_is_documented_and_known_to_scenarios() -> None:
    """The reasons FORMATS.md's omissions table lists are the ones scenarios may assert
    (`packing.OMISSION_REASONS`): `unknown` was given by bundles but refused by the
    scenario checker."""
    from gitmem.packing import OMISSION_REASONS

    table = (Path(__file__).parent.parent / "docs" / "FORMATS.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", table.split(
        "## The ACB's omissions", 1)[1].split("\n## ", 1)[0], re.MULTILINE))
    assert documented == set(OMISSION_REASONS)


def test_task_state_names_each_tasks_owner(memory: Memory) -> None:
    """Seed 000 §6.2: task state tracks owners. The item's text says who owns the task,
    as it is now, and the item carries `owner`; a task without one says none."""
    owned = memory.task("Migrate cache to Valkey", owner="alice",
                        session_id="s1").content["task_id"]
    memory.task(task_id=owned, owner="carol", status="doing")
    free = memory.task("Write the runbook", session_id="s1").content["task_id"]
    items = {i["id"]: i for i in section(memory.build_acb({"session_id": "s1", "now": NOW}),
                                         "task_state")}
    assert items[owned]["text"] == "Task [doing] Migrate cache to Valkey (owner: carol)"
    assert items[owned]["owner"] == "carol"
    assert items[free]["text"] == "Task [open] Write the runbook" and "owner" not in items[free]


def test_a_cancelled_task_weighs_as_little_as_a_done_one(memory: Memory) -> None:
    """A finished task is memory still, but of less weight in retrieval than an open one:
    cancelled as done."""
    weights = {}
    for status in ("open", "done", "cancelled"):
        task = memory.task(f"Rotate the {status} certificates").content["task_id"]
        if status != "open":
            memory.task(task_id=task, status=status)
        rel = f"tasks/{task}.md"
        rows = parse_file(rel, "task", (memory.store / rel).read_bytes(), memory.policies)
        [chunk] = rows.tables["chunks"]
        weights[status] = chunk[CHUNK_COLUMNS.index("importance")]
    assert weights["cancelled"] == weights["done"] == 0.2 < weights["open"]


def test_a_views_max_tokens_keeps_its_start_with_no_hole(memory: Memory) -> None:
    """A chunk over the view's own max_tokens ends it: a smaller chunk after it would
    read as following the one before the hole."""
    (memory.store / "views" / "runbook.md").write_text(
        "---\nsection: rules\npinned: true\nmax_tokens: 120\n---\n# One\n\nStep one is short."
        "\n\n# Two\n\n" + "Step two is long. " * 60 + "\n\n# Three\n\nStep three is short.\n")
    acb = memory.build_acb({"now": NOW})
    ids = [i["id"] for i in section(acb, "rules") if i["id"].startswith("views/runbook.md")]
    assert ids == ["views/runbook.md#one"]
    assert {"views/runbook.md#two", "views/runbook.md#three"} <= set(omitted(acb, "budget"))


@pytest.mark.parametrize("budget", [1500, 3000, 4500, 6000])
def test_the_recent_window_shows_a_turn_of_several_chunks_whole_or_not_at_all(
        memory: Memory, budget: int) -> None:
    """Its oldest turn was the start of a long message whose other chunks did not fit:
    read as the whole of what was said."""
    for n in range(12):
        words = " ".join(["kubernetes cluster frankfurt"] * (300 if n % 3 == 0 else 10))
        say(memory, f"Message {n}: {words}", session_id="sB", ts=f"2026-02-01T10:{n:02d}:00Z")
    whole = {}
    for item in section(memory.build_acb({"session_id": "sB", "now": NOW}), "recent_window"):
        whole.setdefault(item["source_id"], []).append(item["id"])
    assert max(len(ids) for ids in whole.values()) > 1
    acb = memory.build_acb({"session_id": "sB", "now": NOW, "max_tokens": budget})
    shown: dict[str, list[str]] = {}
    for item in section(acb, "recent_window"):
        shown.setdefault(item["source_id"], []).append(item["id"])
    assert shown and all(ids == whole[source] for source, ids in shown.items())


@pytest.mark.parametrize("budget", [600, 1000, 1500, 2100])
def test_the_newest_turn_too_long_for_the_window_shows_its_head_marked_cut(
        memory: Memory, budget: int) -> None:
    """The user's latest message is never gone while its start fits: its leading chunks
    (else its first chunk's start) are shown, marked cut with the whole turn's tokens,
    the rest left out for budget (or shown where retrieval put it); the older turns are
    not shown (they would follow a hole)."""
    for n in range(3):
        say(memory, f"Earlier note {n}: the deployment is fine", session_id="s2",
            ts=f"2026-02-01T10:0{n}:00Z")
    words = " ".join(["the deployment failure of the payments cluster in frankfurt"] * 180)
    latest = say(memory, f"Latest: {words}", session_id="s2", ts="2026-02-01T10:09:00Z")
    whole = [i for i in section(memory.build_acb({"session_id": "s2", "now": NOW}),
                                "recent_window") if i["source_id"] == latest]
    assert len(whole) > 2 and "truncated" not in whole[-1]
    full = sum(i["token_est"] for i in whole)
    acb = memory.build_acb({"session_id": "s2", "now": NOW, "max_tokens": budget,
                            "query_text": "deployment failure"})
    shown = section(acb, "recent_window")
    assert shown and {i["source_id"] for i in shown} == {latest}
    assert [i["id"] for i in shown] == [i["id"] for i in whole[:len(shown)]]
    assert all(i["truncated"] is True and i["full_token_est"] == full for i in shown)
    note = re.search(r"\n\[turn cut: (\d+) of (\d+) tokens shown\]$", shown[-1]["text"])
    assert note and int(note[2]) == full
    if len(shown) > 1 or shown[0]["text"].startswith(whole[0]["text"]):
        assert int(note[1]) == sum(i["token_est"] for i in whole[:len(shown)])
    else:  # the start of its first chunk
        assert whole[0]["text"].startswith(shown[0]["text"][:note.start()])
        assert 16 <= int(note[1]) < whole[0]["token_est"]
    elsewhere = {i["id"] for s in acb["sections"] if s["name"] != "recent_window"
                 for i in s["items"]}
    assert {i["id"] for i in whole[len(shown):]} <= set(omitted(acb, "budget")) | elsewhere
    assert sum(i["token_est"] for s in acb["sections"] for i in s["items"]) <= acb[
        "token_used_est"] <= acb["provenance"]["budget"]["available"]


def test_the_newest_turn_of_one_chunk_too_long_for_the_window_shows_its_start(
        memory: Memory) -> None:
    say(memory, "Earlier: the deployment is fine", session_id="s3", ts="2026-02-01T10:00:00Z")
    latest = say(memory, "Latest: " + "the deployment failure in frankfurt. " * 60,
                 session_id="s3", ts="2026-02-01T10:09:00Z")
    [whole] = [i for i in section(memory.build_acb({"session_id": "s3", "now": NOW}),
                                  "recent_window") if i["source_id"] == latest]
    acb = memory.build_acb({"session_id": "s3", "now": NOW, "max_tokens": 300})
    [shown] = section(acb, "recent_window")
    assert shown["id"] == whole["id"] and shown["full_token_est"] == whole["token_est"]
    head, _, note = shown["text"].rpartition("\n[turn cut: ")
    assert shown["truncated"] and whole["text"].startswith(head) and len(head) < len(
        whole["text"]) and note.endswith(f" of {whole['token_est']} tokens shown]")
