"""Policies: the defaults parse; every bad value names path:line and the field."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest

from gitmem.config import Config
from gitmem.errors import FormatError, ValidationError
from gitmem.policies import (
    load_policies,
    parse_budgets,
    parse_channels,
    parse_manifest,
    parse_privacy,
)
from gitmem.store import manifest_text
from tests.conftest import Cli


def template(rel: str) -> str:
    return (resources.files("gitmem") / "templates" / rel).read_text(encoding="utf-8")


BUDGETS = template("policies/budgets.yaml")
PRIVACY = template("policies/privacy.yaml")
CHANNELS = template("policies/channels.yaml")


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


def test_default_budgets() -> None:
    b = parse_budgets(BUDGETS)
    assert (b.total, b.reserve) == (65000, 5000)
    assert b.sections["retrieved_evidence"].max_tokens == 28000
    assert b.section_order()[:2] == ["identity", "handoff"]
    assert (b.candidate_pool_max, b.retrieved_chunks_max) == (2000, 200)
    assert (b.alpha, b.beta, b.gamma, b.recency_tau_days) == (0.7, 0.2, 0.1, 14.0)
    assert b.max_excerpt_bytes == 8192


def test_default_privacy_redacts_and_refuses_secret() -> None:
    p = parse_privacy(PRIVACY)
    assert "secret" in p.never_store
    assert p.redact("my api_key = sk-abc123 ok") == "my [REDACTED] ok"
    assert "AKIA" not in p.redact("key AKIAABCDEFGHIJKLMNOP here")
    assert p.rule("public").suppress_sensitivity == frozenset({"high", "secret"})
    assert "views/preferences.md" in p.rule("public").suppress_views
    assert p.rule("private").suppress_sensitivity == frozenset({"secret"})


def _privacy(*patterns: str) -> str:
    lines = "".join(f"    - '{p}'\n" for p in patterns)
    return f"version: 1\nstore:\n  redact_patterns:\n{lines}"


@pytest.mark.parametrize(("message", "shown"), [
    ("session_id 'password=hunter2' is not a name", "session_id '[REDACTED]' is not a name"),
    ('tag "x token: abc" and api_key=abc123 bare', 'tag "x [REDACTED]" and [REDACTED] bare'),
    ("can't read 'password=abc'", "can't read '[REDACTED]'"),  # an apostrophe opens none
    ("the store's name 'password=hunter2' is bad", "the store's name '[REDACTED]' is bad"),
    ("bytes b'password=hunter2' here", "bytes b'[REDACTED]' here"),  # a prefix's quote
])
def test_a_value_an_error_quotes_keeps_its_closing_quote(message: str, shown: str) -> None:
    """`password=\\S+` took the quote that closed a value an error quotes."""
    assert parse_privacy(PRIVACY).redact_message(message) == shown


def test_a_line_errors_value_is_redacted_inside_its_quotes(tmp_path: Path) -> None:
    from gitmem.rows import parse_file
    from gitmem.store import init_store
    init_store(tmp_path)
    policies = load_policies(tmp_path / "memory")
    from tests.daemons import event_line
    _, bad = event_line("password=hunter2", "a session that is no name")
    [error] = parse_file("events/2026-03/2026-03-01.jsonl", "events", bad.encode(),
                         policies).errors
    assert "hunter2" not in error.detail and "'[REDACTED]'" in error.detail


def test_names_redact_as_text_and_only_those_without_a_secret_are_remembered() -> None:
    p = parse_privacy(_privacy(r"\bsk-[a-z]{20,}\b"))
    key = "sk-" + "q" * 24
    for _ in range(2):  # the second time from memory
        assert p.redact_name("alice") == "alice"
        assert p.redact_name(f"proj:{key}") == "proj:[REDACTED]"
    assert "alice" in p._names and all(key not in name for name in p._names)


@pytest.mark.parametrize("text", [
    "Token: abc and sk-aaaaaaaaaaaaaaaaaaaaaaaa",   # both flagged patterns
    "TOKEN=xyz",                                     # the case-insensitive one alone
    "PIN 4242-4242 then nothing else",               # the verbose one
    "code 4242-4242",                                # the back-referencing one alone
    "nothing secret here at all",
    "xsk-aaaaaaaaaaaaaaaaaaaaaaaa: the screen finds it, the pattern's boundary does not",
    "",
])
def test_redaction_screens_each_pattern_and_redacts_as_each_pattern_would(text: str) -> None:
    patterns = (r"(?i)\b(token)\b\s*[:=]\s*\S+", r"\bsk-[a-z]{20,}\b", r"(?x) \b PIN \b")
    p = parse_privacy(_privacy(*patterns))
    expected = text
    for source in patterns:
        expected = re.sub(source, "[REDACTED]", expected)
    assert p.redact(text) == expected
    with_backref = parse_privacy(_privacy(*patterns, r"(\d{4})-\1"))
    assert with_backref.redact(text) == re.sub(r"(\d{4})-\1", "[REDACTED]", expected)
    boundary_backref = parse_privacy(_privacy(r"\b4(\d)-4\1"))  # screened as 4(\d)-4\1
    assert boundary_backref.redact(text + " 42-42 x42-42") == re.sub(
        r"\b4(\d)-4\1", "[REDACTED]", text + " 42-42 x42-42")


def test_a_screen_drops_only_a_leading_boundary_before_a_literal() -> None:
    p = parse_privacy(_privacy(r"\bsk-[a-z]{3}\b", r"(?i)\btoken\b", r"\b\w+@corp\b"))
    sources = [screen.pattern for screen in p._screens]
    assert sources == [r"sk-[a-z]{3}\b", r"(?i)\btoken\b", r"\b\w+@corp\b"]
    assert p.redact("sk-abc xsk-abc sk-abcd") == "[REDACTED] xsk-abc sk-abcd"


def test_a_screen_begins_at_the_literal_after_a_leading_class_or_lookbehind() -> None:
    patterns = (r"\b[Bb]ear(er)\s+\w{4}\1", r"(?<=://)[^\s:@/]+:[^\s@/]+(?=@)", r"[Bb]+x",
                r"[^a]bc")
    p = parse_privacy(_privacy(*patterns))
    assert [screen.pattern for screen in p._screens] == [
        r"ear(er)\s+\w{4}\1", r"://[^\s:@/]+:[^\s@/]+(?=@)", r"[Bb]+x", r"[^a]bc"]
    text = ("Bearer abcder, bearer abcd, xbearer wxyzer, https://u:pw@h/x, "
            "ssh://git@h, https://h/a:b@c, bbx, zbc")
    expected = text
    for source in patterns:
        expected = re.sub(source, "[REDACTED]", expected)
    assert p.redact(text) == expected == (
        "[REDACTED], bearer abcd, xbearer wxyzer, https://[REDACTED]@h/x, "
        "ssh://git@h, https://h/a:b@c, [REDACTED], [REDACTED]")


def test_default_channels() -> None:
    c = parse_channels(CHANNELS)
    assert "views/preferences.md" in c.default_views["private"]
    assert "views/preferences.md" not in c.default_views["public"]


def test_seed_list_form_of_channels_is_accepted() -> None:
    text = ("version: 1\nchannels:\n  - name: private\n"
            "    default_load_views: [views/identity.md]\n")
    assert parse_channels(text).default_views == {"private": ("views/identity.md",)}


def test_load_policies_of_a_new_store(tmp_path: Path) -> None:
    from gitmem.store import init_store

    store = init_store(tmp_path / "r").store
    policies = load_policies(store)
    assert policies.manifest.default_tenant == "default"
    assert set(policies.hashes) == {"manifest.json", "policies/budgets.yaml",
                                    "policies/privacy.yaml", "policies/channels.yaml"}
    assert all(h.startswith("sha256:") for h in policies.hashes.values())


def budgets_error(text: str) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        parse_budgets(text)
    assert caught.value.path == "policies/budgets.yaml"
    return caught.value


def test_reserve_not_below_total() -> None:
    text = BUDGETS.replace("reserve_tokens: 5000", "reserve_tokens: 65000")
    err = budgets_error(text)
    assert (err.line, err.field) == (line_of(text, "reserve_tokens: 65000"), "reserve_tokens")
    assert "below acb_total_max_tokens (65000)" in str(err)
    assert str(err).startswith(f"policies/budgets.yaml:{err.line}: field 'reserve_tokens'")


def test_unknown_section() -> None:
    text = BUDGETS.replace("  tool_state:", "  gossip: {max_tokens: 5, priority: 1}\n  tool_state:")
    err = budgets_error(text)
    assert (err.line, err.field) == (line_of(text, "gossip"), "sections.gossip")
    assert "unknown section" in str(err) and "relevant_decisions" in str(err)


def test_bad_nested_value_names_its_own_line() -> None:
    text = BUDGETS.replace("{max_tokens: 2000,", "{max_tokens: lots,")
    err = budgets_error(text)
    assert err.field == "sections.tool_state.max_tokens"
    assert err.line == line_of(text, "lots") and "got 'lots'" in str(err)


def test_negative_weight() -> None:
    text = BUDGETS.replace("alpha: 0.7", "alpha: -1")
    err = budgets_error(text)
    assert (err.line, err.field) == (line_of(text, "alpha"), "retrieval.weights.alpha")


@pytest.mark.parametrize(("setting", "value", "said"), [
    ("recent_window_events: 40", "99999999999999999999", "expected an integer <= 2147483647"),
    ("decisions_max: 100", "99999999999999999999", "expected an integer <= 2147483647"),
    ("alpha: 0.7", ".nan", "expected a number from 0 to 1,000,000, got nan"),
    ("recency_tau_days: 14", ".inf", "expected a number from 0 to 1,000,000, got inf"),
    ("alpha: 0.7", "1.0e+300", "expected a number from 0 to 1,000,000, got 1e+300"),
    ("beta: 0.2", "1" + "0" * 400, "expected a number from 0 to 1,000,000, got 1000"),
])
def test_a_number_beyond_what_a_build_takes_is_refused(setting: str, value: str,
                                                        said: str) -> None:
    """Beyond 64 bits PostgreSQL and islice crashed every build; NaN weights scored
    nothing, with no word."""
    key = setting.split(":")[0]
    err = budgets_error(BUDGETS.replace(setting, f"{key}: {value}"))
    assert said in str(err) and err.field is not None and err.field.endswith(key)


def test_aliases_that_expand_beyond_reason_are_refused_at_once() -> None:
    """Nine levels of ten aliases: a message's repr of the value hung every command."""
    levels = ["a: &l0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 10)}]" for n in range(1, 9)]
    bomb = "\n".join(levels) + "\nacb_total_max_tokens: *l8\n"
    with pytest.raises(FormatError) as caught:
        parse_budgets("version: 1\n" + bomb)
    assert "its aliases (*name) expand to 2,345,679,023 values, more than 1,000,000" in str(
        caught.value) and caught.value.line == 1
    small = "version: 1\nx: &w [1, 2]\ny: *w\n"  # a few aliases are YAML like any other
    assert "unknown field 'x'" in str(budgets_error(small))


