"""decode_args: typed arguments decoded by codecs, the return value encoded by its type."""

import numpy as np
from mlserver import MLModel
from mlserver.codecs import decode_args


class TypedModel(MLModel):
    @decode_args
    async def predict(self, x: np.ndarray, words: list[str]) -> np.ndarray:
        return x.sum(axis=-1, keepdims=True) + len(words)
