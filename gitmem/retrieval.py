"""Bounded lexical retrieval for natural-language questions.

PostgreSQL's `websearch_to_tsquery`/`plainto_tsquery` AND every word, and
`ts_rank` has no notion of how rare a word is. Agents ask in sentences, so:

1. *Analyze*: each content word becomes a term — its English stem OR its plain
   lower-case form (so actor names and tags match too); quoted phrases stay
   phrases. Stopwords drop out.
2. *Document frequency* of each term, exact, from `lexeme_df` (kept in step
   with the chunks by the indexer), per tenant: IDF needs no estimate, and
   the ranking is the same on any index built from the same files.
3. *Bounded pools*: per term, its most recent matches (all of them when rare),
   sized by IDF so the union stays <= candidate_pool_max; plus the chunks
   matching all terms, the two rarest together, and the decisions/tasks/
   summaries matching any. Never "rank every match" of a common word.
4. *Score* each candidate: alpha * lexical + beta * recency + gamma * importance,
   where lexical is the IDF-weighted share of the query's terms it matches,
   recency is exp(-age / tau). Ties: importance, recency, smaller token_est, id.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gitmem.db import Database, Row

MAX_TERMS = 12        # the rarest terms of a long question are kept
MIN_POOL = 50         # the smallest pool any term gets
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
    ts: datetime
    kind: str
    channel: str
    session_id: str
    sensitivity: str
    hash: str
    token_est: int
    importance: float
    matches: list[bool]
    lexical: float = 0.0
    recency: float = 0.0
    score: float = 0.0

    def sort_key(self) -> tuple[float, float, float, int, str]:
        """Descending score, then importance, recency, smaller size, id."""
        return (-self.score, -self.importance, -self.ts.timestamp(), self.token_est,
                self.chunk_id)


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


def frequencies(db: Database, tenant: str, terms: Sequence[Term]) -> tuple[list[int], int]:
    """Exact document frequency of each term in the tenant, and its chunk count.

    A word's forms are alternatives, so its df is that of its commonest form; a
    phrase's is that of its rarest word (an upper bound).
    """
    lexemes = sorted({lex for term in terms for lex in term.lexemes} | {""})
    known = {row["lexeme"]: int(row["df"]) for row in db.fetchall(
        "lexeme_df", {"tenant": tenant, "lexemes": lexemes})}
    dfs = [(min if term.phrase else max)(known.get(lex, 0) for lex in term.lexemes)
           for term in terms]
    return dfs, known.get("", 0)


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
    dfs, total = frequencies(db, tenant, terms)
    present = sorted((df, n) for n, df in enumerate(dfs) if df > 0)[:MAX_TERMS]
    terms = [terms[n] for _, n in present]
    dfs = [df for df, _ in present]
    weights = [idf(df, total) for df in dfs]
    timings["terms"] = _ms(start)
    if not terms:
        return Retrieval(terms, weights, [], 0, [], timings)
    queries = [t.query for t in terms]
    statements = []
    for term, limit in zip(terms, pool_sizes(dfs, weights, limits.pool_max), strict=True):
        statements.append(("pool_term", {"tenant": tenant, "query": term.query,
                                         "queries": queries, "limit": limit}))
    extra = max(MIN_POOL, limits.pool_max // 10)
    if len(terms) >= 2:
        for group in (terms, terms[:2]):  # every term, and the two rarest together
            statements.append(("pool_term", {
                "tenant": tenant, "queries": queries, "limit": extra,
                "query": " & ".join(f"({t.query})" for t in group)}))
    statements.append(("pool_records", {"tenant": tenant, "queries": queries, "limit": extra,
                                        "query": " | ".join(f"({q})" for q in queries)}))
    pool: dict[str, Row] = {}
    for rows in db.fetch_many(statements):
        for row in rows:
            if len(pool) >= limits.pool_max:
                break
            pool.setdefault(row["chunk_id"], row)
    timings["pools"] = round(_ms(start) - timings["terms"], 3)
    candidates, suppressed = score_rows(pool.values(), weights, limits, now, allowed)
    timings["score"] = round(_ms(start) - timings["pools"] - timings["terms"], 3)
    return Retrieval(terms, weights, candidates, len(pool), suppressed, timings)


def pool_sizes(dfs: Sequence[int], weights: Sequence[float], pool_max: int) -> list[int]:
    """Each term's share of the pool: by its IDF weight, never below MIN_POOL.

    A rare term (df under its share) is fetched whole; a common one only its most
    recent matches, as its low weight can rank few of them above the rest.
    """
    budget = int(pool_max * 0.7)
    total = sum(weights) or 1.0
    return [min(df, max(MIN_POOL, int(budget * w / total))) for df, w in
            zip(dfs, weights, strict=True)]


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


def score_rows(rows: Iterable[Row], weights: list[float], limits: Limits, now: datetime,
               allowed: Callable[[Candidate], bool]) -> tuple[list[Candidate], list[str]]:
    """Score feature rows; returns (allowed candidates best first, suppressed ids)."""
    total_weight = sum(weights) or 1.0
    tau = max(limits.tau_days, 1e-6) * 86400.0
    kept: list[Candidate] = []
    suppressed: list[str] = []
    for row in rows:
        cand = Candidate(
            chunk_id=row["chunk_id"], source_type=row["source_type"],
            source_id=row["source_id"], ts=row["ts"], kind=row["kind"],
            channel=row["channel"], session_id=row["session_id"],
            sensitivity=row["sensitivity"], hash=row["hash"], token_est=row["token_est"],
            importance=float(row["importance"]), matches=list(row["matches"]))
        if not allowed(cand):
            suppressed.append(cand.chunk_id)
            continue
        cand.lexical = sum(w for w, m in zip(weights, cand.matches, strict=True) if m
                           ) / total_weight
        age = max(0.0, (now - cand.ts).total_seconds())
        cand.recency = math.exp(-age / tau)
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
    rows = db.fetchall("exact_matches", {
        "tenant": tenant, "queries": [t.query for t in terms],
        "any": " | ".join(f"({t.query})" for t in terms)})
    exact = Limits(limits.pool_max, top, limits.alpha, limits.beta, limits.gamma,
                   limits.tau_days)
    ranked, _ = score_rows(rows, weights, exact, now, allowed)
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
