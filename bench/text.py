"""The benchmark corpus's grammar: templates that turn vocabulary into conversation.

Templates hold `{slot}` placeholders filled from `bench.vocabulary`; each topic
has sentences people say and sentences agents say, drawn with Zipfian weights
so some phrasings dominate. Tool calls and their outputs (small, or huge logs
that the write path cuts into an excerpt plus an artifact) come from here too.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from typing import Any

from bench.vocabulary import SLOTS, TOPICS, Zipf, generated

_SLOT = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Template:
    """A sentence with `{slot}` holes, split once into literals and slot names."""

    parts: tuple[str, ...]  # literal, slot, literal, slot, ..., literal

    @classmethod
    def of(cls, text: str) -> Template:
        """Compile a template string."""
        return cls(tuple(_SLOT.split(text)))

    def fill(self, rng: random.Random, fixed: dict[str, str] | None = None) -> str:
        """The sentence with every slot drawn (or taken from `fixed`)."""
        out: list[str] = []
        for index, part in enumerate(self.parts):
            if index % 2 == 0:
                out.append(part)
            elif fixed is not None and part in fixed:
                out.append(fixed[part])
            else:
                out.append(generated(part, rng) or SLOTS[part].draw(rng))
        text = "".join(out)
        first = text.split(" ", 1)[0]
        if any(c.isdigit() or c in "-_." for c in first.rstrip(".,:;?")):
            return text  # an identifier (eu-west-1, order_lines) keeps its case
        return text[:1].upper() + text[1:]


@functools.cache
def compiled(text: str) -> Template:
    """A template string compiled once."""
    return Template.of(text)


def _bank(text: str) -> Zipf:
    return Zipf.of([t.strip() for t in text.strip().split("\n") if t.strip()], 0.8)


HUMAN: dict[str, Zipf] = {
    "deploys": _bank("""
can you deploy the {svc} service to {env}?
the {svc} deploy to {env} failed again, can you check why?
we {verbed} {svc} {time} and {metric} went up.
please hold the {svc} rollout until {person} signs off.
is the {comp} for {svc} ready for the release?
let's {verb} the {svc} {comp} before the next deploy.
who approved the {svc} release {time}?
the canary for {svc} looks fine, go ahead with {env}.
why did the {svc} deployment take so long {time}?
roll back {svc} in {env}, we are seeing {problem}."""),
    "databases": _bank("""
the {svc} database has {problem} again.
can you look at the slow query in {svc}? it started {time}.
we need to {verb} the {comp} for {svc} before it fills up.
how big is the {svc} table now?
is the {svc} migration safe to run during business hours?
{person} thinks the {comp} needs a new index.
check the replication lag on the {svc} read replica.
we should try {rare} for the {svc} {comp}."""),
    "incidents": _bank("""
we have an incident: {svc} is throwing {problem}.
{ticket} is open, {svc} in {env} is degraded.
who is on call for {svc} this week?
the pager went off {time} for {svc} {metric}.
can you write the postmortem for {ticket}?
customers report {problem} on {svc} since {time}.
what was the root cause of the {svc} outage {time}?"""),
    "reviews": _bank("""
