"""A truss's model behind :class:`podium.types.ModelInstance`, run as Truss's server runs it.

- The constructor gets Truss's keywords by name (``config``: the truss's config with Truss's
  defaults, ``data_dir``, ``secrets``, ``lazy_data_resolver``, ``environment``); one with
  ``**kwargs`` gets them all.
- ``predict`` streams when it *returns* a generator (sync or async), whatever its kind
  (``Capabilities.returns_streams``): ``predict_stream`` holds the predict slot until the
  generator ends, as Truss holds its semaphore, and waits at most ``streaming_read_timeout``
  seconds for each item; a returned value is postprocessed and comes as one ``Returned``.
  ``predict`` (every other protocol's non-streaming call) gathers a returned generator into one
  string, as Truss's ``accept: application/json`` does.
- A pydantic-annotated input is validated with Truss's message (``Input Parsing Error: ...``).
- The truss's ``environment_variables`` are in front of ``os.environ`` for its code only
  (``_environ``); its folders are importable (``_imports``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import textwrap
from collections.abc import AsyncGenerator
from concurrent.futures import Executor
from typing import Any

from ...errors import InvalidInput, ModelError, ResponseTimeout
from ...types import Capabilities, InputKind, Returned, is_response
from .._adapter import Adapter
from .._calls import (
    call_method,
    defining,
    iterate_async,
    iterate_sync,
    model_error,
    run_sync,
    validated,
)
from .._forms import batched_predict, input_form
from .._source import ModelSource
from . import _environ
from ._config import TrussSettings
from ._secrets import TrussSecrets
from ._spec import TrussMethod, TrussSpec

__all__ = ["LazyDataResolver", "TrussModel"]

logger = logging.getLogger("podium.model")


class LazyDataResolver:
    """Truss's ``lazy_data_resolver``: on Baseten it fetches the weights a truss's ``weights``
    name while the model loads. Podium fetches nothing (the files must be in place), so there
    is never anything to wait for: ``block_until_download_complete`` returns at once, with
    Truss's answer for a truss without a weights manifest ("")."""

    def __init__(self, data_dir: Any) -> None:
        self._data_dir = data_dir

    def block_until_download_complete(
        self, log_stats: bool = True, issue_collect: bool = True
    ) -> str:
        return ""

    def raise_if_not_collected(self) -> None:
        return None


#: Seconds between two tries of a truss's ``load()`` (Truss's ``gap_seconds``).
LOAD_RETRY_GAP = 1.0


def _load_retries() -> int:
    """Truss's ``NUM_LOAD_RETRIES_TRUSS`` (default 1): how often a failed ``load()`` is tried
    again."""
    try:
        return max(0, int(os.environ.get("NUM_LOAD_RETRIES_TRUSS", "1")))
    except ValueError:
        return 1


def _is_stream(value: Any) -> bool:
    return inspect.isgenerator(value) or inspect.isasyncgen(value)