def test_excerpt_limit_too_small() -> None:
    text = BUDGETS.replace("max_excerpt_bytes: 8192", "max_excerpt_bytes: 10")
    err = budgets_error(text)
    assert (err.line, err.field) == (line_of(text, "max_excerpt_bytes"),
                                     "write.max_excerpt_bytes")
    assert ">= 256" in str(err)


def test_misspelt_key_is_refused_not_ignored() -> None:
    text = BUDGETS.replace("candidate_pool_max: 2000", "candidate_pool: 2000")
    err = budgets_error(text)
    assert (err.line, err.field) == (line_of(text, "candidate_pool:"), "retrieval.candidate_pool")
    assert "unknown field" in str(err) and "candidate_pool_max" in str(err)
    err = budgets_error(BUDGETS + "acb_total: 1\n")
    assert err.field == "acb_total" and err.line == BUDGETS.count("\n") + 1


def test_section_that_is_not_a_mapping() -> None:
    text = BUDGETS.replace("  identity:           {max_tokens: 1200,  priority: 10}",
                           "  identity: 1200")
    err = budgets_error(text)
    assert err.field == "sections.identity" and err.line == line_of(text, "identity: 1200")


def test_broken_budgets_yaml() -> None:
    with pytest.raises(FormatError) as caught:
        parse_budgets(BUDGETS.replace("reserve_tokens: 5000", "reserve_tokens: [5000"))
    assert caught.value.line is not None and caught.value.line > 1
    assert "broken YAML" in str(caught.value)


