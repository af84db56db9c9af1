"""``ts.torch_handler.text_handler``: ``TextHandler``, the base of TorchServe's text handlers.

Loads the model (``BaseHandler``) and the vocabulary, ``source_vocab.pt`` in the model
directory (or the manifest's ``model.sourceVocab``), read with ``torch.load`` (weights only
where torch defaults to it: a ``dict`` of token → index loads; torchtext's ``Vocab`` objects
need torchtext and an archive built for it). Gives subclasses the clean-up steps TorchServe's
text classifier runs: HTML tags off, contractions expanded, accents off, punctuation off,
``basic_english`` tokens.
"""

from __future__ import annotations

import logging
import os
import re
import string
import unicodedata
from abc import ABC
from typing import Any

from ..handler_utils.text_utils import get_tokenizer
from ..utils.util import CLEANUP_REGEX
from ._torch import torch
from .base_handler import BaseHandler
from .contractions import CONTRACTION_MAP

__all__ = ["CONTRACTIONS_PATTERN", "TextHandler"]

logger = logging.getLogger("ts.torch_handler.text_handler")  # TorchServe's name

#: Any key of CONTRACTION_MAP, tried in the table's order, whatever the case.
CONTRACTIONS_PATTERN = re.compile(
    "({})".format("|".join(CONTRACTION_MAP)), flags=re.IGNORECASE | re.DOTALL
)
_PUNCTUATION = str.maketrans("", "", string.punctuation)


class TextHandler(BaseHandler, ABC):
    """Text clean-up, tokens, and the vocabulary (``source_vocab``)."""

    def __init__(self) -> None:
        super().__init__()
        self.source_vocab: Any = None
        self.tokenizer = get_tokenizer("basic_english")
        self.input_text: Any = None
        self.lig: Any = None
        self.initialized: Any = None

    def initialize(self, context: Any) -> None:
        super().initialize(context)
        self.initialized = False
        named = (self.manifest or {}).get("model", {}).get("sourceVocab")
        if named:
            model_dir = context.system_properties.get("model_dir") or ""
            inside = os.path.join(model_dir, named)
            path = inside if os.path.isfile(inside) else named
        else:
            path = self.get_source_vocab_path(context)
        self.source_vocab = torch.load(path)
        self.initialized = True

    def get_source_vocab_path(self, ctx: Any) -> str:
        path = os.path.join(ctx.system_properties.get("model_dir") or "", "source_vocab.pt")
        if not os.path.isfile(path):
            raise FileNotFoundError(
                "the text handler needs its vocabulary: source_vocab.pt in the archive "
                "(torch-model-archiver --extra-files source_vocab.pt)"
            )
        return path

    def _expand_contractions(self, text: str) -> str:
        """``don't`` → ``do not`` (keeping the first letter's case), then apostrophes off."""

        def expand(match: re.Match[str]) -> str:
            found = match.group(0)
            expansion = CONTRACTION_MAP.get(found) or CONTRACTION_MAP[found.lower()]
            return found[0] + expansion[1:]

        return CONTRACTIONS_PATTERN.sub(expand, text).replace("'", "")

    def _remove_accented_characters(self, text: str) -> str:
        return (
            unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("utf-8", "ignore")
        )

    def _remove_html_tags(self, text: str) -> str:
        return CLEANUP_REGEX.sub("", text)

    def _remove_punctuation(self, text: str) -> str:
        return text.translate(_PUNCTUATION)

    # TorchServe's first spelling, kept for handlers that call it
    _remove_puncutation = _remove_punctuation

    def _tokenize(self, text: str) -> list[str]:
        return self.tokenizer(text)

    def get_word_token(self, input_tokens: list[str]) -> list[str]:
        """Tokens without the ``Ġ`` a byte-level BPE tokenizer marks spaces with."""
        return [token.replace("\u0120", "") for token in input_tokens]

    def summarize_attributions(self, attributions: Any) -> Any:
        """Softmaxed attributions over the last dimension, scaled by the norm of their sums."""
        attributions = torch.softmax(attributions, dim=_implicit_softmax_dim(attributions))
        return attributions / torch.norm(attributions.sum(dim=-1))


def _implicit_softmax_dim(tensor: Any) -> int:
    """The dimension torch's softmax takes when none is given (TorchServe's handlers give none)."""
    return 0 if tensor.dim() in (0, 1, 3) else 1
