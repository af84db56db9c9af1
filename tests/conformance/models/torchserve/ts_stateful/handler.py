"""A running sum per sequence, written as TorchServe's stateful example writes its handler: it
sets the sequence id response header itself, starts afresh on ``ts_request_sequence_start`` and
forgets the sequence on ``ts_request_sequence_end``; a body of 0 ends the sequence from the
handler's side (the ``ts_request_sequence_end`` response header)."""


class StatefulHandler:
    def initialize(self, context):
        self.totals = {}  # sequence id -> running sum; a sequence stays on one worker
        self.initialized = True

    def handle(self, data, context):
        answers = []
        for idx, row in enumerate(data):
            body = row.get("data") or row.get("body")
            if isinstance(body, (bytes, bytearray)):
                body = body.decode()
            value = int(body)
            sequence = context.get_sequence_id(idx)
            context.set_response_header(idx, context.header_key_sequence_id, sequence)
            if context.get_request_header(idx, context.header_key_sequence_start):
                self.totals[sequence] = 0
            total = self.totals.get(sequence, 0) + value
            self.totals[sequence] = total
            if value == 0:
                context.set_response_header(idx, context.header_key_sequence_end, sequence)
            if value == 0 or context.get_request_header(idx, context.header_key_sequence_end):
                self.totals.pop(sequence, None)
            answers.append(total)
        return answers
