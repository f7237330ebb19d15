"""Index rows from records: chunk splitting, importance, searchable extras."""

from __future__ import annotations

import re
import time

from gitmem import tokens
from gitmem.rows import importance, search_extra, search_keys, split_text, tenant_tag


def test_short_text_is_one_part() -> None:
    assert split_text("hello world", 600) == ["hello world"]


def test_parts_respect_the_token_limit_and_keep_every_paragraph() -> None:
    text = "\n\n".join(f"Paragraph {i}. " + "words and more words " * (i % 20)
                       for i in range(200))
    parts = split_text(text, 100)
    assert len(parts) > 1
    assert all(tokens.count(p) <= 100 for p in parts)
    assert "\n\n".join(parts) == text


def test_multibyte_text_is_never_corrupted() -> None:
    text = "日本語のテキストと絵文字🎉を含む長い段落です。" * 400  # one paragraph, no newlines
    parts = split_text(text, 100)
    assert len(parts) > 10
    assert not any("\ufffd" in p for p in parts)
    assert "".join(parts) == text
    assert all(tokens.count(p) <= 101 for p in parts)


def test_a_huge_paragraph_is_split_in_linear_time() -> None:
    text = " ".join(f"w{i:07d}" for i in range(200_000))  # ~1.8 MB, one paragraph
    start = time.perf_counter()
    parts = split_text(text, 600)
    assert time.perf_counter() - start < 20  # quadratic re-encoding took minutes
    assert all(tokens.count(p) <= 601 for p in parts[:50])
    assert "".join(parts).replace(" ", "") == text.replace(" ", "")


def test_a_paragraph_of_one_line_is_cut_between_words() -> None:
    """A cut at any token split `ECONNREFUSED` into `E` and `CONNREFUSED`, and no search
    found the word (36 of 41 cuts of long words fell inside one)."""
    words = [f"{'ECONNREFUSED' if n % 7 == 0 else 'zrckcixdkc'}{n}" for n in range(3000)]
    text = " ".join(words)
    parts = split_text(text, 100)
    assert len(parts) > 10 and all(tokens.count(p) <= 100 for p in parts)
    assert [w for p in parts for w in p.split(" ")] == words
    unspaced = "x" * 5000  # no word to keep whole: cut where a token starts
    assert "".join(split_text(unspaced, 100)) == unspaced
    for repeated in (" ".join(["ECONNREFUSED"] * 3000),  # a part that begins after a
                     " ".join(f"supercalifragilistic{n}" for n in range(2000))):  # space
        assert max(tokens.count(p) for p in split_text(repeated, 600)) <= 600  # was 601


def test_lines_are_preferred_cut_points() -> None:
    text = "\n".join(f"line {i}: " + "x" * (i % 50) for i in range(3000))
    parts = split_text(text, 100)
    assert "\n".join(parts) == text


def test_importance_prior() -> None:
    assert importance("decision", ()) > importance("summary", ()) > importance("message", ())
    assert importance("message", (), "human") > importance("message", (), "agent")
    assert importance("tool_call", ("pinned",)) == 1.0
    assert importance("message", ("important",)) > importance("message", ())


def test_search_extra_spells_out_tags() -> None:
    assert search_extra("alice", ("topic:deploy", "team/infra")) == (
        "alice topic:deploy team/infra topic deploy team infra")


def test_search_extra_redacts_before_it_folds() -> None:
    """A secret with accents, or a run long enough to be cut, is redacted as written:
    folded first, no pattern would match it any more."""
    def redact(text: str) -> str:
        return re.sub(r"clé-[0-9]+|tok_[0-9a-f]{600}", "[REDACTED]", text)

    long_token = "tok_" + "ab" * 300
    extra = search_extra("clé-4242", ("vault:clé-1234", f"ci:{long_token}"), redact)
    assert "4242" not in extra and "1234" not in extra and "abab" not in extra
    assert "vault" in extra and "ci" in extra.split()
    assert "1234" in search_extra("x", ("vault:clé-1234",))  # nothing to redact with


def test_tenant_tag_is_a_fixed_width_prefix_of_its_own() -> None:
    tag = tenant_tag("acme:eu/1")
    assert len(tag) == 8 and tag.isalnum() and tag != tenant_tag("acme:eu/2")
    assert tenant_tag("Zürich") == tenant_tag("Zürich") != tenant_tag("Zurich")


def test_search_keys_are_the_utc_day_iso_week_and_month() -> None:
    tag = tenant_tag("acme")
    # 23:30 at UTC-5 on Sunday 31 May is 04:30 UTC on Monday 1 June (ISO week 23)
    assert search_keys("acme", "2026-05-31T23:30:00-05:00") == [
        tag, "@d20260601", "@w202623", "@m202606"]
    assert search_keys("acme", "2027-01-01T00:10:00Z") == [tag, "@d20270101", "@w202653",
                                                            "@m202701"]
    assert search_keys("acme", "2026-06-01T12:00:00.123456+02:00")[1] == "@d20260601"


def test_search_keys_of_an_offset_of_part_of_an_hour_are_those_of_its_utc_day() -> None:
    # at +05:30, 05:15 is 23:45 UTC the day before and 05:45 is 00:15 UTC, in May
    assert search_keys("acme", "2026-05-01T05:15:00+05:30")[1:] == [
        "@d20260430", "@w202618", "@m202604"]
    assert search_keys("acme", "2026-05-01T05:45:00+05:30")[1:] == [
        "@d20260501", "@w202618", "@m202605"]
    assert search_keys("acme", "2026-05-01T00:50:00-00:45")[1] == "@d20260501"
    assert search_keys("acme", "2026-04-30T23:20:00-00:45")[1] == "@d20260501"
