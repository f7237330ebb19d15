"""Query terms for full-text retrieval, and their exact statistics.

1. *Analyze*: each content word becomes a term — its English stem OR its plain
   lower-case form (so actor names and tags match too); quoted phrases stay
   phrases. Stopwords drop out. Terms are then *qualified*: every lexeme of a
   chunk carries its tenant's tag (sql/schema.sql), so the GIN index holds one
   posting list per tenant and word, and a search reads this tenant's matches
   only, however large the others are.
2. *Statistics*, exact, from `lexeme_df` in one round trip: each term's
   document frequency (IDF needs no estimate; the ranking is the same on any
   index built from the same files), over all chunks and over the short ones,
   and the sizes of the tenant's newest days (gitmem/planning.py plans with them).
"""

from __future__ import annotations

import calendar
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gitmem.db import Database
from gitmem.folding import bare_versions, compounds, fold
from gitmem.rows import tenant_tag

DAYS_MAX = 120          # newest days (with chunks) a lane may reach before going whole
COMPOUNDS_MAX = 4       # compound words of a query also asked as the phrase of their parts
_QUOTED = re.compile(r'"([^"]+)"')


@dataclass(frozen=True)
class Term:
    """One unit of a query: a word (its stem or plain form) or a quoted phrase."""

    text: str
    query: str            # tsquery text
    lexemes: tuple[str, ...]
    phrase: bool = False
    # a phrase's distances between its words, as the index counts positions: a
    # stopword between two words holds a position of its own ("near the office")
    gaps: tuple[int, ...] = ()


# --------------------------------------------------------------------------- terms

def quote(lexeme: str) -> str:
    """A lexeme as a tsquery literal."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def analyze(db: Database, text: str) -> list[Term]:
    """The terms of a natural-language query (phrases first, then words), read as the
    index reads a text (gitmem/folding.py: accents folded, unspaced scripts paired)."""
    shown = _QUOTED.findall(text)
    text = fold(text)
    phrases = _QUOTED.findall(text)
    if len(shown) != len(phrases):  # folding made a quote mark (a full-width one)
        shown = phrases
    unquoted = _QUOTED.sub(" ", text)
    parted = itertools.islice(compounds(unquoted).items(), COMPOUNDS_MAX)
    asked = [*zip(phrases, shown, strict=True),
             *((" ".join(parts), token) for token, parts in parted)]
    # the phrases' tokens and the words' in one round trip
    *phrased, worded = _tokens(db, [phrase for phrase, _ in asked]
                               + [unquoted + " " + " ".join(phrases)])
    terms: list[Term] = []
    seen: set[str] = set()
    for (_, as_asked), tokens in zip(asked, phrased, strict=True):
        term = _phrase(tokens, as_asked.strip())
        if term is not None and term.query not in seen:
            seen.add(term.query)
            terms.append(term)
    for token, lexemes in worded:
        if not lexemes:
            continue  # a stopword
        # a number joined to a word (`JIRA-4521`) is read signed, a version with its `v`
        # (`v2.3.1`) as one token: the digits are a form too, as the index holds them
        # (folding.joined_numbers, folding.bare_versions)
        unsigned = [token[1:]] if token[:1] == "-" and token[1:].isdigit() else []
        forms = tuple(dict.fromkeys([*lexemes, token.lower(), *unsigned,
                                     *bare_versions(token)]))
        if forms[0] in seen:
            continue
        seen.add(forms[0])
        terms.append(_term(token, forms, False))
    return terms


Tokens = list[tuple[str, list[str] | None]]


def _phrase(tokens: Tokens, as_asked: str) -> Term | None:
    """A phrase's term: its words' stems and the distances between them (None for
    fewer than two words)."""
    words: list[tuple[int, str]] = []  # (position, stem)
    position = 0
    for _, lexemes in tokens:
        if lexemes is None:
            continue  # no position: a token no dictionary takes
        position += 1
        if lexemes:
            words.append((position, lexemes[0]))
    if len(words) < 2:
        return None
    stems = tuple(stem for _, stem in words)
    gaps = tuple(b[0] - a[0] for a, b in itertools.pairwise(words))
    return _term(as_asked, stems, True, gaps)


def _term(text: str, lexemes: tuple[str, ...], phrase: bool,
          gaps: tuple[int, ...] = ()) -> Term:
    if not phrase:
        return Term(text, " | ".join(quote(x) for x in lexemes), lexemes)
    gaps = gaps or (1,) * (len(lexemes) - 1)
    query = quote(lexemes[0]) + "".join(
        f" {'<->' if gap == 1 else f'<{gap}>'} {quote(x)}" for gap, x in zip(gaps, lexemes[1:],
                                                                         strict=True))
    return Term(text, query, lexemes, True, gaps)


def _tokens(db: Database, texts: list[str]) -> list[Tokens]:
    """Each text's tokens with their lexemes: [] for a stopword (it holds a position in
    the index), None for a token no dictionary takes (it holds none)."""
    found: list[Tokens] = [[] for _ in texts]
    rows = db.fetchall_planned("query_tokens", {"texts": texts})  # one plan for any texts
    for row in rows:
        found[row["part"] - 1].append(
            (row["token"], None if row["lexemes"] is None else list(row["lexemes"])))
    return found


def qualify(terms: Sequence[Term], tenant: str) -> list[Term]:
    """The same terms in the tenant's own lexemes (what its chunks' tsvectors hold)."""
    tag = tenant_tag(tenant)
    return [_term(t.text, tuple(tag + x for x in t.lexemes), t.phrase, t.gaps) for t in terms]


def stamped(terms: Sequence[Term], unit: str) -> list[Term]:
    """The same terms stamped with a time unit ('@w202621'): the lexemes of the short
    chunks' stamped index (sql/schema.sql, gitmem_stamped)."""
    return [_term(t.text, tuple(x + unit for x in t.lexemes), t.phrase, t.gaps)
            for t in terms]


