"""Bounded lexical retrieval for natural-language questions.

PostgreSQL's `websearch_to_tsquery`/`plainto_tsquery` AND every word, and
`ts_rank` has no notion of how rare a word is. Agents ask in sentences, so:

1. *Analyze*: each content word becomes a term — its English stem OR its plain
   lower-case form (so actor names and tags match too); quoted phrases stay
   phrases. Stopwords drop out.
2. *Estimate document frequency* from the column statistics PostgreSQL keeps
   for `chunks.tsv` (most common lexemes and their frequencies); a word absent
   from them is rare, and its pool query below counts it exactly.
3. *Bounded pools*: per term, its most recent matches (all of them when rare),
   sized so the union stays <= candidate_pool_max; plus the chunks matching
   all terms, the decisions/tasks/summaries matching any, and the pinned ones.
   Never "rank every match" of a common word.
4. *Score* each candidate: alpha * lexical + beta * recency + gamma * importance,
   where lexical is the IDF-weighted share of the query's terms it matches,
   recency is exp(-age / tau). Ties: importance, recency, smaller token_est, id.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gitmem.db import Database, Row

MAX_TERMS = 12
RARE_DF = 64          # a word seen in fewer chunks than this needs no estimate
STATS_TTL_S = 60.0    # column statistics are re-read at most this often
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


class LexemeStats:
    """Document-frequency estimates from PostgreSQL's statistics on chunks.tsv."""

    def __init__(self) -> None:
        self._freq: dict[str, float] = {}
        self._total = 0
        self._min_freq = 0.0
        self._loaded_at = -math.inf
        self._lock = threading.Lock()

    def refresh(self, db: Database, *, force: bool = False) -> None:
        """Re-read the statistics if older than STATS_TTL_S (or when forced)."""
        with self._lock:
            if not force and time.monotonic() - self._loaded_at < STATS_TTL_S:
                return
            row = db.fetchone("lexeme_stats")
            total = db.fetchone("chunk_total")
            self._total = int(total["total"]) if total else 0
            if row is None or row["elems"] is None:
                self._freq, self._min_freq = {}, 0.0
            else:
                freqs = list(row["freqs"])
                self._freq = dict(zip(row["elems"], freqs[:len(row["elems"])], strict=True))
                # the array ends with min, max and null frequencies of the elements
                self._min_freq = float(freqs[len(row["elems"])]) if len(freqs) > len(
                    row["elems"]) else min(freqs, default=0.0)
            self._loaded_at = time.monotonic()

    @property
    def total(self) -> int:
        """Chunks in the index (estimated)."""
        return self._total

    def estimate(self, term: Term) -> float | None:
        """Estimated df of a term, or None when it is rarer than the statistics see."""
        if term.phrase:
            known = [self._freq[lex] for lex in term.lexemes if lex in self._freq]
            if len(known) < len(term.lexemes):
                return None
            return min(known) * self._total
        known = [self._freq[lex] for lex in term.lexemes if lex in self._freq]
        return sum(known) * self._total if known else None

    def ceiling(self) -> float:
        """The df below which a lexeme may be missing from the statistics."""
        return max(RARE_DF, self._min_freq * self._total)


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


def retrieve(db: Database, stats: LexemeStats, tenant: str, terms: Sequence[Term],
             limits: Limits, now: datetime, allowed: Callable[[Candidate], bool]) -> Retrieval:
    """Bounded candidate pools, scored; suppressed candidates listed by id only."""
    timings: dict[str, float] = {}
    start = time.perf_counter()
    stats.refresh(db)
    terms = list(terms)
    estimates = [stats.estimate(t) for t in terms]
    order = sorted(range(len(terms)), key=lambda i: (estimates[i] is not None,
                                                    estimates[i] or 0.0, i))[:MAX_TERMS]
    terms = [terms[i] for i in order]
    estimates = [estimates[i] for i in order]
    per_term = max(50, min(500, limits.pool_max // (len(terms) + 2))) if terms else 0
    pool: dict[str, None] = {}
    dfs: list[float] = []
    statements = [("pool_term", {"tenant": tenant, "query": t.query, "limit": per_term})
                  for t in terms]
    if len(terms) >= 2:
        for group in (terms, terms[:2]):  # all terms, and the two rarest together
            statements.append(("pool_term", {"tenant": tenant, "limit": per_term,
                                             "query": " & ".join(f"({t.query})" for t in group)}))
    if terms:
        statements.append(("pool_records", {"tenant": tenant, "limit": per_term,
                                            "query": " | ".join(f"({t.query})" for t in terms)}))
    fetched = db.fetch_many(statements)
    results, extras = fetched[:len(terms)], fetched[len(terms):]
    for estimate, rows in zip(estimates, results, strict=True):
        if len(rows) < per_term:
            dfs.append(float(len(rows)))           # a complete, exact count
        else:
            dfs.append(max(float(per_term), estimate or stats.ceiling()))
        for row in rows:
            pool.setdefault(row["chunk_id"])
    for rows in extras:
        for row in rows:
            pool.setdefault(row["chunk_id"])
    ids = list(pool)[:limits.pool_max]
    timings["pools"] = _ms(start)
    weights = [idf(df, stats.total) for df in dfs]
    candidates, suppressed = _features(db, tenant, ids, terms, weights, limits, now, allowed)
    timings["score"] = round(_ms(start) - timings["pools"], 3)
    return Retrieval(terms, weights, candidates, len(ids), suppressed, timings)


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


def _features(db: Database, tenant: str, ids: list[str], terms: Sequence[Term],
              weights: list[float], limits: Limits, now: datetime,
              allowed: Callable[[Candidate], bool]) -> tuple[list[Candidate], list[str]]:
    if not ids:
        return [], []
    rows = db.fetchall("candidate_features", {"tenant": tenant, "ids": ids,
                                              "queries": [t.query for t in terms]})
    return score_rows(rows, weights, limits, now, allowed)


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