def test_with_a_list_for_errors_every_problem_of_a_file_is_collected() -> None:
    """What `gitmem verify` lists: each bad value at its line, the default standing in
    (a file that is not YAML at all is one problem); without the list, the first is
    raised, as loading a store's policies does."""
    text = (BUDGETS.replace("acb_total_max_tokens: 65000", "acb_total_max_tokens: -1")
            .replace("alpha: 0.7", "alpha: x")
            .replace("retrieval:", "retreival:\n  bogus: 1\nretrieval:"))
    errors: list[FormatError] = []
    budgets = parse_budgets(text, errors=errors)
    assert [(e.line, e.field) for e in errors] == [
        (line_of(text, "retreival"), "retreival"),
        (line_of(text, "acb_total"), "acb_total_max_tokens"),
        (line_of(text, "alpha: x"), "retrieval.weights.alpha")]
    assert (budgets.total, budgets.alpha) == (65000, 0.7)
    with pytest.raises(ValidationError) as caught:
        parse_budgets(text)
    assert caught.value.field == "retreival"
    privacy = PRIVACY.replace("    team:\n", "    radio:\n").replace(
        "'\\bAIza[0-9A-Za-z_-]{35}'", "'(unclosed'").replace("redaction: \"[REDACTED]\"",
                                                         "redaction: 5")
    errors = []
    parsed = parse_privacy(privacy, errors=errors)
    assert [e.field for e in errors] == ["store.redact_patterns", "store.redaction",
                                         "load.channel_rules.radio"]
    assert parsed.redact("sk-" + "a" * 30) == "[REDACTED]"  # the other patterns stand
    channels = CHANNELS.replace("  team:", "  radio:").replace("  agent:", "  robot:")
    errors = []
    assert set(parse_channels(channels, errors=errors).default_views) == {"private", "public"}
    assert [e.field for e in errors] == ["channels.radio", "channels.robot"]
    errors = []
    parse_channels("channels: [\n", errors=errors)
    assert len(errors) == 1 and "broken YAML" in str(errors[0])
    errors = []
    manifest = parse_manifest('{"format_version": 2, "default_tenant": ""}', errors=errors)
    assert [e.field for e in errors] == ["format_version", "default_tenant"]
    assert manifest.default_tenant == "default"


