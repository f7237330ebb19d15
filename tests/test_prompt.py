"""The prompt text of an ACB: what the JSON says beside an item (its date, a summary's
conflicts, a cut tool output's artifact) the text says too, and the text costs no
more tokens than the bundle counts."""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

import pytest

from gitmem import prompt, tokens
from gitmem.memory import Memory

NOW = "2026-11-27T12:00:00+00:00"
TEXTS = ["alice: no", "Decision: Use PostgreSQL", "[shell result build.log]\nline 0",
         "Summary (session): done", "Task [done] Rotate", "5 files", "  indented",
         "\nnewline first", "«quoted»", "日本語", "-dash", "(paren", "é", "[x]", "", "😀",
         "1234", "...", "<|endoftext|>", "] x", "UTC"]


def section(acb: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The items of one section."""
    return next(s["items"] for s in acb["sections"] if s["name"] == name)


def test_the_counts_made_ahead_bound_what_the_encoder_counts() -> None:
    """Packing charges the dates and notes the text adds by counts made ahead (it never
    loads the encoder): each must be at least what cl100k_base counts, joins included."""
    rng = random.Random(7)
    for _ in range(3000):
        text = rng.choice(TEXTS)
        ts = (f"{rng.randint(1970, 2999)}-{rng.randint(1, 12):02d}-{rng.randint(1, 31):02d}"
              f"T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00+00:00")
        full, short = prompt.stamps([{"ts": ts}, {"ts": ts}])
        assert full.endswith(" UTC] ") and short == f"[{ts[11:16]}] "
        assert tokens.count(full + text) - tokens.count(text) <= prompt.STAMP_TOKENS
        assert tokens.count(short + text) - tokens.count(text) <= prompt.TIME_TOKENS
        artifact = "art_" + hashlib.sha256(ts.encode()).hexdigest()
        for form in (prompt.ARTIFACT_NOTE, prompt.GAP_NOTE):  # at the end, at a hole
            note = "\n" + form.format(artifact)
            assert (tokens.count(text + note) - tokens.count(text)
                    <= prompt.artifact_note_tokens(artifact))
        shown, full = rng.randint(0, 10 ** rng.randint(1, 6)), rng.randint(1, 10 ** 6)
        assert (tokens.count(text + prompt.TURN_NOTE.format(shown, full)) - tokens.count(text)
                <= prompt.turn_note_tokens(shown, full))


def test_an_item_of_another_day_is_dated_in_full_and_of_the_same_day_by_its_time() -> None:
    items = [{"ts": "2026-11-26T23:59:00+00:00"}, {"ts": "2026-11-27T00:01:00+00:00"},
             {}, {"ts": "2026-11-27T09:30:12.5+00:00"}]
    assert prompt.stamps(items) == ["[2026-11-26 23:59 UTC] ", "[2026-11-27 00:01 UTC] ", "",
                                    "[09:30] "]
    assert prompt.shortened(items) == prompt.STAMP_TOKENS - prompt.TIME_TOKENS


def record(memory: Memory, text: str, ts: str, session: str = "c1", **fields: Any) -> str:
    return memory.record({"session_id": session, "ts": ts, "content": {"text": text},
                          **fields}).id


def test_the_text_dates_every_item_so_their_order_in_time_reads(memory: Memory) -> None:
    """"Migration done" and "We will migrate" read in either order without dates."""
    record(memory, "We will migrate the ledger to the new cluster", "2026-11-20T09:00:00Z",
           session="ops")
    record(memory, "Ledger migration done", "2026-11-26T16:30:00Z", session="ops")
    record(memory, "Is the ledger migrated?", "2026-11-27T10:00:00Z")
    record(memory, "Checking", "2026-11-27T10:02:00Z", actor={"type": "agent", "id": "bot"})
    acb = memory.build_acb({"session_id": "c1", "now": NOW, "query_text": "ledger migration"})
    text = prompt.render_text(acb)
    assert "[2026-11-20 09:00 UTC] user: We will migrate the ledger" in text
    assert "[2026-11-26 16:30 UTC] user: Ledger migration done" in text
    assert ("## Recent conversation\n[2026-11-27 10:00 UTC] user: Is the ledger migrated?"
            "\n\n[10:02] bot: Checking\n") in text
    assert tokens.count(text) <= acb["token_used_est"]


def test_the_text_marks_a_stale_summary(memory: Memory) -> None:
    """The JSON flags a summary that states a since-superseded decision as current
    (`conflicts`); the text says so next to it, naming both decisions."""
    evt = record(memory, "Deploy billing with Ansible", "2026-11-20T09:00:00Z", session="ops")
    old = memory.decide("Billing is deployed with Ansible", [evt],
                        ts="2026-11-20T09:05:00+00:00").content["decision_id"]
    summary = memory.record({"kind": "summary", "session_id": "ops", "refs": [evt],
                             "ts": "2026-11-21T09:00:00+00:00", "content": {
                                 "text": "Billing deploys run with Ansible playbooks",
                                 "scope": "session", "decisions": [old]}}
                            ).content["summary_id"]
    new = memory.decide("Billing is deployed with Helm charts", [evt], supersedes=[old],
                        ts="2026-11-22T09:00:00+00:00").content["decision_id"]
    acb = memory.build_acb({"session_id": "c1", "now": NOW,
                            "query_text": "how are billing deploys run"})
    [item] = [i for i in section(acb, "retrieved_evidence") if i["id"] == summary]
    assert item["conflicts"] == [{"kind": "superseded_decision", "decision": old,
                                  "superseded_by": new, "stale": True}]
    text = prompt.render_text(acb)
    assert (f"Summary (session): Billing deploys run with Ansible playbooks\n"
            f"(stale: cites superseded decision {old}, now {new})") in text
    assert tokens.count(text) <= acb["token_used_est"]


def test_the_text_says_where_tool_output_was_cut_and_which_artifact_holds_it(
        memory: Memory) -> None:
    big = "".join(f"line {n}: migration log of the ledger shards\n" for n in range(2000))
    cut = memory.record({"kind": "tool_result", "session_id": "c1", "ts": NOW, "content": {
        "tool": "shell", "path": "migrate.log", "output": big}})
    whole = memory.record({"kind": "tool_result", "session_id": "c1", "ts": NOW, "content": {
        "tool": "shell", "path": "small.log", "output": "all good\n"}})
    acb = memory.build_acb({"session_id": "c1", "now": NOW})
    chunks = [i for i in section(acb, "tool_state") if i["source_id"] == cut.id]
    assert len(chunks) > 1 and whole.id in [i["id"] for i in section(acb, "tool_state")]
    text = prompt.render_text(acb)
    artifact = cut.content["artifact_id"]
    assert text.count(artifact) == 1  # one note
    parts = [int(i["id"].partition("#")[2]) for i in chunks]
    if parts == list(range(1, len(parts) + 1)):  # no hole: after its last chunk
        note = f"[output cut here; the whole output is artifact {artifact}]"
        assert text.index(note) > text.index(chunks[-1]["text"][-40:])
    else:  # at the hole between its head and its tail's end, not after that end
        note = f"[… output not shown from here to its next part; the whole output is " \
               f"artifact {artifact}]"
        hole = next(n for n in range(1, len(parts)) if parts[n] != parts[n - 1] + 1)
        assert chunks[hole - 1]["text"] + "\n" + note + "\n\n" in text
        assert "[output cut here" not in text
    assert tokens.count(text) <= acb["token_used_est"]


@pytest.mark.parametrize("budget", [300, 1000, 4000, 65000])
def test_the_text_never_costs_more_than_the_bundle_counts(memory: Memory, budget: int) -> None:
    big = "".join(f"line {n}: build output of the invoices service\n" for n in range(3000))
    memory.record({"kind": "tool_result", "session_id": "c1", "ts": NOW, "content": {
        "tool": "make", "path": "build.log", "output": big}})
    for n in range(60):
        record(memory, f"turn {n}: the invoices service build is slow on step {n}",
               f"2026-11-{20 + n % 7}T1{n % 10}:{n:02d}:00Z", session="c1" if n % 2 else "c2")
    acb = memory.build_acb({"session_id": "c1", "now": NOW, "max_tokens": budget,
                            "query_text": "invoices service build"})
    text = prompt.render_text(acb)
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d UTC\] ", text, re.MULTILINE)
    assert tokens.count(text) <= acb["token_used_est"] <= acb["provenance"]["budget"][
        "available"]


def test_a_cut_outputs_note_says_gap_only_where_a_part_is_missing() -> None:
    """Retrieved evidence lists an output's chunks by score: all four shown as #4, #2, #1,
    #3 put the gap note after #4 (its end), telling the model a part was missing."""
    def chunk(part: int) -> dict[str, Any]:
        return {"id": f"evt_A#{part}", "source_id": "evt_A", "artifact_id": "art_x",
                "text": f"part {part}"}

    every = [chunk(4), chunk(2), chunk(1), chunk(3)]
    assert prompt._artifact_notes(every) == {3: prompt.ARTIFACT_NOTE.format("art_x")}
    holed = [chunk(4), chunk(1), chunk(2)]  # #3 not shown: the hole is after #2
    assert prompt._artifact_notes(holed) == {2: prompt.GAP_NOTE.format("art_x")}


@pytest.mark.parametrize("budget", [600, 1500, 2100])
def test_the_text_of_a_cut_newest_turn_costs_no_more_than_the_bundle_counts(
        memory: Memory, budget: int) -> None:
    for n in range(3):
        record(memory, f"note {n}: the deployment is fine", f"2026-11-2{n}T10:00:00Z", "s2")
    words = " ".join(["the deployment failure of the payments cluster in frankfurt"] * 180)
    latest = record(memory, f"Latest: {words}", "2026-11-26T10:00:00Z", "s2")
    acb = memory.build_acb({"session_id": "s2", "now": NOW, "max_tokens": budget,
                            "query_text": "deployment failure"})
    shown = section(acb, "recent_window")
    assert shown and all(i["source_id"] == latest and i["truncated"] for i in shown)
    text = prompt.render_text(acb)
    assert re.search(r"\[turn cut: \d+ of \d+ tokens shown\]\n", text)
    assert tokens.count(text) <= acb["token_used_est"]
