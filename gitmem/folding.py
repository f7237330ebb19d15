"""Search text: what the full-text index and a query's analysis read of a text.

PostgreSQL's parser and the English stemmer leave two gaps that the text alone
cannot close:

- *Accents.* 'café' is not 'cafe', and 'décisions' keeps its accent, so the
  stemmer does not make it 'decis' as it does 'decisions'. (The `unaccent`
  extension is not in every server, the embedded one included.)
- *Unspaced scripts.* Chinese and Japanese write words without spaces, and the
  parser takes a whole run of letters for one word: '我们决定使用' is one token,
  so '决定' finds nothing.

`fold` closes both, on the index's side (gitmem/rows.py: the chunks'
`search_text`) and on the query's (gitmem/lexicon.py), so the two meet:
compatibility forms are unified (NFKC: full-width Latin letters are the plain ones), the
combining accents of alphabetic scripts are dropped ('é' -> 'e'; the voicing
marks of kana stay: 'が' is not 'か') and letters with a stroke of their own
are spelt plainly ('ø' -> 'o', 'ß' -> 'ss'), and every run of Han, kana or Hangul is
cut into overlapping pairs of characters, as Lucene's CJK analyzer does
('决定使用' -> '决定 定使 使用'), so a word of two or more characters is found as
the pairs it is made of. The index also holds each character of such a run
alone, after the text (`search_text`), so a word of one character ('雨',
'猫') is found too; a query's runs of two or more are asked as pairs only.
What an item shows is never folded.

- *Compound words.* The parser keeps a host (`db-prod-7.internal`), an e-mail
  address, a URL, a file path (`billing/invoice_calc.py`) or a dotted name
  (`psycopg.errors.UniqueViolation`) as one token, and a CamelCase identifier
  as one word, so `oncall`, `invoice_calc`, `UniqueViolation` or `rate limiter`
  found nothing inside them. The index also holds each such token's parts after
  the text (`compound_parts`: split at `. / @ : + ~ %`, `_` and `-`, and at
  CamelCase humps; a word joined by `_` or `-` only, the parser splits itself),
  and a query asks for a compound it holds as the phrase of its parts too
  (gitmem/lexicon.py), so a part is found, and a compound inside a longer one.
  Numbers, times and addresses made of digits only (`10:00:00`, `10.0.0.1`)
  are left whole.
- *Numbers the parser keeps inside a word.* A number joined to a word by a hyphen
  (`JIRA-4521`) is read signed, a version written with its `v` (`v2.3.1`) as one
  token: the index holds the bare number too (`joined_numbers`, `bare_versions`), and
  a query asks for both forms.

A run of 500 characters or more without a space (a pasted blob, a long key) is
cut into pieces of 500 on both sides too: PostgreSQL refuses a lexeme over
2,047 bytes, and the index adds its tenant's tag and a time stamp to each, so
one long word in one event would otherwise fail the whole file's indexing.
"""

from __future__ import annotations

import functools
import re
import unicodedata

# Combining marks of alphabetic scripts (Latin, Greek, Cyrillic): the accents that
# NFD takes off their letters; Hebrew's points and cantillation and Arabic's vowel
# marks (harakat), which most text leaves out (`שלום` finds `שָׁלוֹם`); and what is
# invisible inside a word: a soft hyphen, a word joiner, a byte-order mark. Kana's
# voicing marks (U+3099, U+309A) are not here; a zero-width space breaks words (_LETTERS).
_ACCENTS = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
                      "\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7"
                      "\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06dc\u06df-\u06e4"
                      "\u06e7\u06e8\u06ea-\u06ed\u00ad\u2060\ufeff]+")
# Letters that carry their stroke in themselves, as PostgreSQL's unaccent rules fold them.
_LETTERS = str.maketrans({"ß": "ss", "ẞ": "SS", "æ": "ae", "Æ": "AE", "œ": "oe", "Œ": "OE",
                          "ø": "o", "Ø": "O", "ł": "l", "Ł": "L", "đ": "d", "Đ": "D",
                          "ð": "d", "Ð": "D", "þ": "th", "Þ": "TH", "\u0131": "i", "ħ": "h",
                          "Ħ": "H", "\u200b": " "})  # a zero-width space: a word break
# The longest run without a space kept whole: 4 bytes a character at most, plus the
# tenant's tag (8) and a time stamp (10), stays under PostgreSQL's 2,047-byte lexemes.
LONGEST_RUN = 500
_UNBROKEN = re.compile(rf"(\S{{{LONGEST_RUN}}})(?=\S)")
# Han (with its extensions and compatibility ideographs), hiragana, katakana (the
# prolonged sound mark included) and Hangul syllables.
# Compound words: words joined by separators the parser keeps inside one token (and
# by _ or -, which it splits at itself), and CamelCase words standing alone. Each
# pattern starts with a character class and only then looks around: Python's re
# scans for a class far faster than it tests a look-behind at every position (a
# text of 250 characters: 3 us instead of 12), and most texts hold neither.
_SEPARATORS = re.compile(r"[./@:+~%]")
_JOINED_AT = re.compile(r"[./@:+~%](?<=[A-Za-z0-9].)(?=[A-Za-z0-9])")
_TOKEN_REST = re.compile(r"[A-Za-z0-9_./@:+~%-]*+")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./@:+~%-")
_PUNCTUATION = "_./@:+~%-"
_HUMP_AT = re.compile(r"[A-Z](?<=[a-z][A-Z])|[A-Z](?<=[A-Z][A-Z])(?=[a-z])")
_WORD_REST = re.compile(r"[A-Za-z0-9]*+")
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_HUMP = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")
_PIECE = re.compile(r"[A-Za-z0-9]+")
_HUMPS = re.compile(r"[A-Z]+(?![a-z])[0-9]*|[A-Z]?[a-z]+[0-9]*|[0-9]+")
# a literal first: found by a fast scan; not inside a host or a dotted name (db-7.internal)
_JOINED_NUMBER = re.compile(r"-([0-9]+)(?![\w@/]|[.:][\w])")
# a version written with its `v` (v2.3.1): one token to the parser, 2.3.1 another
_PREFIXED_VERSION = re.compile(r"[vV]([0-9]++(?:\.[0-9]++)++)(?![\w@/]|[.:][\w])")
COMPOUND_MAX = 200      # longer tokens (keys, blobs) are not taken apart
_UNSPACED = re.compile("[\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
                       "\uac00-\ud7a3\uf900-\ufaff\U00020000-\U0003134f]+")


