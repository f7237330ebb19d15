"""Bounded retrieval in-process, as build_acb runs it, for the baseline and recall runs.

The same limits (budgets.yaml), the same channel filter (privacy.yaml) and the
same clock as the daemon's build_acb for that request; query analysis is done
once per request beforehand (`prepare`) and not timed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from bench.queries import Ask
from gitmem import lexicon, planning, retrieval
from gitmem.db import Database
from gitmem.policies import Policies
from gitmem.privacy import ChannelRule
from gitmem.records import parse_ts


def limits(policies: Policies) -> planning.Limits:
    """Retrieval's bounds and weights, as build_acb reads them."""
    return planning.Limits.of(policies.budgets)


@dataclass
class Prepared:
    """A request ready for timed retrieval: its analyzed terms, clock and filter."""

    ask: Ask
    terms: list[lexicon.Term]
    now: datetime
    rule: ChannelRule

    def retrieve(self, db: Database, policies: Policies) -> retrieval.Retrieval:
        """The bounded retrieval build_acb runs for this request."""
        return retrieval.retrieve(db, self.ask.tenant, self.terms, limits(policies), self.now,
                                  self.rule)


def prepare(db: Database, policies: Policies, ask: Ask) -> Prepared:
    """Analyze the request's query (untimed)."""
    now_text = ask.params.get("now")
    now = parse_ts(now_text) if now_text else datetime.now(UTC)
    return Prepared(ask, lexicon.analyze(db, ask.query), now,
                    policies.privacy.rule(str(ask.params.get("channel", "private"))))
