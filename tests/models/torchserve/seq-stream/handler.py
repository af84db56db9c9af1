"""TorchServe's examples/stateful/sequence_continuous_batching handler, unmodified in what it does
(its cache, its stopping criteria, its answers), written without BaseHandler and the ``lru``
package so that it needs no torch: a running sum per sequence; an odd number streams (the
running sum again at each step, 10 more steps), an even one answers once, -1 cancels the
sequence's running stream, 0 ends the sequence. Each step's batch is recorded (sequence id and
request id per request) in the file named by PODIUM_E2E_EVENTS."""

import collections
import json
import logging
import os
import time

logger = logging.getLogger(__name__)


class StatefulHandler:
    DEFAULT_CAPACITY = 10

    class LRU(collections.OrderedDict):  # the lru package's LRU, as much as the example uses
        def __init__(self, capacity):
            super().__init__()
            self.capacity = capacity

        def has_key(self, key):
            return key in self

        def __setitem__(self, key, value):
            super().__setitem__(key, value)
            self.move_to_end(key)
            while len(self) > self.capacity:
                self.popitem(last=False)

    def __init__(self):
        self.cache = None
        self.context = None

    def initialize(self, ctx):
        ctx.cache = {}
        config = ctx.model_yaml_config["handler"]
        self.cache = self.LRU(int(config.get("cache", {}).get("capacity", self.DEFAULT_CAPACITY)))
        self.step_seconds = float(config.get("step_seconds", 1))
        self.initialized = True

    def handle(self, data, context):
        self.context = context
        _record(context, len(data))
        return self.postprocess(self.inference(self.preprocess(data)))

    def preprocess(self, data):
        results = []
        for idx, row in enumerate(data):
            sequence_id = self.context.get_sequence_id(idx)
            self.context.set_response_header(idx, self.context.header_key_sequence_id, sequence_id)
            if self.context.get_request_header(idx, self.context.header_key_sequence_start):
                prev = 0
                self.context.cache[sequence_id] = {
                    "start": True,
                    "cancel": False,
                    "end": False,
                    "num_requests": 0,
                }
            elif self.cache.has_key(sequence_id):
                prev = int(self.cache[sequence_id])
            else:
                prev = None
            req_id = self.context.get_request_id(idx)
            if req_id not in self.context.cache:
                request = row.get("data") or row.get("body")
                if isinstance(request, (bytes, bytearray)):
                    request = request.decode("utf-8")
                self.context.cache[req_id] = {
                    "stopping_criteria": self._create_stopping_criteria(
                        req_id=req_id, seq_id=sequence_id
                    ),
                    "stream": True,
                }
                self.context.cache[sequence_id]["num_requests"] += 1
                if type(request) is dict and "input" in request:
                    request = request.get("input")
                if int(request) == -1:
                    self.context.cache[sequence_id]["cancel"] = True
                    self.context.cache[req_id]["stream"] = False
                    results.append(int(request))
                elif prev is None:
                    self.context.cache[sequence_id]["end"] = True
                    self.context.cache[req_id]["stream"] = False
                    self.context.set_response_header(
                        idx, self.context.header_key_sequence_end, sequence_id
                    )
                    results.append(int(request))
                else:
                    val = prev + int(request)
                    self.cache[sequence_id] = val
                    if int(request) == 0:
                        self.context.cache[sequence_id]["end"] = True
                        self.context.cache[req_id]["stream"] = False
                        self.context.set_response_header(
                            idx, self.context.header_key_sequence_end, sequence_id
                        )
                    elif int(request) % 2 == 0:
                        self.context.cache[req_id]["stream"] = False
                    results.append(val)
            else:
                time.sleep(self.step_seconds)
                results.append(prev)
        return results

    def inference(self, data, *args, **kwargs):
        return data

    def postprocess(self, data):
        self.context.stopping_criteria = [
            self.context.cache[req_id]["stopping_criteria"]
            for req_id in self.context.request_ids.values()
        ]
        return data

    def clean_up(self, seq_id, req_id, del_seq):
        self.context.cache[seq_id]["num_requests"] -= 1
        if self.context.cache[seq_id]["num_requests"] == 0 and del_seq:
            del self.context.cache[seq_id]
        del self.context.cache[req_id]

    def _create_stopping_criteria(self, req_id, seq_id):
        class StoppingCriteria:
            def __init__(self, outer, req_id, seq_id):
                self.req_id = req_id
                self.seq_id = seq_id
                self.outer = outer
                self.counter = 10

            def __call__(self, res):
                cache = self.outer.context.cache
                if cache[seq_id]["end"]:
                    ret = True if cache[req_id]["stream"] else None
                    self.outer.clean_up(self.seq_id, self.req_id, True)
                    return ret
                elif cache[seq_id]["cancel"]:
                    ret = True if cache[req_id]["stream"] else None
                    self.outer.clean_up(self.seq_id, self.req_id, False)
                    if cache[seq_id]["num_requests"] == 0:
                        cache[seq_id]["cancel"] = False
                    return ret
                elif cache[seq_id]["start"]:
                    self.outer.clean_up(self.seq_id, self.req_id, False)
                    cache[seq_id]["start"] = False
                    return None
                elif not cache[req_id]["stream"]:
                    self.outer.clean_up(self.seq_id, self.req_id, False)
                    return None
                elif self.counter == 0:
                    self.outer.clean_up(self.seq_id, self.req_id, False)
                    return True
                else:
                    self.counter -= 1
                return False

        return StoppingCriteria(outer=self, req_id=req_id, seq_id=seq_id)


def _record(context, size):
    path = os.environ.get("PODIUM_E2E_EVENTS")
    if not path:
        return
    batch = [[context.get_sequence_id(idx), context.get_request_id(idx)] for idx in range(size)]
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"tag": "seq-stream", "event": "step", "batch": batch}) + "\n")