class TrussModel(Adapter):
    """One instance of a truss's model class."""

    def __init__(
        self,
        spec: TrussSpec,
        source: ModelSource,
        *,
        secrets: Any,
        executor: Executor,
    ) -> None:
        parts = source.truss_parts()
        settings: TrussSettings = parts.settings
        self.spec = spec
        self.name = source.config.name
        self._executor = executor
        self._env = settings.environment
        self._timeout = settings.streaming_read_timeout
        if self._env:
            _environ.install()
        directory = getattr(secrets, "directory", None)
        settings.data_dir.mkdir(parents=True, exist_ok=True)  # Truss makes it too
        available = {
            "config": source.config.raw,  # config.yaml with Truss's defaults filled in
            "data_dir": settings.data_dir,
            "secrets": TrussSecrets(settings.secrets, directory),
            "lazy_data_resolver": LazyDataResolver(settings.data_dir),
            "environment": None,  # Baseten's environments (production, ...): none here
        }
        kwargs = {k: available[k] for k in spec.init_kwargs}
        with defining(f"model '{self.name}': {spec.cls.__name__}.__init__"):
            with _environ.using(self._env):
                self.obj = spec.cls(**kwargs)
        predict = spec.predict
        #: what each request's input is validated into: a batched predict (with nothing before
        #: it) annotated ``list[Item]`` gets a list of Items, as a native model does (a truss
        #: has no OIP request form: only a pydantic element counts)
        self._schema = spec.input_schema
        if spec.preprocess is None and predict is not None and batched_predict(source.config):
            kind, element = input_form(predict.input_annotation, batched=True)
            self._schema = element if kind is InputKind.SCHEMA else None
        self.capabilities = Capabilities(
            needs_inputs=spec.needs_inputs,
            needs_request=spec.needs_request,
            input_kind=InputKind.SCHEMA if self._schema is not None else InputKind.DEFAULT,
            input_schema=self._schema,
            has_preprocess=spec.preprocess is not None,
            has_postprocess=spec.postprocess is not None,
            predict_in_thread=predict is not None
            and not (predict.is_async or predict.is_generator),
            returns_streams=predict is not None,
            endpoints=frozenset(spec.endpoints),
            websocket=spec.websocket is not None,
            health_check=spec.is_healthy is not None,
            io_schema=spec.schema,
            truss=True,
        )
        self._own_threads(self.capabilities.predict_in_thread)

    # -- calling the model's code ----------------------------------------------------------

    def _enter(self) -> None:
        """The truss's variables in front of the environment for this task from now on (each
        request runs in a task of its own, which serves only this model)."""
        if self._env:
            _environ.overlay.set(self._env)

    async def _call(
        self, method: TrussMethod, args: tuple[Any, ...], *, threads: bool = False
    ) -> Any:
        """Truss's ``_execute_user_model_fn``: a generator function is called (never awaited), a
        coroutine function awaited, anything else run in a thread; errors become ``ModelError``."""
        self._enter()
        fn = getattr(self.obj, method.name)
        try:
            if method.is_generator:
                return fn(*args)
            if method.is_async:
                return await fn(*args)
            if threads:
                return await self._threads.run(fn, *args)
            return await run_sync(self._executor, fn, *args)
        except Exception as exc:
            raise model_error(self.name, method.name, exc) from exc

    async def load(self) -> None:
        """The model's ``load()``: async on the loop, sync in the pool. As Truss's server, a
        ``load()`` that raises is tried again a second later, ``NUM_LOAD_RETRIES_TRUSS`` times
        (1 unless that variable says otherwise)."""
        load = getattr(self.obj, "load", None)
        if load is None:
            return
        retries = _load_retries()
        for attempt in range(retries + 1):
            try:
                await self._load_once(load)
                return
            except Exception as exc:
                if attempt == retries:
                    raise
                logger.warning(
                    "model '%s': load() raised %s: %s; trying again in %g s (%d of %d)",
                    self.name, type(exc).__name__, exc, LOAD_RETRY_GAP, attempt + 1, retries,
                )  # fmt: skip
                await asyncio.sleep(LOAD_RETRY_GAP)

    async def _load_once(self, load: Any) -> None:
        with _environ.using(self._env):  # the loading task may load other models after
            await call_method(load, executor=self._executor)

    def validate(self, value: Any) -> Any:
        """The input validated into the model's pydantic type, as Truss does; its failure is a
        400 with Truss's message (``Input Parsing Error: `loc`: msg.``)."""
        try:
            return validated(self._schema, value)
        except Exception as exc:
            errors = getattr(exc, "errors", None)
            if not callable(errors) or not callable(getattr(exc, "error_count", None)):
                raise
            raise InvalidInput(_parsing_error(exc)) from exc

    async def preprocess(self, inputs: Any, request: Any) -> Any:
        method = self.spec.preprocess
        if method is None:
            return inputs
        return await self._call(method, method.args(inputs, request))

    async def postprocess(self, outputs: Any, request: Any) -> Any:
        method = self.spec.postprocess
        if method is None:
            return outputs
        return await self._call(method, method.args(outputs, request))

    def _predict(self) -> TrussMethod:
        if self.spec.predict is None:
            raise ModelError(f"model '{self.name}' has no predict; it serves a WebSocket")
        return self.spec.predict

    def _no_postprocess(self, what: str) -> None:
        if self.spec.postprocess is not None:
            raise ModelError(
                f"model '{self.name}': If the predict function returns {what}, you cannot use "
                "postprocessing. Include all processing in the predict method."
            )

    async def _predicted(self, inputs: Any, request: Any) -> tuple[Any, bool]:
        """What ``predict`` returned, and whether it is a generator (which streams)."""
        method = self._predict()
        result = await self._call(method, method.args(inputs, request), threads=True)
        stream = _is_stream(result)
        if stream or is_response(result):
            self._no_postprocess("a generator (streaming)" if stream else "a response object")
        return result, stream

    async def predict(self, inputs: Any, request: Any) -> Any:
        """One call's whole value: a returned generator is gathered into one string."""
        result, stream = await self._predicted(inputs, request)
        return await self._gather(result) if stream else result

    async def _gather(self, stream: Any) -> str:
        chunks = []
        async for chunk in self._items(stream):
            chunks.append(chunk if isinstance(chunk, bytes | bytearray) else str(chunk).encode())
        return b"".join(chunks).decode()

    async def _items(self, stream: Any) -> AsyncGenerator[Any, None]:
        """A returned generator's items, each awaited at most ``streaming_read_timeout``."""
        if inspect.isasyncgen(stream):
            items = iterate_async(stream, self.name)
        else:
            items = iterate_sync(stream, self._executor, self.name)
        try:
            while True:
                try:
                    async with asyncio.timeout(self._timeout):
                        item = await anext(items)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise ResponseTimeout(
                        f"model '{self.name}': no item of its stream came within "
                        f"streaming_read_timeout ({self._timeout:g} s)"
                    ) from None
                yield item
        finally:
            await items.aclose()

    async def predict_stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        """A returned generator's items; or the returned value, postprocessed, as one
        :class:`Returned`."""
        result, stream = await self._predicted(inputs, request)
        if stream:
            async for item in self._items(result):
                yield item
            return
        if self.spec.postprocess is not None:  # (a response object has none: _predicted)
            result = await self.postprocess(result, request)
        yield Returned(result)

    # -- what a truss offers besides predict (types.ModelEndpoints) ------------------------

    async def is_healthy(self) -> bool:
        method = self.spec.is_healthy
        if method is None:
            return True
        return bool(await self._call(method, ()))

    async def endpoint(self, name: str, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        method = self.spec.endpoints.get(name)
        if method is None:
            raise ModelError(f"model '{self.name}' defines no method '{name}'")
        result = await self._call(method, method.args(inputs, request))
        if _is_stream(result):
            async for item in self._items(result):
                yield item
        else:
            yield Returned(result)

    async def websocket(self, websocket: Any) -> None:
        method = self.spec.websocket
        if method is None:
            raise ModelError(f"model '{self.name}' serves no WebSocket")
        self._enter()
        try:
            await self.obj.websocket(websocket)
        except Exception as exc:
            if type(exc).__name__ == "WebSocketDisconnect":
                raise
            raise model_error(self.name, "websocket", exc) from exc


def _location(loc: tuple[Any, ...]) -> str:
    """Truss's dotted form of a pydantic error's location: ``items[1].value``."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(("." if i > 0 else "") + str(part))
    return "".join(parts)


def _parsing_error(exc: Any) -> str:
    """Truss's message for a pydantic ``ValidationError`` (``format_pydantic_validation_error``)."""
    lines = ["Input Parsing Error:" if exc.error_count() == 1 else "Input Parsing Errors:"]
    try:
        for error in exc.errors(include_url=False, include_input=False):
            message = error.get("msg") or str({k: v for k, v in error.items() if k != "loc"})
            lines.append(textwrap.indent(f"`{_location(error['loc'])}`: {message}.", "  "))
    except Exception:
        return f"Input Parsing Error, {exc}"
    return "\n".join(lines)
