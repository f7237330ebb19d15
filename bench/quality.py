"""Retrieval quality: does a question's evidence land in the first 2,000 tokens?

A retriever maps a question to ranked `Item`s (the ids each stands for and its
size in tokens). `pack` fills the budget greedily in rank order; a question
counts as answered when every evidence id of it is inside the packed items; a
miss is told apart by how far its evidence got (`missed`: none of it ranked,
part of it, or all of it but past the budget).
The same scoring serves both sides:

- the BM25 baseline (`rank_bm25.BM25Okapi`) over the question's tenant's
  chunks, the ones its channel may load, tokenised into PostgreSQL's english
  lexemes so both sides see the same words, each ranked chunk sized with
  `gitmem.tokens.count` of its text;
- gitmem: `acb_retriever(build_acb)` turns the ACB's retrieved_evidence
  section into items (plug in the build function when it exists).
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import pg
from bench.context import Context
from bench.stats import Metric, percentile
from gitmem import tokens
from gitmem.records import canonical_json

BUDGET_TOKENS = 2000
RANKED_MAX = 200   # like retrieved_chunks_max: no retriever ranks more than this
MISS_KINDS = ("absent", "partial", "late")
_LEXEME = re.compile(r"'((?:[^']|'')*)'(?::([0-9A-D,]+))?")
Question = dict[str, Any]


@dataclass(frozen=True)
class Item:
    """One ranked piece of evidence: the ids it stands for and its token count."""

    ids: frozenset[str]
    tokens: int


Retriever = Callable[[Question], Sequence[Item]]


def pack(items: Sequence[Item], budget: int = BUDGET_TOKENS) -> list[Item]:
    """Items taken in rank order while they fit the budget (a too-big one is skipped)."""
    packed: list[Item] = []
    left = budget
    for item in items:
        if item.tokens <= left:
            packed.append(item)
            left -= item.tokens
    return packed


def answered(question: Question, items: Sequence[Item], budget: int = BUDGET_TOKENS) -> bool:
    """Whether every evidence id of the question is inside the packed items."""
    inside = set().union(*(item.ids for item in pack(items, budget)))
    return all(ref in inside for ref in question["evidence"])


@dataclass
class QualityReport:
    """Answered questions overall and per category, and which were missed."""

    name: str
    total: int = 0
    hits: int = 0
    ranked_hits: int = 0   # evidence anywhere in the ranked list (before the budget)
    by_category: dict[str, list[int]] = field(default_factory=dict)   # [hits, total]
    misses: list[str] = field(default_factory=list)
    # the misses by how far their evidence got: none of it in the ranked list, part of
    # it, or all of it but past the budget
    missed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MISS_KINDS, 0))

    @property
    def share(self) -> float:
        """Share of questions answered within the budget."""
        return self.hits / self.total if self.total else 0.0

    def metrics(self, target: str = "") -> list[Metric]:
        """The report as metric rows."""
        categories = {k: round(h / t, 3) for k, (h, t) in sorted(self.by_category.items())}
        return [
            Metric("quality", f"{self.name}: evidence in first {BUDGET_TOKENS} tokens",
                   round(self.share, 3), "share", samples=self.total, target=target,
                   extra={"by_category": categories, "misses": self.misses,
                          "missed": self.missed}),
            Metric("quality", f"{self.name}: evidence in top {RANKED_MAX}",
                   round(self.ranked_hits / self.total, 3) if self.total else 0.0, "share",
                   samples=self.total),
        ]


def score(questions: Sequence[Question], retriever: Retriever, name: str,
          budget: int = BUDGET_TOKENS) -> QualityReport:
    """Run every question through `retriever` and score the packed evidence."""
    report = QualityReport(name)
    for question in questions:
        items = list(retriever(question))[:RANKED_MAX]
        hit = answered(question, items, budget)
        ranked = set().union(*(item.ids for item in items))
        report.total += 1
        report.hits += hit
        reached = sum(ref in ranked for ref in question["evidence"])
        report.ranked_hits += reached == len(question["evidence"])
        for category in question["categories"]:
            counts = report.by_category.setdefault(category, [0, 0])
            counts[0] += hit
            counts[1] += 1
        if not hit:
            report.misses.append(question["id"])
            kind = ("absent" if not reached else "partial"
                    if reached < len(question["evidence"]) else "late")
            report.missed[kind] += 1
    return report


# --------------------------------------------------------------------------- BM25

def lexemes(tsvector: str) -> list[str]:
    """A tsvector's text as a token list (each lexeme repeated by its frequency)."""
    out: list[str] = []
    for match in _LEXEME.finditer(tsvector):
        word = match.group(1).replace("''", "'")
        positions = match.group(2)
        out.extend([word] * (positions.count(",") + 1 if positions else 1))
    return out


class _TenantIndex:
    """BM25 over one tenant's loadable chunks, plus postings to find candidates fast."""

    def __init__(self, rows: Iterator[tuple[str, str, int, str]]) -> None:
        self.chunk_ids: list[str] = []
        self.source_ids: list[str] = []
        self.postings: dict[str, array[int]] = {}
        self.bm25 = _bm25()(self._documents(rows))

    def _documents(self, rows: Iterator[tuple[str, str, int, str]]) -> Iterator[list[str]]:
        for number, (chunk_id, source_id, _, tsv) in enumerate(rows):
            self.chunk_ids.append(chunk_id)
            self.source_ids.append(source_id)
            words = lexemes(tsv)
            for word in set(words):
                self.postings.setdefault(word, array("I")).append(number)
            yield words

    def rank(self, query: list[str]) -> list[int]:
        """Document numbers of the top chunks for the query's lexemes, best first
        (ties: chunk order)."""
        candidates = sorted({doc for word in query for doc in self.postings.get(word, ())})
        if not candidates:
            return []
        scores = self.bm25.get_batch_scores(query, candidates)
        best = sorted(range(len(candidates)), key=lambda i: (-scores[i], candidates[i]))
        return [candidates[i] for i in best[:RANKED_MAX]]


