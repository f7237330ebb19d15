"""Bounded retrieval: query analysis, exact frequencies, pool bounds and recall."""

from __future__ import annotations

import random
from datetime import datetime

from gitmem import retrieval
from gitmem.memory import Memory

NOW = datetime.fromisoformat("2026-03-01T12:00:00+00:00")
WORDS = ["deploy", "pipeline", "cluster", "database", "cache", "review", "incident",
         "customer", "latency", "migration", "schema", "index", "query", "token", "budget",
         "release", "rollback", "alert", "dashboard", "service", "worker", "queue", "retry",
         "timeout", "backup", "replica"]


def limits(memory: Memory) -> retrieval.Limits:
    b = memory.policies.budgets
    return retrieval.Limits(b.candidate_pool_max, b.retrieved_chunks_max, b.alpha, b.beta,
                            b.gamma, b.recency_tau_days)


def test_analyze_keeps_phrases_stems_and_plain_forms(memory: Memory) -> None:
    terms = retrieval.analyze(memory.db, 'Which "blue cluster" did Alice deploy to?')
    assert terms[0].phrase and terms[0].query == "'blue' <-> 'cluster'"
    words = {t.text: t for t in terms[1:]}
    assert "Which" not in words and "did" not in words  # stopwords drop out
    assert words["Alice"].lexemes == ("alic", "alice")
    assert words["deploy"].query == "'deploy'"


def test_frequencies_are_exact_and_follow_syncs(memory: Memory) -> None:
    for n in range(30):
        memory.record({"content": {"text": f"cluster note {n}" + (" kafka" if n < 3 else "")},
                       "ts": "2026-02-01T00:00:00+00:00"})
    memory.sync()
    terms = retrieval.analyze(memory.db, "kafka cluster")
    dfs, corpus = retrieval.frequencies(memory.db, "default", terms)
    assert dfs == [3, 30] and corpus.chunks == 30
    with memory.db.connection() as conn:
        average = conn.execute("SELECT avg(length(tsv))::float8 AS a FROM chunks").fetchone()
    assert average is not None and abs(corpus.average_length - average["a"]) < 1e-9
    (memory.store / "events" / "2026-02" / "2026-02-01.jsonl").unlink()
    memory.sync()
    dfs, corpus = retrieval.frequencies(memory.db, "default", terms)
    assert dfs == [0, 0] and corpus.chunks == 0


def test_incremental_frequencies_equal_a_rebuild(memory: Memory) -> None:
    rng = random.Random(7)
    for day in range(1, 6):
        memory.record_many([{"content": {"text": " ".join(rng.choices(WORDS, k=8))},
                             "ts": f"2026-02-0{day}T10:00:00+00:00", "tenant_id": tenant}
                            for tenant in ("acme", "globex") for _ in range(20)])
        memory.sync()
    path = memory.store / "events" / "2026-02" / "2026-02-03.jsonl"
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:5]))  # rewrite
    memory.sync()
    with memory.db.connection() as conn:
        incremental = conn.execute("SELECT * FROM lexeme_df ORDER BY 1, 2").fetchall()
    memory.reindex()
    with memory.db.connection() as conn:
        rebuilt = conn.execute("SELECT * FROM lexeme_df ORDER BY 1, 2").fetchall()
    assert incremental == rebuilt and len(rebuilt) > 20


def test_pool_plan_fetches_rare_terms_whole_and_walks_for_common_ones() -> None:
    assert retrieval.plan_pools([5, 40], 1_000_000, 200) == (2, 0)  # all rare: no walk
    whole, window = retrieval.plan_pools([30, 90_000, 120_000], 1_000_000, 200)
    assert whole == 1 and 0 < window <= retrieval.MAX_WINDOW
    assert retrieval.plan_pools([400_000], 1_000_000, 200) == (0, 1500)  # common: newest


def test_a_rare_term_of_another_tenant_is_not_fetched(memory: Memory) -> None:
    memory.record({"content": {"text": "zygomorphic flowers"}, "tenant_id": "other"})
    mine = memory.record({"content": {"text": "zygomorphic petals"}}).id
    memory.sync()
    terms = retrieval.analyze(memory.db, "zygomorphic")
    found = retrieval.retrieve(memory.db, "default", terms, limits(memory), NOW,
                               lambda c: True)
    assert [c.chunk_id for c in found.candidates] == [mine]


def test_bounded_pools_recall_exact_ranking(memory: Memory) -> None:
    rng = random.Random(11)
    vocabulary = [*WORDS, *(f"filler{n}" for n in range(400))]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]  # Zipf-like
    memory.record_many([
        {"content": {"text": " ".join(rng.choices(vocabulary, weights, k=12))},
         "ts": f"2026-02-{1 + n % 28:02d}T{n % 24:02d}:{n % 60:02d}:00+00:00"}
        for n in range(6000)])
    memory.sync()
    allowed = lambda c: True  # noqa: E731 - no privacy filter in this comparison
    for question in ("why did the deploy pipeline time out on the replica?",
                     "backup retry timeout", "customer latency dashboard alert"):
        terms = retrieval.analyze(memory.db, question)
        bounded = retrieval.retrieve(memory.db, "default", terms, limits(memory), NOW, allowed)
        assert bounded.pool_size <= 2000
        exact = retrieval.exact_top(memory.db, "default", bounded.terms, bounded.idf,
                                    limits(memory), NOW, allowed, top=200)
        got = {c.chunk_id for c in bounded.candidates[:200]}
        recall = len(got & set(exact)) / len(exact)
        assert recall >= 0.9, (question, recall)


def test_frequent_co_matches_are_walked_rare_ones_fetched() -> None:
    assert retrieval.walk_is_cheaper([90_000, 85_000], 372_000, 200)     # 'database cache'
    assert not retrieval.walk_is_cheaper([40, 3_000], 372_000, 200)      # a rare word in it
    assert not retrieval.walk_is_cheaper([10], 0, 200)                   # empty tenant
