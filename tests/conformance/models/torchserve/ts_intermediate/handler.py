"""TorchServe 0.12's own test handler for intermediate responses
(test/pytest/test_send_intermediate_prediction_response.py): three intermediate "hello", then
"hello world " as the return value."""

from ts.handler_utils.utils import send_intermediate_predict_response


def handle(data, context):
    if type(data) is list:
        for _i in range(3):
            send_intermediate_predict_response(
                ["hello"], context.request_ids, "Intermediate Prediction success", 200, context
            )
        return ["hello world "]
