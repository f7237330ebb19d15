"""The shape of a benchmark corpus: tenants, sessions and where facts are planted.

Everything is drawn from one seeded `random.Random` (no global state), so the
same size and seed give the same plan. Tenant sizes are Zipfian (one tenant
holds close to half the events), sessions start over eight weeks before a
fixed `NOW`, mostly in working hours, and their lengths are log-normal.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone

from bench.facts import FACTS, FactTemplate, render, slot_values
from bench.text import topic_weights
from bench.vocabulary import PEOPLE, TOPICS, Zipf

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
SPAN_DAYS = 56
OLD_DAYS = 21
DAY_MS = 86_400_000
NOW_MS = int(NOW.timestamp() * 1000)


@dataclass(frozen=True)
class Shape:
    """How big a corpus is: events, tenants and planted questions."""

    events: int
    tenants: int
    questions: int


SHAPES = {
    "tiny": Shape(1_000, 3, 24),
    "10k": Shape(10_000, 5, 60),
    "100k": Shape(100_000, 12, 120),
    "1m": Shape(1_000_000, 40, 200),
    # the same million events in one tenant: the scale SPEC §5 sets bounded retrieval
    # against ("naive ts_rank over every match costs hundreds of milliseconds there")
    "1m-one": Shape(1_000_000, 1, 200),
}

_TENANT_NAMES = ("northwind", "contoso", "fabrikam", "tailspin", "wingtip", "litware",
                 "proseware", "adatum", "fourthcoffee", "woodgrove", "lucerne", "margie",
                 "alpineski", "bluebird", "cohovineyard", "graphicdesign", "humongous",
                 "lamna", "relecloud", "trey", "wideworld", "southridge", "vanarsdel",
                 "consolidated", "datum", "fincorp", "northridge", "blueyonder", "munson",
                 "nod", "parnell", "tuxedo", "adventure", "boulder", "cascade", "delta",
                 "everest", "fjord", "glacier", "harbor")
_AGENT_ROLES = ("coder", "ops", "reviewer", "support", "planner", "analyst", "oncall",
                "release")
_OFFSETS = (0, 1, 2, -5, -8, 9, 5.5, 3)


@dataclass(frozen=True)
class Tenant:
    """One tenant: its people, its agents and its clock's UTC offset."""

    id: str
    weight: float
    offset_minutes: int
    humans: tuple[str, ...]
    agents: tuple[str, ...]
    topics: Zipf

    @property
    def tz(self) -> timezone:
        """The tenant's UTC offset."""
        return timezone(timedelta(minutes=self.offset_minutes))


@dataclass
class Plant:
    """A planted fact (or decoy) inside a session: where, what, and the ids it got."""

    position: int
    turns: tuple[tuple[str, str], ...]   # (human|agent, text)
    question: int | None = None          # index into Plan.questions; None for a decoy
    event_ids: list[str] = field(default_factory=list)
    ts: str = ""


@dataclass
class SessionPlan:
    """One session: who talks, when it starts, how long it runs, what it hides."""

    index: int
    tenant: Tenant
    session_id: str
    channel: str
    start_ms: int
    length: int
    agent: str
    humans: tuple[str, ...]
    topic: str
    seed: int
    plants: list[Plant] = field(default_factory=list)


@dataclass
class Question:
    """A question with known evidence: the ids of the turns that state the fact."""

    id: str
    question: str
    fact: str
    fact_key: str
    tenant_id: str
    session_id: str
    agent_id: str
    channel: str
    categories: tuple[str, ...]
    plant: Plant

    def to_dict(self) -> dict[str, object]:
        """The JSON form saved beside the corpus."""
        planted = datetime.fromisoformat(self.plant.ts) if self.plant.ts else NOW
        return {"id": self.id, "question": self.question, "tenant_id": self.tenant_id,
                "session_id": self.session_id, "agent_id": self.agent_id,
                "channel": self.channel, "now": NOW.isoformat(),
                "evidence": list(self.plant.event_ids), "categories": list(self.categories),
                "fact": self.fact, "fact_key": self.fact_key, "planted_ts": self.plant.ts,
                "age_days": round((NOW - planted).total_seconds() / 86400, 2)}


@dataclass
class Plan:
    """Tenants, sessions (in start order) and the questions planted among them."""

    tenants: list[Tenant]
    sessions: list[SessionPlan]
    questions: list[Question]


def _tenants(rng: random.Random, count: int) -> list[Tenant]:
    tenants = []
    for rank in range(1, count + 1):
        name = _TENANT_NAMES[(rank - 1) % len(_TENANT_NAMES)]
        suffix = "" if rank <= len(_TENANT_NAMES) else str(rank)
        topics = list(TOPICS)
        rng.shuffle(topics)
        humans = tuple(rng.sample(PEOPLE, rng.randint(3, 10)))
        agents = tuple(f"{name}-{role}" for role in rng.sample(_AGENT_ROLES, rng.randint(2, 5)))
        tenants.append(Tenant(
            id=f"{name}{suffix}", weight=1.0 / rank ** 1.3,
            offset_minutes=int(rng.choice(_OFFSETS) * 60), humans=humans, agents=agents,
            topics=Zipf.of(topics, 1.0)))
    return tenants


