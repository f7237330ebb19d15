"""The build_acb requests the latency, baseline and recall measurements share.

Four categories, from the corpus's `questions.json`:

- `fast`: no query_text (the fast path: sections from caches, no retrieval),
  from the questions' sessions and `FAST_SESSIONS` more sessions of the corpus
  picked by a hash of their ids (questions share a few sessions per tenant);
- `common` / `rare`: the corpus's `term_queries`, each asked in `TERM_TENANTS`
  tenants spread over the tenants' sizes (the largest always among them), from
  a question's session of that tenant;
- `question`: each natural-language question, from its own session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench import pg
from bench.context import Context

CATEGORIES = ("fast", "common", "rare", "question")
RETRIEVAL = ("common", "rare", "question")
TERM_TENANTS = 8
FAST_SESSIONS = 150   # the daemon caches 256 sessions' windows: all of these fit
_FIELDS = ("tenant_id", "session_id", "agent_id", "channel", "now")
_SHARED = "asks"


@dataclass(frozen=True)
class Ask:
    """One build_acb request of a category; `tenant_chunks` says how big its tenant is."""

    category: str
    params: dict[str, Any]
    tenant_chunks: int = 0

    @property
    def query(self) -> str:
        """The query text ("" on the fast path)."""
        return str(self.params.get("query_text", ""))

    @property
    def tenant(self) -> str:
        """The asking tenant."""
        return str(self.params["tenant_id"])

    def label(self) -> str:
        """Short description for reports."""
        return f"{self.tenant} ({self.tenant_chunks:,} chunks): {self.query!r}"


def spread(items: list[str], count: int) -> list[str]:
    """`count` items evenly spaced over `items` (first and last included)."""
    if len(items) <= count:
        return list(items)
    if count == 1:
        return items[:1]
    return [items[round(i * (len(items) - 1) / (count - 1))] for i in range(count)]


def asks(ctx: Context) -> dict[str, list[Ask]]:
    """The requests of every category (built once per run; the index must exist)."""
    found = ctx.shared.get(_SHARED)
    if found is not None:
        return dict(found)
    db = ctx.ensure_index()
    with pg.connect(ctx.dsn) as conn:
        sizes = pg.tenant_chunks(conn, db.schema)
        sampled = pg.sample_sessions(conn, db.schema, FAST_SESSIONS)
    questions = sorted(ctx.corpus.questions(), key=lambda q: q["id"])
    contexts: dict[str, dict[str, Any]] = {}
    for question in questions:
        contexts.setdefault(question["tenant_id"], {k: question[k] for k in _FIELDS})
    tenants = spread(sorted(contexts, key=lambda t: (-sizes.get(t, 0), t)), TERM_TENANTS)
    terms = ctx.corpus.term_queries()
    now = questions[0]["now"] if questions else None
    fast = {(q["tenant_id"], q["session_id"]): {k: q[k] for k in _FIELDS} for q in questions}
    for row in sampled:
        fast.setdefault((row["tenant_id"], row["session_id"]), {**row, "now": now})
    out: dict[str, list[Ask]] = {
        "fast": [Ask("fast", params, sizes.get(params["tenant_id"], 0))
                 for params in fast.values()],
        "question": [Ask("question", {**{k: q[k] for k in _FIELDS},
                                      "query_text": q["question"]},
                         sizes.get(q["tenant_id"], 0)) for q in questions],
    }
    for category in ("common", "rare"):
        out[category] = [Ask(category, {**contexts[t], "query_text": text}, sizes.get(t, 0))
                         for text in terms[category] for t in tenants]
    ctx.shared[_SHARED] = out
    return dict(out)
