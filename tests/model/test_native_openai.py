"""A native model's face to OpenAI's API (podium.model._openai): what it offers once loaded,
the rules checked at load time, and ``embed`` run in the predict slot, alone or in a dynamic
batch beside ordinary predict calls."""

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from test_native_context import make as native_model

from podium.errors import BadModelOutput, DefinitionError
from podium.model.native import NativeModel, inspect_class
from podium.types import EmbedInputs, OpenAIFace


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2, thread_name_prefix="test-openai") as pool:
        yield pool


def make(cls: type, executor: ThreadPoolExecutor, **config: Any) -> NativeModel:
    return native_model(cls, executor, sequence_batching=False, **config)


class Generates:
    def load(self) -> None:
        self.tokenizer = object()
        self.context_length = 64

    def step(self, batch: list) -> None:
        pass


class Embeds:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, inputs: list[str]) -> Any:
        self.calls.append(len(inputs))
        return [[float(len(t)), 1.0] for t in inputs]

    def predict(self, batch: Any) -> Any:
        return [{"echo": item} for item in batch] if isinstance(batch, list) else batch


def test_a_generating_model_offers_its_tokenizer_after_load(executor: ThreadPoolExecutor) -> None:
    model = make(Generates, executor, continuous_batching=True)
    assert model.openai is None  # not loaded yet
    asyncio.run(model.load())
    assert isinstance(model.openai, OpenAIFace)
    assert model.openai.generates and not model.openai.embeds
    assert model.openai.context_length == 64


def test_a_tokenizer_without_context_length_is_refused_at_load(
    executor: ThreadPoolExecutor,
) -> None:
    class NoLength(Generates):
        def load(self) -> None:
            self.tokenizer = object()

    model = make(NoLength, executor, continuous_batching=True)
    with pytest.raises(DefinitionError, match="self.context_length to a positive int"):
        asyncio.run(model.load())


def test_a_tokenizer_on_a_model_without_continuous_batching_does_not_generate(
    executor: ThreadPoolExecutor,
) -> None:
    class Plain:
        def load(self) -> None:
            self.tokenizer = object()

        def predict(self, x: Any) -> Any:
            return x

    model = make(Plain, executor)
    asyncio.run(model.load())
    assert model.openai is None


def test_embed_rules_are_checked_with_the_class() -> None:
    class TwoArgs:
        def embed(self, texts: list[str], extra: int) -> Any: ...

    class Yields:
        def embed(self, texts: list[str]) -> Any:
            yield texts

    for cls, words in ((TwoArgs, "exactly one parameter"), (Yields, "not yield")):
        with pytest.raises(DefinitionError, match=words):
            inspect_class(cls)


def test_a_model_that_only_embeds_needs_no_predict(executor: ThreadPoolExecutor) -> None:
    class Only:
        def embed(self, texts: list[str]) -> Any:
            return np.ones((len(texts), 3))

    model = make(Only, executor)
    assert model.capabilities.embeds  # known before load: worker processes report it
    asyncio.run(model.load())
    assert model.openai is not None and model.openai.embeds
    got = asyncio.run(model.predict(EmbedInputs(["a", "b"]), None))
    assert got.shape == (2, 3)


def test_embed_in_a_batch_beside_predict_calls(executor: ThreadPoolExecutor) -> None:
    model = make(Embeds, executor, batch_size=4)
    asyncio.run(model.load())
    batch = [EmbedInputs(["ab", "c"]), {"x": 1}, EmbedInputs(["defg"])]
    assert asyncio.run(model.preprocess(batch[0], None)) is batch[0]  # not preprocessed
    out = asyncio.run(model.predict(batch, None))
    assert np.array_equal(out[0], [[2.0, 1.0], [1.0, 1.0]])
    assert out[1] == {"echo": {"x": 1}}
    assert np.array_equal(out[2], [[4.0, 1.0]])
    assert model.obj.calls == [3]  # one embed over the texts of both calls


def test_embed_that_answers_the_wrong_shape_is_the_models_fault(
    executor: ThreadPoolExecutor,
) -> None:
    class Wrong:
        def embed(self, texts: list[str]) -> Any:
            return [[1.0]]

    model = make(Wrong, executor)
    with pytest.raises(BadModelOutput, match="one vector per text"):
        asyncio.run(model.predict(EmbedInputs(["a", "b"]), None))


def test_own_chat_and_complete_run_in_the_predict_slot(executor: ThreadPoolExecutor) -> None:
    from podium.types import MethodInputs

    class Own:
        async def chat(self, request: Any) -> Any:
            for word in ("a", "b"):
                yield word

        def complete(self, request: Any) -> Any:
            return 42  # not text

    model = make(Own, executor)
    asyncio.run(model.load())
    assert model.openai is not None and model.openai.methods == {"chat", "complete"}

    async def chat() -> list[str]:
        items = await model.predict(MethodInputs("chat", None), None)
        return [item async for item in items]

    assert asyncio.run(chat()) == ["a", "b"]
    with pytest.raises(BadModelOutput, match="complete must return the text"):
        asyncio.run(model.predict(MethodInputs("complete", None), None))

    class TwoArgs:
        def chat(self, request: Any, extra: Any) -> str: ...

    with pytest.raises(DefinitionError, match="chat must take exactly one parameter"):
        inspect_class(TwoArgs)