def _start_ms(rng: random.Random) -> int:
    """A session start within the span, weighted to working hours."""
    day = rng.randrange(SPAN_DAYS)
    hour = rng.choices(range(24), weights=[1, 1, 1, 1, 1, 2, 3, 6, 10, 12, 12, 10, 8, 10, 12,
                                           12, 10, 8, 5, 4, 3, 2, 2, 1])[0]
    ms = NOW_MS - (day + 1) * DAY_MS + hour * 3_600_000 + rng.randrange(3_600_000)
    return min(ms, NOW_MS - 3 * 3_600_000)


def _sessions(rng: random.Random, tenants: list[Tenant], events: int) -> list[SessionPlan]:
    weights = [t.weight for t in tenants]
    channels = ("team", "private", "agent", "public")
    sessions: list[SessionPlan] = []
    total = 0
    topics = topic_weights()
    while total < events:
        tenant = rng.choices(tenants, weights=weights)[0]
        length = max(6, min(600, int(rng.lognormvariate(math.log(40), 0.9))))
        length = min(length, events - total) if events - total >= 6 else length
        sessions.append(SessionPlan(
            index=0, tenant=tenant, session_id=f"s_{rng.getrandbits(40):010x}",
            channel=rng.choices(channels, weights=(45, 30, 15, 10))[0],
            start_ms=_start_ms(rng), length=length, agent=rng.choice(tenant.agents),
            humans=tuple(rng.sample(tenant.humans, min(len(tenant.humans), rng.randint(1, 2)))),
            topic=tenant.topics.draw(rng) if rng.random() < 0.8 else topics.draw(rng),
            seed=rng.getrandbits(64)))
        total += length
    sessions.sort(key=lambda s: (s.start_ms, s.session_id))
    for index, session in enumerate(sessions):
        session.index = index
    return sessions


def _plant_questions(rng: random.Random, tenants: list[Tenant], sessions: list[SessionPlan],
                     count: int) -> list[Question]:
    by_tenant: dict[str, list[SessionPlan]] = {t.id: [] for t in tenants}
    for session in sessions:
        if session.channel == "team":
            by_tenant[session.tenant.id].append(session)
    pairs = [(t, f) for t in tenants if len(by_tenant[t.id]) >= 3 for f in FACTS]
    rng.shuffle(pairs)
    pairs.sort(key=lambda pair: -pair[0].weight * rng.random())  # bigger tenants first, mixed
    questions: list[Question] = []
    for tenant, fact in pairs[:count]:
        questions.append(_plant(rng, tenant, fact, by_tenant[tenant.id], len(questions)))
    return questions


def _plant(rng: random.Random, tenant: Tenant, fact: FactTemplate, hosts: list[SessionPlan],
           number: int) -> Question:
    old = rng.random() < 0.35
    cut = NOW_MS - OLD_DAYS * DAY_MS
    pool = [s for s in hosts[:-1] if (s.start_ms < cut) == old] or hosts[:-1]
    host = rng.choice(pool)
    values = slot_values(rng)
    turns = tuple((speaker, render(text, values)) for speaker, text in fact.turns)
    plant = Plant(position=rng.randrange(host.length), turns=turns, question=number)
    host.plants.append(plant)
    for decoy in fact.decoys:
        other = rng.choice(hosts)
        other.plants.append(Plant(position=rng.randrange(other.length),
                                  turns=((rng.choice(("human", "agent")), render(decoy, values)),)))
    asker = hosts[-1] if hosts[-1] is not host else hosts[-2]
    categories = ["direct" if fact.direct else "paraphrase"]
    if host.start_ms < cut:
        categories.append("old")
    if len(turns) > 1:
        categories.append("split")
    return Question(id=f"q{number + 1:03d}", question=render(fact.question, values),
                    fact=" / ".join(text for _, text in turns), fact_key=fact.key,
                    tenant_id=tenant.id, session_id=asker.session_id, agent_id=asker.agent,
                    channel="team", categories=tuple(categories), plant=plant)


def make_plan(events: int, tenants: int, questions: int, seed: int) -> Plan:
    """The whole corpus plan for a size and seed."""
    rng = random.Random(seed)
    tenant_list = _tenants(rng, tenants)
    sessions = _sessions(rng, tenant_list, events)
    planted = _plant_questions(rng, tenant_list, sessions, questions)
    return Plan(tenant_list, sessions, planted)
