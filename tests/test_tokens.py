"""Token counts: cl100k_base with its vocabulary from the install, never the network."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from gitmem import prompt, tokens
from gitmem.memory import Memory

PROBE = textwrap.dedent("""
    from gitmem import tokens
    from gitmem.rows import split_text
    assert tokens.count("hello world") == 2
    assert tokens.count("We deploy on Fridays.") == 5
    assert tokens.truncate("one two three four", 2) == "one two"
    assert len(split_text("word " * 2000, 100)) > 1
    print("ok", tokens.encoding().name)
""")


def offline_env(tmp_path: Path) -> dict[str, str]:
    """Any download would go to a dead proxy; tiktoken's caches are empty."""
    cache = tmp_path / "empty-cache"
    cache.mkdir(parents=True)
    dead = "http://127.0.0.1:9"
    return {**os.environ, "HTTPS_PROXY": dead, "HTTP_PROXY": dead, "https_proxy": dead,
            "http_proxy": dead, "ALL_PROXY": dead, "NO_PROXY": "", "no_proxy": "",
            "TIKTOKEN_CACHE_DIR": str(cache), "DATA_GYM_CACHE_DIR": str(cache)}


def test_token_counts_need_no_network(tmp_path: Path) -> None:
    prefix: list[str] = []
    # with a network namespace of its own the process cannot reach anything at all
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0:
        prefix = [unshare, "-rn"]
        # the sandbox is real: the vocabulary tiktoken downloads cannot be fetched
        fetch = "import tiktoken; tiktoken.get_encoding('cl100k_base')"
        blocked = subprocess.run([*prefix, sys.executable, "-c", fetch],
                                 env=offline_env(tmp_path / "a"), capture_output=True,
                                 text=True, timeout=120)
        assert blocked.returncode != 0
    result = subprocess.run([*prefix, sys.executable, "-c", PROBE],
                            env=offline_env(tmp_path / "b"), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok ")


def test_counts_are_cl100k() -> None:
    assert tokens.count("") == 0
    assert tokens.count("<|endoftext|>") > 1  # special tokens count as plain text
    assert tokens.count_many(["a b", "c"] * 40) == [2, 1] * 40
    assert tokens.count_many(["hello world"]) == [2]


def test_section_headings_are_counted_as_the_encoder_counts_them() -> None:
    """Packing uses the headings' counts made ahead, so that a bundle never loads the
    encoder; they must be what cl100k_base counts."""
    assert set(prompt.HEADER_TOKENS) == set(prompt.SECTION_TITLES)
    for name in prompt.SECTION_TITLES:
        assert prompt.HEADER_TOKENS[name] == tokens.count(prompt.header(name)), name


def test_building_a_bundle_does_not_load_the_encoder(memory: Memory) -> None:
    """A daemon's first build_acb would otherwise pay for loading the vocabulary (the
    indexer, in a process of its own, is what counts tokens)."""
    memory.record({"content": {"text": "we deploy on fridays"}, "session_id": "s1"})
    memory.sync()
    probe = textwrap.dedent(f"""
        import tiktoken.registry
        from gitmem.config import load_config
        from gitmem.memory import Memory
        config = load_config(store={str(memory.store)!r}, dsn={memory.config.dsn!r},
                             schema={memory.config.schema!r})
        with Memory(config) as memory:
            memory.build_acb({{"session_id": "s1"}})
            memory.build_acb({{"session_id": "s1", "query_text": "deploy fridays"}})
            assert not tiktoken.registry.ENCODINGS, "the encoder was loaded"
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
