"""Answers with what it received: numbers doubled, text upper-cased, and what MLServer gives a
runtime (the request's id, its headers, the settings), all through MLServer's own helpers."""

import json

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec, StringCodec
from mlserver.types import InferenceRequest, InferenceResponse, Parameters, RequestOutput


class ProbeModel(MLModel):
    async def load(self) -> bool:
        self.factor = self.settings.parameters.extra["factor"]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        outputs = []
        for inp in payload.inputs:
            value = self.decode(inp, default_codec=NumpyCodec)  # "text" is str by the metadata
            if isinstance(value, np.ndarray):
                outputs.append(self.encode(value * self.factor, RequestOutput(name=inp.name)))
            else:
                upper = [v.upper() for v in value]
                outputs.append(StringCodec.encode_output(inp.name, upper))
        headers = (payload.parameters.headers or {}) if payload.parameters else {}
        info = {
            "id": payload.id,
            "probe_header": headers.get("x-probe"),
            "name": self.name,
            "version": self.version,
            "uri": self.settings.parameters.uri,
        }
        outputs.append(StringCodec.encode_output("info", [json.dumps(info)]))
        # MLServer sends a response's parameters.headers as response headers (and metadata).
        echo = Parameters(headers={"x-probe-echo": headers.get("x-probe", "")})
        return InferenceResponse(model_name=self.name, outputs=outputs, parameters=echo)
