"""A stateful streaming sequence with continuous batching, in the style of TorchServe's stateful
streaming example: each request of a sequence sends an integer.

- an odd number n streams n items (one every 200 ms), each adding 1 to the sequence's total;
- ``-1`` cancels the stream in progress of the same sequence (it stops at its next item):
  with ``continuousBatching`` the sequence's next request runs while its previous one streams;
- ``0`` ends the sequence (the ``ts_request_sequence_end`` response header).

    curl -siN localhost:8080/predictions/stateful-stream -H 'content-type: text/plain' \
        --data-binary 21                                                        # note the id
    curl -s localhost:8080/predictions/stateful-stream -H 'content-type: text/plain' \
        --data-binary -1 -H 'ts_request_sequence_id: <id>'
"""

import time

from ts.protocol.otf_message_handler import send_intermediate_predict_response


class StatefulStream:
    def initialize(self, context):
        self.sequences = {}  # sequence id -> {"total": int, "cancel": bool}; kept on this worker

    def handle(self, data, context):
        answers = []
        for idx, row in enumerate(data):
            body = row.get("data") or row.get("body")
            if isinstance(body, (bytes, bytearray)):
                body = body.decode()
            value = int(body)
            sequence = context.get_sequence_id(idx)
            state = self.sequences.setdefault(sequence, {"total": 0, "cancel": False})
            if value == -1:
                state["cancel"] = True
                answers.append("cancelling the stream in progress\n")
            elif value == 0:
                self.sequences.pop(sequence, None)
                context.set_response_header(idx, "ts_request_sequence_end", sequence)
                answers.append(f"ended; total {state['total']}\n")
            else:
                answers.append(self._stream(value, state, context))
        return answers

    def _stream(self, value, state, context):
        for i in range(value if value % 2 else 1):
            if state["cancel"]:
                state["cancel"] = False
                return "cancelled\n"
            time.sleep(0.2)
            state["total"] += 1
            item = f"item {i}; total {state['total']}\n"
            send_intermediate_predict_response(
                [item], context.request_ids, "Intermediate", 200, context
            )
        return "done\n"