can you review PR {pr} for the {svc} {comp}?
{person} left comments on PR {pr}, please address them.
the tests on PR {pr} are failing with {problem}.
please split PR {pr}, it touches the {comp} and the {svc} {comp}.
is PR {pr} safe to merge before the freeze?
I don't like the {rare} approach in PR {pr}."""),
    "customers": _bank("""
{customer} complained about {problem} in the {svc} integration.
{customer} wants a call about their {svc} usage next week.
{customer} asked whether we support {rare}.
can you prepare the quarterly report for {customer}?
{person} is the account lead for {customer} now.
{customer} is hitting the rate limit on {svc}.
the {customer} contract renewal depends on the {svc} fix."""),
    "ci": _bank("""
the {svc} build is red since {time}.
CI takes {n} minutes now, can we speed it up?
the {comp} job in CI keeps failing with {problem}.
can you bump {tool} in the {svc} pipeline?
the flaky test in {svc} blocked three merges {time}."""),
    "planning": _bank("""
what is left for the {svc} milestone?
let's plan the {svc} {comp} work for next sprint.
{person} will own the {svc} {comp} migration.
can you estimate the {svc} {comp} rewrite?
we should drop the {svc} {comp} from this quarter's scope.
the {team} team needs the {svc} API by {time}."""),
    "observability": _bank("""
the {svc} dashboard shows {metric} at {pct}.
can you add an alert on {metric} for {svc}?
{metric} for {svc} doubled {time}, any idea why?
the {tool} traces for {svc} are missing spans."""),
    "security": _bank("""
rotate the {svc} credentials, {person} left the company.
the scanner flagged {svc} for an outdated {comp}.
who has admin access to the {svc} {comp}?
we need an audit of the {svc} {comp} permissions before {time}."""),
    "infra": _bank("""
the {svc} nodes are at {pct} CPU.
can you move {svc} to the new {comp}?
we are paying too much for the {svc} {comp}.
{person} wants to try {tool} for the {svc} {comp}.
let's {verb} the {comp} in {env} this week."""),
}

AGENT: dict[str, Zipf] = {
    "deploys": _bank("""
I {verbed} {svc} in {env}; the rollout finished in {n} minutes.
the {svc} deploy failed {reason}.
I checked the {svc} {comp}: {metric} is back to normal at {ms}.
the rollout of {svc} is paused at {pct} of pods.
I will {verb} the {svc} {comp} and report back.
the previous {svc} release was {ver}; the new one is {ver}."""),
    "databases": _bank("""
the slow query on {svc} scans the whole table {reason}.
I added an index on the {svc} {comp}; the query now takes {ms}.
replication lag on the {svc} replica is {ms}.
the {svc} table has grown by {pct} this month.
I ran EXPLAIN ANALYZE on the {svc} query: it uses a {rare}.
vacuum on the {svc} {comp} finished after {n} minutes."""),
    "incidents": _bank("""
{svc} returned {problem} from {time} until I {verbed} it.
the root cause looks like {problem} {reason}.
I opened {ticket} and paged {person}.
{metric} on {svc} recovered after the {comp} was {verbed}.
timeline: {svc} degraded {time}, mitigated {n} minutes later.
the incident affected {pct} of requests to {svc}."""),
    "reviews": _bank("""
I reviewed PR {pr}: the {comp} change looks correct, but tests are missing.
PR {pr} introduces {problem} when the {comp} is empty.
I left {n} comments on PR {pr}; the main one is about {rare}.
PR {pr} is approved and merged into the release branch."""),
    "customers": _bank("""
{customer} made {n} calls to {svc} in the last hour.
I drafted a reply to {customer} about {problem}.
the {customer} integration uses the {svc} {comp} heavily.
{customer}'s usage of {svc} grew {pct} month over month."""),
    "ci": _bank("""
the {svc} build fails {reason}.
I quarantined the flaky test in {svc}; CI is green again.
CI time for {svc} dropped from {n} to {n} minutes after caching.
the {comp} step in CI now runs in parallel."""),
    "planning": _bank("""
remaining for the {svc} milestone: the {comp}, the {comp} and docs.
I estimate the {svc} {comp} work at {n} days.
I created a task for the {svc} {comp} and assigned it to {person}.
the {svc} plan depends on the {team} team finishing the {comp}."""),
    "observability": _bank("""
{metric} for {svc} is {ms} at p95 over the last hour.
I added an alert: {svc} {metric} above {pct} for {n} minutes.
the {tool} dashboard for {svc} now shows {metric} per tenant.
I found the missing spans: the {comp} drops the trace header."""),
    "security": _bank("""
I rotated the {svc} credentials and updated the {comp}.
the scanner finding on {svc} is a false positive; the {comp} is patched.
{n} people have admin access to the {svc} {comp}.
I enabled {rare} on the {svc} {comp}."""),
    "infra": _bank("""
I {verbed} the {svc} {comp} in {env}.
{svc} runs on {n} nodes at {pct} CPU.
moving {svc} to the new {comp} saves about {pct} of the cost.
the {comp} in {env} was {verbed} {reason}."""),
}

