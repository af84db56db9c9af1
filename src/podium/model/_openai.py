"""A native model's face to OpenAI's API (``docs/openai.md``): what it offers, read after its
``load()``, and its ``embed`` run in the ``predict`` slot.

- A model with ``continuous_batching: true`` that sets ``self.tokenizer`` in ``load()``
  *generates*: ``/v1/chat/completions`` and ``/v1/completions`` tokenize with that tokenizer and
  run each choice as one generation whose inputs are a ``podium.openai.Sampling``. It must set
  ``self.context_length`` too (a positive int): prompts longer than it are refused.
- A model that defines ``chat(self, request)`` and/or ``complete(self, request)`` (sync or
  async, or a generator of either kind) answers ``/v1/chat/completions`` / ``/v1/completions``
  itself: it gets the validated request (``podium.openai.ChatCompletionRequest`` /
  ``CompletionRequest``) and returns the text, or yields it piece by piece (a stream). It runs
  in the predict slot (``predict_concurrency``) until it returns; a generator's pieces are read
  after. Thread workers only: a generator cannot cross to a worker process.
- A model that defines ``embed(self, inputs: list[str])`` (sync or async), returning one vector
  per text (an array-like ``[n, dim]``), *embeds*: ``/v1/embeddings`` calls reach it through the
  model's scheduler (:class:`~podium.types.EmbedInputs`), so dynamic batching
  (``batch_size`` / ``max_batch_delay``) runs one ``embed`` over the texts of several calls.

Both are checked when the model loads, each problem naming the attribute and the rule.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import BadModelOutput, DefinitionError
from ..types import EmbedInputs, MethodInputs, OpenAIFace
from ._calls import call_method, iterate_async, iterate_sync, model_error, one_parameter

__all__ = ["METHODS", "check_embed", "openai_call", "openai_face", "run_openai"]

#: The OpenAI methods a model may define to answer chat / completions itself.
METHODS = ("chat", "complete")


#: The one parameter each method OpenAI's API calls takes.
_TAKES = {"chat": "the request", "complete": "the request", "embed": "the texts (a list of str)"}


def check_embed(cls: type, problems: list[str]) -> None:
    """``chat`` and ``complete`` are methods taking one parameter (the request), ``embed`` a
    plain or async method taking one (the texts)."""
    for method, takes in _TAKES.items():
        fn = getattr(cls, method, None)
        if fn is None:
            continue
        where = f"{cls.__name__}.{method}"
        if not callable(fn):
            problems.append(f"{where} must be a method")
            continue
        if method == "embed" and (
            inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)
        ):
            problems.append(f"{where} must return the vectors, not yield them")
        count = one_parameter(cls, method)
        if count is not None:
            problems.append(f"{where} must take exactly one parameter, {takes}; it takes {count}")


def openai_face(obj: Any, model: str, continuous: bool) -> OpenAIFace | None:
    """What the loaded ``obj`` offers OpenAI's API, or None (nothing); ``DefinitionError`` when
    a generating model's ``context_length`` is missing or not a positive int."""
    tokenizer = getattr(obj, "tokenizer", None)
    embeds = callable(getattr(obj, "embed", None))
    methods = frozenset(m for m in METHODS if callable(getattr(obj, m, None)))
    generates = continuous and tokenizer is not None
    length = getattr(obj, "context_length", None)
    if generates and (type(length) is not int or length < 1):
        raise DefinitionError(
            f"model '{model}' sets self.tokenizer and continuous_batching: true, so it serves "
            "OpenAI's completions; its load() must also set self.context_length to a positive "
            f"int (the most prompt + completion tokens), not {length!r}"
        )
    if not generates and not embeds and not methods:
        return None
    return OpenAIFace(tokenizer, length if generates else None, generates, embeds, methods)


