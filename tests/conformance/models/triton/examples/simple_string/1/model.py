"""Triton python-backend twin of Triton's `simple_string` example model: OUTPUT0 = INPUT0 + INPUT1,
OUTPUT1 = INPUT0 - INPUT1, element-wise (BYTES holding decimal integers)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            ia, ib = a.astype(np.int64), b.astype(np.int64)
            s = np.array([str(x).encode() for x in (ia + ib).ravel()], dtype=object).reshape(
                a.shape
            )
            d = np.array([str(x).encode() for x in (ia - ib).ravel()], dtype=object).reshape(
                a.shape
            )
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", s), pb_utils.Tensor("OUTPUT1", d)]
                )
            )
        return responses
