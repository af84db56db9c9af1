"""``ts.torch_handler.text_classifier``: TorchServe's default text classification handler.

One text per call (like TorchServe's, it reads only the batch's first row): cleaned up
(``TextHandler``), tokenized, its tokens and bigrams looked up in ``source_vocab``, and given
to the model as ``model(tokens, offsets=[0])`` (an ``EmbeddingBag`` text classifier). The answer
is ``{label: probability}`` for every class, labels from ``index_to_name.json``.
"""

from __future__ import annotations

from typing import Any

from ..handler_utils.text_utils import ngrams_iterator
from ..utils.util import map_class_to_label
from ._torch import captum_attr, torch
from .text_handler import TextHandler, _implicit_softmax_dim

__all__ = ["TextClassifier"]


class TextClassifier(TextHandler):
    """Every class's probability for the first row's text."""

    ngrams = 2

    def preprocess(self, data: Any) -> Any:
        """(the token ids as a tensor on the model's device, the tokens)."""
        row = data[0]
        text = row.get("data") or row.get("body")
        if isinstance(text, bytes | bytearray):
            text = text.decode("utf-8")
        text = self._remove_html_tags(text)
        text = text.lower()
        text = self._expand_contractions(text)
        text = self._remove_accented_characters(text)
        text = self._remove_punctuation(text)
        tokens = self._tokenize(text)
        ids = [self.source_vocab[token] for token in ngrams_iterator(tokens, self.ngrams)]
        return torch.as_tensor(ids, device=self.device), tokens

    def inference(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        text_tensor, _ = data
        offsets = torch.as_tensor([0], device=self.device)
        return super().inference(text_tensor, offsets)

    def postprocess(self, data: Any) -> Any:
        probabilities = torch.softmax(data, dim=_implicit_softmax_dim(data))
        return map_class_to_label(probabilities.tolist(), self.mapping)

    def get_insights(self, text_preprocess: Any, _: Any, target: int = 0) -> Any:
        """Each token's importance for ``target`` (Captum's layer integrated gradients over the
        model's ``embedding``): ``[{"importances": [...], "words": [...]}]``."""
        attr = captum_attr()
        if self.lig is None:
            self.lig = attr.LayerIntegratedGradients(self.model, self.model.embedding)
        text_tensor, all_tokens = text_preprocess
        offsets = torch.tensor([0]).to(self.device)
        reference = (
            attr.TokenReferenceBase()
            .generate_reference(text_tensor.shape[0], device=self.device)
            .squeeze(0)
        )
        attributions = self.lig.attribute(
            text_tensor,
            reference,
            additional_forward_args=(offsets),
            return_convergence_delta=False,
            target=target,
        )
        importances = self.summarize_attributions(attributions)
        return [{"importances": importances.tolist(), "words": self.get_word_token(all_tokens)}]
