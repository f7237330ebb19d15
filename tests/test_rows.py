"""Index rows from records: chunk splitting, importance, searchable extras."""

from __future__ import annotations

import time

from gitmem import tokens
from gitmem.rows import importance, search_extra, split_text, tenant_lexeme


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
    assert search_extra("acme", "alice", ("topic:deploy", "team/infra")) == (
        f"{tenant_lexeme('acme')} alice topic:deploy team/infra topic deploy team infra")


def test_tenant_lexeme_is_one_word_of_its_own() -> None:
    word = tenant_lexeme("acme:eu/1")
    assert word.isalnum() and word != tenant_lexeme("acme:eu/2")
