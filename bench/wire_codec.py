"""The worker-process codec alone: encode and decode of one message, ``N`` times.

    PYTHONPATH=src .venv/bin/python bench/wire_codec.py KIND N

Run it under valgrind's callgrind with ``N`` and with 0 and divide the difference of the
instructions by ``N`` (start-up cancels out; timings on a shared machine do not):

    PYTHONHASHSEED=0 PYTHONPATH=src valgrind --tool=callgrind --callgrind-out-file=cg.out \\
        .venv/bin/python bench/wire_codec.py answer_oip 10000

KIND: infer_oip, answer_oip (an OIP request / response of one FP32 tensor of 4 values),
infer_f32, answer_f32 (``{"x": 4 float32 in a numpy array}``), answer_json (a small dict).
Works on any tree whose ``_wire`` has ``Encoder`` or the older ``encode``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from podium.runtime.process import _messages as m
from podium.runtime.process import _wire
from podium.types import InferenceRequest, InferenceResponse, RequestInput, ResponseOutput


def main() -> int:
    tensor: dict[str, Any] = {"shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}
    request = InferenceRequest(inputs=[RequestInput(name="x", **tensor)], id="r1")
    response = InferenceResponse(outputs=[ResponseOutput(name="y", **tensor)], model_name="m")
    array = {"x": np.arange(4, dtype=np.float32)}
    kinds: dict[str, Any] = {
        "infer_oip": m.Infer(1, request, None, "rid"),
        "answer_oip": m.Answer(1, response),
        "infer_f32": m.Infer(1, array, None, "rid"),
        "answer_f32": m.Answer(1, array),
        "answer_json": m.Answer(1, {"label": "cat", "score": 0.5}),
    }
    codec: Any = _wire
    encode = codec.Encoder().encode if hasattr(codec, "Encoder") else codec.encode
    got: list[Any] = []
    decoder = codec.Decoder(got.append)
    message = kinds[sys.argv[1]]
    for _ in range(int(sys.argv[2])):
        decoder.feed(b"".join(encode(message)))
        got.clear()
    return 0


if __name__ == "__main__":
    sys.exit(main())
