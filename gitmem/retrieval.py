"""Bounded lexical retrieval for natural-language questions.

PostgreSQL's `websearch_to_tsquery`/`plainto_tsquery` AND every word, and
`ts_rank` has no notion of how rare a word is. Agents ask in sentences, so:

1. *Analyze*: each content word becomes a term — its English stem OR its plain
   lower-case form (so actor names and tags match too); quoted phrases stay
   phrases. Stopwords drop out.
2. *Document frequency* of each term, exact, from `lexeme_df` (kept in step
   with the chunks by the indexer), per tenant: IDF needs no estimate, and
   the ranking is the same on any index built from the same files.
3. *Bounded pools*, all in one round trip: every match of the rare terms
   (through the GIN index, narrowed to the tenant by its own word); the
   tenant's newest chunks matching any term (one backward walk serves every
   common word); the newest chunks matching all terms, and each pair of the
   three rarest; the decisions, tasks and summaries matching any. The union
   is capped at candidate_pool_max. Never "rank every match" of a common word.
4. *Score* each candidate: alpha * lexical + beta * recency + gamma * importance,
   where lexical is the IDF-weighted share of the query's terms it matches,
   recency is exp(-age / tau). Ties: importance, recency, smaller token_est, id.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gitmem.db import Database
from gitmem.rows import tenant_lexeme

MAX_TERMS = 12        # the rarest terms of a long question are kept
MAX_WINDOW = 20000    # newest chunks of the tenant walked for the common terms, at most
RANDOM_READ_COST = 3  # a match fetched through the GIN index, in walked chunks
RARE_MAX = 4000       # matches fetched whole through the GIN index, at most
WINDOW_MARGIN = 3.0   # recent matches walked per retrieved slot: importance reorders them
GROUP_POOL = 100      # newest chunks matching some of the common terms together
BM25_K1, BM25_B = 1.2, 0.75
MIN_POOL = 50         # newest decisions, tasks and summaries matching any term
_QUOTED = re.compile(r'"([^"]+)"')


@dataclass(frozen=True)
class Term:
    """One unit of a query: a word (its stem or plain form) or a quoted phrase."""

    text: str
    query: str            # tsquery text
    lexemes: tuple[str, ...]
    phrase: bool = False


@dataclass
class Candidate:
    """A chunk considered for retrieved_evidence, with its score parts."""

    chunk_id: str
    source_type: str
    source_id: str
    epoch: float          # ts as seconds since 1970
    channel: str
    sensitivity: str
    token_est: int
    importance: float
    mask: int             # bit n set: matches term n
    lexical: float = 0.0
    recency: float = 0.0
    score: float = 0.0

    def sort_key(self) -> tuple[float, float, float, int, str]:
        """Descending score, then importance, recency, smaller size, id."""
        return (-self.score, -self.importance, -self.epoch, self.token_est, self.chunk_id)


@dataclass
class Retrieval:
    """The outcome of one bounded retrieval."""

    terms: list[Term]
    idf: list[float]
    candidates: list[Candidate]          # scored, best first, privacy-filtered
    pool_size: int
    suppressed: list[str] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)


def _quote(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def analyze(db: Database, text: str) -> list[Term]:
    """The terms of a natural-language query (phrases first, then words)."""
    terms: list[Term] = []
    seen: set[str] = set()
    for phrase in _QUOTED.findall(text):
        words = [lexemes for _, lexemes in _tokens(db, phrase) if lexemes]
        if len(words) >= 2:
            query = " <-> ".join(_quote(w[0]) for w in words)
            if query not in seen:
                seen.add(query)
                terms.append(Term(phrase.strip(), query, tuple(w[0] for w in words), True))
    for token, lexemes in _tokens(db, _QUOTED.sub(" ", text) + " " + " ".join(
            _QUOTED.findall(text))):
        if not lexemes:
            continue  # a stopword
        forms = tuple(dict.fromkeys([*lexemes, token.lower()]))
        key = forms[0]
        if key in seen:
            continue
        seen.add(key)
        terms.append(Term(token, " | ".join(_quote(f) for f in forms), forms))
    return terms


def _tokens(db: Database, text: str) -> list[tuple[str, list[str]]]:
    rows = db.fetchall("query_tokens", {"text": text})
    return [(row["token"], list(row["lexemes"] or [])) for row in rows]


@dataclass(frozen=True)
class Corpus:
    """What ranking needs to know of a tenant's whole index."""

    chunks: int            # how many
    average_length: float  # distinct lexemes per chunk, on average


