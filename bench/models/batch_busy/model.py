"""The dynamic-batching benchmark's model: a batch takes 1 ms + 0.05 ms per request (an
accelerator's time: it waits, the event loop serves meanwhile), and the model measures how busy
it is. Every answer carries, in its parameters, the seconds it has spent in ``predict`` so far
(``busy_s``), its clock (``at_s``) and the batches it ran (``batches``): bench/run.py reads them before and after a run, so the
share of the time the model was busy comes from the model itself.

Four variants share this file (their directories link to it and name the class in
``model_class_name``): ``SyncModel`` (``bench/models/batch_busy_sync``) waits with a blocking
``time.sleep`` on the model's thread, as an accelerator's blocking call does, timed by the OS
(``asyncio.sleep`` counts whole milliseconds on uvloop: bench/RESULTS.md §34); ``PairModel``
(``bench/models/batch_busy_sync2``) is ``SyncModel`` on two predict threads
(``predict_concurrency: 2``), each batch waiting twice as long, so that the model alone allows
as much as ``SyncModel``; its ``busy_s`` is its threads' mean (bench/RESULTS.md §43);
``SequenceModel`` (``bench/models/sequence_batch``) is ``Model`` as stateful sequences: each
request's sequence keeps a running total of its inputs (its Context in ``current_context``'s
list, in the batch's order), answered in ``parameters.total``; ``SingleModel``
(``bench/models/busy_single``) does the same work unbatched, one request at a time, waiting 1 ms
+ 0.05 ms for each (its ``batches`` counts calls)."""

import asyncio
import threading
import time

from podium import InferenceResponse, ResponseOutput
from podium.types import current_context


def _answer(inputs: dict, stats: dict) -> InferenceResponse:
    """One request's answer: its inputs (numpy arrays, by name) back, and the model's figures."""
    return InferenceResponse(
        outputs=[
            ResponseOutput(
                name=name,
                shape=list(value.shape),
                datatype="FP32",
                data=value.ravel().tolist(),
            )
            for name, value in inputs.items()
        ],
        parameters=stats,
    )


class Model:
    def __init__(self) -> None:
        self.busy = 0.0
        self.batches = 0

    def _ran(self, started: float) -> dict:
        now = time.monotonic()
        self.busy += now - started
        self.batches += 1
        return {"busy_s": self.busy, "at_s": now, "batches": self.batches}

    async def predict(self, batch: list) -> list:
        # each item: the request's inputs by name (numpy arrays)
        started = time.monotonic()
        await asyncio.sleep(0.001 + 0.00005 * len(batch))
        stats = self._ran(started)
        return [_answer(inputs, stats) for inputs in batch]


class SyncModel(Model):
    def predict(self, batch: list) -> list:  # type: ignore[override]
        started = time.monotonic()
        time.sleep(0.001 + 0.00005 * len(batch))
        stats = self._ran(started)
        return [_answer(inputs, stats) for inputs in batch]


class PairModel(Model):
    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()  # its two threads count into one total

    def _ran(self, started: float) -> dict:
        with self._lock:
            stats = super()._ran(started)
            self.busy -= (stats["at_s"] - started) / 2  # the mean of its two threads
            stats["busy_s"] = self.busy
            return stats

    def predict(self, batch: list) -> list:  # type: ignore[override]
        started = time.monotonic()
        time.sleep(2 * (0.001 + 0.00005 * len(batch)))
        stats = self._ran(started)
        return [_answer(inputs, stats) for inputs in batch]


class SequenceModel(Model):
    async def predict(self, batch: list) -> list:
        contexts = current_context.get()
        started = time.monotonic()
        await asyncio.sleep(0.001 + 0.00005 * len(batch))
        stats = self._ran(started)
        answers = []
        for context, inputs in zip(contexts, batch, strict=True):
            total = context.state.get("total", 0.0) + sum(float(v.sum()) for v in inputs.values())
            context.state["total"] = total
            answers.append(_answer(inputs, {**stats, "total": total}))
        return answers


class SingleModel(Model):
    async def predict(self, inputs: dict) -> InferenceResponse:  # type: ignore[override]
        started = time.monotonic()
        await asyncio.sleep(0.00105)
        return _answer(inputs, self._ran(started))
