"""What bounded retrieval is measured against (the benchmark and the tests).

- `exact_top`: the same score as retrieval's lane statements, over every chunk
  of the tenant matching any term, best first: what the bounded pools' recall
  is taken against.
- `naive_top`: what a simple implementation does: `ts_rank` over every match
  of any term, top N, on the same index.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gitmem import planning, retrieval
from gitmem.db import Database, named_queries
from gitmem.lexicon import Term, qualify
from gitmem.privacy import ChannelRule


def exact_top(db: Database, tenant: str, terms: Sequence[Term], limits: planning.Limits,
              now: datetime, rule: ChannelRule, top: int = 200) -> list[str]:
    """Ids of the exact top-`top` by retrieval's own score over every match."""
    query = retrieval.prepare(db, tenant, terms)
    if not query.terms:
        return []
    scoring = retrieval.Scoring(tuple(query.weights), limits, query.stats.average_tokens, now)
    every = retrieval.Period(retrieval.any_of([t.query for t in query.terms]))
    sql, params = retrieval.lane_statement(tenant, query.terms, [every], "all", top, scoring,
                                           rule, 2 ** 62)
    [rows] = db.run_many([(sql, params)])
    return [row[0] for row in rows if row[9] is not None]


def naive_top(db: Database, tenant: str, terms: Sequence[Term], top: int = 200) -> list[str]:
    """The naive baseline: ts_rank over every match of any term, top `top`."""
    if not terms:
        return []
    mine = qualify(terms, tenant)
    match = retrieval.SCOPES["all"].format(query="query")
    sql = named_queries()["naive_rank"].format(match=match)
    [rows] = db.run_many([(sql, {"tenant": tenant, "limit": top,
                                 "query": retrieval.any_of([t.query for t in mine])})])
    return [row[0] for row in rows]
