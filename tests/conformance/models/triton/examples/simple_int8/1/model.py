"""Triton python-backend twin of Triton's `simple_int8` example model: OUTPUT0 = INPUT0 + INPUT1,
OUTPUT1 = INPUT0 - INPUT1, element-wise (INT8)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            s, d = (a + b).astype(a.dtype), (a - b).astype(a.dtype)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", s), pb_utils.Tensor("OUTPUT1", d)]
                )
            )
        return responses