# --------------------------------------------------------------------------- statistics

@dataclass(frozen=True)
class Day:
    """One UTC day of a tenant's chunks: its time key and sizes."""

    key: str              # '@d20260601'
    start: float          # epoch of its midnight
    chunks: int
    short: int


@dataclass(frozen=True)
class Stats:
    """What planning and scoring need to know of the tenant and the terms."""

    dfs: list[int]             # per term, all chunks
    short_dfs: list[int]       # per term, short chunks
    chunks: int
    short_chunks: int
    average_tokens: float
    days: list[Day]            # newest first, at most DAYS_MAX
    units: frozenset[str]      # every time key the tenant has ('@d…', '@w…', '@m…')


def statistics(db: Database, tenant: str, terms: Sequence[Term]) -> Stats:
    """Exact frequencies of the (qualified) terms, the tenant's totals and newest days.

    A word's forms are alternatives, so its df is that of its commonest form; a
    phrase's is that of its rarest word (an upper bound).
    """
    tag = tenant_tag(tenant)
    lexemes = sorted({x for t in terms for x in t.lexemes} | {"", "#"})
    [counts, days, weeks] = db.fetch_many([  # lookups by key: one plan for any values
        ("lexeme_df_rows", {"tenant": tenant, "lexemes": lexemes}),
        ("tenant_days", {"tenant": tenant, "low": tag + "@d", "high": tag + "@d~",
                         "limit": DAYS_MAX}),
        ("tenant_time_keys", {"tenant": tenant, "low": tag + "@m", "high": tag + "@x"}),
    ], planned_once=True)
    known = {row[0]: (int(row[1]), int(row[2])) for row in counts}

    def df(term: Term, part: int) -> int:
        values = [known.get(x, (0, 0))[part] for x in term.lexemes]
        return (min if term.phrase else max)(values)

    chunks, short = known.get("", (0, 0))
    tokens = known.get("#", (0, 0))[0]
    cut = len(tag)
    day_list = [Day(key[cut:], _day_start(key[cut + 2:]), int(n), int(s)) for key, n, s in days]
    units = frozenset([d.key for d in day_list] + [key[cut:] for key, in weeks])
    return Stats([df(t, 0) for t in terms], [df(t, 1) for t in terms], chunks, short,
                 tokens / chunks if chunks else 1.0, day_list, units)


def _day_start(yyyymmdd: str) -> float:
    # calendar arithmetic, not strptime: a request reads up to DAYS_MAX day keys
    return float(calendar.timegm((int(yyyymmdd[:4]), int(yyyymmdd[4:6]), int(yyyymmdd[6:8]),
                                  0, 0, 0)))
