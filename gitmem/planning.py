"""Lane planning for bounded retrieval (gitmem/retrieval.py runs the lanes).

A lane is a set of terms matched together (one term, a pair, all of them), over
all chunks or the short ones only, reaching back some number of days (time keys
in the tsvector let the GIN index return recent matches only) or over the whole
history. `plan` grows the lanes greedily — the lane whose next day holds the
best possible matches goes first — until their expected rows fill the budget; a
lane whose whole history is small is taken whole. Never "rank every match" of a
common word. Expected rows come from the exact day sizes and term frequencies
(gitmem/lexicon.py).
"""

from __future__ import annotations

import calendar
import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from gitmem.lexicon import Day, Stats
from gitmem.policies import Budgets
from gitmem.rows import SHORT_TOKENS

BUDGET_SHARE = 0.75     # expected lane rows, as a share of candidate_pool_max
WHOLE_SLACK = 8.0       # a lane this close to its whole history takes it whole
BM25_K1, BM25_B = 1.2, 0.75
DAY = 86400.0


@dataclass(frozen=True)
class Limits:
    """The bounds and weights retrieval runs under (from budgets.yaml)."""

    pool_max: int
    retrieved_max: int
    alpha: float
    beta: float
    gamma: float
    tau_days: float

    @classmethod
    def of(cls, budgets: Budgets) -> Limits:
        """The limits budgets.yaml sets (as build_acb runs retrieval)."""
        return cls(budgets.candidate_pool_max, budgets.retrieved_chunks_max, budgets.alpha,
                   budgets.beta, budgets.gamma, budgets.recency_tau_days)


def idf(df: float, total: int) -> float:
    """BM25's inverse document frequency, never negative."""
    size = max(float(total), df, 1.0)
    return math.log(1.0 + (size - df + 0.5) / (df + 0.5))


def length_norm(token_est: float, average: float) -> float:
    """BM25's saturation and length normalization for a term that occurs once."""
    return (BM25_K1 + 1) / (1 + BM25_K1 * (1 - BM25_B + BM25_B * token_est / max(average, 1.0)))


@dataclass
class Lane:
    """Terms matched together, over all chunks or the short ones, back some days."""

    terms: tuple[int, ...]
    short: bool
    rate: float           # expected share of the scope's chunks that match
    value: float          # alpha * typical lexical score of a match
    days: int = 0         # newest days reached (0: none)
    whole: bool = False   # the whole history instead
    done: tuple[int, bool] = (0, False)   # (days, whole) already fetched

    def reach(self, count: int) -> int:
        """Days reached, the whole history counting as one more than there are."""
        return count + 1 if self.whole else self.days


def lane_groups(count: int) -> list[tuple[int, ...]]:
    """Term sets (indexes, rarest first) that get lanes: each term; each pair of the
    four rarest; all but one term when there are four to six; all of them."""
    terms = list(range(count))
    groups: list[tuple[int, ...]] = [(n,) for n in terms]
    groups += list(itertools.combinations(terms[:4], 2))
    if 4 <= count <= 6:
        groups += [tuple(t for t in terms if t != left) for left in terms]
    if count >= 3:
        groups.append(tuple(terms))
    return list(dict.fromkeys(groups))


def lanes_for(stats: Stats, weights: Sequence[float], limits: Limits) -> list[Lane]:
    """Every lane of the query, nothing reached yet.

    A lane's expected rows per day come from the exact sizes of the day and the
    terms' frequencies within the scope. Words may come together (a phrase split
    into words) or avoid each other, so a set's rate starts as the geometric mean
    of independence and full correlation, and the second round corrects it by what
    the first one found. A lane's value is what its matches would score: alpha *
    length norm * the set's IDF share (recency is added day by day).
    """
    total = sum(weights) or 1.0
    lanes: list[Lane] = []
    for group in lane_groups(len(weights)):
        for short in (False, True):
            freqs = [(stats.short_dfs[n] / max(stats.short_chunks, 1)) if short
                     else (stats.dfs[n] / max(stats.chunks, 1)) for n in group]
            rate = math.sqrt(math.prod(freqs) * min(freqs)) if freqs else 0.0
            norm = length_norm(SHORT_TOKENS / 2 if short else stats.average_tokens,
                               stats.average_tokens)
            lanes.append(Lane(group, short, rate,
                              limits.alpha * norm * sum(weights[n] for n in group) / total))
    return lanes


