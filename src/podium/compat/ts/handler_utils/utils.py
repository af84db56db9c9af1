"""``ts.handler_utils.utils``: where newer TorchServe exports the streaming helper too."""

from ..protocol.otf_message_handler import send_intermediate_predict_response

__all__ = ["send_intermediate_predict_response"]