def test_a_channel_rule_given_twice_is_refused_not_silently_replaced() -> None:
    """YAML keeps the last of two equal keys: a second `public:` appended by a hand edit
    or a merge would loosen the public channel's rules with no word."""
    text = PRIVACY + "    public:\n      load_event_channels: [public, private]\n"
    with pytest.raises(FormatError) as caught:
        parse_privacy(text)
    line = len(PRIVACY.splitlines()) + 1
    assert (caught.value.path, caught.value.line) == ("policies/privacy.yaml", line)
    first = PRIVACY.splitlines().index("    public:") + 1
    assert f"the key 'public' is given twice (first on line {first})" in str(caught.value)


def test_a_value_yaml_cannot_build_names_its_line_and_key_path() -> None:
    text = BUDGETS.replace("{max_tokens: 1200,", "{max_tokens: 0b_,")
    with pytest.raises(ValidationError) as caught:
        parse_budgets(text)
    assert (caught.value.path, caught.value.line, caught.value.field) == (
        "policies/budgets.yaml", line_of(text, "0b_"), "sections.identity.max_tokens")
    assert "'0b_' is not a valid YAML int" in str(caught.value)


def privacy_error(text: str) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        parse_privacy(text)
    assert caught.value.path == "policies/privacy.yaml"
    return caught.value


@pytest.mark.parametrize("text", [
    "", "version: 1\n", "version: 1\nstore:\n  redaction: '[X]'\n",
    "version: 1\nstore:\n  redact_patterns:\n",
])
def test_a_privacy_file_without_patterns_is_refused_not_read_as_redact_nothing(
        text: str) -> None:
    """An empty privacy.yaml (an editor's save caught half way) redacted nothing: a
    running daemon wrote 43 of 150 secrets to disk during saves of the same file."""
    err = privacy_error(text)
    assert "no redact_patterns: nothing would be redacted" in str(err)
    assert parse_privacy("version: 1\nstore:\n  redact_patterns: []\n").patterns == ()
    problems: list[FormatError] = []
    parse_privacy("version: 1\nstore: 5\n", errors=problems)  # one problem, not two
    assert [p.detail for p in problems] == ["expected a mapping, got int"]


@pytest.mark.parametrize("text", ["", "version: 1\n", "version: 1\nsections:\n"])
def test_a_budgets_file_without_sections_is_refused_not_read_as_show_nothing(
        text: str) -> None:
    """An empty budgets.yaml (an editor's save caught half way) made every bundle empty,
    silently; a running daemon served empty bundles while a save was under way."""
    with pytest.raises(ValidationError) as caught:
        parse_budgets(text)
    assert caught.value.path == "policies/budgets.yaml"
    assert "no sections: every bundle would be empty" in str(caught.value)
    assert parse_budgets("version: 1\nsections: {}\n").sections == {}


@pytest.mark.parametrize(("pattern", "said"), [
    ("(x+x+)+y", "repeats what holds a repeat of its own"),
    ("(\\w+\\s?)+:", "repeats what holds a repeat of its own"),
    ("(?:a|b+)*c", "repeats what holds a repeat of its own"),
    ("(?=(a+)+)b", "repeats what holds a repeat of its own"),
    ("(?:\\w+\\s?){2,30}!", "repeats what holds a repeat of its own"),  # a bounded outer
    ("(x+x+){1,20}y", "repeats what holds a repeat of its own"),
    ("(?>(x+x+)+y)", "repeats what holds a repeat of its own"),  # atomic: it still backtracks
    ("(a|a)+b", "and more with every character"),  # alternatives that take the same
    ("(x+)(x+)(x+)(x+)(x+)(x+)y", "and more with every character"),  # x**6 ways
    ("(?:[0-9a-f]{2}|[0-9]{2})+[^0-9a-f]", "and more with every character"),  # its tail
    ("(a|a)+[^a]", "and more with every character"),  # takes any end: the run alone fails
])
def test_a_pattern_that_can_backtrack_for_ever_is_refused_naming_its_line(
        pattern: str, said: str) -> None:
    """`(x+x+)+y` on 58 x's and a `!` hung a write, and the daemon with it; the others
    took 2 to 12 s on texts of 25 to 70 characters."""
    text = _privacy("sk-[a-z]{20,}", pattern)
    started = time.perf_counter()
    err = privacy_error(text)
    assert time.perf_counter() - started < 5  # caught at a short text, not hung on it
    assert err.line == line_of(text, pattern) and err.field == "store.redact_patterns"
    assert said in str(err) and "re holds the process" in str(err)