def extend(lanes: Sequence[Lane], stats: Stats, limits: Limits, now: datetime,
           spent: float, budget: float) -> float:
    """Grow the lanes, a day at a time, the one whose next day holds the best possible
    matches first, until their expected rows fill the budget; a lane whose whole
    history is small is taken whole. Returns the rows spent."""
    tau = max(limits.tau_days, 1e-6) * DAY
    now_epoch = now.timestamp()
    recency = [math.exp(-min(700.0, max(0.0, now_epoch - (d.start + DAY)) / tau))
               for d in stats.days]
    sizes = {short: [d.short if short else d.chunks for d in stats.days]
             for short in (False, True)}
    queue: list[tuple[float, int]] = []
    for number, lane in enumerate(lanes):
        if lane.whole:
            continue
        everything = lane.rate * (stats.short_chunks if lane.short else stats.chunks)
        taken = lane.rate * sum(sizes[lane.short][:lane.days])
        if everything - taken <= WHOLE_SLACK:
            lane.whole = True  # a handful at most: fetch them all
            spent += everything - taken
        elif lane.days < len(stats.days):
            heapq.heappush(queue, (-(lane.value + limits.beta * recency[lane.days]), number))
        else:
            heapq.heappush(queue, (-lane.value, number))
    while queue and spent < budget:
        _, number = heapq.heappop(queue)
        lane = lanes[number]
        if lane.days >= len(stats.days):
            everything = lane.rate * (stats.short_chunks if lane.short else stats.chunks)
            lane.whole = True
            spent += everything - lane.rate * sum(sizes[lane.short])
            continue
        lane.days += 1
        spent += lane.rate * sizes[lane.short][lane.days - 1]
        following = (lane.value + limits.beta * recency[lane.days]
                     if lane.days < len(stats.days) else lane.value)
        heapq.heappush(queue, (-following, number))
    return spent


def plan(stats: Stats, weights: Sequence[float], limits: Limits, now: datetime) -> list[Lane]:
    """The first round's lanes: the budget spent on the best possible matches first."""
    lanes = lanes_for(stats, weights, limits)
    extend(lanes, stats, limits, now, 0.0, BUDGET_SHARE * limits.pool_max)
    return lanes


def wanted(lanes: Sequence[Lane], count: int) -> list[Lane]:
    """The lanes that fetch something no other lane holds (see `needed`)."""
    return [lane for lane in lanes if needed(lane, lanes, count)]


def needed(lane: Lane, lanes: Sequence[Lane], count: int) -> bool:
    """False when the lane reaches nothing new, or another lane of a subset of its
    terms, over the same or a wider scope, reaches at least as far (it holds them all)."""
    if lane.reach(count) <= (count + 1 if lane.done[1] else lane.done[0]):
        return False
    for other in lanes:
        if other is lane or not set(other.terms) <= set(lane.terms):
            continue
        if (other.short and not lane.short) or (other.terms == lane.terms
                                                and other.short == lane.short):
            continue
        if other.reach(count) >= lane.reach(count):
            return False
    return True


def short_covered(lane: Lane, lanes: Sequence[Lane], reach: int, count: int) -> bool:
    """Whether short lanes of a subset of the lane's terms have fetched (or fetch now)
    its short matches back to `reach`: then its statement need read only long chunks."""
    return any(other.short and set(other.terms) <= set(lane.terms)
               and (count + 1 if other.done[1] else other.done[0]) >= reach
               for other in lanes)


def horizon(days: int, count: int) -> int:
    """Days rounded up to a power of two, so that lanes share statements."""
    if days >= count:
        return count
    reach = 1
    while reach < days:
        reach *= 2
    return min(reach, count)


def cover(days: Sequence[Day], reach: int, units: frozenset[str], skip: int = 0) -> list[str]:
    """Time keys covering the days from the reach-th newest to the (skip+1)-th newest:
    months and ISO weeks where they fit whole, days at the edges (few keys keep the
    GIN query cheap). With skip 0 the newest day is the last."""
    first = datetime.fromtimestamp(days[reach - 1].start, UTC).date()
    last = datetime.fromtimestamp(days[skip].start, UTC).date()
    keys: list[str] = []
    day = first
    while day <= last:
        month_end = _next_month(day)
        if day.day == 1 and (skip == 0 or month_end - timedelta(days=1) <= last):
            key, step = f"@m{day:%Y%m}", month_end
        elif day.isoweekday() == 1 and (skip == 0 or day + timedelta(days=6) <= last):
            year, week, _ = day.isocalendar()
            key, step = f"@w{year}{week:02d}", day + timedelta(days=7)
        else:
            key, step = f"@d{day:%Y%m%d}", day + timedelta(days=1)
        if key in units:
            keys.append(key)
        day = step
    return keys


def unit_bounds(key: str) -> tuple[float, float]:
    """The epochs a time key's unit starts and ends at ('@d20260601', '@w202622',
    '@m202606'; the end excluded)."""
    if key.startswith("@w"):
        first = date.fromisocalendar(int(key[2:6]), int(key[6:8]), 1)
        after = first + timedelta(days=7)
    elif key.startswith("@d"):  # calendar arithmetic: strptime costs more, per unit
        first = date(int(key[2:6]), int(key[6:8]), int(key[8:10]))
        after = first + timedelta(days=1)
    else:
        first = date(int(key[2:6]), int(key[6:8]), 1)
        after = _next_month(first)
    return (calendar.timegm(first.timetuple()), calendar.timegm(after.timetuple()))


def _next_month(day: date) -> date:
    """The first day of the month after `day`'s."""
    return (day.replace(day=28) + timedelta(days=4)).replace(day=1)
