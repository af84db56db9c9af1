"""``ts.handler_utils.text_utils``: the tokenizer and n-grams TorchServe's text handlers use
(torchtext's ``basic_english`` normalisation and ``ngrams_iterator``, without torchtext)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

__all__ = ["get_tokenizer", "ngrams_iterator"]


def ngrams_iterator(token_list: Sequence[str], ngrams: int) -> Iterator[str]:
    """Each token, then every run of 2 .. ``ngrams`` consecutive tokens joined by a space
    (``['a', 'b', 'c']``, 2 → ``a b c 'a b' 'b c'``)."""
    yield from token_list
    for n in range(2, ngrams + 1):
        for start in range(len(token_list) - n + 1):
            yield " ".join(token_list[start : start + n])


#: ``basic_english``, in order: each rule rewrites the lowercased line before it is split.
_BASIC_ENGLISH = [
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"\'", " '  "),
        (r"\"", ""),
        (r"\.", " . "),
        (r"<br \/>", " "),
        (r",", " , "),
        (r"\(", " ( "),
        (r"\)", " ) "),
        (r"\!", " ! "),
        (r"\?", " ? "),
        (r"\;", " "),
        (r"\:", " "),
        (r"\s+", " "),
    )
]


def _basic_english(line: str) -> list[str]:
    line = line.lower()
    for pattern, replacement in _BASIC_ENGLISH:
        line = pattern.sub(replacement, line)
    return line.split()


def _split(line: str) -> list[str]:
    return line.split()


def get_tokenizer(tokenizer: str | None, language: str = "en") -> Callable[[str], list[str]]:
    """``None``: split on whitespace; ``"basic_english"``: lowercase, separate punctuation,
    split. Anything else is refused (TorchServe returns nothing for it; Podium says why)."""
    if tokenizer is None:
        return _split
    if tokenizer == "basic_english":
        if language != "en":
            raise ValueError("the basic_english tokenizer is only for English ('en')")
        return _basic_english
    if callable(tokenizer):
        return tokenizer
    raise ValueError(
        f"tokenizer {str(tokenizer)[:64]!r} is not available without torchtext: "
        "use None or 'basic_english'"
    )