@pytest.mark.parametrize("pattern", ["(x++x++)+y", "(\\d{1,3}\\.)+\\d", "(a|b)+c",
                                     "(\\w|\\d)+z", "\\b[Bb]earer\\s+[A-Za-z0-9._~+/-]{20,}",
                                     "\\beyJ[\\w-]{10,}(?:\\.[\\w-]{10,}){2}"])  # a JWT
def test_a_repeat_that_cannot_backtrack_for_ever_is_kept(pattern: str) -> None:
    privacy = parse_privacy(_privacy(pattern))
    assert privacy.redact("x" * 58 + "!") == "x" * 58 + "!"  # at once


def test_a_redaction_a_pattern_matches_is_refused() -> None:
    """Redacted twice (a line read again by the index), its text would change."""
    err = privacy_error(PRIVACY.replace('redaction: "[REDACTED]"', 'redaction: "token=x"'))
    assert err.field == "store.redaction" and "'token=x' matches the redaction pattern" in str(
        err)


@pytest.mark.parametrize("redaction", ["<secret removed: \\g<0>>", "[REDACTED\\secret]", "\\1"])
def test_the_redaction_is_written_as_given_never_as_a_template(redaction: str) -> None:
    """`\\g<0>` put the secret back; `\\s` failed every write and the indexer."""
    privacy = parse_privacy(f"version: 1\nstore:\n  redaction: '{redaction}'\n"
                            "  redact_patterns: ['password=\\S+']\n")
    assert privacy.redact("password=hunter2 now") == f"{redaction} now"


def test_bad_regex_names_the_pattern_line() -> None:
    text = PRIVACY.replace("'\\bAIza[0-9A-Za-z_-]{35}'", "'(unclosed'")
    err = privacy_error(text)
    assert (err.line, err.field) == (line_of(text, "(unclosed"), "store.redact_patterns")
    assert "invalid regular expression '(unclosed'" in str(err)


@pytest.mark.parametrize("source", ["", "a*", ".*", "(?i)x?", "\\b", "(?m)^"])
def test_a_redaction_pattern_that_matches_the_empty_string_is_refused(source: str) -> None:
    """sub() puts the redaction wherever such a pattern matches nothing: every text would
    read `[REDACTED]h[REDACTED]e...` (and every key, so a write's `content.text` went
    missing). Refused at its line, whether it matches the empty text itself ('a*') or
    only between characters ('\\b')."""
    quoted = f"'{source}'"  # YAML's single quotes: backslashes as written
    text = PRIVACY.replace("'\\bAIza[0-9A-Za-z_-]{35}'", quoted)
    err = privacy_error(text)
    assert (err.line, err.field) == (line_of(text, f"- {quoted}\n"), "store.redact_patterns")
    assert (f"the redaction pattern {source!r} matches the empty string, so it would redact "
            "everything") in str(err)
    keys = _privacy(r"\bnothing\b") + f"  redact_keys: [{quoted}]\n"
    err = privacy_error(keys)
    assert (err.line, err.field) == (line_of(keys, "redact_keys"), "store.redact_keys")
    assert "matches the empty string, so every key would name a secret" in str(err)


def test_patterns_that_only_look_around_or_repeat_after_a_literal_are_kept() -> None:
    p = parse_privacy(_privacy(r"(?<=pw=)\S+", r"x+", r"tok(en)?", r"\bk\w*"))
    assert p.redact("pw=abc x tok k9 hello") == \
        "pw=[REDACTED] [REDACTED] [REDACTED] [REDACTED] hello"


def test_a_store_whose_pattern_matches_the_empty_string_names_it_on_every_command(
        cli: Cli, config: Config) -> None:
    """`gitmem record "hello"` answered `field 'content.text': missing` (the key itself
    was redacted); now the policy file is named, and nothing is written."""
    path = config.store / "policies" / "privacy.yaml"
    path.write_text(path.read_text().replace("  redact_patterns:\n", "  redact_patterns:\n"
                                                                      "    - ''\n", 1))
    result = cli("record", "hello", ok=False)
    assert result.exit_code == 1
    line = line_of(path.read_text(), "- ''")
    assert (f"policies/privacy.yaml:{line}: field "
            "'store.redact_patterns': the redaction pattern '' matches the empty string") \
        in result.output
    assert not list((config.store / "events").rglob("*.jsonl"))


