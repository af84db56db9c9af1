"""Streaming: one intermediate response per word, the last word as the return value."""

import json

from ts.handler_utils.utils import send_intermediate_predict_response as newer_send
from ts.protocol.otf_message_handler import send_intermediate_predict_response


class Streamer:
    def initialize(self, context):
        self.context = context

    def handle(self, data, context):
        row = data[0]
        body = row.get("body")
        if isinstance(body, (bytes, bytearray)):
            body = json.loads(body)
        words = body["text"].split()
        context.set_response_header(0, "X-Streamed", "yes")
        send = newer_send if body.get("newer") else send_intermediate_predict_response
        for word in words[:-1]:
            if body.get("fail_after") == word:
                raise RuntimeError(f"failed after {word}")
            send([word + " "], context.request_ids, "Intermediate Prediction success", 200, context)
        return [words[-1]]
