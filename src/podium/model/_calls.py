"""Calling user code: sync code in a thread pool, async code on the loop, errors translated."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from typing import Any

from ..devices import device, empty_cache, is_device_lost, is_out_of_memory
from ..errors import (
    BadModelOutput,
    DefinitionError,
    DeviceLost,
    DeviceOutOfMemory,
    ModelError,
    ModelStatus,
    PodiumError,
    ValidationFailed,
)
from ..types import END

logger = logging.getLogger("podium.model")


def one_parameter(cls: type, name: str) -> int | None:
    """How many parameters the method ``name`` of ``cls`` takes besides ``self``, where that is
    not exactly one (a method called with one argument: ``step(batch)``, ``embed(texts)``);
    None where it takes exactly one, or its signature cannot be read."""
    try:
        params = list(inspect.signature(getattr(cls, name)).parameters.values())
    except (TypeError, ValueError):
        return None
    if params and inspect.isfunction(inspect.getattr_static(cls, name)):
        params = params[1:]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [
        p
        for p in params
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return None if positional and len(required) <= 1 else len(params)


@contextmanager
def defining(what: str, hint: Callable[[Exception], str] = lambda exc: "") -> Iterator[None]:
    """User code run while a model is defined (its file imported, its class made), in every
    contract: what it raises becomes a ``DefinitionError`` "``what`` raised T: message", then
    ``hint(exc)``; a ``DefinitionError`` passes as it is."""
    try:
        yield
    except DefinitionError:
        raise
    except Exception as exc:
        raise DefinitionError(f"{what} raised {type(exc).__name__}: {exc}{hint(exc)}") from exc


def model_error(model: str, method: str, exc: BaseException) -> PodiumError:
    """Translate an exception raised by user code; Podium's own errors pass through. An HTTP
    error the code raised on purpose (``fastapi`` / ``starlette`` ``HTTPException``, as Truss
    models raise it) keeps its status (400-599) and detail: :class:`ModelStatus`. A device out
    of memory is :class:`DeviceOutOfMemory` (the framework's cache is emptied first); a lost
    device :class:`DeviceLost` (its worker is restarted)."""
    if isinstance(exc, PodiumError):
        return exc
    if is_out_of_memory(exc):
        empty_cache()
        where = device()
        logger.warning("model '%s' %s ran out of memory on %s", model, method, where)
        return DeviceOutOfMemory(
            f"model '{model}' {method} ran out of memory on {where} "
            f"({type(exc).__name__}: {exc}); a smaller request may fit"
        )
    if is_device_lost(exc):
        where = device()
        logger.error("model '%s' %s lost its device %s", model, method, where, exc_info=exc)
        return DeviceLost(
            f"model '{model}' {method} lost its device {where} ({type(exc).__name__}: {exc}); "
            "the worker is restarted"
        )
    status = _http_exception_status(exc)
    if status is not None:
        logger.warning("model '%s' %s raised HTTP %d", model, method, status)
        detail = getattr(exc, "detail", None)
        return ModelStatus(str(detail if detail is not None else ""), status, detail)
    logger.error("model '%s' %s raised", model, method, exc_info=exc)
    return ModelError(f"model '{model}' {method} raised {type(exc).__name__}: {exc}")


def _http_exception_status(exc: BaseException) -> int | None:
    """The status of a ``starlette.exceptions.HTTPException`` (fastapi's derives from it),
    recognised by class so that this layer imports no web library; None for anything else."""
    if not any(
        c.__module__ == "starlette.exceptions" and c.__qualname__ == "HTTPException"
        for c in type(exc).__mro__
    ):
        return None
    status = getattr(exc, "status_code", None)
    if type(status) is int and 400 <= status <= 599:
        return status
    return None


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def run_sync(executor: Executor, fn: Callable[..., Any], *args: Any) -> Any:
    """Run blocking ``fn(*args)`` in ``executor``; never on the event loop.

    If the caller is cancelled, a call still queued in the pool never runs; one already running
    cannot be stopped, so the cancellation waits for it to return. The caller's resources (a
    predict slot) are then held exactly as long as the user's code really runs.

    ``fn`` runs in a copy of the caller's context (as ``asyncio.to_thread`` runs it): the request
    it serves (its id in the model's log lines, ``podium.request_id()``) and its span go along.
    """
    future = executor.submit(contextvars.copy_context().run, functools.partial(fn, *args))
    waiter = asyncio.wrap_future(future)
    waiter.add_done_callback(_retrieve)  # after a cancel nobody reads its error: no log noise
    try:
        return await asyncio.shield(waiter)
    except asyncio.CancelledError:
        if not future.cancel():  # already running: it finishes whatever we do
            await asyncio.wait([waiter])
        raise


async def call_method(
    fn: Callable[..., Any],
    *args: Any,
    executor: Executor,
    threads: Callable[..., Awaitable[Any]] | None = None,
) -> Any:
    """A model's method as its contract runs it: a coroutine function awaited on the loop;
    a sync one on ``threads`` (the instance's own ``CallThreads.run``) or else in ``executor``
    (:func:`run_sync`), in the caller's context either way, and the awaitable it may return
    awaited."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    result = await (threads(fn, *args) if threads is not None else run_sync(executor, fn, *args))
    if inspect.isawaitable(result):
        result = await result
    return result


async def iterate_sync(
    gen: Generator[Any, Any, Any], executor: Executor, model: str
) -> AsyncGenerator[Any, None]:
    """Drive a sync generator one item at a time in ``executor``.

    When the consumer stops early (client left), the generator is closed (``GeneratorExit`` inside
    it) in the pool, after the step it may be running finishes; the caller is not held up by it.
    """
    lock = threading.Lock()

    def step() -> Any:
        with lock:
            try:
                return next(gen)
            except StopIteration:
                return END

    def close() -> None:
        with lock:
            try:
                gen.close()
            except Exception:  # logged: nobody is waiting for it
                logger.exception("model '%s' generator raised while closing", model)

    loop = asyncio.get_running_loop()
    run = contextvars.copy_context().run  # the request's context, in the pool's threads too
    finished = False
    try:
        while True:
            try:
                item = await loop.run_in_executor(executor, run, step)
            except Exception as exc:
                finished = True
                raise model_error(model, "predict", exc) from exc
            if item is END:
                finished = True
                return
            yield item
    finally:
        if not finished:
            executor.submit(close)


async def iterate_async(agen: Any, model: str) -> AsyncGenerator[Any, None]:
    """Iterate an async generator, translating its errors and always closing it."""
    try:
        while True:
            try:
                item = await agen.__anext__()
            except StopAsyncIteration:
                return
            except (asyncio.CancelledError, GeneratorExit):
                raise
            except Exception as exc:
                raise model_error(model, "predict", exc) from exc
            yield item
    finally:
        await agen.aclose()


def check_results(outputs: Any, size: int, who: str, what: str = "batch") -> None:
    """What a model returned for a batch (or a continuous ``step``, ``what``) of ``size``
    requests is a list (or tuple) with one result per request; else ``BadModelOutput`` naming
    ``who`` (``model 'm' predict``)."""
    if not isinstance(outputs, list | tuple):
        raise BadModelOutput(
            f"{who} must return a list for a {what} of {size} requests, "
            f"got {type(outputs).__name__}"
        )
    if len(outputs) != size:
        raise BadModelOutput(
            f"{who} returned {len(outputs)} results for a {what} of {size} requests"
        )


def validated(schema: Any, value: Any) -> Any:
    """``value`` validated into the pydantic model ``schema``: from its JSON when it is text or
    bytes, else as it is."""
    if isinstance(value, bytes | str):
        return schema.model_validate_json(value)
    return schema.model_validate(value)


def validation_failed(exc: BaseException, what: str) -> ValidationFailed | None:
    """A pydantic ``ValidationError`` (whichever pydantic raised it) as ``ValidationFailed``:
    ``what`` then every location and message; None for any other exception."""
    errors = getattr(exc, "errors", None)
    if errors is None or not callable(errors):
        return None
    details = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in errors()
    ]
    where = "; ".join(
        f"{'.'.join(str(p) for p in d['loc']) or '(body)'}: {d['msg']}" for d in details
    )
    return ValidationFailed(f"{what}: {where}", details)
