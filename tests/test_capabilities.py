"""``types.Capabilities``: one frozen value per model instance, made by its contract's adapter."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from starlette.requests import Request

from podium.config import ModelConfig
from podium.model import NativeModel
from podium.model.native import inspect_class
from podium.runtime.process import RemoteInstance
from podium.runtime.process._messages import Ready
from podium.types import Capabilities, InputKind


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as pool:
        yield pool


def native(cls: type, executor: ThreadPoolExecutor) -> NativeModel:
    config = ModelConfig(name="m")
    spec = inspect_class(cls)
    return NativeModel(spec, config, model_dir=Path("."), secrets={}, executor=executor)


def test_frozen_and_slotted() -> None:
    caps = Capabilities()
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.streaming = True  # type: ignore[misc]
    assert not hasattr(caps, "__dict__")
    # the 12 flags, device, declared inputs, what a truss offers besides predict (5), and an
    # MLServer runtime's character-count BYTES shapes and custom handler routes
    assert len(dataclasses.fields(Capabilities)) == 23  # and whether it embeds


def test_the_defaults_are_an_async_predict_that_takes_the_inputs(
    executor: ThreadPoolExecutor,
) -> None:
    class Model:
        async def predict(self, inputs):  # type: ignore[no-untyped-def]
            return inputs

    assert native(Model, executor).capabilities == Capabilities()


def test_the_native_adapter_reads_them_from_the_class(executor: ThreadPoolExecutor) -> None:
    class Model:
        def preprocess(self, inputs):  # type: ignore[no-untyped-def]
            return inputs

        def predict(self, inputs):  # type: ignore[no-untyped-def]
            yield inputs

    caps = native(Model, executor).capabilities
    assert caps == Capabilities(streaming=True, has_preprocess=True)

    class Blocking:
        def predict(self, request: Request):  # type: ignore[no-untyped-def]
            return 1

    caps = native(Blocking, executor).capabilities
    assert caps == Capabilities(needs_inputs=False, needs_request=True, predict_in_thread=True)


def test_a_process_workers_instance_takes_its_workers_less_what_runs_there() -> None:
    remote = RemoteInstance()
    assert remote.capabilities == Capabilities() and not remote.pipelined
    worker = Capabilities(
        needs_request=True,
        input_kind=InputKind.RAW,
        streaming=True,
        has_preprocess=True,
        predict_on_infer=True,
        consumes_stream=True,
        predict_in_thread=True,
        device="gpu",  # what the worker's instance was given, as management describes it
    )
    remote.describe(Ready(worker))
    assert remote.pipelined  # preprocess runs in the worker process
    assert remote.capabilities == dataclasses.replace(
        worker, has_preprocess=False, predict_in_thread=False
    )