def test_unknown_channel_in_privacy() -> None:
    text = PRIVACY.replace("    team:\n", "    radio:\n")
    err = privacy_error(text)
    assert (err.line, err.field) == (line_of(text, "radio"), "load.channel_rules.radio")
    assert "private|public|team|agent" in str(err)


def test_unknown_sensitivity_in_channel_rule() -> None:
    text = PRIVACY.replace("suppress_sensitivity: [secret]", "suppress_sensitivity: [topsecret]")
    err = privacy_error(text)
    assert err.field == "load.channel_rules.private.suppress_sensitivity"
    assert err.line == line_of(text, "topsecret") and "'topsecret'" in str(err)


def test_redaction_must_be_a_string() -> None:
    text = PRIVACY.replace('redaction: "[REDACTED]"', "redaction: 5")
    err = privacy_error(text)
    assert (err.line, err.field) == (line_of(text, "redaction: 5"), "store.redaction")


def test_secret_is_always_never_stored() -> None:
    text = PRIVACY.replace("never_store_sensitivity: [secret]", "never_store_sensitivity: []")
    assert "secret" in parse_privacy(text).never_store


def test_unknown_channel_in_channels() -> None:
    text = CHANNELS.replace("  team:", "  radio:")
    with pytest.raises(ValidationError) as caught:
        parse_channels(text)
    err = caught.value
    assert (err.path, err.line, err.field) == ("policies/channels.yaml", line_of(text, "radio"),
                                               "channels.radio")


def test_default_manifest_parses() -> None:
    m = parse_manifest(manifest_text("acme"))
    assert (m.format_version, m.default_tenant, m.tokenizer) == (1, "acme", "cl100k_base")


@pytest.mark.parametrize(("text", "field", "line"), [
    ('{\n"format_version": 2\n}', "format_version", 2),
    ('{\n"format_version": 1,\n"default_tenant": "has space"\n}', "default_tenant", 3),
    ('{\n"format_version": 1,\n"tokenizer": "gpt2"\n}', "tokenizer", 3),
])
def test_bad_manifest_values(text: str, field: str, line: int) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_manifest(text)
    assert (caught.value.path, caught.value.line, caught.value.field) == (
        "manifest.json", line, field)


def test_malformed_manifest_json() -> None:
    with pytest.raises(FormatError) as caught:
        parse_manifest('{"format_version": 1,\n "x": }')
    assert caught.value.line == 2 and "malformed JSON" in str(caught.value)
    with pytest.raises(FormatError) as caught:  # which tenant is meant? neither is taken
        parse_manifest('{"format_version": 1, "default_tenant": "acme", '
                       '"default_tenant": "globex"}')
    assert caught.value.path == "manifest.json"
    assert "malformed JSON: key 'default_tenant' is given twice in one object; keep one" in (
        str(caught.value))


def test_a_manifest_as_editors_save_it_and_a_key_given_twice_named_at_its_line() -> None:
    """A byte-order mark (Notepad's) was `Expecting value at column 1`; a key given twice
    had no line."""
    assert parse_manifest("\ufeff" + manifest_text("acme")).default_tenant == "acme"
    with pytest.raises(FormatError) as caught:
        parse_manifest('{\n  "default_tenant": "acme",\n  "default_tenant": "globex"\n}')
    assert caught.value.line == 3


def test_no_channels_as_an_empty_list_and_a_public_channel_without_a_rule(
        tmp_path: Path) -> None:
    from gitmem.policy_warnings import channels_unruled
    from gitmem.store import init_store

    assert parse_channels("version: 1\nchannels: []\n").default_views == {}
    init_store(tmp_path)
    store = tmp_path / "memory"
    privacy = store / "policies" / "privacy.yaml"
    text = privacy.read_text()
    privacy.write_text(text[:text.index("load:")] + "load:\n  channel_rules: {}\n")
    warned = {w.detail for w in channels_unruled(store, load_policies(store), "")}
    assert any("loads only events of the 'public' channel, and nothing" in w for w in warned)
    assert not any("'public' and 'public'" in w for w in warned)


def test_missing_policy_file_says_how_to_fix(tmp_path: Path) -> None:
    from gitmem.store import init_store

    store = init_store(tmp_path / "r").store
    (store / "policies" / "privacy.yaml").unlink()
    with pytest.raises(FormatError) as caught:
        load_policies(store)
    assert caught.value.path == "policies/privacy.yaml" and "gitmem init" in str(caught.value)


