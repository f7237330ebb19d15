"""One session's conversation as a stream of write operations, in time order.

A session alternates a person's (or a peer agent's) request with the agent's
work: tool calls and their results (rarely huge), replies, now and then a
decision citing the turns before it, a task or a task update, and at the end
sometimes a summary. Planted facts and decoys are spoken at their positions.
Event ids are ULIDs made from the event's time and the session's own seeded
random numbers, so a corpus is the same byte for byte on every run.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ulid import ULID

from bench import text
from bench.plan import NOW_MS, SessionPlan
from bench.vocabulary import SLOTS
from gitmem.records import format_ts

HUGE_RESULT_SHARE = 0.02     # of tool results (~0.5% of all events)
DECISION_SHARE = 0.04        # per exchange
TASK_SHARE = 0.03
TASK_UPDATE_SHARE = 0.03
SUMMARY_SHARE = 0.25         # of sessions with at least 20 events


@dataclass(frozen=True)
class Op:
    """One write: `event` (batched), `decide`, `task` or `task_update` (single)."""

    key: tuple[int, int, int]   # (ms, session index, sequence): the global write order
    action: str
    fields: dict[str, Any]


class _Session:
    def __init__(self, plan: SessionPlan) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.clock = plan.start_ms
        self.seq = 0
        self.count = 0
        self.recent: list[str] = []

    def tick(self, lo_ms: int, hi_ms: int) -> None:
        self.clock += self.rng.randint(lo_ms, hi_ms)

    def base(self, actor: dict[str, str]) -> dict[str, Any]:
        ms = self.clock
        when = datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=ms % 1000 * 1000)
        when = when.astimezone(self.plan.tenant.tz)
        event_id = f"evt_{ULID.from_int((ms << 80) | self.rng.getrandbits(80))}"
        return {"id": event_id, "ts": format_ts(when), "tenant_id": self.plan.tenant.id,
                "session_id": self.plan.session_id, "agent_id": self.plan.agent,
                "channel": self.plan.channel, "actor": actor}

    def op(self, action: str, fields: dict[str, Any]) -> Op:
        self.seq += 1
        self.count += 1
        self.recent = [*self.recent[-4:], fields["id"]]
        return Op((self.clock, self.plan.index, self.seq), action, fields)

    def event(self, actor: dict[str, str], kind: str, content: dict[str, Any],
              refs: list[str] | None = None, tags: list[str] | None = None,
              sensitivity: str = "none") -> Op:
        fields = {**self.base(actor), "kind": kind, "content": content, "refs": refs or [],
                  "tags": tags or [], "sensitivity": sensitivity}
        return self.op("event", fields)

    # ------------------------------------------------------------------ speakers

    def human(self) -> dict[str, str]:
        if self.plan.channel == "agent":
            peers = [a for a in self.plan.tenant.agents if a != self.plan.agent]
            return {"type": "agent", "id": self.rng.choice(peers or [self.plan.agent])}
        return {"type": "human", "id": self.rng.choice(self.plan.humans)}

    def agent(self) -> dict[str, str]:
        return {"type": "agent", "id": self.plan.agent}

    def speaker(self, who: str) -> dict[str, str]:
        return self.agent() if who == "agent" else self.human()


def session_ops(plan: SessionPlan) -> Iterator[Op]:
    """The session's writes in time order (ends before the corpus's NOW)."""
    s = _Session(plan)
    rng = s.rng
    plants = sorted(plan.plants, key=lambda p: p.position)
    while s.count < plan.length and s.clock < NOW_MS:
        while plants and plants[0].position <= s.count:
            yield from _planted(s, plants.pop(0))
        yield from _exchange(s, rng)
    for plant in plants:
        yield from _planted(s, plant)
    if s.count >= 20 and rng.random() < SUMMARY_SHARE:
        s.tick(5_000, 60_000)
        summary = " ".join(text.sentence(rng, text.SUMMARIES) for _ in range(rng.randint(2, 4)))
        op = s.event(s.agent(), "summary", {"text": summary, "scope": "session"},
                     refs=list(s.recent))
        # its id as seeded as its event's (else minted at random: no corpus twice the same)
        op.fields["content"]["summary_id"] = "sum_" + op.fields["id"].removeprefix("evt_")
        yield op


def _planted(s: _Session, plant: Any) -> Iterator[Op]:
    for who, said in plant.turns:
        s.tick(5_000, 90_000)
        op = s.event(s.speaker(who), "message", {"text": said})
        plant.event_ids.append(op.fields["id"])
        plant.ts = plant.ts or op.fields["ts"]
        yield op


def _exchange(s: _Session, rng: random.Random) -> Iterator[Op]:
    topic = s.plan.topic if rng.random() < 0.7 else s.plan.tenant.topics.draw(rng)
    s.tick(10_000, 600_000)
    yield _request(s, rng, topic)
    for _ in range(rng.choice((0, 0, 1, 1, 1, 2, 3))):
        s.tick(500, 8_000)
        call_op = s.event(s.agent(), "tool_call", text.tool_call(rng, topic))
        yield call_op
        call = call_op.fields["content"]
        s.tick(200, 30_000)
        huge = rng.random() < HUGE_RESULT_SHARE
        output = text.tool_output(rng, call, huge)
        content: dict[str, Any] = {"tool": call["tool"], "output": output}
        if call["tool"] == "fs.read_file":
            content["path"] = call["args"]["path"]
        yield s.event({"type": "tool", "id": call["tool"]}, "tool_result", content,
                      refs=[call_op.fields["id"]])
    s.tick(2_000, 40_000)
    yield s.event(s.agent(), "message", {"text": text.agent_message(rng, topic)})
    roll = rng.random()
    if roll < DECISION_SHARE:
        yield _decision(s, rng, topic)
    elif roll < DECISION_SHARE + TASK_SHARE:
        s.tick(1_000, 20_000)
        title = text.phrase(rng, text.TASKS)
        task_id = f"tsk_{ULID.from_int((s.clock << 80) | rng.getrandbits(80))}"
        yield s.op("task", {**s.base(s.agent()), "title": title[:1].upper() + title[1:],
                            "task_id": task_id, "owner": rng.choice(s.plan.tenant.humans),
                            "refs": list(s.recent[-2:])})
    elif roll < DECISION_SHARE + TASK_SHARE + TASK_UPDATE_SHARE:
        s.tick(1_000, 20_000)
        yield s.op("task_update", {**s.base(s.agent()), "pick": rng.random(),
                                   "status": rng.choice(("doing", "doing", "blocked", "done",
                                                         "done", "cancelled")),
                                   "refs": list(s.recent[-1:])})


def _request(s: _Session, rng: random.Random, topic: str) -> Op:
    roll = rng.random()
    tags = [f"topic:{topic}"] if rng.random() < 0.3 else []
    if roll < 0.02 and s.plan.channel != "public":
        return s.event(s.human(), "message", {"text": text.sensitive_message(rng)},
                       sensitivity="high")
    if roll < 0.021:
        return s.event(s.human(), "message", {"text": text.sentence(rng, text.PINNED)},
                       tags=["pinned", *tags])
    if roll < 0.0215:
        return s.event(s.human(), "message", {"text": text.secret_leak(rng)})
    sensitivity = "low" if roll > 0.95 else "none"
    return s.event(s.human(), "message", {"text": text.human_message(rng, topic)}, tags=tags,
                   sensitivity=sensitivity)


def _decision(s: _Session, rng: random.Random, topic: str) -> Op:
    s.tick(2_000, 60_000)
    svc = SLOTS["svc"].draw(rng)
    said = text.sentence(rng, text.DECISIONS)
    fields = {**s.base(s.agent()), "text": f"For {svc}: {said}",
              "title": f"{svc} {topic}", "chain": f"{topic}:{svc}",
              "supersede": rng.random() < 0.7, "refs": list(s.recent[-rng.randint(1, 3):]),
              "rationale": [text.phrase(rng, text.RATIONALES)],
              "alternatives": [f"{text.phrase(rng, text.TASKS)} instead"] if rng.random() < 0.5
              else [], "confidence": round(rng.uniform(0.5, 0.95), 2),
              "tags": [f"topic:{topic}"]}
    return s.op("decide", fields)
