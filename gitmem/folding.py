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

A run of 500 characters or more without a space (a pasted blob, a long key) is
cut into pieces of 500 on both sides too: PostgreSQL refuses a lexeme over
2,047 bytes, and the index adds its tenant's tag and a time stamp to each, so
one long word in one event would otherwise fail the whole file's indexing.
"""

from __future__ import annotations

import re
import unicodedata

# Combining marks of alphabetic scripts (Latin, Greek, Cyrillic): the accents that
# NFD takes off their letters. Kana's voicing marks (U+3099, U+309A) are not here.
_ACCENTS = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")
# Letters that carry their stroke in themselves, as PostgreSQL's unaccent rules fold them.
_LETTERS = str.maketrans({"ß": "ss", "ẞ": "SS", "æ": "ae", "Æ": "AE", "œ": "oe", "Œ": "OE",
                          "ø": "o", "Ø": "O", "ł": "l", "Ł": "L", "đ": "d", "Đ": "D",
                          "ð": "d", "Ð": "D", "þ": "th", "Þ": "TH", "\u0131": "i", "ħ": "h",
                          "Ħ": "H"})
# The longest run without a space kept whole: 4 bytes a character at most, plus the
# tenant's tag (8) and a time stamp (10), stays under PostgreSQL's 2,047-byte lexemes.
LONGEST_RUN = 500
_UNBROKEN = re.compile(rf"(\S{{{LONGEST_RUN}}})(?=\S)")
# Han (with its extensions and compatibility ideographs), hiragana, katakana (the
# prolonged sound mark included) and Hangul syllables.
_UNSPACED = re.compile("[\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
                       "\uac00-\ud7a3\uf900-\ufaff\U00020000-\U0003134f]+")


def fold(text: str) -> str:
    """The text as a query is searched with (the module's docstring says how)."""
    if text.isascii():
        return _cut(text)
    return _cut(_UNSPACED.sub(_pairs, _plain(text)))


def search_text(text: str) -> str | None:
    """What the index reads instead of `text` (folded, and the characters of the
    unspaced runs alone after it), or None where it reads `text` itself."""
    if text.isascii():
        folded = _cut(text)
    else:
        plain = _plain(text)
        folded = _cut(_UNSPACED.sub(_pairs, plain))
        singles = dict.fromkeys(c for run in _UNSPACED.findall(plain) if len(run) > 1
                                for c in run)
        if singles:
            folded += "\n" + " ".join(singles)
    return None if folded == text else folded


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
