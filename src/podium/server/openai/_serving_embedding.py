"""``POST /v1/embeddings`` on a model that embeds (docs/openai.md, "Embeddings").

The texts go to the model's ``embed`` through its scheduler (so dynamic batching runs one
``embed`` over the texts of several calls). ``input`` is a string, strings, token ids or lists
of token ids (decoded with the model's tokenizer, which it must then set); ``encoding_format``
``float`` gives lists of numbers, ``base64`` each vector's float32 little-endian bytes.
``dimensions`` may only be the model's own (its vectors are not trained to be cut).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import BadModelOutput
from ...types import Call, EmbedInputs, WireProtocol
from ._protocol import EmbeddingRequest, OpenAIInvalid, decode
from ._serving import target, texts_or_ids

if TYPE_CHECKING:
    from ...dataplane import DataPlane

__all__ = ["MAX_INPUTS", "embeddings"]

#: The most texts one request may embed (OpenAI's own bound).
MAX_INPUTS = 2048


async def embeddings(plane: DataPlane, body: bytes) -> dict[str, Any]:
    request = decode(body, EmbeddingRequest)
    t = target(plane, request.model, "embeds")
    texts: list[str] = []
    for i, item in enumerate(texts_or_ids(request.input)):
        if isinstance(item, str):
            texts.append(item)
            continue
        if t.codec is None:
            raise OpenAIInvalid(
                f"model '{t.mv.name}' sets no tokenizer, so it takes text, not token ids", "input"
            )
        t.codec.check_ids(item, f"input[{i}]")
        texts.append(t.codec.decode(item))
    if len(texts) > MAX_INPUTS:
        raise OpenAIInvalid(
            f"'input' holds {len(texts)} texts; at most {MAX_INPUTS} are embedded per request",
            "input",
        )
    call = Call(t.mv.name, t.mv.version, WireProtocol.OPENAI, EmbedInputs(texts), None)
    answer = await plane.infer(call, t.mv)
    vectors = np.asarray(answer.value, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
        raise BadModelOutput(f"model '{t.mv.name}' answered the shape {list(vectors.shape)}")
    dim = int(vectors.shape[1])
    if request.dimensions is not None and request.dimensions != dim:
        raise OpenAIInvalid(
            f"model '{t.mv.name}' embeds into {dim} dimensions; 'dimensions' may only be {dim}",
            "dimensions",
        )
    data = []
    for i, row in enumerate(vectors):
        embedding: Any
        if request.encoding_format == "base64":
            embedding = base64.b64encode(row.astype("<f4").tobytes()).decode()
        else:
            embedding = row.tolist()
        data.append({"object": "embedding", "index": i, "embedding": embedding})
    tokens = sum(len(t.codec.encode(text)) for text in texts) if t.codec is not None else 0
    counted = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"object": "list", "data": data, "model": request.model, "usage": counted}
