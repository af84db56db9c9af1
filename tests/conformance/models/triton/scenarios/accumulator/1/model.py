"""A running sum per sequence; START begins afresh with the input.

Sequence batching with Triton's START / END / READY control inputs; the state lives in this
instance, keyed by the request's correlation id."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _flag(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return tensor is not None and bool(tensor.as_numpy().ravel()[0])


class TritonPythonModel:
    def initialize(self, args):
        self.state = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            key = request.correlation_id()
            start, end = _flag(request, "START"), _flag(request, "END")
            total = value.astype(np.int64) if start else self.state.get(key, 0) + value
            self.state[key] = total
            out = total
            if end:
                self.state.pop(key, None)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT", out.astype(np.int32))]
                )
            )
        return responses
