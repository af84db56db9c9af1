"""``ts.handler_utils.micro_batching``: a handler's batch cut into micro batches that go through
``preprocess`` → ``inference`` → ``postprocess`` as a pipeline, each step with its own threads
(TorchServe's ``examples/micro_batching``).

A handler sets ``self.handle = MicroBatching(self)`` and, usually from its model-config.yaml's
``micro_batching`` section, ``micro_batch_size`` and ``parallelism`` (threads per step, each 1 by
default). The answers come back in the batch's order. Differences from TorchServe's: a step that
raises fails the whole call with that error (TorchServe's thread dies and the call waits
forever); a ``parallelism`` of 0 or an unknown step is a ``ValueError`` (TorchServe asserts, and
0 threads would wait forever); the profiler (``ENABLE_TORCH_PROFILER``) is not run.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["HANDLER_METHODS", "MicroBatching"]

HANDLER_METHODS = ["preprocess", "inference", "postprocess"]


class MicroBatching:
    """The pipeline for ``parent_handler``; call it as the handler's ``handle(data, context)``."""

    def __init__(
        self,
        parent_handler: Any,
        micro_batch_size: int = 1,
        parallelism: dict[str, int] | None = None,
    ) -> None:
        self.handler = parent_handler
        self.micro_batch_size = micro_batch_size
        self._parallelism: dict[str, int] = {}
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._lock = threading.Lock()
        self.thread_local_data = threading.local()
        self.parallelism = dict(parallelism or {})

    @property
    def parallelism(self) -> dict[str, int]:
        return dict(self._parallelism)

    @parallelism.setter
    def parallelism(self, parallelism: dict[str, int]) -> None:
        unknown = sorted(set(parallelism) - set(HANDLER_METHODS))
        if unknown:
            raise ValueError(f"micro batching parallelism: unknown steps {unknown}, "
                             f"expected some of {HANDLER_METHODS}")  # fmt: skip
        for step, threads in parallelism.items():
            if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
                raise ValueError(
                    f"micro batching parallelism: {step} needs a whole number of threads >= 1"
                )
        with self._lock:
            self._parallelism.update(parallelism)
        self.shutdown()  # each step's next pool has its new size

    def _pool(self, step: str) -> ThreadPoolExecutor:
        with self._lock:
            if step not in self._pools:
                self._pools[step] = ThreadPoolExecutor(
                    self._parallelism.get(step, 1), thread_name_prefix=f"micro-batch-{step}"
                )
            return self._pools[step]

    def shutdown(self) -> None:
        """Stops every step's threads (after the calls they run); a later call starts them
        again."""
        with self._lock:
            old, self._pools = self._pools, {}
        for pool in old.values():
            pool.shutdown(wait=True)

    def get_micro_batch_idx(self) -> int | None:
        """The index of the micro batch the calling step works on (None outside a step)."""
        return getattr(self.thread_local_data, "micro_batch_idx", None)

    def _step(self, step: str, index: int, data: Any) -> Any:
        self.thread_local_data.micro_batch_idx = index
        try:
            return getattr(self.handler, step)(data)
        finally:
            self.thread_local_data.micro_batch_idx = None

    def _chain(self, index: int, data: Any) -> Future[Any]:
        """The micro batch ``index`` through every step: each one's result goes to the next
        step's threads as soon as it is there; the last future holds the answers."""
        done: Future[Any] = Future()

        def run(position: int, value: Any) -> None:
            if position == len(HANDLER_METHODS):
                done.set_result(value)
                return
            step = HANDLER_METHODS[position]
            future = self._pool(step).submit(self._step, step, index, value)

            def next_step(finished: Future[Any]) -> None:
                error = finished.exception()
                if error is not None:
                    done.set_exception(error)
                else:
                    run(position + 1, finished.result())

            future.add_done_callback(next_step)

        run(0, data)
        return done

    def handle(self, data: list[Any]) -> list[Any]:
        """``data`` in micro batches of ``micro_batch_size``, through the pipeline; the answers
        in ``data``'s order."""
        size = max(1, int(self.micro_batch_size))
        futures = [self._chain(i, data[start : start + size])
                   for i, start in enumerate(range(0, len(data), size))]  # fmt: skip
        return [item for future in futures for item in future.result()]

    def __call__(self, data: list[Any], context: Any) -> Any:
        """The handler's entry point: describe and explanations as the handler's own
        ``handle`` does them, every other call through the micro batches."""
        start = time.time()
        self.handler.context = context
        if self.handler._is_describe():
            output: Any = [self.handler.describe_handle()]
        elif self.handler._is_explain():
            output = self.handler.explain_handle(self.handler.preprocess(data), data)
        else:
            output = self.handle(data)
        context.metrics.add_time("HandlerTime", round((time.time() - start) * 1000, 2), None, "ms")
        return output