OPENERS = _bank("""
ok.
thanks.
sure.
got it.
one more thing.
quick question.
heads up.
fyi.""")

SENSITIVE = _bank("""
{person}'s salary review is next week; keep the numbers out of the team channel.
{person} is on medical leave until the end of the month.
{person}'s personal phone number is in the HR system, do not share it.
the severance terms for {person} are confidential.
{customer}'s contract value and discount are confidential.""")

SECRET_LEAKS = (
    "here is the staging token: {tok} use it for the smoke test",
    "the db password={tok} for the {svc} replica, rotate it after",
    "api_key: {tok} for the {svc} sandbox",
)


DECISIONS = _bank("""
{svc} deploys go through the {comp} with a {pct} canary first.
we use {tool} to manage the {svc} {comp}.
the {svc} {comp} is owned by the {team} team.
retries for {svc} are capped at {n} with exponential backoff and jitter.
we keep {svc} logs for {n} days and then archive them.
the {svc} {comp} moves to {env} only after a load test.
{svc} talks to the {comp} through the service mesh, never directly.
schema changes to {svc} ship as expand-and-contract migrations.
the {svc} {comp} timeout is {ms}.
{svc} alerts page the {team} team, not the platform team.""")

RATIONALES = _bank("""
it caught {problem} twice last quarter
the {team} team already runs it
it keeps {metric} predictable
it is the cheapest option that meets the SLO
{person} measured it under load
it avoids {problem}""")

TASKS = _bank("""
{verb} the {svc} {comp}
write the runbook for {svc} {problem}
add an alert on {svc} {metric}
investigate {problem} in {svc}
follow up with {customer} about {svc}
clean up the {svc} {comp} config""")

PINNED = _bank("""
always {verb} the {svc} {comp} in staging before {env}.
never deploy {svc} on Fridays without {person}'s approval.
every {svc} change needs a rollback plan in the PR description.
customer data from {customer} must stay in the EU region.""")

SUMMARIES = _bank("""
we discussed {problem} in {svc} and agreed to {verb} the {comp}.
the session covered the {svc} rollout; {metric} stayed within the SLO.
{person} and the agent reviewed PR {pr} and the {svc} {comp} plan.
open question: whether to {verb} the {svc} {comp} before {time}.""")


def sentence(rng: random.Random, bank: Zipf) -> str:
    """One sentence from `bank`, filled and punctuated."""
    return _end(compiled(bank.draw(rng)).fill(rng))


def phrase(rng: random.Random, bank: Zipf) -> str:
    """One phrase from `bank`, filled, without final punctuation."""
    return compiled(bank.draw(rng)).fill(rng)


def topic_weights() -> Zipf:
    """Topics in rank order: deploys and databases come up most."""
    return Zipf.of(TOPICS, 0.9)


def human_message(rng: random.Random, topic: str) -> str:
    """What a person says: one to three sentences."""
    count = rng.choice((1, 1, 1, 2, 2, 3))
    parts = [compiled(HUMAN[topic].draw(rng)).fill(rng) for _ in range(count)]
    if rng.random() < 0.15:
        parts.insert(0, OPENERS.draw(rng).capitalize())
    return " ".join(_end(p) for p in parts)


def agent_message(rng: random.Random, topic: str) -> str:
    """What an agent says: two to five sentences, sometimes with a list."""
    count = rng.choice((2, 2, 3, 3, 4, 5))
    parts = [_end(compiled(AGENT[topic].draw(rng)).fill(rng)) for _ in range(count)]
    if rng.random() < 0.1:
        return parts[0] + "\n\n" + "\n".join(f"- {p}" for p in parts[1:])
    return " ".join(parts)


def sensitive_message(rng: random.Random) -> str:
    """A message that must not reach a team or public channel."""
    return _end(compiled(SENSITIVE.draw(rng)).fill(rng))


