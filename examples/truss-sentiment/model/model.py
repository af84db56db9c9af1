"""A sentiment scorer written as a truss: Truss's constructor keywords, a pydantic input, a
bundled package, a data file, a secret with a default, an environment variable, and a predict
that streams when asked (it returns a generator) and answers whole otherwise."""

import os
import time

import pydantic
from lexicon import load_lexicon, tokens

from model.scoring import label


class Review(pydantic.BaseModel):
    text: str
    stream: bool = False


class Model:
    def __init__(self, **kwargs):
        self._data_dir = kwargs["data_dir"]
        self._secrets = kwargs["secrets"]
        self._config = kwargs["config"]
        self._lexicon = None

    def load(self):
        self._lexicon = load_lexicon(self._data_dir / "lexicon.txt")
        self._band = float(os.environ["SENTIMENT_NEUTRAL_BAND"])

    def is_healthy(self):
        return self._lexicon is not None

    def predict(self, review: Review):
        words = tokens(review.text)
        if review.stream:
            return self._per_word(words)
        scores = [self._lexicon.get(w, 0.0) for w in words]
        score = sum(scores) / len(scores) if scores else 0.0
        return {
            "label": self._secrets["label_prefix"] + label(score, self._band),
            "score": round(score, 3),
            "words": len(words),
        }

    def _per_word(self, words):
        for word in words:
            time.sleep(0.01)  # a stand-in for generating each piece
            yield f"{word}={self._lexicon.get(word, 0.0)}\n"