class BM25Retriever:
    """The baseline: BM25 over the asking tenant's chunks that its channel may load."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.schema = ctx.ensure_index().schema
        self.privacy = ctx.policies.privacy
        self._key: tuple[str, str] | None = None
        self._index: _TenantIndex | None = None

    def __call__(self, question: Question) -> list[Item]:
        suppressed = sorted(self.privacy.rule(question["channel"]).suppress_sensitivity)
        key = (question["tenant_id"], ",".join(suppressed))
        with pg.connect(self.ctx.dsn) as conn:
            if key != self._key or self._index is None:
                self._index = None  # free the previous tenant's index first
                self._index = _TenantIndex(pg.tenant_lexemes(conn, self.schema, key[0],
                                                             suppressed))
                self._key = key
            query = sorted(set(lexemes(pg.query_lexemes(conn, question["question"]))))
            ranked = self._index.rank(query)
            chunk_ids = [self._index.chunk_ids[doc] for doc in ranked]
            texts = pg.chunk_texts(conn, self.schema, chunk_ids)
        return [Item(frozenset((chunk_id.split("#", 1)[0], self._index.source_ids[doc])),
                     tokens.count(texts[chunk_id]))
                for doc, chunk_id in zip(ranked, chunk_ids, strict=True)]


# --------------------------------------------------------------------------- gitmem

def items_from_acb(acb: dict[str, Any], section: str = "retrieved_evidence",
                   pinned: bool = True) -> list[Item]:
    """The items of one ACB section, in order, as scoring items (ids from their refs);
    `pinned=False` leaves out the pinned items (placed first, whatever the query)."""
    items: list[Item] = []
    for part in acb.get("sections", []):
        if part.get("name") != section:
            continue
        for item in part.get("items", []):
            if item.get("pinned") and not pinned:
                continue
            ids = {ref.split("#", 1)[0] for ref in item.get("refs", [])}
            ids.update(str(item[k]).split("#", 1)[0] for k in ("id", "chunk_id", "source_id")
                       if item.get(k))
            items.append(Item(frozenset(ids), int(item.get("token_est", 0))))
    return items


def pinned_tokens(acb: dict[str, Any], section: str = "retrieved_evidence") -> int:
    """Tokens of the pinned items at the head of an ACB section."""
    return sum(int(item.get("token_est", 0)) for part in acb.get("sections", [])
               if part.get("name") == section for item in part.get("items", [])
               if item.get("pinned"))


def acb_retriever(build: Callable[[dict[str, Any]], dict[str, Any]],
                  intent: str = "recall", pinned: bool = True) -> Retriever:
    """A retriever asking gitmem: `build` takes a build_acb request, returns the ACB."""
    def retrieve(question: Question) -> list[Item]:
        request = {k: question[k] for k in ("tenant_id", "session_id", "agent_id", "channel",
                                            "now")}
        return items_from_acb(build({**request, "intent": intent,
                                     "query_text": question["question"]}), pinned=pinned)
    return retrieve


def measure_bm25(ctx: Context) -> list[Metric]:
    """The BM25 baseline's share of questions answered within 2,000 tokens."""
    questions = sorted(ctx.corpus.questions(), key=lambda q: (q["tenant_id"], q["id"]))
    report = score(questions, BM25Retriever(ctx), "bm25 baseline")
    ctx.shared["quality_bm25"] = report
    return report.metrics()


def measure_gitmem(ctx: Context) -> list[Metric]:
    """gitmem's share: build_acb over the socket (the corpus daemon), each question asked
    from its tenant/session/channel, its retrieved_evidence packed into 2,000 tokens."""
    from bench.daemons import corpus_daemon  # a daemon only when this measurement runs

    questions = sorted(ctx.corpus.questions(), key=lambda q: (q["tenant_id"], q["id"]))
    daemon = corpus_daemon(ctx)
    answers: dict[str, dict[str, Any]] = {}
    with daemon.client() as client:
        def build(request: dict[str, Any]) -> dict[str, Any]:
            key = canonical_json(request)
            if key not in answers:
                answers[key] = client.call("build_acb", request)
            return answers[key]
        reports = [score(questions, acb_retriever(build), "gitmem"),
                   score(questions, acb_retriever(build, pinned=False),
                         "gitmem, ranked items only (pinned left out)")]
    bm25: QualityReport | None = ctx.shared.get("quality_bm25")
    target = (f"above BM25 ({bm25.share:.3f}, same run)" if bm25
              else "above the BM25 baseline (quality_bm25)")
    metrics: list[Metric] = []
    for report in reports:
        found = report.metrics(target)
        if bm25 is not None:
            found[0].extra["bm25_by_category"] = {
                k: round(h / t, 3) for k, (h, t) in sorted(bm25.by_category.items())}
            found[0].extra["minus_bm25"] = round(report.share - bm25.share, 3)
        metrics += found
    pinned = [pinned_tokens(a) for a in answers.values()]
    metrics[0].extra["pinned_tokens"] = {"median": percentile(pinned, 50),
                                               "max": max(pinned, default=0)}
    return metrics


def _bm25() -> Any:
    """`rank_bm25.BM25Okapi`, imported when the baseline is measured (the rest of the
    benchmark, its --help included, runs without the `bench` extra)."""
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        raise RuntimeError("the BM25 baseline needs rank_bm25: .venv/bin/pip install -e "
                           "'.[bench]'") from None
    return BM25Okapi
