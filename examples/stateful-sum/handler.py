"""A running sum per sequence, in the style of TorchServe's stateful example: each request of a
sequence sends an integer; the answer is the sum of every integer the sequence has sent so far.

The state lives in the handler's own LRU cache, keyed by the sequence id, as TorchServe's
stateful handlers keep it: a sequence stays on one worker, so the cache always has its entry.
The first request of a sequence (the ``ts_request_sequence_start`` request header) starts from
0. As TorchServe's stateful examples, the handler sets the id response header itself (Podium
then sends it once), and ends a sequence itself when a request sends 0 (the
``ts_request_sequence_end`` response header, as TorchServe's handlers do).

    curl -si localhost:8080/predictions/stateful-sum -H 'content-type: text/plain' \
        --data-binary 3                                   # starts one: see its id header
    curl -s localhost:8080/predictions/stateful-sum -H 'content-type: text/plain' \
        --data-binary 4 -H 'ts_request_sequence_id: <id>'
"""

from collections import OrderedDict


class StatefulSum:
    def initialize(self, context):
        config = context.model_yaml_config.get("handler", {})
        self.capacity = int(config.get("cache_size", 1000))
        self.cache = OrderedDict()  # sequence id -> running sum, least recently used first
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
                self.cache.pop(sequence, None)  # a new sequence, perhaps under an old id
            total = self.cache.pop(sequence, 0) + value
            if value == 0:  # the client's way to say "done": end the sequence
                context.set_response_header(idx, "ts_request_sequence_end", sequence)
            else:
                self.cache[sequence] = total
                while len(self.cache) > self.capacity:
                    self.cache.popitem(last=False)
            answers.append(total)
        return answers
