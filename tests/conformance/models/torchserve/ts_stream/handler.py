"""Continuous batching inside a sequence, in the contract of TorchServe's
sequence-continuous-batching example: each ``handle`` call advances every request of the batch
by one step and sets ``context.stopping_criteria``, one callable per request: ``None`` for an
answer that is not streamed, ``False`` while a stream goes on, ``True`` at its last item (as
TorchServe's frontend reads them). A body n (odd) streams n items; -1 stops the sequence's
running stream at its next step; 0 ends the sequence."""

import time


class SequenceStreamHandler:
    def initialize(self, context):
        self.jobs = {}  # request id -> {"left": steps to go, "i": steps done}
        self.cancel = set()  # sequences whose running stream must stop
        self.initialized = True

    def handle(self, data, context):
        answers, criteria = [], []
        for idx, row in enumerate(data):
            request_id = context.get_request_id(idx)
            sequence = context.get_sequence_id(idx)
            # As TorchServe's example: the handler returns the sequence id to the client.
            context.set_response_header(idx, context.header_key_sequence_id, sequence)
            job = self.jobs.get(request_id)
            if job is None:
                body = row.get("data") or row.get("body")
                if isinstance(body, (bytes, bytearray)):
                    body = body.decode()
                value = int(body)
                job = {"left": 0, "i": 0, "stream": False}
                if value == -1:
                    self.cancel.add(sequence)
                    answers.append("cancelling\n")
                elif value == 0:
                    context.set_response_header(idx, context.header_key_sequence_end, sequence)
                    answers.append("ended\n")
                else:
                    job["left"] = value if value % 2 else 1
                    job["stream"] = value % 2 == 1
                self.jobs[request_id] = job
                if job["left"] == 0:
                    criteria.append(self._stop(request_id))
                    continue
            if sequence in self.cancel:
                self.cancel.discard(sequence)
                job["left"] = 0
                answers.append("cancelled\n")
            else:
                time.sleep(0.2)
                job["left"] -= 1
                answers.append(f"item {job['i']}\n")
                job["i"] += 1
            criteria.append(self._stop(request_id))
        context.stopping_criteria = criteria
        return answers

    def _stop(self, request_id):
        def stop(_result):
            job = self.jobs[request_id]
            if job["left"] == 0:
                del self.jobs[request_id]
                return True if job["stream"] else None
            return False

        return stop
