"""Decodes OIP tensors and returns each one, plus a description of what arrived.

Each input comes back as an output of the same name (its datatype then follows the decoded dtype),
and ``kinds`` lists ``name:dtype:shape`` (``list[str]`` / ``list[bytes]`` for BYTES).
"""

import numpy as np


class Model:
    def predict(self, inputs):
        outputs = {}
        kinds = []
        for name, value in inputs.items():
            outputs[name] = value
            if isinstance(value, np.ndarray):
                kinds.append(f"{name}:{value.dtype}:{list(value.shape)}")
            else:
                element = type(value[0]).__name__ if value else "empty"
                kinds.append(f"{name}:list[{element}]:{len(value)}")
        outputs["kinds"] = kinds
        return outputs