def frequencies(db: Database, tenant: str, terms: Sequence[Term]) -> tuple[list[int], Corpus]:
    """Exact document frequency of each term in the tenant, and the tenant's corpus.

    A word's forms are alternatives, so its df is that of its commonest form; a
    phrase's is that of its rarest word (an upper bound).
    """
    lexemes = sorted({lex for term in terms for lex in term.lexemes} | {"", "#"})
    known = {row["lexeme"]: int(row["df"]) for row in db.fetchall(
        "lexeme_df", {"tenant": tenant, "lexemes": lexemes})}
    dfs = [(min if term.phrase else max)(known.get(lex, 0) for lex in term.lexemes)
           for term in terms]
    chunks = known.get("", 0)
    return dfs, Corpus(chunks, known.get("#", 0) / chunks if chunks else 1.0)


def idf(df: float, total: int) -> float:
    """BM25's inverse document frequency, never negative."""
    size = max(float(total), df, 1.0)
    return math.log(1.0 + (size - df + 0.5) / (df + 0.5))


@dataclass(frozen=True)
class Limits:
    """The bounds and weights retrieval runs under (from budgets.yaml)."""

    pool_max: int
    retrieved_max: int
    alpha: float
    beta: float
    gamma: float
    tau_days: float


def retrieve(db: Database, tenant: str, terms: Sequence[Term], limits: Limits,
             now: datetime, allowed: Callable[[Candidate], bool]) -> Retrieval:
    """Bounded candidate pools, scored; suppressed candidates listed by id only."""
    timings: dict[str, float] = {}
    start = time.perf_counter()
    dfs, corpus = frequencies(db, tenant, terms)
    total = corpus.chunks
    present = sorted((df, n) for n, df in enumerate(dfs) if df > 0)[:MAX_TERMS]
    terms = [terms[n] for _, n in present]
    dfs = [df for df, _ in present]
    weights = [idf(df, total) for df in dfs]
    timings["terms"] = _ms(start)
    if not terms:
        return Retrieval(terms, weights, [], 0, [], timings)
    found = _pools(db, tenant, terms, dfs, total, limits)
    timings["pools"] = round(_ms(start) - timings["terms"], 3)
    candidates, suppressed = score_rows(found.values(), weights, limits, now, allowed,
                                        corpus.average_length)
    timings["score"] = round(_ms(start) - timings["pools"] - timings["terms"], 3)
    return Retrieval(terms, weights, candidates, len(found), suppressed, timings)


