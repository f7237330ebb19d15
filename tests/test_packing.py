"""Packing a bundle under its budget: the scaled caps of the first pass, and the space
they leave unused, given in a second pass to what was left out (on a real store and
PostgreSQL)."""

from __future__ import annotations

import re
from typing import Any

from gitmem import tokens
from gitmem.items import cut_text
from gitmem.memory import Memory
from gitmem.packing import ITEM_SEPARATOR_TOKENS, within_caps
from gitmem.prompt import header_tokens, overhead

NOW = "2026-11-27T11:00:00+00:00"


def section(acb: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The items of one section."""
    return next(s["items"] for s in acb["sections"] if s["name"] == name)


def omitted(acb: dict[str, Any], reason: str) -> list[str]:
    return [c for o in acb["omissions"] if o["reason"] == reason for c in o["candidates"]]


def set_budgets(memory: Memory, total: int, reserve: int, caps: dict[str, int]) -> None:
    """Rewrite budgets.yaml's total, reserve and some sections' caps."""
    path = memory.store / "policies" / "budgets.yaml"
    text = path.read_text()
    text = re.sub(r"acb_total_max_tokens: \d+", f"acb_total_max_tokens: {total}", text)
    text = re.sub(r"reserve_tokens: \d+", f"reserve_tokens: {reserve}", text)
    for name, cap in caps.items():
        text = re.sub(rf"({name}:\s+\{{max_tokens: )\d+", rf"\g<1>{cap}", text)
    path.write_text(text)


def within_budget(memory: Memory, acb: dict[str, Any]) -> None:
    """The hard rules: no section over its policy's cap, nothing over the budget."""
    budget = acb["provenance"]["budget"]
    assert acb["token_used_est"] <= budget["available"]
    assert acb["token_used_est"] == sum(s["token_est"] for s in acb["sections"])
    for s in acb["sections"]:
        assert within_caps(s, memory.policies.budgets.sections[s["name"]].max_tokens), s["name"]


def test_space_a_section_leaves_unused_goes_to_what_another_left_out(memory: Memory) -> None:
    """30 turns at a budget of 2,000 tokens: the recent window's scaled cap (369 tokens)
    held 15 of them while 1,400 of the 1,847 tokens available went unused."""
    ids = [memory.record({"session_id": "c1", "ts": f"2026-11-27T10:{n}:00Z", "content": {
        "text": f"turn {n}: we talked about step {n} of the rollout plan and agreed on the "
                "next action"}}).id for n in range(10, 40)]
    request = {"session_id": "c1", "now": NOW, "max_tokens": 2000}
    acb = memory.build_acb(request)
    assert [i["id"] for i in section(acb, "recent_window")] == ids  # oldest first, all
    assert not omitted(acb, "budget")
    assert section(acb, "recent_window") and acb["provenance"]["budget"]["scale"] < 1
    within_budget(memory, acb)
    scaled = int(memory.policies.budgets.sections["recent_window"].max_tokens * 2000 / 65000)
    assert next(s for s in acb["sections"] if s["name"] == "recent_window")["token_est"] > scaled
    memory.cache.invalidate()
    assert memory.build_acb(request)["acb_id"] == acb["acb_id"]  # packed again: the same


def test_the_second_pass_serves_sections_in_priority_order(memory: Memory) -> None:
    """Both relevant_decisions and recent_window leave an item out in the first pass;
    the space left holds one of them: the decision's, the higher-priority section."""
    for view in (memory.store / "views").iterdir():
        view.unlink()  # only the items of this test compete
    first = memory.record({"session_id": "c1", "ts": "2026-11-27T09:00:00Z",
                           "content": {"text": "Which queue should the billing jobs use?"}}).id
    older = memory.decide("Retry a failed billing job three times", [first],
                          ts="2026-11-27T09:01:00+00:00").content["decision_id"]
    newer = memory.decide("Run the billing jobs from a PostgreSQL table with SKIP LOCKED",
                          [first], ts="2026-11-27T09:02:00+00:00").content["decision_id"]
    turns = [memory.record({"session_id": "c1", "ts": f"2026-11-27T10:0{n}:00Z", "content": {
        "text": f"Note {n}: the billing job queue keeps its rows for thirty days"}}).id
        for n in range(4)]
    full = memory.build_acb({"session_id": "c1", "now": NOW})
    cost = {i["id"]: i["token_est"] + ITEM_SEPARATOR_TOKENS + overhead(i)  # as packed
            for s in full["sections"] for i in s["items"]}
    decisions = header_tokens("relevant_decisions") + cost[newer]
    assert decisions > cost[older]  # the policy's cap holds both
    recent = header_tokens("recent_window") + sum(cost[t] for t in turns[1:])
    # at half the total, the caps hold the newer decision and the three latest turns; the
    # reserve leaves room for one more decision, not for it and the oldest turn as well
    set_budgets(memory, 2000, 2000 - 2 * (decisions + recent + cost[older] + 1), {
        "relevant_decisions": 2 * decisions + 1, "recent_window": 2 * recent + 1})
    acb = memory.build_acb({"session_id": "c1", "now": NOW, "max_tokens": 1000})
    assert [i["id"] for i in section(acb, "relevant_decisions")] == [newer, older]
    assert [i["id"] for i in section(acb, "recent_window")] == turns[1:]
    assert omitted(acb, "budget") == sorted([first, turns[0]])
    within_budget(memory, acb)
    assert acb["provenance"]["budget"]["available"] - acb["token_used_est"] < cost[turns[0]]


def test_a_second_pass_keeps_each_section_in_its_own_order(memory: Memory) -> None:
    """The newest task is too big for task_state's scaled cap, two older small ones fit:
    packed in the second pass, it goes first (newest first), not after them."""
    small = [memory.task(f"Rotate key {n}", ts=f"2026-11-2{n}T10:00:00+00:00").content["task_id"]
             for n in range(2)]
    big = memory.task("Rotate every certificate of the staging cluster", details=(
        "the ingress, the database, the message broker and the metrics endpoints " * 3),
        ts="2026-11-25T10:00:00+00:00").content["task_id"]
    acb = memory.build_acb({"session_id": "c1", "now": NOW, "max_tokens": 1000})
    assert [i["id"] for i in section(acb, "task_state")] == [big, small[1], small[0]]
    scaled = int(memory.policies.budgets.sections["task_state"].max_tokens * 1000 / 65000)
    assert section(acb, "task_state")[0]["token_est"] > scaled
    assert "second_pass" in acb["provenance"]["timings_ms"]
    within_budget(memory, acb)


IDENTITY = ("---\nsection: identity\npinned: true\n---\n# Identity\n\nYou are Atlas, the billing "
            "assistant of Acme. Never issue refunds above 500 EUR without approval.\n"
            + "".join(f"Guideline {n}: be careful with invoices and double-check totals. "
                      for n in range(1, 131)) + "\n")


def test_a_pinned_view_larger_than_its_section_is_cut_to_fit_not_dropped(
        memory: Memory) -> None:
    (memory.store / "views" / "identity.md").write_text(IDENTITY)
    acb = memory.build_acb({"now": NOW, "query_text": "refund"})
    [item] = section(acb, "identity")
    cap = memory.policies.budgets.sections["identity"].max_tokens
    assert item["id"] == "views/identity.md#identity" and item["truncated"] is True
    assert item["full_token_est"] > cap >= item["token_est"] + ITEM_SEPARATOR_TOKENS
    assert item["text"].startswith("# Identity\n\nYou are Atlas")
    assert "Never issue refunds above 500 EUR without approval." in item["text"]
    body, note = item["text"].rsplit("\n", 1)
    assert body.endswith("double-check totals.")  # at the end of a sentence
    assert note == (f"[cut to fit: {tokens.count(body)} of {item['full_token_est']} tokens "
                    "shown; the whole is views/identity.md#identity]")
    assert item["token_est"] == tokens.count(item["text"])
    assert not omitted(acb, "budget")
    assert [o for o in acb["omissions"] if o["reason"] == "truncated_pinned"] == [{
        "reason": "truncated_pinned", "candidates": ["views/identity.md#identity"],
        "source": "views/identity.md#identity", "token_est": item["full_token_est"],
        "shown_token_est": item["token_est"]}]
    within_budget(memory, acb)
    fast = memory.build_acb({"now": NOW})  # the fast path, its bundle kept: the same item
    assert section(fast, "identity") == [item]


def test_a_pinned_item_is_cut_at_a_line_break_that_keeps_most_of_it(memory: Memory) -> None:
    lines = "".join(f"- rule {n}: answer in the customer's language, with the invoice number\n"
                    for n in range(450))
    (memory.store / "views" / "rules.md").write_text(
        f"---\nsection: rules\npinned: true\n---\n# Rules\n\n{lines}")
    acb = memory.build_acb({"now": NOW})
    item = next(i for i in section(acb, "rules") if i["id"] == "views/rules.md#rules")
    body = item["text"].rsplit("\n", 1)[0]
    assert item["truncated"] and ("# Rules\n\n" + lines).startswith(body + "\n")  # whole lines
    cap = memory.policies.budgets.sections["rules"].max_tokens
    assert item["full_token_est"] > cap > item["token_est"] > 0.95 * cap  # most of the room
    within_budget(memory, acb)


def test_a_pinned_item_with_no_room_for_a_useful_part_is_left_out_for_budget(
        memory: Memory) -> None:
    (memory.store / "views" / "identity.md").write_text(IDENTITY)
    acb = memory.build_acb({"now": NOW, "max_tokens": 30})
    assert not section(acb, "identity")
    assert "views/identity.md#identity" in omitted(acb, "budget")
    assert not omitted(acb, "truncated_pinned")


def test_a_text_without_spaces_is_cut_near_the_room_not_at_its_headings_space() -> None:
    """A Chinese view was cut at the space of `# `: `#` alone shown of 6,000 tokens."""
    chinese = "# 部署规则\n\n" + "我们决定只在法兰克福集群部署。" * 800
    head = cut_text(chinese, 6000)
    assert tokens.count(head) > 5000 and head.endswith("\u3002")
    russian = "## Второй\n\n" + "оченьдлинноеслово" * 500
    assert tokens.count(cut_text(russian, 100)) > 90
