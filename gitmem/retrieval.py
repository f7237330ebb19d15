"""Bounded lexical retrieval for natural-language questions.

PostgreSQL's `websearch_to_tsquery`/`plainto_tsquery` AND every word, and
`ts_rank` has no notion of how rare a word is. Agents ask in sentences, so:

1. *Analyze* and 2. *Statistics*: gitmem/lexicon.py (terms in the tenant's own
   lexemes; exact document frequencies and day sizes).
3. *Lanes*: gitmem/planning.py (which terms together, over which chunks, back
   how many days). Here each lane's days become time keys in the GIN lookup, or,
   where few of its matches lie beyond them, a cut of the rows by time (cheaper
   than a month key's posting list); a statement reads its periods newest first.
4. *Score* in the database, every lane row alike: alpha * lexical + beta *
   recency + gamma * importance, lexical being the IDF-weighted share of the
   terms matched with BM25's length normalization (a term counts once) over
   token counts, recency exp(-age / tau). Each lane statement returns its best
   rows, so their union holds the best of everything fetched. Ties: importance,
   recency, smaller token_est, id. Lanes run on two connections at once.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gitmem.db import Database, named_queries
from gitmem.lexicon import Stats, Term, qualify, quote, stamped, statistics
from gitmem.planning import (
    BM25_B,
    BM25_K1,
    BUDGET_SHARE,
    DAY,
    Lane,
    Limits,
    cover,
    extend,
    horizon,
    idf,
    needed,
    plan,
    short_covered,
    unit_bounds,
)
from gitmem.privacy import ChannelRule
from gitmem.rows import SHORT_TOKENS, tenant_tag

MAX_TERMS = 12          # the rarest terms of a long question are kept
KEYLESS_EXTRA = 400.0   # a span whose terms match at most this many rows beyond it
                        # is cut by time on the rows, not by time keys in the GIN lookup
RECORDS_LIMIT = 50      # best decisions, tasks and summaries, whatever the lanes found
RECORDS_CAP = 200       # ... among the newest of them matching any term
RECORDS_PERIODS = (4, 16, 64)  # ... read newest first: these newest days, then the older
SPLIT_SHARES = (0.125, 0.5)  # a split stretch's periods: its newest eighth, half, the rest
# rows each lane returns of the matches the channel may not load: one, so that a lane
# whose matches are all hidden still tells the planner how many it matched
SUPPRESSED_SAMPLE = 1
DENSE_SHARE = 0.5       # a lane expected to match this share of its statement's cap alone
                        # would crowd the others sharing it out: they get their own
STATEMENT_ROWS = 300    # what a statement costs beyond its rows, in rows: at 1M chunks one
                        # costs about 0.9 ms plus 3.6 us per row it keeps (planning, GIN
                        # lookups of its words, sorts), so its lookups weigh more than its rows


@dataclass(slots=True)
class Candidate:
    """A chunk considered for retrieved_evidence, as a lane statement scored it."""

    chunk_id: str
    source_type: str
    source_id: str
    epoch: float          # ts as seconds since 1970
    channel: str
    sensitivity: str
    token_est: int
    importance: float
    mask: int             # bit n set: matches term n
    score: float = 0.0
    tid: str = ""         # the row's ctid when it was scored (where to read it again)


@dataclass
class Retrieval:
    """The outcome of one bounded retrieval."""

    terms: list[Term]
    idf: list[float]
    candidates: list[Candidate]          # scored, best first, privacy-filtered
    pool_size: int                       # rows the lanes matched, before scoring
    loadable: int = 0                    # of those, the rows the channel may load
    lanes: list[dict[str, Any]] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    unsearched: list[dict[str, str]] = field(default_factory=list)  # Query.unsearched


# --------------------------------------------------------------------------- statements

@dataclass(frozen=True)
class Scoring:
    """The score every lane statement computes, as SQL parameters."""

    weights: tuple[float, ...]
    limits: Limits
    average_tokens: float
    now: datetime

    def params(self) -> dict[str, Any]:
        """Parameters of the {score} fragment: alpha * lexical + beta * recency + gamma *
        importance, lexical = (k1 + 1) / (1 + k1 * (1 - b + b * token_est / avg)) * the
        IDF weights of the terms matched / their sum, recency = exp(-age / tau). The
        constants are folded here, so that a row costs the fewest operators: its terms'
        weights `w<n>` already times alpha * (k1 + 1) / sum, over `lex0 + lex1 * token_est`."""
        b = self.limits
        scale = b.alpha * (BM25_K1 + 1) / (sum(self.weights) or 1.0)
        out: dict[str, Any] = {f"w{n}": w * scale for n, w in enumerate(self.weights)}
        out.update(lex0=1 + BM25_K1 * (1 - BM25_B),
                   lex1=BM25_K1 * BM25_B / max(self.average_tokens, 1.0),
                   beta=b.beta, gamma=b.gamma, now=self.now.timestamp(),
                   tau=max(b.tau_days, 1e-6) * DAY)
        return out


def _mask_sql(count: int) -> str:
    return " | ".join(f"((c.tsv @@ %(q{n})s::tsquery)::int::int8 << {n})" for n in range(count))


def _score_sql(count: int) -> str:
    # Rounded to 9 decimals (near-equal scores tie, and the tie-breaks decide) in float8:
    # `round(x * 1e9) / 1e9` is the double nearest the rounded decimal, as a numeric
    # round would give, at a fraction of the cost (~1 ms a request over 2,000 rows).
    # The constants come folded (`Scoring.params`).
    share = " + ".join(f"((mask >> {n}) & 1) * %(w{n})s::float8" for n in range(count))
    return (f"round((({share}) / (%(lex0)s::float8 + %(lex1)s::float8 * token_est) + "
            "%(beta)s::float8 * "
            "exp(-least(700, greatest(0, %(now)s::float8 - epoch) / %(tau)s::float8)) + "
            "%(gamma)s::float8 * importance) * 1e9) / 1e9")


# How each scope matches ({query}: the parameter holding the tsquery). There is no index of
# all chunks: the short ones and the long ones have one each (sql/indexes.sql), and "all"
# asks both (a BitmapOr).
_MATCH = "c.tsv @@ %({query})s::tsquery"
SCOPES = {
    "all": f"((c.token_est <= {SHORT_TOKENS} AND {_MATCH})"
           f" OR (c.token_est > {SHORT_TOKENS} AND {_MATCH}))",
    "short": f"{_MATCH} AND c.token_est <= {SHORT_TOKENS}",
    "long": f"{_MATCH} AND c.token_est > {SHORT_TOKENS}",
    "records": f"{_MATCH} AND c.source_type <> 'event'",
    # the short chunks' lexemes stamped with their days (sql/schema.sql, gitmem_stamped)
    "short-stamped": "gitmem_stamped(c.tsv, c.ts) @@ %({query})s::tsquery"
                     f" AND c.token_est <= {SHORT_TOKENS}",
}
_SPAN = "AND c.ts >= to_timestamp(%(since{n})s) AND c.ts < to_timestamp(%(until{n})s)"


@dataclass(frozen=True)
class Period:
    """A stretch of time a lane statement reads: the matches of `query` (time keys in it
    keep the stretch's rows) or, where `cut`, of `query` with rows cut by time."""

    query: str
    since: float = -math.inf      # epochs, until excluded
    until: float = math.inf
    cut: bool = False
    stamped: bool = False         # `query` asks the short chunks' stamped lexemes

    def before(self, epoch: float) -> Period:
        """This period's rows older than `epoch`, cut by time."""
        return Period(self.query, self.since, min(self.until, epoch), True, self.stamped)


def lane_statement(tenant: str, terms: Sequence[Term], periods: Sequence[Period], scope: str,
                   limit: int, scoring: Scoring, rule: ChannelRule,
                   cap: int) -> tuple[str, dict[str, Any]]:
    """SQL and parameters of one lane statement (named query `retrieval_lane`): the
    periods newest first, read until `cap` rows matched."""
    queries = named_queries()
    mask = _mask_sql(len(terms))
    params: dict[str, Any] = {f"q{n}": t.query for n, t in enumerate(terms)}
    parts: list[str] = []
    for n, period in enumerate(periods):
        match = SCOPES["short-stamped" if period.stamped else scope]
        parts.append(queries["retrieval_lane_period"].format(
            match=match.format(query=f"query{n}"),
            span=_SPAN.format(n=n) if period.cut else ""))
        params[f"query{n}"] = period.query
        if period.cut:
            params.update({f"since{n}": period.since, f"until{n}": period.until})
    text = queries["retrieval_lane"].format(periods="\nUNION ALL\n".join(parts), mask=mask,
                                            score=_score_sql(len(terms)))
    params.update(scoring.params())
    params.update(tenant=tenant, limit=limit, cap=cap, sample=SUPPRESSED_SAMPLE,
                  suppress=sorted(rule.suppress_sensitivity),
                  channels=None if rule.event_channels is None else sorted(rule.event_channels))
    return text, params


def _conjunction(terms: Sequence[Term], group: Sequence[int]) -> str:
    return " & ".join(f"({terms[n].query})" for n in group)


def any_of(parts: Sequence[str]) -> str:
    """A tsquery matching any of `parts`."""
    return " | ".join(f"({p})" for p in parts)


@dataclass(frozen=True)
class Statement:
    """A lane statement ready to run, with what it is for."""

    label: str
    sql: str
    params: dict[str, Any]
    expected: float
    cap: int                      # rows it may match at most
    lanes: tuple[int, ...] = ()   # indexes of the lanes it fetches for
    scope: str = "all"            # its scope and periods (for a continuation)
    periods: tuple[Period, ...] = ()

    def cost(self) -> float:
        """What running it is expected to cost, in rows (how `Database.run_parallel`
        shares statements out between its connections)."""
        rows = self.cap if self.scope == "records" else min(self.expected, self.cap)
        return rows + STATEMENT_ROWS


def statements(tenant: str, terms: Sequence[Term], lanes: Sequence[Lane], stats: Stats,
               scoring: Scoring, rule: ChannelRule, pool: int) -> list[Statement]:
    """The statements fetching what the lanes reach beyond what they fetched before:
    one per scope and span of days (lanes reaching as far share it, reaches rounded
    up to powers of two; a lane over all chunks reads the long ones only where short
    lanes hold its short matches). Marks the lanes as fetched. Each statement may keep
    up to its share of `pool` rows, by expected size."""
    count = len(stats.days)
    tag = tenant_tag(tenant)
    # when the days listed hold every chunk (a young tenant's), nothing lies beyond them
    empty_beyond = sum(d.chunks for d in stats.days) >= stats.chunks
    reaching: dict[tuple[int, int], list[int]] = {}
    for number, lane in enumerate(lanes):
        if not needed(lane, lanes, count):
            continue
        done = count + 1 if lane.done[1] else lane.done[0]
        reach = count + 1 if lane.whole else horizon(lane.days, count)
        if reach > done:
            if not (empty_beyond and done >= count):
                reaching.setdefault((done, reach), []).append(number)
            lane.done = (min(reach, count), lane.whole)
    # a lane over all chunks whose short matches short lanes hold (as far back) reads
    # the long chunks only: about half the rows, and the long index alone
    grouped: dict[tuple[str, int, int], list[int]] = {}
    for (done, reach), numbers in reaching.items():
        for number in numbers:
            lane = lanes[number]
            scope = ("short" if lane.short
                     else "long" if short_covered(lane, lanes, reach, count) else "all")
            grouped.setdefault((scope, done, reach), []).append(number)
    twins = {(lane.terms, lane.short): lane for lane in lanes}
    short_sizes = [d.short for d in stats.days]
    def planned_for(scope: str, done: int, reach: int, members: list[int]) -> _Planned:
        query = any_of([_conjunction(terms, lanes[n].terms) for n in members])
        short = scope == "short"
        sizes = [d.short if short else d.chunks for d in stats.days]
        rate = sum(lanes[n].rate for n in members)
        rows = stats.short_chunks if short else stats.chunks
        # a long-only statement expects its lanes' rows less what their short twins get
        twin_rate = (sum(twin.rate for n in members
                         if (twin := twins.get((lanes[n].terms, True))) is not None)
                     if scope == "long" else 0.0)
        if reach > count:
            expected = (rate * (rows - sum(sizes[:done]))
                        - twin_rate * (stats.short_chunks - sum(short_sizes[:done])))
            label = f"{scope}:{done}d-whole"
        else:
            expected = rate * sum(sizes[done:reach]) - twin_rate * sum(short_sizes[done:reach])
            label = f"{scope}:{done}-{reach}d"
        stamp = (functools.partial(_stamped_query, terms, [lanes[n].terms for n in members])
                 if short and "<->" not in query else None)
        # the most rows its lanes' words can match (a lane's rarest word, over its history)
        most = sum(min(stats.short_dfs[t] for t in lanes[n].terms) for n in members)
        make = functools.partial(span_periods, query, stats, tag, done, reach,
                                 rate * (rows - sum(sizes[done:reach])) <= KEYLESS_EXTRA,
                                 stamp, most)
        return (label, scope, max(expected, 0.0), tuple(members), make)

    groups = sorted(grouped.items())
    planned = [planned_for(*key, members) for key, members in groups]
    caps = _caps(planned, scoring.limits.retrieved_max, pool)
    # Lanes sharing a statement share its cap, newest rows first: where a lane is expected
    # to fill most of it alone, a sparse lane's older rows (a rare word's, beside a common
    # one reaching as far) would be cut for the dense lane's newer ones. The sparse lanes
    # of such a statement get one of their own, with its own share of the pool.
    parted: list[tuple[tuple[str, int, int], list[int]]] = []
    for (key, members), shared, cap in zip(groups, planned, caps, strict=True):
        dense = [n for n in members if shared[2] > cap
                 and planned_for(*key, [n])[2] > DENSE_SHARE * cap]
        sparse = [n for n in members if n not in dense]
        parted += [(key, part) for part in (dense, sparse) if part]
    if len(parted) > len(groups):
        groups = parted
        planned = [planned_for(*key, members) for key, members in groups]
        caps = _caps(planned, scoring.limits.retrieved_max, pool)
    out: list[Statement] = []
    for (label, scope, expected, fetched, make_periods), cap in zip(planned, caps, strict=True):
        periods = make_periods(cap)
        sql, params = lane_statement(tenant, terms, periods, scope,
                                     scoring.limits.retrieved_max, scoring, rule, cap)
        out.append(Statement(label, sql, params, expected, cap, fetched, scope, periods))
    return out


def span_periods(query: str, stats: Stats, tag: str, done: int, reach: int, few_beyond: bool,
                 stamp: Callable[[str], str] | None = None, most: int = 0,
                 cap: int = 0) -> tuple[Period, ...]:
    """The periods, newest first, from the done-th newest day back to the reach-th (the
    whole history when reach is past the days). Time keys in the query keep its rows,
    or, where `few_beyond` (few matches outside it: a month key's posting list, as long
    as the tenant's month, costs more than filtering those rows by time), a cut by time.

    With `stamp` (short chunks, no phrase: the query stamped with a time unit), the
    query stamped with each of those days' units instead: small posting lists ORed, no
    intersection with a key's list (sql/schema.sql, gitmem_stamped). Where the words
    may match more than the statement's `cap` (`most`: a bound over the history), the
    units split into periods newest first (`newest_first`), even in a span with few
    matches beyond it (whose oldest period is then one keyless lookup cut by time):
    the statement stops at the period that fills its cap, and never looks up the
    older ones (a common pair over 57 days: 8,290 matches visited for 1,099 kept)."""
    days = stats.days
    until = days[done - 1].start if done else math.inf  # where the newer days begin
    if reach > len(days):  # older than what was fetched (a negated key only adds to the lookup)
        return (Period(query, -math.inf, until, cut=bool(done)),)
    since = days[reach - 1].start
    split = stamp is not None and most > cap
    if few_beyond and not split:
        return (Period(query, since, until, cut=True),)
    units = cover(days, reach, stats.units, skip=done)
    if stamp is None:
        keys = " | ".join(quote(tag + k) for k in units)
        return (Period(f"({query}) & ({keys})", since, until),)
    if not split:
        return (Period(any_of([stamp(unit) for unit in units]), since, until, stamped=True),)
    periods = newest_first(units, since, until, stamp)
    if few_beyond and len(periods) > 2:
        # past the newest half, one lookup of the words' whole lists cut by time costs
        # less than the stamped lists of many units
        return (*periods[:2], Period(query, since, periods[1].since, cut=True))
    return periods


def newest_first(units: Sequence[str], since: float, until: float,
                 stamp: Callable[[str], str]) -> tuple[Period, ...]:
    """Stamped periods over the units (oldest first, as `cover` gives them) from the
    newest back: the newest units covering SPLIT_SHARES of the stretch, then the rest."""
    spans = [(unit, max(since, start), min(until, end))
             for unit in reversed(units) for start, end in [unit_bounds(unit)]]
    if not spans:
        return (Period(any_of([]), since, until, stamped=True),)
    newest, length = spans[0][2], spans[0][2] - spans[-1][1]
    groups: list[list[tuple[str, float, float]]] = [[]]
    shares = iter(SPLIT_SHARES)
    share = next(shares, 1.0)
    for span in spans:
        groups[-1].append(span)
        if newest - span[1] >= share * length and span is not spans[-1]:
            groups.append([])
            share = next(shares, 1.0)
    return tuple(Period(any_of([stamp(u) for u, _, _ in group]), group[-1][1], group[0][2],
                        stamped=True) for group in groups)


_Planned = tuple[str, str, float, tuple[int, ...], Callable[[int], tuple["Period", ...]]]


def _caps(planned: Sequence[_Planned], least: int, pool: int) -> list[int]:
    """Each statement's cap: its share of `pool` by expected rows, at least `least`
    (retrieved_chunks_max), all of them together never more than the pool."""
    total = sum(p[2] for p in planned) or 1.0
    caps = [max(least, math.ceil(pool * p[2] / total)) for p in planned]
    asked = sum(caps)
    if asked > pool:  # never more rows than the pool holds, whatever was expected
        caps = [max(1, cap * pool // asked) for cap in caps]
    return caps


def _stamped_query(terms: Sequence[Term], groups: Sequence[Sequence[int]], unit: str) -> str:
    """Any of the term groups, each term's lexemes stamped with a time unit."""
    mine = stamped(terms, unit)
    return any_of([_conjunction(mine, group) for group in groups])


def continuations(tenant: str, terms: Sequence[Term], todo: Sequence[Statement],
                  found: Found, scoring: Scoring, rule: ChannelRule,
                  room: int) -> list[Statement]:
    """The statements cut off at their cap that found far more than expected (their
    matches go further back than they could keep), continued past the oldest row each
    kept, sharing `room`."""
    rounds = zip(todo, found.matched, found.oldest, strict=True)
    cut = [(s, oldest) for s, matched, oldest in rounds
           if s.scope != "records" and matched >= s.cap and oldest is not None
           and s.cap >= CONTINUE_UNDER * s.expected]
    if not cut or room < CONTINUE_MIN * len(cut):
        return []
    out: list[Statement] = []
    for statement, oldest in cut:
        # rows as old as the oldest kept may not all have been kept: ask for them again
        # (a row fetched twice counts twice in the pool, and is kept once)
        older = tuple(p.before(oldest + 1e-6) for p in statement.periods
                      if p.since < oldest + 1e-6)
        cap = room // len(cut)
        sql, params = lane_statement(tenant, terms, older, statement.scope,
                                     scoring.limits.retrieved_max, scoring, rule, cap)
        out.append(Statement(statement.label + "+", sql, params, statement.expected, cap,
                             statement.lanes, statement.scope, older))
    return out


def records_statement(tenant: str, terms: Sequence[Term], stats: Stats, scoring: Scoring,
                      rule: ChannelRule, cap: int) -> Statement:
    """The best decisions, tasks and summaries matching any term, among the newest `cap`
    of them: read a period at a time, newest first (common words fill the cap in the
    newest days, and the older matches are never visited)."""
    query = any_of([t.query for t in terms])
    tag = tenant_tag(tenant)
    bounds = [0, *(n for n in RECORDS_PERIODS if n < len(stats.days)), len(stats.days) + 1]
    periods = [period for done, reach in itertools.pairwise(bounds)
               for period in span_periods(query, stats, tag, done, reach, False)]
    sql, params = lane_statement(tenant, terms, periods, "records", min(RECORDS_LIMIT, cap),
                                 scoring, rule, cap)
    return Statement("records", sql, params, 0.0, cap, (), "records", tuple(periods))


# --------------------------------------------------------------------------- retrieval

@dataclass(frozen=True)
class Query:
    """A query ready for a tenant: the terms it has (rarest first, at most MAX_TERMS),
    in plain and qualified form, their statistics and IDF weights."""

    plain: list[Term]
    terms: list[Term]
    stats: Stats
    weights: list[float]
    # the query's terms left out, each with why: {"term", "why"}, in the query's order
    unsearched: list[dict[str, str]] = field(default_factory=list)


def prepare(db: Database, tenant: str, terms: Sequence[Term]) -> Query:
    """Qualify the terms, look up their statistics, keep those the tenant has."""
    mine = qualify(terms, tenant)
    stats = statistics(db, tenant, mine)
    matched = [n for _, n in sorted((df, n) for n, df in enumerate(stats.dfs) if df > 0)]
    order = matched[:MAX_TERMS]
    why = {n: "no chunk of the tenant holds it" for n, df in enumerate(stats.dfs) if not df}
    why.update((n, f"past the {MAX_TERMS} rarest terms") for n in matched[MAX_TERMS:])
    stats = Stats([stats.dfs[n] for n in order], [stats.short_dfs[n] for n in order],
                  stats.chunks, stats.short_chunks, stats.average_tokens, stats.days,
                  stats.units)
    return Query([terms[n] for n in order], [mine[n] for n in order], stats,
                 [idf(df, stats.chunks) for df in stats.dfs],
                 [{"term": terms[n].text, "why": why[n]} for n in sorted(why)])


def retrieve(db: Database, tenant: str, terms: Sequence[Term], limits: Limits, now: datetime,
             rule: ChannelRule) -> Retrieval:
    """Bounded lanes, scored; what the channel may not load is listed by id only."""
    timings: dict[str, float] = {}
    start = time.perf_counter()
    query = prepare(db, tenant, terms)
    plain, mine, stats, weights = query.plain, query.terms, query.stats, query.weights
    timings["terms"] = _ms(start)
    if not mine:
        return Retrieval(plain, weights, [], 0, 0, [], timings, query.unsearched)
    scoring = Scoring(tuple(weights), limits, stats.average_tokens, now)
    lanes = plan(stats, weights, limits, now)
    budget = BUDGET_SHARE * limits.pool_max
    records = min(RECORDS_CAP, limits.pool_max // 4)
    todo = [*statements(tenant, mine, lanes, stats, scoring, rule, limits.pool_max - records),
            records_statement(tenant, mine, stats, scoring, rule, records)]
    timings["plan"] = round(_ms(start) - timings["terms"], 3)
    found = Found()
    found.add(todo, db.run_parallel([(s.sql, s.params) for s in todo],
                                    [s.cost() for s in todo]))
    timings["lanes"] = round(_ms(start) - timings["plan"] - timings["terms"], 3)
    expected = sum(s.expected for s in todo)
    lanes_found = sum(found.matched[:-1])  # the records statement is not a lane
    if lanes_found < REFILL_SHARE * expected and not all(lane.whole for lane in lanes):
        # the words came together less than planned: correct the rates by what was
        # found and spend what is left of the budget
        ratios: dict[tuple[int, ...], float] = {}
        for statement, matched in zip(todo, found.matched, strict=True):
            if matched >= statement.cap:
                continue  # cut off at its share of the pool: its rate was not wrong
            ratio = min(50.0, max(0.02, (matched + 1) / (statement.expected + 1)))
            for number in statement.lanes:
                ratios[lanes[number].terms] = ratio
        for lane in lanes:  # the same words go together (or not) in either scope
            lane.rate *= ratios.get(lane.terms, 1.0)
        extend(lanes, stats, limits, now, float(found.pool), budget)
        left = limits.pool_max - found.pool
        more = statements(tenant, mine, lanes, stats, scoring, rule, left) if left > 0 else []
    else:
        # words that came together far more than planned: what a statement could not
        # keep for its cap lies further back; continue it while the pool has room
        more = continuations(tenant, mine, todo, found, scoring, rule,
                             limits.pool_max - found.pool)
    if more:
        found.add(more, db.run_parallel([(s.sql, s.params) for s in more],
                                        [s.cost() for s in more]))
        timings["refill"] = round(_ms(start) - timings["lanes"] - timings["plan"]
                                  - timings["terms"], 3)
    ranked = found.ranked(limits.retrieved_max)
    return Retrieval(plain, weights, ranked, found.pool, found.loadable, found.described,
                     timings, query.unsearched)


# A first round that found less than this share of what it expected refills. At 1M
# events 0.5 sent 34 of 400 questions to a second round and 0.35 sends 8, for a
# bounded-pool recall of 0.978 instead of 0.981 (docs/performance-log.md, section 1).
REFILL_SHARE = 0.35
# A statement cut off at its cap having found at least CONTINUE_UNDER times the rows it
# was expected to (words that come together, a name) is continued with at least
# CONTINUE_MIN rows. Continuing every cut-off statement while the first round filled at
# most 0.55 of the pool raised the worst recall of the 1M benchmark further (0.685
# instead of 0.51) but cost 1-3 ms of p95 over the socket (docs/performance-log.md).
CONTINUE_MIN = 50
CONTINUE_UNDER = 2.0


@dataclass
class Found:
    """What the lane statements returned, merged."""

    best: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # a lane row per chunk
    described: list[dict[str, Any]] = field(default_factory=list)
    matched: list[int] = field(default_factory=list)
    oldest: list[float | None] = field(default_factory=list)  # each statement's oldest row
    pool: int = 0
    loadable: int = 0  # of the pool, the rows the channel may load

    def add(self, todo: Sequence[Statement], results: Sequence[list[tuple[Any, ...]]]) -> None:
        """Merge the rows of a round of statements."""
        for statement, rows in zip(todo, results, strict=True):
            matched = int(rows[0][10]) if rows else 0
            loadable = int(rows[0][13]) if rows else 0
            self.pool += matched
            self.loadable += loadable
            self.matched.append(matched)
            self.oldest.append(float(rows[0][11]) if rows else None)
            self.described.append({"lane": statement.label,
                                   "expected": round(statement.expected, 1),
                                   "matched": loadable})
            best = self.best
            for row in rows:  # rows the channel may not load (score NULL) are never named
                if row[9] is not None and row[0] not in best:  # first lane's row kept
                    best[row[0]] = row

    def ranked(self, limit: int) -> list[Candidate]:
        """The best `limit` rows as candidates: descending score, then importance,
        recency, smaller size, id (candidates are made for those only: a request
        merges ~1,500 rows to keep 200)."""
        rows = sorted(self.best.values(),
                      key=lambda r: (-r[9], -r[7], -r[3], r[6], r[0]))[:limit]
        return [Candidate(r[0], r[1], r[2], r[3], r[4], r[5], r[6], float(r[7]), int(r[8]),
                          float(r[9]), r[12]) for r in rows]


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


def describe(terms: Sequence[Term], weights: Sequence[float]) -> list[dict[str, Any]]:
    """Provenance form of the query terms."""
    return [{"term": t.text, "query": t.query, "idf": round(w, 4), "phrase": t.phrase}
            for t, w in zip(terms, weights, strict=True)]