async def run_openai(
    obj: Any,
    inputs: Any,
    run: Callable[..., Awaitable[Any]],
    executor: Any,
    predict: Callable[[Any, Any], Awaitable[Any]],
    model: str,
    requests: Any = None,
) -> Any:
    """An OpenAI call of the model's own (:func:`openai_call`) in the predict slot: ``embed``
    (alone, or over a dynamic batch), ``chat`` or ``complete``; what the model raises becomes a
    ``ModelError`` naming the method. ``run`` runs a sync method (in the instance's threads).
    ``requests``: the raw requests of a dynamic batch, in its order (its other calls' go to
    ``predict`` with them)."""
    method = inputs.method if type(inputs) is MethodInputs else "embed"
    call = functools.partial(call_method, executor=executor, threads=run)  # any method
    try:
        if method != "embed":
            return await _run_method(obj, inputs, call, executor, model)
        return await _run_embed(obj.embed, call, predict, inputs, model, requests)
    except Exception as exc:
        raise model_error(model, method, exc) from exc


def openai_call(inputs: Any) -> bool:
    """Whether ``inputs`` (one request's, or a dynamic batch's list) are an OpenAI call of the
    model's own (embed, chat, complete)."""
    if type(inputs) is MethodInputs or type(inputs) is EmbedInputs:
        return True
    return type(inputs) is list and any(type(item) is EmbedInputs for item in inputs)


async def _run_method(
    obj: Any, inputs: MethodInputs, run: Callable[..., Awaitable[Any]], executor: Any, model: str
) -> Any:
    """The model's ``chat`` / ``complete`` on the request: its text, or an async iterator of
    its pieces (a sync generator's read in the thread pool)."""
    fn = getattr(obj, inputs.method)
    if inspect.isasyncgenfunction(fn):
        return iterate_async(fn(inputs.request), model)
    value = await run(fn, inputs.request)
    if inspect.isgenerator(value):
        return iterate_sync(value, executor, model)
    if not isinstance(value, str):
        raise BadModelOutput(
            f"model '{model}': {inputs.method} must return the text (a str) or yield it, "
            f"not {type(value).__name__}"
        )
    return value


async def _run_embed(
    embed: Callable[[list[str]], Any],
    run: Callable[..., Awaitable[Any]],
    predict: Callable[[Any, Any], Awaitable[Any]],
    inputs: Any,
    model: str,
    requests: Any = None,
) -> Any:
    """``inputs`` through the model's ``embed`` (called by ``run``): one call's vectors, or a
    batch's list of them. A batch that mixes embeddings calls with others sends the others to
    ``predict`` (as one batch, in their order, with their own raw requests from ``requests``,
    so that a predict that takes the request gets the list of theirs)."""
    if type(inputs) is EmbedInputs:
        return await _vectors(embed, run, inputs.texts, model)
    calls = [i for i, item in enumerate(inputs) if type(item) is EmbedInputs]
    texts = [text for i in calls for text in inputs[i].texts]
    vectors = await _vectors(embed, run, texts, model)
    results: list[Any] = [None] * len(inputs)
    start = 0
    for i in calls:
        n = len(inputs[i].texts)
        results[i] = vectors[start : start + n]
        start += n
    others = [i for i in range(len(inputs)) if type(inputs[i]) is not EmbedInputs]
    if others:
        if isinstance(requests, list):
            requests = [requests[i] for i in others]
        answered = await predict([inputs[i] for i in others], requests)
        for i, value in zip(others, answered, strict=True):
            results[i] = value
    return results


async def _vectors(
    embed: Callable[[list[str]], Any],
    run: Callable[..., Awaitable[Any]],
    texts: list[str],
    model: str,
) -> Any:
    import numpy as np

    value = await run(embed, texts)
    try:
        array = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise BadModelOutput(
            f"model '{model}': embed returned {type(value).__name__}, not vectors"
        ) from exc
    if array.ndim != 2 or array.shape[0] != len(texts):
        raise BadModelOutput(
            f"model '{model}': embed must return one vector per text ([{len(texts)}, dim]); "
            f"it returned the shape {list(array.shape)}"
        )
    return array