def _pools(db: Database, tenant: str, terms: Sequence[Term], dfs: Sequence[int], total: int,
           limits: Limits) -> dict[str, tuple[Any, ...]]:
    """Run every pool in one round trip; their union (never over pool_max rows).

    The budget goes first to decisions, tasks and summaries; then to chunks
    matching the common terms together; then to the rare terms' matches (newest
    first when they are many); what is left to the newest chunks matching any.
    """
    queries = [t.query for t in terms]
    mine = "'" + tenant_lexeme(tenant) + "'"
    base = {"tenant": tenant, "queries": queries}
    anyone = " | ".join(f"({q})" for q in queries)
    left = limits.pool_max - MIN_POOL
    statements: list[tuple[str, dict[str, Any]]] = [
        ("pool_records", {**base, "limit": MIN_POOL, "query": f"({anyone}) & {mine}"})]
    whole, window = plan_pools(dfs, total, limits.retrieved_max)
    common = terms[whole:]  # a rare term's pool holds all of its co-matches already
    df_of = dict(zip((t.query for t in terms), dfs, strict=True))
    for group in co_match_groups(common):
        together = " & ".join(f"({t.query})" for t in group)
        limit = min(left, limits.retrieved_max if len(group) == len(common) else GROUP_POOL)
        left -= limit
        walk = walk_is_cheaper([df_of[t.query] for t in group], total, limit)
        statements.append(("pool_term_walk" if walk else "pool_term",
                           {**base, "limit": limit, "query": f"{together} & {mine}"}))
    rare = sum(dfs[:whole])
    share = min(rare, left // 2 if window else left)
    for term, df in zip(terms[:whole], dfs[:whole], strict=True):
        limit = max(1, df * share // rare)
        left -= limit
        statements.append(("pool_rare", {**base, "query": f"({term.query}) & {mine}",
                                         "limit": limit}))
    if window and left > 0:
        statements.append(("pool_recent", {**base, "window": window, "any": anyone,
                                           "limit": left}))
    found: dict[str, tuple[Any, ...]] = {}
    for rows in db.fetch_many(statements):
        for row in rows:
            found.setdefault(row[0], row)
    return found


def plan_pools(dfs: Sequence[int], total: int, retrieved_max: int) -> tuple[int, int]:
    """How many of the rarest terms to fetch whole, and how many newest chunks to walk.

    The common terms' best single matches are their most recent ones, so the walk
    must reach WINDOW_MARGIN * retrieved_max of them in all: the rarer the
    rarest common term, the longer the walk. Fetching a term whole costs a
    random heap read per match, walking a sequential one per chunk; the cheapest
    split wins. The walk is capped at MAX_WINDOW chunks afterwards, so a split
    that would need a longer one is not mistaken for a cheap one.
    """
    best: tuple[float, int, int] | None = None
    for whole in range(len(dfs) + 1):
        if sum(dfs[:whole]) > RARE_MAX:
            break  # fetching so many matches whole costs more than any walk saves
        common = dfs[whole:]
        window = 0
        if common:
            need = math.ceil(retrieved_max * WINDOW_MARGIN / len(common))
            window = min(total, math.ceil(need * total / max(min(common), 1)))
        cost = RANDOM_READ_COST * sum(dfs[:whole]) + window
        if best is None or cost < best[0]:
            best = (cost, whole, window)
    assert best is not None
    return best[1], min(best[2], MAX_WINDOW)


def walk_is_cheaper(dfs: Sequence[int], total: int, limit: int) -> bool:
    """Whether walking the newest chunks finds `limit` co-matches of these terms
    sooner than fetching every co-match through the GIN index.

    Fetching costs a random read per co-match (at most the rarest term's df);
    the walk visits limit / frequency chunks, the frequency taken as if the terms
    were independent (co-occurring words only make the walk shorter).
    """
    if total <= 0:
        return False
    frequency = math.prod(df / total for df in dfs)
    walk = limit / frequency if frequency > 0 else math.inf
    return walk < RANDOM_READ_COST * min(dfs)


def co_match_groups(terms: Sequence[Term]) -> list[list[Term]]:
    """Sets of terms whose joint matches get a pool: all of them; for up to six
    terms, every set of all but one; and each pair of the three rarest."""
    n = len(terms)
    groups: list[list[Term]] = [list(terms)] if n >= 2 else []
    if 4 <= n <= 6:
        groups += [[t for t in terms if t is not left] for left in terms]
    if n >= 3:
        groups += [list(pair) for pair in itertools.combinations(terms[:3], 2)
                   if n > 3 or list(pair) not in groups]
    return groups


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


def score_rows(rows: Iterable[Sequence[Any]], weights: list[float], limits: Limits,
               now: datetime, allowed: Callable[[Candidate], bool], average_length: float
               ) -> tuple[list[Candidate], list[str]]:
    """Score feature rows (the pool queries' columns, in order); returns the allowed
    candidates best first (at most retrieved_max) and the suppressed ids."""
    total_weight = sum(weights) or 1.0
    tau = max(limits.tau_days, 1e-6) * 86400.0
    now_epoch = now.timestamp()
    bits = list(enumerate(weights))
    average = max(average_length, 1.0)
    kept: list[Candidate] = []
    suppressed: list[str] = []
    for chunk_id, source_type, source_id, epoch, channel, sensitivity, token_est, \
            importance, mask, words in rows:
        cand = Candidate(chunk_id, source_type, source_id, epoch, channel, sensitivity,
                         token_est, float(importance), mask)
        if not allowed(cand):
            suppressed.append(chunk_id)
            continue
        # BM25's saturation and length normalization (a term counts once): a short
        # chunk that matches is likelier about the question than a long one
        norm = (BM25_K1 + 1) / (1 + BM25_K1 * (1 - BM25_B + BM25_B * words / average))
        cand.lexical = norm * sum(w for n, w in bits if mask >> n & 1) / total_weight
        cand.recency = math.exp(-max(0.0, now_epoch - epoch) / tau)
        cand.score = round(limits.alpha * cand.lexical + limits.beta * cand.recency
                           + limits.gamma * cand.importance, 9)
        kept.append(cand)
    kept.sort(key=Candidate.sort_key)
    suppressed.sort()
    return kept[:limits.retrieved_max], suppressed


def exact_top(db: Database, tenant: str, terms: Sequence[Term], weights: list[float],
              limits: Limits, now: datetime, allowed: Callable[[Candidate], bool],
              top: int = 200) -> list[str]:
    """Ids of the exact top-`top` by the same score over every match (for the benchmark)."""
    if not terms:
        return []
    [rows] = db.fetch_many([("exact_matches", {
        "tenant": tenant, "queries": [t.query for t in terms],
        "any": " | ".join(f"({t.query})" for t in terms)})])
    exact = dataclasses.replace(limits, retrieved_max=top)
    _, corpus = frequencies(db, tenant, terms)
    ranked, _ = score_rows(rows, weights, exact, now, allowed, corpus.average_length)
    return [c.chunk_id for c in ranked]


def naive_top(db: Database, tenant: str, terms: Sequence[Term], top: int = 200) -> list[str]:
    """The naive baseline: ts_rank over every match of any term (for the benchmark)."""
    if not terms:
        return []
    rows = db.fetchall("naive_rank", {"tenant": tenant, "limit": top,
                                      "any": " | ".join(f"({t.query})" for t in terms)})
    return [row["chunk_id"] for row in rows]


def describe(terms: Sequence[Term], weights: Sequence[float]) -> list[dict[str, Any]]:
    """Provenance form of the query terms."""
    return [{"term": t.text, "query": t.query, "idf": round(w, 4), "phrase": t.phrase}
            for t, w in zip(terms, weights, strict=True)]