def secret_leak(rng: random.Random) -> str:
    """A message carrying a credential that the write path must redact."""
    token = "".join(rng.choice("abcdefghijkmnopqrstuvwxyz0123456789") for _ in range(24))
    return compiled(rng.choice(SECRET_LEAKS)).fill(rng, {"tok": token})


def _end(sentence: str) -> str:
    return sentence if sentence.endswith((".", "?", "!", ":")) else sentence + "."


# --------------------------------------------------------------------------- tools

def tool_call(rng: random.Random, topic: str) -> dict[str, Any]:
    """The content of a tool_call event."""
    svc = SLOTS["svc"].draw(rng)
    kind = rng.choice(("shell", "shell", "sql", "read", "http", "logs", "grep", "ci"))
    if kind == "shell":
        namespace = rng.choice(("prod", "staging"))
        cmd = rng.choice((f"kubectl rollout status deploy/{svc} -n {namespace}",
                          f"kubectl get pods -l app={svc}",
                          f"git log --oneline -n 20 -- services/{svc}",
                          f"make test SERVICE={svc}", f"df -h /var/lib/{svc}",
                          f"helm history {svc}"))
        return {"tool": "shell.run", "args": {"cmd": cmd}}
    if kind == "sql":
        return {"tool": "sql.query", "args": {"sql": f"SELECT count(*) FROM {svc.replace('-', '_')}"
                                               f"_events WHERE created_at > now() - interval "
                                               f"'{rng.randint(1, 48)} hours'"}}
    if kind == "read":
        return {"tool": "fs.read_file", "args": {"path": f"services/{svc}/config.yaml"}}
    if kind == "http":
        return {"tool": "http.get", "args": {"url": f"https://{svc}.internal/healthz"}}
    if kind == "logs":
        return {"tool": "k8s.logs", "args": {"pod": generated("host", rng), "tail": 500}}
    if kind == "grep":
        return {"tool": "fs.grep", "args": {"pattern": SLOTS["comp"].draw(rng),
                                            "path": f"services/{svc}"}}
    return {"tool": "ci.status", "args": {"pipeline": f"{svc}-{topic}"}}


_LEVELS = ("INFO", "INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")
_LOG_MSGS = (
    "request handled status=200 duration={ms}",
    "request handled status=500 duration={ms} error={problem}",
    "retrying {comp} call attempt={n}",
    "connection pool size={n} in_use={n}",
    "cache miss key={svc}:{n}",
    "scheduled job finished in {ms}",
    "slow query on {comp} took {ms}",
    "health check ok",
    "consumer lag {n} messages on {comp}",
)
_LOG_TEMPLATES = tuple(Template.of(t) for t in _LOG_MSGS)


def log_lines(rng: random.Random, count: int, svc: str) -> list[str]:
    """`count` plausible log lines of one service."""
    lines: list[str] = []
    minute = rng.randint(0, 1400)
    for index in range(count):
        second = (minute * 60 + index * 7) % 86400
        stamp = f"{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}"
        lines.append(f"{stamp} {rng.choice(_LEVELS)} [{svc}] "
                     f"{rng.choice(_LOG_TEMPLATES).fill(rng).lower()}")
    return lines


def tool_output(rng: random.Random, call: dict[str, Any], huge: bool) -> str:
    """The output of a tool call: a few lines, or (huge) tens of kilobytes of log."""
    svc = SLOTS["svc"].draw(rng)
    if huge:
        return "\n".join(log_lines(rng, rng.randint(150, 800), svc)) + "\n"
    tool = call["tool"]
    if tool == "sql.query":
        return f" count\n-------\n {rng.randint(0, 10**6)}\n(1 row)\n"
    if tool == "fs.read_file":
        keys = ("replicas", "timeout_ms", "pool_size", "max_retries", "batch_size")
        return "\n".join(f"{k}: {rng.randint(1, 500)}" for k in rng.sample(keys, 3)) + "\n"
    if tool == "http.get":
        return f'{{"status": "ok", "version": "{generated("ver", rng)}", "uptime_s": ' \
               f'{rng.randint(10, 10**6)}}}'
    return "\n".join(log_lines(rng, rng.randint(1, 25), svc)) + "\n"