def test_non_utf8_policy_file(tmp_path: Path) -> None:
    from gitmem.store import init_store

    store = init_store(tmp_path / "r").store
    (store / "policies" / "budgets.yaml").write_bytes(BUDGETS.encode() + b"# caf\xe9\n")
    with pytest.raises(FormatError) as caught:
        load_policies(store)
    assert caught.value.path == "policies/budgets.yaml"
    assert caught.value.line == BUDGETS.count("\n") + 1 and "UTF-8" in str(caught.value)


@pytest.mark.parametrize("rel", ["policies/budgets.yaml", "policies/privacy.yaml"])
def test_a_fifo_at_a_policy_file_is_named_not_waited_on(config: Config, rel: str) -> None:
    """A FIFO's open waited for a writer: verify, status and sync hung (and a failure's
    message, redacted by the privacy policy, with them); the file is named instead."""
    policy = config.store / rel
    policy.unlink()
    os.mkfifo(policy)
    env = {**os.environ, "GITMEM_STORE": str(config.store), "GITMEM_DSN": config.dsn or "",
           "GITMEM_SCHEMA": config.schema}
    try:
        for command in (("verify",), ("status",), ("sync",), ("record", "hello")):
            result = subprocess.run([sys.executable, "-m", "gitmem", *command], env=env,
                                    capture_output=True, text=True, timeout=30)
            assert result.returncode == 1, (command, result.stdout, result.stderr)
            said = result.stdout + result.stderr
            assert f"{rel}: cannot be read: a FIFO (named pipe), not a regular file" in said
            assert "Traceback" not in said
    finally:
        with contextlib.suppress(OSError):  # let a reader blocked on it go
            os.close(os.open(policy, os.O_WRONLY | os.O_NONBLOCK))
        policy.unlink()


