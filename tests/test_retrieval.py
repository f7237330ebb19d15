"""Bounded retrieval: query analysis, exact statistics, lane planning, bounds and recall."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gitmem import baselines, lexicon, planning, retrieval, sections
from gitmem.db import sql_text
from gitmem.memory import Memory
from gitmem.privacy import ChannelRule
from gitmem.rows import SHORT_TOKENS, tenant_tag

NOW = datetime.fromisoformat("2026-03-01T12:00:00+00:00")
WORDS = ["deploy", "pipeline", "cluster", "database", "cache", "review", "incident",
         "customer", "latency", "migration", "schema", "index", "query", "token", "budget",
         "release", "rollback", "alert", "dashboard", "service", "worker", "queue", "retry",
         "timeout", "backup", "replica"]
EVERYONE = ChannelRule(frozenset(), frozenset(), None)   # no privacy filter in comparisons


def limits(memory: Memory) -> planning.Limits:
    return planning.Limits.of(memory.policies.budgets)


def test_analyze_keeps_phrases_stems_and_plain_forms(memory: Memory) -> None:
    terms = lexicon.analyze(memory.db, 'Which "blue cluster" did Alice deploy to?')
    assert terms[0].phrase and terms[0].query == "'blue' <-> 'cluster'"
    words = {t.text: t for t in terms[1:]}
    assert "Which" not in words and "did" not in words  # stopwords drop out
    assert words["Alice"].lexemes == ("alic", "alice")
    assert words["deploy"].query == "'deploy'"



@pytest.mark.parametrize("text", [
    "Where do the api database backups end up each night?",
    "roll-back of v1.2.3 on host-42.example.com/path/x by bob@x.org: 'quoted' \"a phrase\"",
    "42 -7 3.14 1e5 http://a.b/c?d=1 /usr/lib/x.so 3rd 12-abc abc-12 Ünïcödé naïve café",
    "the a an of", ""])
def test_query_tokens_are_what_ts_debug_returns(memory: Memory, text: str) -> None:
    with memory.db.connection() as conn:
        reference = conn.execute("SELECT alias, token, lexemes FROM ts_debug('english', %s) "
                                 "WHERE alias <> 'blank'", [text]).fetchall()
    rows = memory.db.fetchall("query_tokens", {"texts": [text]})
    assert [(r["alias"], r["token"], r["lexemes"]) for r in rows] == \
        [(r["alias"], r["token"], r["lexemes"]) for r in reference]
    assert {r["part"] for r in rows} <= {1}


def test_query_tokens_of_several_texts_are_each_texts_in_order(memory: Memory) -> None:
    texts = ["services/api/config.yaml", "", "the blue cluster", "Ünïcödé café v1.2.3"]
    rows = memory.db.fetchall("query_tokens", {"texts": texts})
    by_part = [[(r["token"], r["lexemes"]) for r in rows if r["part"] == n]
               for n in range(1, len(texts) + 1)]
    with memory.db.connection() as conn:
        for text, got in zip(texts, by_part, strict=True):
            reference = conn.execute("SELECT token, lexemes FROM ts_debug('english', %s) "
                                     "WHERE alias <> 'blank'", [text]).fetchall()
            assert got == [(r["token"], r["lexemes"]) for r in reference], text
    assert [r["part"] for r in rows] == sorted(r["part"] for r in rows)


def test_a_query_with_phrases_and_compounds_is_analyzed_in_one_round_trip(
        memory: Memory) -> None:
    text = 'Did "blue cluster" read services/api/config.yaml or UniqueViolation in fs.read_file?'
    terms = lexicon.analyze(memory.db, text)
    phrases = [t for t in terms if t.phrase]
    # quoted phrases first, then compounds: joined ones, then CamelCase ones
    assert [t.text for t in phrases] == ["blue cluster", "services/api/config.yaml",
                                         "fs.read_file", "UniqueViolation"]
    assert phrases[1].query == "'servic' <-> 'api' <-> 'config' <-> 'yaml'"
    assert phrases[2].query == "'fs' <-> 'read' <-> 'file'"
    assert phrases[3].query == "'uniqu' <-> 'violat'"
    words = {t.text for t in terms if not t.phrase}
    assert {"blue", "cluster", "read", "UniqueViolation"} <= words

def test_statistics_are_exact_per_tenant_and_follow_syncs(memory: Memory) -> None:
    for n in range(30):
        memory.record({"content": {"text": f"cluster note {n}" + (" kafka" if n < 3 else "")},
                       "ts": "2026-02-01T00:00:00+00:00"})
    memory.record({"content": {"text": "kafka " * 80 + "cluster"}, "ts": "2026-02-02T09:00:00Z",
                   "tenant_id": "other"})
    memory.sync()
    terms = lexicon.qualify(lexicon.analyze(memory.db, "kafka cluster"), "default")
    stats = lexicon.statistics(memory.db, "default", terms)
    assert (stats.dfs, stats.short_dfs, stats.chunks, stats.short_chunks) == ([3, 30], [3, 30],
                                                                              30, 30)
    assert [(d.key, d.chunks) for d in stats.days] == [("@d20260201", 30)]
    assert {"@w202605", "@m202602"} <= stats.units
    with memory.db.connection() as conn:
        average = conn.execute("SELECT avg(token_est)::float8 AS a FROM chunks "
                               "WHERE tenant_id = 'default'").fetchone()
    assert average is not None and abs(stats.average_tokens - average["a"]) < 1e-9
    other = lexicon.statistics(memory.db, "other", lexicon.qualify(
        lexicon.analyze(memory.db, "kafka cluster"), "other"))
    assert (other.dfs, other.short_dfs, other.chunks) == ([1, 1], [0, 0], 1)  # a long chunk
    (memory.store / "events" / "2026-02" / "2026-02-01.jsonl").unlink()
    memory.sync()
    stats = lexicon.statistics(memory.db, "default", terms)
    assert stats.dfs == [0, 0] and stats.chunks == 0 and stats.days == []


def test_incremental_frequencies_equal_a_rebuild(memory: Memory) -> None:
    rng = random.Random(7)
    for day in range(1, 6):
        memory.record_many([{"content": {"text": " ".join(rng.choices(WORDS, k=8))},
                             "ts": f"2026-02-0{day}T10:00:00+00:00", "tenant_id": tenant}
                            for tenant in ("acme", "globex") for _ in range(20)])
        memory.sync()
    evt = memory.record({"content": {"text": "one lonely tenant"}, "tenant_id": "initech",
                         "ts": "2026-02-09T10:00:00+00:00"}).id
    decision = memory.decide("Keep the quarterly platform roadmap", [evt], tenant_id="initech",
                             ts="2026-02-09T11:00:00+00:00").content["decision_id"]
    memory.sync()
    path = memory.store / "events" / "2026-02" / "2026-02-03.jsonl"
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:5]))  # rewrite
    (memory.store / "events" / "2026-02" / "2026-02-09.jsonl").unlink()
    (memory.store / "decisions" / f"{decision}.md").unlink()  # initech has no chunk left
    memory.sync()
    with memory.db.connection() as conn:
        incremental = conn.execute("SELECT * FROM lexeme_df ORDER BY 1, 2").fetchall()
    assert not [row for row in incremental if row["tenant_id"] == "initech"]
    memory.reindex()
    with memory.db.connection() as conn:
        rebuilt = conn.execute("SELECT * FROM lexeme_df ORDER BY 1, 2").fetchall()
    assert incremental == rebuilt and len(rebuilt) > 20


def synthetic(dfs: list[int], chunks: int = 1_000_000, days: int = 60) -> lexicon.Stats:
    """A large tenant whose chunks are spread evenly over `days` days before NOW."""
    per_day = chunks // days
    start = datetime(2026, 3, 1, tzinfo=UTC)
    day_list = [lexicon.Day(f"@d{start - timedelta(days=n):%Y%m%d}",
                              (start - timedelta(days=n)).timestamp(), per_day, per_day // 2)
                for n in range(days)]
    starts = [start - timedelta(days=n) for n in range(days)]
    units = {f"@{kind}{day:{form}}" for day in starts
             for kind, form in (("d", "%Y%m%d"), ("w", "%G%V"), ("m", "%Y%m"))}
    return lexicon.Stats(dfs, [df // 3 for df in dfs], chunks, chunks // 2, 60.0, day_list,
                         frozenset(units))


def expected_rows(stats: lexicon.Stats, lanes: list[planning.Lane]) -> float:
    total = 0.0
    for lane in lanes:
        scope = stats.short_chunks if lane.short else stats.chunks
        sizes = [d.short if lane.short else d.chunks for d in stats.days]
        total += lane.rate * (scope if lane.whole else sum(sizes[:lane.days]))
    return total


def test_a_rare_term_is_fetched_whole_and_a_common_one_only_recently() -> None:
    stats = synthetic([40, 250_000])
    weights = [planning.idf(df, stats.chunks) for df in stats.dfs]
    bounds = planning.Limits(2000, 200, 0.7, 0.2, 0.1, 14)
    lanes = planning.wanted(planning.plan(stats, weights, bounds, NOW), len(stats.days))
    rare = [lane for lane in lanes if lane.terms == (0,)]
    common = [lane for lane in lanes if lane.terms == (1,)]
    assert rare and all(lane.whole for lane in rare)  # its lanes hold every match
    assert common and all(not lane.whole and 0 < lane.days <= 3 for lane in common)
    assert not [lane for lane in lanes if lane.terms == (0, 1)]  # inside the rare lane
    assert expected_rows(stats, lanes) <= planning.BUDGET_SHARE * 2000 + 2 * 8_333


def test_the_plan_spends_its_budget_on_the_best_matches_first() -> None:
    stats = synthetic([20_000, 90_000, 120_000, 300_000])
    weights = [planning.idf(df, stats.chunks) for df in stats.dfs]
    bounds = planning.Limits(2000, 200, 0.7, 0.2, 0.1, 14)
    lanes = planning.wanted(planning.plan(stats, weights, bounds, NOW), len(stats.days))
    assert lanes and expected_rows(stats, lanes) <= 2000 * 1.05

    def reach(lane: planning.Lane) -> int:
        return len(stats.days) if lane.whole else lane.days

    # a lane whose matches score higher and are no more numerous reaches at least as far
    for a in lanes:
        for b in lanes:
            if a.short == b.short and a.value > b.value and a.rate <= b.rate:
                assert reach(a) >= reach(b), (a, b)
    # the most common word alone is never worth a lane when the others are rarer
    assert not [lane for lane in lanes if lane.terms == (3,)]
    small = planning.Limits(200, 200, 0.7, 0.2, 0.1, 14)
    assert expected_rows(stats, planning.wanted(planning.plan(stats, weights, small, NOW),
                                                 len(stats.days))) < 250


def test_word_pairs_are_costed_as_if_they_came_together_half_the_time() -> None:
    # "roll back": as if independent, 2% and 2.1% of chunks would share 0.04%; such
    # words come together, and a pair counted as rare would be fetched whole
    stats = synthetic([20_000, 21_000])
    weights = [planning.idf(df, stats.chunks) for df in stats.dfs]
    bounds = planning.Limits(2000, 200, 0.7, 0.2, 0.1, 14)
    pair = [lane for lane in planning.plan(stats, weights, bounds, NOW) if lane.terms == (0, 1)]
    assert pair and all(lane.rate > 5 * 0.02 * 0.021 for lane in pair if not lane.short)
    assert expected_rows(stats, pair) <= planning.BUDGET_SHARE * 2000 * 1.05


def test_time_keys_only_where_a_span_holds_few_of_the_matches() -> None:
    stats = synthetic([1_500, 250_000])  # ~25 matches a day, and ~4,200 a day
    weights = [planning.idf(df, stats.chunks) for df in stats.dfs]
    bounds = planning.Limits(2000, 200, 0.7, 0.2, 0.1, 14)
    lanes = planning.plan(stats, weights, bounds, NOW)
    terms = [lexicon.Term("kafka", "'kafka'", ("kafka",)),
             lexicon.Term("deploy", "'deploy'", ("deploy",))]
    scoring = retrieval.Scoring(tuple(weights), bounds, stats.average_tokens, NOW)
    found = {s.label: s for s in
             retrieval.statements("default", terms, lanes, stats, scoring, EVERYONE, 2000)}
    # kafka over its newest 8 days: ~200 of its 1,500 matches, the rest beyond the span,
    # so the days' keys go into the GIN lookup (long chunks only: the short lane of
    # kafka holds its short ones, over the whole history)
    [recent] = found["long:0-8d"].periods
    assert not recent.cut and "@d" in recent.query and "since0" not in found["long:0-8d"].params
    # the pair over every day: nothing beyond the span, so no key is looked up and the
    # rows are cut by time instead
    both = found["long:0-60d"]
    assert both.periods == (retrieval.Period(both.periods[0].query, stats.days[59].start,
                                             math.inf, cut=True),)
    assert "@" not in both.periods[0].query
    assert (both.params["since0"], both.params["until0"]) == (stats.days[59].start, math.inf)
    whole = found["short:0d-whole"]  # a whole history needs no cut
    assert not whole.periods[0].cut and "since0" not in whole.params


def test_nothing_is_looked_up_beyond_the_days_when_they_hold_every_chunk() -> None:
    """A lane that reached every day and then goes whole reads what lies beyond the
    days: nothing, for a tenant whose days (at most DAYS_MAX) hold all its chunks."""
    terms = [lexicon.Term("kafka", "'kafka'", ("kafka",)),
             lexicon.Term("zookeeper", "'zookeeper'", ("zookeeper",))]
    bounds = planning.Limits(2000, 200, 0.7, 0.2, 0.1, 14)

    def run(stats: lexicon.Stats) -> tuple[list[str], planning.Lane]:
        lane = planning.Lane((0,), True, 0.001, 1.0, days=60, whole=True, done=(60, False))
        fresh = planning.Lane((1,), True, 0.00001, 1.0, whole=True)
        scoring = retrieval.Scoring((1.0, 1.0), bounds, stats.average_tokens, NOW)
        found = retrieval.statements("default", terms, [lane, fresh], stats, scoring,
                                     EVERYONE, 2000)
        return [s.label for s in found], lane

    labels, lane = run(synthetic([1_500, 10], chunks=600_000))  # 10,000 a day, 60 days
    assert labels == ["short:0d-whole"] and lane.done == (60, True)
    labels, lane = run(synthetic([1_500, 10]))  # 40 chunks older than the days listed
    assert labels == ["short:0d-whole", "short:60d-whole"] and lane.done == (60, True)


def test_statements_are_costed_by_their_lookups_as_well_as_their_rows() -> None:
    """Two connections share the statements by cost: one that expects no row still
    costs its GIN lookups, and one never keeps more rows than its cap."""
    def cost(expected: float, cap: int, scope: str = "short") -> float:
        return retrieval.Statement("x", "", {}, expected, cap, scope=scope).cost()

    assert cost(0.0, 100) == retrieval.STATEMENT_ROWS
    assert cost(50.0, 100) == 50 + retrieval.STATEMENT_ROWS
    assert cost(5_000.0, 300) == 300 + retrieval.STATEMENT_ROWS
    assert cost(0.0, 200, "records") == 200 + retrieval.STATEMENT_ROWS  # it fills its cap


def test_a_lane_over_all_chunks_reads_the_long_ones_where_short_lanes_hold_the_rest(
) -> None:
    stats = synthetic([1_500, 250_000])
    weights = [planning.idf(df, stats.chunks) for df in stats.dfs]
    bounds = planning.Limits(2000, 200, 0.7, 0.2, 0.1, 14)
    terms = [lexicon.Term("kafka", "'kafka'", ("kafka",)),
             lexicon.Term("deploy", "'deploy'", ("deploy",))]
    scoring = retrieval.Scoring(tuple(weights), bounds, stats.average_tokens, NOW)

    def labels(lanes: list[planning.Lane]) -> dict[str, retrieval.Statement]:
        return {s.label: s for s in retrieval.statements("default", terms, lanes, stats,
                                                         scoring, EVERYONE, 2000)}

    # kafka over all chunks 8 days back, its short chunks only 2: the short lane does
    # not hold days 3-8, so the statement reads every chunk (both indexes; the short
    # lane is not fetched at all, the other holds its rows)
    found = labels([planning.Lane((0,), False, 0.01, 1.0, days=8),
                    planning.Lane((0,), True, 0.02, 1.0, days=2)])
    assert set(found) == {"all:0-8d"}
    assert "token_est <= 48 AND" in found["all:0-8d"].sql
    assert "token_est > 48 AND" in found["all:0-8d"].sql
    # the short lane 16 days back (as it usually reaches further: short chunks score
    # higher): the long chunks alone, expecting the rows of all chunks less the short
    # ones the short lane expects of those days
    found = labels([planning.Lane((0,), False, 0.01, 1.0, days=8),
                    planning.Lane((0,), True, 0.02, 1.0, days=16)])
    assert set(found) == {"long:0-8d", "short:0-16d"}
    long = found["long:0-8d"]
    assert "token_est > 48" in long.sql and "token_est <= 48" not in long.sql
    days = stats.days[:8]
    assert long.expected == pytest.approx(
        0.01 * sum(d.chunks for d in days) - 0.02 * sum(d.short for d in days))
    # a short lane of a subset of the terms holds them too (the pair's short matches)
    found = labels([planning.Lane((0, 1), False, 0.001, 1.0, days=4),
                    planning.Lane((0,), True, 0.02, 1.0, days=8)])
    assert set(found) == {"long:0-4d", "short:0-8d"}


def test_cover_uses_months_weeks_and_days() -> None:
    days = [lexicon.Day(f"@d{datetime(2026, 6, 3) - timedelta(days=n):%Y%m%d}",
                          (datetime(2026, 6, 3, tzinfo=UTC) - timedelta(days=n)).timestamp(),
                          10, 5) for n in range(60)]
    units = frozenset([d.key for d in days] + ["@m202605", "@m202606", "@w202622",
                                               "@w202621", "@w202620", "@w202619"])
    assert planning.cover(days, 1, units) == ["@d20260603"]
    assert planning.cover(days, 3, units) == ["@m202606"]            # 1 to 3 June
    # 20 May (a Wednesday) onwards: days to Sunday, two ISO weeks, then June
    assert planning.cover(days, 15, units) == ["@d20260520", "@d20260521", "@d20260522",
                                                "@d20260523", "@d20260524", "@w202622",
                                                "@m202606"]
    assert planning.horizon(3, 60) == 4 and planning.horizon(60, 60) == 60


def test_the_short_bound_is_the_same_in_code_and_sql() -> None:
    assert f"token_est <= {SHORT_TOKENS}" in sql_text("indexes.sql")
    assert f"token_est > {SHORT_TOKENS}" in sql_text("indexes.sql")
    assert sql_text("lexemes.sql").count(f"token_est <= {SHORT_TOKENS}") >= 4


def test_a_rare_term_of_another_tenant_is_not_fetched(memory: Memory) -> None:
    memory.record({"content": {"text": "zygomorphic flowers"}, "tenant_id": "other"})
    mine = memory.record({"content": {"text": "zygomorphic petals"}}).id
    memory.sync()
    terms = lexicon.analyze(memory.db, "zygomorphic")
    found = retrieval.retrieve(memory.db, "default", terms, limits(memory), NOW, EVERYONE)
    assert [c.chunk_id for c in found.candidates] == [mine]


def test_the_naive_baseline_ranks_short_and_long_chunks_of_the_tenant(memory: Memory) -> None:
    memory.record({"content": {"text": "zygomorphic flowers"}, "tenant_id": "other"})
    short = memory.record({"content": {"text": "zygomorphic zygomorphic petals"}}).id
    long = memory.record({"content": {"text": "zygomorphic " + "sepal " * 200}}).id
    memory.record({"content": {"text": "nothing to see"}})
    memory.sync()
    terms = lexicon.analyze(memory.db, "zygomorphic")
    # both indexes (short and long chunks), this tenant only, by ts_rank
    assert baselines.naive_top(memory.db, "default", terms) == [short, long]
    assert baselines.naive_top(memory.db, "default", terms, top=1) == [short]
    assert baselines.naive_top(memory.db, "default", []) == []


def test_bounded_pools_recall_exact_ranking(memory: Memory) -> None:
    rng = random.Random(11)
    vocabulary = [*WORDS, *(f"filler{n}" for n in range(400))]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]  # Zipf-like
    memory.record_many([
        {"content": {"text": " ".join(rng.choices(vocabulary, weights, k=12))},
         "ts": f"2026-02-{1 + n % 28:02d}T{n % 24:02d}:{n % 60:02d}:00+00:00"}
        for n in range(6000)])
    memory.sync()
    for question in ("why did the deploy pipeline time out on the replica?",
                     "backup retry timeout", "customer latency dashboard alert"):
        terms = lexicon.analyze(memory.db, question)
        bounded = retrieval.retrieve(memory.db, "default", terms, limits(memory), NOW, EVERYONE)
        assert bounded.pool_size <= 2000
        exact = baselines.exact_top(memory.db, "default", bounded.terms, limits(memory), NOW,
                                    EVERYONE, top=200)
        got = {c.chunk_id for c in bounded.candidates[:200]}
        recall = len(got & set(exact)) / len(exact)
        assert recall >= 0.9, (question, recall)



def test_rows_are_scored_by_the_documented_formula(memory: Memory) -> None:
    """score = alpha * BM25-normalized IDF share of the terms matched + beta *
    exp(-age / tau) + gamma * importance, rounded to 9 decimals: the lane statements
    compute it with their constants folded, and the result must not move."""
    rng = random.Random(5)
    start = datetime(2026, 1, 10, tzinfo=UTC)
    memory.record_many([
        {"content": {"text": " ".join(rng.choices(WORDS, k=rng.choice((3, 9, 30, 120))))},
         "ts": (start + timedelta(hours=7 * n)).isoformat(),
         "tags": ["important"] if n % 5 == 0 else []}
        for n in range(400)])
    memory.sync()
    bounds = limits(memory)
    terms = lexicon.analyze(memory.db, "cache rollback queue budget")
    found = retrieval.retrieve(memory.db, "default", terms, bounds, NOW, EVERYONE)
    average = retrieval.prepare(memory.db, "default", terms).stats.average_tokens
    total = sum(found.idf)
    assert len(found.candidates) == 200 and len({c.mask for c in found.candidates}) > 3
    assert len({c.importance for c in found.candidates}) > 1
    for c in found.candidates:
        share = sum(w for n, w in enumerate(found.idf) if c.mask >> n & 1) / total
        age = max(0.0, NOW.timestamp() - c.epoch) / (bounds.tau_days * planning.DAY)
        expected = (bounds.alpha * planning.length_norm(c.token_est, average) * share
                    + bounds.beta * math.exp(-min(700.0, age)) + bounds.gamma * c.importance)
        assert c.score == pytest.approx(round(expected, 9), abs=2e-9), c
    assert [c.score for c in found.candidates] == sorted(
        (c.score for c in found.candidates), reverse=True)

def test_recent_lanes_find_the_newest_matches_of_a_common_word(memory: Memory) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    memory.record_many([{"content": {"text": f"deploy finished {n}"},
                         "ts": (start + timedelta(hours=6 * n)).isoformat()}
                        for n in range(240)])  # 60 days, four a day
    memory.sync()
    now = start + timedelta(days=60)
    tight = planning.Limits(20, 10, 0.7, 0.2, 0.1, 14)  # a budget of 12 expected rows
    found = retrieval.retrieve(memory.db, "default", lexicon.analyze(memory.db, "deploy"),
                               tight, now, EVERYONE)
    assert len(found.candidates) == 10
    assert found.pool_size < 240 and all(lane["lane"] != "all:whole" for lane in found.lanes)
    newest = sorted(c.epoch for c in found.candidates)
    assert newest[0] >= (now - timedelta(days=8)).timestamp()


def test_a_span_cut_by_time_keeps_what_time_keys_keep(memory: Memory) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    memory.record_many([{"content": {"text": f"deploy finished {n}"},
                         "ts": (start + timedelta(hours=11 * n)).isoformat()}
                        for n in range(130)])  # 60 days, crossing months and weeks
    memory.sync()
    terms = lexicon.qualify(lexicon.analyze(memory.db, "deploy"), "default")
    stats = lexicon.statistics(memory.db, "default", terms)
    scoring = retrieval.Scoring((1.0,), limits(memory), stats.average_tokens, NOW)
    tag = tenant_tag("default")

    def rows(query: str, span: tuple[float, float] | None) -> list[tuple[object, ...]]:
        period = (retrieval.Period(query, *span, cut=True) if span
                  else retrieval.Period(query))
        sql, params = retrieval.lane_statement("default", terms, [period], "all", 200,
                                               scoring, EVERYONE, 2000)
        return memory.db.run_many([(sql, params)])[0]

    def keys(reach: int, skip: int = 0) -> str:
        return " | ".join(f"'{tag}{k}'" for k in planning.cover(stats.days, reach,
                                                                stats.units, skip=skip))

    days, word = stats.days, terms[0].query
    for done, reach in ((0, 5), (5, 20), (20, 45)):  # newest days, then older stretches
        keyed = rows(f"({word}) & ({keys(reach, done)})", None)
        cut = rows(word, (days[reach - 1].start,
                          days[done].start + planning.DAY if done else math.inf))
        assert keyed and cut == keyed, (done, reach)
    older = rows(f"({word}) & !({keys(10)})", None)  # what a whole lane adds after 10 days
    assert older and rows(word, (-math.inf, days[9].start)) == older


def test_quoted_phrases_match_within_the_tenant(memory: Memory) -> None:
    memory.record({"content": {"text": "the blue cluster in Frankfurt"}})
    memory.record({"content": {"text": "a cluster that is blue"}})
    memory.record({"content": {"text": "the blue cluster again"}, "tenant_id": "other"})
    memory.sync()
    terms = lexicon.analyze(memory.db, '"blue cluster"')
    found = retrieval.retrieve(memory.db, "default", terms, limits(memory), NOW, EVERYONE)
    texts = {row["chunk_id"]: row["text"] for row in memory.db.fetchall(
        "evidence_items", {"tenant": "default", "ids": [c.chunk_id for c in found.candidates],
                           "tids": [c.tid for c in found.candidates],
                           "anchors": []})}
    assert [texts[c.chunk_id] for c in found.candidates if c.mask & 1] == [
        "user: the blue cluster in Frankfurt"]
    assert all(tenant_tag("default") in t.query for t in lexicon.qualify(terms, "default"))


def test_evidence_is_read_where_the_lanes_found_it_and_by_id_once_it_moved(
        memory: Memory) -> None:
    first = memory.record({"content": {"text": "the zeppelin hangar is in Friedrichshafen"}}).id
    second = memory.record({"content": {"text": "is the zeppelin hangar heated?"},
                            "session_id": "s1"}).id
    reply = memory.record({"content": {"text": "yes, since the spring"},
                           "session_id": "s1"}).id
    memory.sync()
    found = retrieval.retrieve(memory.db, "default", lexicon.analyze(memory.db, "zeppelin"),
                               limits(memory), NOW, EVERYONE)
    assert {c.chunk_id for c in found.candidates} == {first, second}
    assert all(c.tid.startswith("(") for c in found.candidates)
    with memory.db.connection() as conn:  # a new row version: the ctid it had is stale
        conn.execute("UPDATE chunks SET importance = importance WHERE chunk_id = %s",
                     (second,))
    rows, replies = sections.evidence_rows(memory.db, "default", found.candidates)
    assert set(rows) == {first, second}
    assert rows[second]["text"] == "user: is the zeppelin hangar heated?"
    assert replies[second]["chunk_id"] == reply
    stale = memory.db.fetchall("evidence_items", {
        "tenant": "default", "ids": [c.chunk_id for c in found.candidates],
        "tids": [c.tid for c in found.candidates], "anchors": []})
    assert [row["chunk_id"] for row in stale] == [first]  # the moved row fails the check


def test_what_the_channel_may_not_load_is_counted_not_scored(memory: Memory) -> None:
    kept = memory.record({"content": {"text": "zeppelin hangar notes"}, "channel": "team"}).id
    memory.record({"content": {"text": "zeppelin hangar secret plan"}, "channel": "private"})
    memory.sync()
    rule = ChannelRule(frozenset({"secret"}), frozenset(), frozenset({"team", "public"}))
    found = retrieval.retrieve(memory.db, "default", lexicon.analyze(memory.db, "zeppelin"),
                               limits(memory), NOW, rule)
    assert [c.chunk_id for c in found.candidates] == [kept]
    assert (found.pool_size, found.loadable) == (2, 1)  # the planner's count, the channel's
    assert sum(lane["matched"] for lane in found.lanes) == 1


def test_a_statement_cut_off_at_its_share_is_continued_while_the_pool_has_room(
        memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two words that always come together (a name) are costed as if they did half the
    time: the statement fetching them is cut off at its share of the pool, and the best
    matches it could not keep lie further back. A second round continues it."""
    rng = random.Random(5)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    events = []
    for n in range(6000):
        words = rng.choices(WORDS, k=8)
        if n % 40 == 0:
            words[:2] = ["Zephyr", "Quasar"]
        events.append({"content": {"text": " ".join(words)},
                       "ts": (start + timedelta(minutes=15 * n)).isoformat()})
    memory.record_many(events)
    memory.sync()
    now = start + timedelta(days=63)
    small = planning.Limits(240, 80, 0.7, 0.2, 0.1, 14)
    terms = lexicon.analyze(memory.db, "Zephyr Quasar deploy")

    def recall() -> tuple[float, list[str]]:
        found = retrieval.retrieve(memory.db, "default", terms, small, now, EVERYONE)
        assert found.pool_size <= small.pool_max
        exact = baselines.exact_top(memory.db, "default", found.terms, small, now, EVERYONE,
                                    top=small.retrieved_max)
        got = {c.chunk_id for c in found.candidates}
        return len(got & set(exact)) / len(exact), [str(lane["lane"]) for lane in found.lanes]

    continued, lanes = recall()
    assert continued == 1.0 and "all:0d-whole+" in lanes
    monkeypatch.setattr(retrieval, "CONTINUE_MIN", 10 ** 9)
    cut, lanes = recall()
    assert cut < 0.9 and not any(lane.endswith("+") for lane in lanes)


