"""Search text: accents folded and unspaced scripts paired, as both sides read it."""

from __future__ import annotations

import pytest

from gitmem.folding import bare_versions, compound_parts, compounds, fold, search_text


@pytest.mark.parametrize(("text", "folded"), [
    ("café décisions naïve", "cafe decisions naive"),
    ("Ålesund Straße Łódź Ærø", "Alesund Strasse Lodz AEro"),
    ("\uff21\uff22\uff23 \ufb01le", "ABC file"),  # full-width letters, a ligature
    ("决定使用", " 决定 定使 使用 "),
    ("使用PostgreSQL作为", " 使用 PostgreSQL 作为 "),
    ("单", " 单 "),
    ("がっこう", " がっ っこ こう "),                 # kana keep their voicing marks
    ("ｶﾞｯｺｳ", " ガッ ッコ コウ "),                   # half-width kana are the full ones
    ("데이터베이스를 사용", " 데이 이터 터베 베이 이스 스를   사용 "),  # syllables, not jamo
    ("Привет, Ёлка", "Привет, Елка"),
    ("plain ascii stays as it is", "plain ascii stays as it is"),
    ("\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd", "\u05e9\u05dc\u05d5\u05dd"),  # points
    ("\u0643\u064e\u062a\u064e\u0628\u064e", "\u0643\u062a\u0628"),  # Arabic's harakat
    ("soft\u00adhyphen word\u2060joiner", "softhyphen wordjoiner"),  # invisible in a word
    ("zero\u200bwidth", "zero width"),  # a zero-width space breaks words
])
def test_fold(text: str, folded: str) -> None:
    assert fold(text) == folded
    assert fold(folded) == folded or fold(folded).split() == folded.split()


def test_search_text_is_none_where_the_text_reads_as_itself() -> None:
    assert search_text("deploy the blue cluster") is None
    assert search_text("em dash — and “quotes”") is None   # nothing to fold
    assert search_text("café") == "cafe"


@pytest.mark.parametrize(("token", "parts"), [
    ("db-prod-7.internal", ["db", "prod", "7", "internal"]),
    ("oncall@acme.example.com", ["oncall", "acme", "example", "com"]),
    ("psycopg.errors.UniqueViolation",
     ["psycopg", "errors", "UniqueViolation", "Unique", "Violation"]),
    ("billing/invoice_calc.py", ["billing", "invoice", "calc", "py"]),
    ("RateLimiterMiddleware", ["Rate", "Limiter", "Middleware"]),
    ("HTTPServer", ["HTTP", "Server"]),
    ("snake_case_name", []),       # the parser splits at _ and - itself
    ("on-call", []),
    ("10.0.0.1", []), ("10:00:00", []), ("3.14", []),  # numbers stay whole
    ("deploy", []), ("Deploy", []), ("NASA", []),
])
def test_compound_parts(token: str, parts: list[str]) -> None:
    assert list(compound_parts(token)) == parts


def test_the_index_holds_the_parts_of_compound_words_after_the_text() -> None:
    text = "see db-prod-7.internal and UniqueViolation, then db-prod-7.internal again"
    assert search_text(text) == text + "\ndb prod 7 internal\nUnique Violation"
    assert compounds("x" * 300 + ".py and a.b") == {"a.b": ("a", "b")}  # a blob stays whole
    assert search_text("Ünïcode.Path") == "Unicode.Path\nUnicode Path"


def test_the_index_holds_a_number_joined_to_a_word_unsigned_too() -> None:
    """PostgreSQL reads `JIRA-4521` as `jira` and the signed `-4521`: asked `4521` (or
    `ticket 4521`), nothing matched. A host's or a dotted name's number is its own."""
    text = "Bug JIRA-4521 blocks PR-12 (see OPS-8812: db-prod-7.internal, -5 degrees)"
    assert search_text(text) == text + "\ndb prod 7 internal\n4521 12 8812"
    assert search_text("release 2.3.1 and build 7-1") == "release 2.3.1 and build 7-1\n1"
    assert search_text("plain words only") is None


def test_the_index_holds_a_version_written_with_its_v_without_it_too() -> None:
    """PostgreSQL reads `v2.3.1` as one token and `2.3.1` as another: neither found
    the other. A `v` inside a word (`libv2.3`) or a version running on into a word is
    not a version's."""
    assert search_text("ship v2.3.1 and V10.4.") == "ship v2.3.1 and V10.4.\nv2 3 1\nV10 4" \
        "\n2.3.1 10.4"
    assert bare_versions("v1.2.3-rc1, v1.2.3 again") == ["1.2.3"]
    assert bare_versions("libv2.3 v2.3.1a x/v1.2 v2 v.3") == []


def test_the_index_holds_each_character_of_an_unspaced_run_alone_too() -> None:
    assert search_text("今日は雨です") == " 今日 日は は雨 雨で です \n今 日 は 雨 で す"
    assert search_text("猫が猫を") == " 猫が が猫 猫を \n猫 が を"  # once each
    assert search_text("单") == " 单 "     # a lone character is its own token already
    assert fold("今日") == " 今日 "         # a query asks for the pair only


def test_a_run_without_a_space_is_cut_into_pieces_postgresql_can_hold() -> None:
    assert fold("x" * 500) == "x" * 500 and search_text("x" * 500) is None
    cut = search_text("key " + "y" * 1203 + " end")
    assert cut is not None and [len(w) for w in cut.split()] == [3, 500, 500, 203, 3]
    assert fold("z" * 1001).split() == ["z" * 500, "z" * 500, "z"]  # a query alike
    wide = fold("é" * 600)  # folded first: 'e', then cut
    assert wide.split() == ["e" * 500, "e" * 100]