def fold(text: str) -> str:
    """The text as a query is searched with (the module's docstring says how)."""
    if text.isascii():
        return _cut(text)
    return _cut(_UNSPACED.sub(_pairs, _plain(text)))


def search_text(text: str) -> str | None:
    """What the index reads instead of `text` (folded; then the characters of the
    unspaced runs alone, and the parts of its compound words), or None where it reads
    `text` itself."""
    if text.isascii():
        folded = _cut(text)
        plain = text
    else:
        plain = _plain(text)
        folded = _cut(_UNSPACED.sub(_pairs, plain))
        singles = dict.fromkeys(c for run in _UNSPACED.findall(plain) if len(run) > 1
                                for c in run)
        if singles:
            folded += "\n" + " ".join(singles)
    groups = [" ".join(parts) for parts in compounds(plain).values()]
    numbers = joined_numbers(plain) + bare_versions(plain)
    if numbers:
        groups.append(" ".join(numbers))
    if groups:
        folded += "\n" + "\n".join(groups)
    return None if folded == text else folded


def joined_numbers(text: str) -> list[str]:
    """The numbers joined to a word by a hyphen (`JIRA-4521`, `PR-12`), each once:
    PostgreSQL's parser reads them signed (`-4521`), so the index holds them unsigned
    as well, where `4521` and `ticket 4521` find them."""
    found: dict[str, None] = {}
    for match in _JOINED_NUMBER.finditer(text):
        if match.start() and text[match.start() - 1].isalnum():
            found[match[1]] = None
    return list(found)


def bare_versions(text: str) -> list[str]:
    """The versions written with a `v` (`v2.3.1`, `V10.4`), without it, each once:
    PostgreSQL's parser reads `v2.3.1` as one token and `2.3.1` as another, so the
    index holds the bare version as well, where `2.3.1` finds it (and a query's
    `v2.3.1` asks for the bare one too: gitmem/lexicon.py)."""
    found: dict[str, None] = {}
    for match in _PREFIXED_VERSION.finditer(text):
        start = match.start()
        if not start or not (text[start - 1].isalnum() or text[start - 1] in "_.-/@"):
            found[match[1]] = None
    return list(found)


def compounds(text: str) -> dict[str, tuple[str, ...]]:
    """The compound words of `text` (module docstring), each once, with its parts."""
    found: dict[str, tuple[str, ...]] = {}
    for token in [*_around(text, _JOINED_AT, _TOKEN_CHARS, _TOKEN_REST),
                  *_around(text, _HUMP_AT, _WORD_CHARS, _WORD_REST)]:
        token = token.strip(_PUNCTUATION)
        if token not in found and len(token) <= COMPOUND_MAX:
            parts = compound_parts(token)
            if parts:
                found[token] = parts
    return found


def _around(text: str, at: re.Pattern[str], chars: frozenset[str],
            rest: re.Pattern[str]) -> list[str]:
    """The tokens (runs of `chars`) holding a match of `at`, each once, in order:
    found from the few places `at` marks rather than by a scan of every word."""
    tokens: list[str] = []
    end = 0
    for match in at.finditer(text):
        where = match.start()
        if where < end:
            continue  # inside the token just taken
        start = where
        while start > end and text[start - 1] in chars:
            start -= 1
        taken = rest.match(text, where)  # always matches (maybe nothing)
        end = taken.end() if taken else where
        tokens.append(text[start:end])
    return tokens


@functools.lru_cache(maxsize=16384)
def compound_parts(token: str) -> tuple[str, ...]:
    """The parts of a compound token ([] for a plain word or a number): its pieces
    between separators, and a CamelCase piece's humps after it
    (`psycopg.errors.UniqueViolation` -> psycopg errors UniqueViolation Unique
    Violation)."""
    joined = _SEPARATORS.search(token) is not None
    if not (joined or _HUMP.search(token)) or token.replace(".", "").replace(
            ":", "").isdigit():
        return ()
    pieces = _PIECE.findall(token) if joined else [token]
    if all(piece.isdigit() for piece in pieces):
        return ()
    parts: list[str] = []
    for piece in pieces:
        if joined:
            parts.append(piece)
        if _HUMP.search(piece):
            parts += _HUMPS.findall(piece)
    return tuple(parts)


def _cut(text: str) -> str:
    """Runs of LONGEST_RUN characters or more without a space, cut into pieces of that."""
    return _UNBROKEN.sub(r"\1 ", text) if len(text) > LONGEST_RUN else text


def _plain(text: str) -> str:
    """Compatibility forms unified, accents dropped, stroked letters spelt plainly."""
    plain = unicodedata.normalize("NFC", _ACCENTS.sub("", unicodedata.normalize("NFKD", text)))
    return plain.translate(_LETTERS)


def _pairs(match: re.Match[str]) -> str:
    run = match.group()
    if len(run) == 1:
        return f" {run} "
    return " " + " ".join(run[i:i + 2] for i in range(len(run) - 1)) + " "