def test_a_rare_words_old_matches_are_not_cut_for_a_common_words_newer_ones(
        memory: Memory) -> None:
    """Both words' lanes reach the whole history, where one statement would fetch them
    together, newest first, up to one cap: the common word's burst of months ago fills
    it and the rare word's older matches, the best of all, are never scored. Expected to
    match more than that cap holds, the statement is one per lane instead."""
    rng = random.Random(7)
    now = datetime(2026, 6, 1, 12, tzinfo=UTC)

    def at(days: float, text: str) -> dict[str, Any]:
        return {"content": {"text": text}, "ts": (now - timedelta(days=days)).isoformat()}

    events = [at(rng.uniform(0, 125), f"weekly status update number {n}") for n in range(1500)]
    events += [at(rng.uniform(0, 125), f"server status update number {n}") for n in range(150)]
    events += [at(rng.uniform(140, 160), f"server migration batch {n} done") for n in range(2500)]
    events += [at(170 + n, f"server kestrel incident {n} postmortem") for n in range(30)]
    recorded = memory.record_many(events)
    memory.sync()
    kestrel = {e.id for e in recorded[-30:]}
    small = limits(memory)
    terms = lexicon.analyze(memory.db, "kestrel server")
    found = retrieval.retrieve(memory.db, "default", terms, small, now, EVERYONE)
    assert {c.chunk_id for c in found.candidates[:30]} == kestrel
    assert len([lane for lane in found.lanes if lane["lane"] == "all:0d-whole"]) == 2


