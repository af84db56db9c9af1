"""Triton python-backend twin of Triton's `simple_dyna_sequence` example model.

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
            # What Triton's example clients expect of `simple_sequence`: the input, plus 1 on the
            # first request of a sequence.
            out = value + (1 if start else 0)
            if end:  # the dyna variant adds the correlation id to the last request's answer
                out = out + int(key)
            if end:
                self.state.pop(key, None)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT", out.astype(np.int32))]
                )
            )
        return responses