# The shapes of secret the default policy must catch in a string, and prose that looks
# like them but holds none (review: env-var names, JSON text, sk-proj- keys).
SECRET_TEXTS = [
    ("export OPENAI_API_KEY=sk-live-Ab3dEf6hIj9kLm2nOp5q", "Ab3dEf6hIj9kLm2nOp5q"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("GITHUB_TOKEN=tok_0000111122223333 make release", "tok_0000111122223333"),
    ("db_password: hunter2-Pr0d!", "hunter2"),
    ('config: {"password": "hunter2 Pr0d!"}', "hunter2"),
    ('{"api_key":"9f8e7d6c5b4a39281706","user":"bob"}', "9f8e7d6c5b4a39281706"),
    ("const client = {accessToken: 'abc def ghi'}", "abc def ghi"),
    ("apiKey=9f8e7d6c5b4a39281706", "9f8e7d6c5b4a39281706"),
    ("key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z here", "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"),
    ("sk-ant-api03-Ab3dEf_6hIj9kLm2nOp5q-Rs8tUv1wXy4zAA", "Ab3dEf_6hIj9kLm2nOp5q"),
    ("Token: abc and secret = s3cr3t", "s3cr3t"),
    ("curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgN"
     "ryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U' https://api", "dozjgNryP4J3jVmNHl0w5N"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
    ('{"headers": {"authorization": "token ghx_abc123"}}', "ghx_abc123"),
    ("401 Unauthorized for Bearer abcdefghijklmnopqrstuvwxyz0123", "abcdefghijklmnopqrstuvw"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9Pl",
     "dozjgNryP4J3jVmNHl0w5N"),
    ("DATABASE_URL=postgresql://app:S3cret!pw@db.internal:5432/app", "S3cret!pw"),
    ("redis://:hunter2@cache:6379/0", "hunter2"),
    ("stripe key sk_live_51H8xYzAbCdEfGhIjKlMn here", "51H8xYzAbCdEfGhIjKlMn"),
    ("slack xoxb-1234567890-abcdefghij posted", "1234567890-abcdefghij"),
    ("slack app xapp-1-A0123456789-1234567890123-abcdef0123456789", "1234567890123-abcdef"),
    ("aws temporary ASIAIOSFODNN7EXAMPLE and session", "IOSFODNN7EXAMPLE"),
    ("role AROAIOSFODNN7EXAMPLE assumed", "IOSFODNN7EXAMPLE"),
    ("GH_PAT github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789AB",
     "abcdefghijklmnopqrstuvwxyz0123456789"),
    ("pasted -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
     "AAAAAAAAAAEAAAAzAAAAC3NzaC1lZDI1NTE5AAAAIAb", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"),
    ("maps key AIzaSyA1234567890abcdefghijklmnopqrstuv", "SyA1234567890abcdefghij"),
]
PROSE = [
    "the token bucket algorithm limits the rate",
    "password reset flow: the user asks, we mail a link",
    "max_tokens: 4096 and token_count: 12, tokenizer: cl100k_base",
    "secrets are kept in the vault; a passphrase protects it",
    "scikit-learn, not sk-learn",
    "a bearer token is sent in the Authorization header; Basic auth is off",
    "authorization: the user must ask first",
    "see https://example.com/a@b, mail bob@example.com, ssh://git@host:22/repo",
    "http://host:8080/x@y and git@github.com:org/repo.git",
]


@pytest.mark.parametrize(("text", "secret"), SECRET_TEXTS)
def test_default_patterns_redact_secret_shapes_in_text(text: str, secret: str) -> None:
    p = parse_privacy(PRIVACY)
    redacted = p.redact(text)
    assert secret not in redacted and "[REDACTED]" in redacted
    assert p.find_secret(text) is not None and p.find_secret(redacted) is None


@pytest.mark.parametrize("text", PROSE)
def test_default_patterns_leave_prose_about_secrets_alone(text: str) -> None:
    p = parse_privacy(PRIVACY)
    assert p.redact(text) == text
    assert p.find_secret(text) is None


def test_a_key_naming_a_secret_has_everything_it_holds_redacted() -> None:
    p = parse_privacy(PRIVACY)
    args = {"user": "bob", "password": "hunter2-Pr0d!", "OPENAI_API_KEY": "9f8e7d6c5b",
            "aws_secret_access_key": "wJalrXUtnFEMI", "db-password": "pw1",
            "clientSecret": "cs1", "Authorization": "Bearer abc123", "private_key": "",
            "credentials": ["u1", {"pass": "p1", "n": 3}], "max_tokens": 4096,
            "tokenizer": "cl100k_base", "secretary": "Ann", "api_key": 9876543210123,
            "pin_password": 4815.1623, "token": True, "secret": None}
    out = p.redact_value({"tool": "login", "args": args})
    assert out == {"tool": "login", "args": {
        "user": "bob", "password": "[REDACTED]", "OPENAI_API_KEY": "[REDACTED]",
        "aws_secret_access_key": "[REDACTED]", "db-password": "[REDACTED]",
        "clientSecret": "[REDACTED]", "Authorization": "[REDACTED]", "private_key": "",
        "credentials": ["[REDACTED]", {"pass": "[REDACTED]", "n": "[REDACTED]"}],
        "max_tokens": 4096, "tokenizer": "cl100k_base", "secretary": "Ann",
        "api_key": "[REDACTED]", "pin_password": "[REDACTED]", "token": True, "secret": None}}
    assert p.find_secret_in(args) == ("key 'password' names a secret (store.redact_keys) and "
                                      "holds a value that is not redacted")
    assert p.find_secret_in(out) is None
    assert p.find_secret_in({"args": {"password": 48151623}}) == (
        "key 'password' names a secret (store.redact_keys) and holds a value that is not "
        "redacted")
    assert p.find_secret_in({"args": {"token": False, "secret": None, "n": 3}}) is None


def test_secrets_used_as_keys_are_redacted_without_dropping_a_key() -> None:
    """Two secret keys and a key already spelt like the redaction: all three values stay,
    under distinct keys, in their order."""
    p = parse_privacy(PRIVACY)
    first, second = "sk-" + "A" * 30, "sk-" + "B" * 30
    env = {first: "enabled", "[REDACTED]": "kept", second: "also", "x": f"note {first}"}
    out = p.redact_value({"env": env})["env"]
    assert list(out.items()) == [("[REDACTED]#2", "enabled"), ("[REDACTED]", "kept"),
                                 ("[REDACTED]#3", "also"), ("x", "note [REDACTED]")]
    assert p.find_secret_in({"env": {first: "enabled"}}) == \
        "matches the redaction pattern '\\\\bsk-[A-Za-z0-9_-]{20,}'"
    assert p.find_secret_in(out) is None


def test_redact_keys_is_a_setting_with_the_default_when_absent() -> None:
    default = parse_privacy(_privacy(r"\bnothing\b"))
    assert default.redact_value({"db_password": "x"}) == {"db_password": "[REDACTED]"}
    assert [k.pattern for k in parse_privacy(PRIVACY).key_patterns] == \
        [k.pattern for k in default.key_patterns]  # the template spells out the default
    own = parse_privacy(_privacy(r"\bnothing\b") + "  redact_keys: ['\\bpin\\b']\n")
    assert own.redact_value({"db_password": "x", "card_PIN": "1234"}) == \
        {"db_password": "x", "card_PIN": "[REDACTED]"}
    text = _privacy(r"\bnothing\b") + "  redact_keys: ['(unclosed']\n"
    with pytest.raises(ValidationError) as caught:
        parse_privacy(text)
    err = caught.value
    assert (err.line, err.field) == (line_of(text, "redact_keys"), "store.redact_keys")