def test_records_are_read_newest_period_first_and_older_periods_only_when_needed(
        memory: Memory) -> None:
    start = datetime(2026, 1, 1, 9, tzinfo=UTC)
    source = memory.record({"content": {"text": "design review"}, "ts": start.isoformat()})
    for n in range(70):  # a decision a day about the cache, and a rare one on day 3
        memory.decide(f"cache policy {n}" + (" zookeeper" if n == 3 else ""), [source.id],
                      ts=(start + timedelta(days=n)).isoformat())
    memory.sync()
    bounds = limits(memory)

    def run(query: str, cap: int) -> tuple[retrieval.Statement, list[tuple[object, ...]],
                                           list[int]]:
        prepared = retrieval.prepare(memory.db, "default", lexicon.analyze(memory.db, query))
        scoring = retrieval.Scoring(tuple(prepared.weights), bounds,
                                    prepared.stats.average_tokens, NOW)
        statement = retrieval.records_statement("default", prepared.terms, prepared.stats,
                                                scoring, EVERYONE, cap)
        with memory.db.connection() as conn:
            [row] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement.sql,
                                 statement.params).fetchall()
        return (statement, memory.db.run_many([(statement.sql, statement.params)])[0],
                _period_loops(row))

    # the newest 4 days, the 12 before, the 48 before those, then the rest: newest first
    statement, rows, loops = run("cache", 3)
    periods = statement.periods
    assert [p.cut for p in periods] == [False, False, False, True]
    assert all(a.since >= b.until for a, b in itertools.pairwise(periods))
    # three decisions fill the cap in the newest period: the older ones are never read
    assert loops == [1, 0, 0, 0]
    assert sorted(float(r[3]) for r in rows) == [(start + timedelta(days=n)).timestamp()
                                                 for n in (67, 68, 69)]
    # a rare word's one match lies beyond every keyed period: all of them are read
    _, rows, loops = run("zookeeper", 3)
    assert loops == [1, 1, 1, 1]
    assert [float(r[3]) for r in rows] == [(start + timedelta(days=3)).timestamp()]


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _period_loops(plan: dict[str, Any]) -> list[int]:
    """How often each period's scan of a lane statement ran (EXPLAIN ANALYZE, JSON); the
    scan reading the kept rows whole by their ctids runs once."""
    scans = [node for node in _nodes(plan["QUERY PLAN"][0]["Plan"])
             if node.get("Relation Name") == "chunks"]
    kept = [node for node in scans if "ctid" in node.get("TID Cond", "") + node.get("Filter", "")]
    assert len(kept) == 1 and kept[0]["Actual Loops"] == 1
    return [node["Actual Loops"] for node in scans if node not in kept]


def _prepared(memory: Memory, text: str, now: datetime
              ) -> tuple[retrieval.Query, retrieval.Scoring]:
    query = retrieval.prepare(memory.db, "default", lexicon.analyze(memory.db, text))
    return query, retrieval.Scoring(tuple(query.weights), limits(memory),
                                    query.stats.average_tokens, now)


def test_short_periods_read_stamped_lexemes_and_find_what_time_keys_find(
        memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    start = datetime(2026, 1, 20, 9, tzinfo=UTC)
    rng = random.Random(11)
    events = []
    for n in range(40 * 6):  # 40 days, a short turn every 4 hours; some long ones
        words = rng.choices(["zephyr", "quasar", "deploy", "review"], k=3)
        text = " ".join(words) + (" " + " ".join(rng.choices(WORDS, k=60)) if n % 7 == 0 else "")
        events.append({"content": {"text": text},
                       "ts": (start + timedelta(hours=4 * n)).isoformat()})
    memory.record_many(events)
    memory.sync()
    now = start + timedelta(days=40)
    bounds = limits(memory)
    tag = tenant_tag("default")

    def prepared(text: str) -> tuple[retrieval.Query, retrieval.Scoring]:
        return _prepared(memory, text, now)

    query, scoring = prepared("zephyr quasar")
    both = retrieval.any_of([retrieval._conjunction(query.terms, (0, 1))])
    [keyed] = retrieval.span_periods(both, query.stats, tag, 1, 16, False)
    [stamped] = retrieval.span_periods(both, query.stats, tag, 1, 16, False, stamp=lambda unit:
                                       retrieval.any_of([retrieval._conjunction(
                                           lexicon.stamped(query.terms, unit), (0, 1))]))
    assert stamped.stamped and not keyed.stamped and "@w" in stamped.query
    # every lexeme gets the unit, quoted as a literal: escaped quotes and backslashes too
    [word, phrase] = lexicon.stamped(
        [lexicon.Term("its", "", ("t1it's", "t1a\\b"), False),
         lexicon.Term("end x", "", ("t1end", "t1x"), True)], "@d20260101")
    assert word.query == "'t1it''s@d20260101' | 't1a\\\\b@d20260101'"
    assert phrase.query == "'t1end@d20260101' <-> 't1x@d20260101'" and phrase.phrase

    def rows(period: retrieval.Period) -> list[str]:
        sql, params = retrieval.lane_statement("default", query.terms, [period], "short",
                                               1000, scoring, EVERYONE, 1000)
        with memory.db.connection() as conn:  # the planner must be able to use the index
            conn.execute("SET enable_seqscan = off")
            [plan] = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchall()
            found = conn.execute(sql, params).fetchall()
        names = {n.get("Index Name") for n in _nodes(plan["QUERY PLAN"][0]["Plan"])}
        assert ("chunks_short_stamped" in names) == period.stamped
        return sorted(row["chunk_id"] for row in found)

    # the same chunks: both words, short, in the 2nd..16th newest days
    assert rows(stamped) == rows(keyed) and len(rows(keyed)) > 10
    # short lanes' keyed periods are stamped, unless a term is a phrase (no positions)
    monkeypatch.setattr(retrieval, "KEYLESS_EXTRA", -1.0)  # time keys, not a cut by time
    for text, expect in (("zephyr quasar", True), ('"zephyr quasar"', False)):
        query, scoring = prepared(text)
        lanes = [planning.Lane(tuple(range(len(query.terms))), True, 0.05, 1.0, days=8)]
        [statement] = retrieval.statements("default", query.terms, lanes, query.stats,
                                           scoring, EVERYONE, bounds.pool_max)
        [period] = statement.periods
        assert statement.scope == "short" and not period.cut and period.stamped == expect
        assert ("<->" in period.query) != expect


def test_dense_words_read_the_newest_stamped_units_first_and_stop_at_the_cap(
        memory: Memory) -> None:
    start = datetime(2026, 1, 5, 0, 30, tzinfo=UTC)  # a Monday
    events = []
    for n in range(56 * 12):  # 8 weeks, a short turn every 2 hours: the pair in each
        events.append({"content": {"text": "billing roll back"},
                       "ts": (start + timedelta(hours=2 * n)).isoformat()})
    memory.record_many(events)
    memory.sync()
    tag = tenant_tag("default")
    query, scoring = _prepared(memory, "roll back", start + timedelta(days=56))
    both = retrieval.any_of([retrieval._conjunction(query.terms, (0, 1))])

    def stamp(unit: str) -> str:
        return retrieval.any_of([retrieval._conjunction(lexicon.stamped(query.terms, unit),
                                                        (0, 1))])

    def run(periods: tuple[retrieval.Period, ...], cap: int) -> tuple[list[str], list[int]]:
        sql, params = retrieval.lane_statement("default", query.terms, periods, "short",
                                               1000, scoring, EVERYONE, cap)
        with memory.db.connection() as conn:
            [plan] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchall()
        rows = memory.db.run_many([(sql, params)])[0]
        return sorted(str(row[0]) for row in rows), _period_loops(plan)

    count = len(query.stats.days)
    # matches beyond the cap: the newest eighth, the newest half, then the older rows
    # in one keyless lookup cut by time (few lie beyond the whole history's span)
    split = retrieval.span_periods(both, query.stats, tag, 0, count, True, stamp,
                                   most=10 ** 6, cap=100)
    assert [(p.stamped, p.cut) for p in split] == [(True, False), (True, False), (False, True)]
    assert all(a.since == b.until for a, b in itertools.pairwise(split))
    assert split[-1].since == query.stats.days[-1].start
    assert split[0].until >= query.stats.days[0].start + 86400
    assert split[0].until - split[0].since < (split[0].until - split[-1].since) / 4
    # the same newest 60 as one lookup of every match, and the older periods never run
    [whole] = retrieval.span_periods(both, query.stats, tag, 0, count, True)
    newest, loops = run(split, 60)
    assert loops == [1, 0, 0]
    assert newest == run((whole,), 60)[0] and len(newest) == 60
    # a cap the newest eighth cannot fill reads on, with the same result
    older, loops = run(split, 400)
    assert loops[:2] == [1, 1] and older == run((whole,), 400)[0]
    # words that cannot match more than the cap keep one period
    assert len(retrieval.span_periods(both, query.stats, tag, 0, count, True, stamp,
                                      most=100, cap=100)) == 1
    # keyed spans split into stamped periods only, newest first, covering the span
    keyed = retrieval.span_periods(both, query.stats, tag, 3, 40, False, stamp,
                                   most=10 ** 6, cap=100)
    assert len(keyed) == 3 and all(p.stamped and not p.cut for p in keyed)
    assert keyed[0].until == query.stats.days[2].start
    assert keyed[-1].since == query.stats.days[39].start
    [together] = retrieval.span_periods(both, query.stats, tag, 3, 40, False, stamp)
    assert run(keyed, 100)[0] == run((together,), 100)[0]
    assert run(keyed, 100000)[0] == run((together,), 100000)[0]
