"""An MLServer runtime behind :class:`podium.types.ModelInstance`.

The data plane hands over the payload as it came (``InputKind.RAW``): for OIP the request as a
JSON-like dict, for the Truss and TorchServe routes the parsed JSON or the body's bytes, which must
then be an OIP request. ``preprocess`` (outside ``predict_concurrency``, once per request even with
batching) validates it into the runtime's own ``InferenceRequest`` (MLServer's class when MLServer
is installed, else ``podium.compat.mlserver``'s), gives it an ``id`` if it has none and puts the
call's headers in ``parameters.headers``, as MLServer's data plane does. ``predict`` awaits the
runtime's ``predict`` (a batch: one merged request, see ``_batch``) and converts its
``InferenceResponse`` into Podium's; the data plane then fills in the model's name and version.
"""

from __future__ import annotations

import functools
import inspect
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from concurrent.futures import Executor
from typing import Any

import msgspec

from ...codecs import JSON_ERRORS, json_problem, request_builtins
from ...errors import (
    BadModelOutput,
    InvalidInput,
    ModelError,
    NotFound,
    PayloadTooLarge,
    PodiumError,
    Unavailable,
)
from ...metrics import current_store, recording_to
from ...types import (
    Capabilities,
    InferenceResponse,
    InputKind,
    ResponseOutput,
    Returned,
    request_id,
)
from .._adapter import Adapter
from .._calls import call_method, model_error, validation_failed
from . import _batch
from ._handlers import call_arguments, handler_routes, rendered

__all__ = ["MLServerModel", "runtime_error"]

logger = logging.getLogger("podium.model")

_DECODED = "_decoded_payload"  # where MLServer's codecs remember a decoded value


def _is_mlserver_error(exc: BaseException) -> bool:
    return isinstance(getattr(exc, "status_code", None), int) and any(
        cls.__name__ == "MLServerError" for cls in type(exc).__mro__
    )


def runtime_error(model: str, method: str, exc: BaseException) -> PodiumError:
    """Translate what a runtime raised. An ``MLServerError`` keeps the meaning of its
    ``status_code``: 404 → ``NotFound``, 413 → ``PayloadTooLarge``, 429 and 503 →
    ``Unavailable``, other 4xx (400, 422...) → ``InvalidInput``, anything else → ``ModelError``."""
    if isinstance(exc, PodiumError) or not _is_mlserver_error(exc):
        return model_error(model, method, exc)
    status: int = exc.status_code  # type: ignore[attr-defined]
    message = f"model '{model}' {method} raised {type(exc).__name__}: {exc}"
    if status == 404:
        return NotFound(message)
    if status == 413:
        return PayloadTooLarge(message)
    if status in (429, 503):
        return Unavailable(message)
    if 400 <= status < 500:
        return InvalidInput(message)
    logger.error("model '%s' %s raised", model, method, exc_info=exc)
    return ModelError(message)


def _text(value: Any) -> Any:
    """BYTES elements for JSON: UTF-8 bytes as text (what MLServer's REST answer does); other
    bytes stay bytes, which gRPC carries as they are."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    if isinstance(value, list):
        return [_text(v) for v in value]
    return value


def _dump(obj: Any) -> dict[str, Any] | None:
    """A parameters object as a plain dict, without what codecs remembered on it."""
    if obj is None:
        return None
    data = obj.model_dump() if hasattr(obj, "model_dump") else dict(obj)
    data = {k: v for k, v in data.items() if v is not None and k != _DECODED}
    return data or None


class MLServerModel(Adapter):
    """One instance of an MLServer runtime (a class written to ``mlserver.MLModel``'s contract)."""

    def __init__(
        self,
        runtime: Any,
        *,
        name: str,
        types: Any,
        streaming: bool,
        batched: bool,
        executor: Executor,
    ) -> None:
        self.runtime = runtime
        self.name = name
        self._metrics = current_store()  # built under its version's metric store
        self._types = types
        self._executor = executor
        self._batched = batched
        self.capabilities = Capabilities(
            input_kind=InputKind.RAW,
            needs_request=True,  # for parameters.headers, as MLServer gives them to the runtime
            request_headers_only=True,  # and for nothing else (a response cache keys by them)
            has_preprocess=True,  # validates the payload into the runtime's InferenceRequest
            streaming=streaming,
            # gRPC ModelStreamInfer feeds predict_stream many requests
            consumes_stream=streaming,
            # MLServer answers infer with predict even when the runtime also streams: the data
            # plane calls predict on non-streaming routes instead of gathering predict_stream.
            predict_on_infer=True,
            predict_in_thread=not inspect.iscoroutinefunction(getattr(runtime, "predict", None)),
            # The inputs of model-settings.json are content-type hints, not a signature.
            checks_declared_inputs=False,
            # "shape": [len(text)] for one text, as MLServer's examples send it
            text_length_shapes=True,
            # @custom_handler methods, served on the HTTP inference listener
            handler_routes=handler_routes(runtime),
        )
        # a sync predict runs on threads of the instance's own, as a native one does
        # (model/_threads.py); a thread worker times its calls there
        self._own_threads(self.capabilities.predict_in_thread)

    # -- lifecycle ---------------------------------------------------------------------------

    async def _call(self, method: str, *args: Any) -> Any:
        fn: Callable[..., Any] = getattr(self.runtime, method)
        # mlserver.register / mlserver.log inside record to this version's metrics
        with recording_to(self._metrics):
            if inspect.iscoroutinefunction(fn):  # (the hot path: no call_method frame)
                return await fn(*args)
            # a sync method: not on the loop (in this context, for the metrics)
            threads = self._threads.run if method == "predict" else None
            return await call_method(fn, *args, executor=self._executor, threads=threads)

    async def load(self) -> None:
        """Run the runtime's ``load()``; returning ``False`` means it is not ready (an error)."""
        try:
            ready = await self._call("load")
        except Exception as exc:
            raise runtime_error(self.name, "load", exc) from exc
        if ready is False:
            raise ModelError(f"model '{self.name}' load() returned False: the runtime is not ready")
        self._set_ready(True)

    async def close(self) -> None:
        """Run the runtime's ``unload()`` (when the model is unloaded; errors are logged), and
        stop its predict threads (each once the calls it holds have returned)."""
        self._set_ready(False)
        await self._threads.close()
        if getattr(self.runtime, "unload", None) is None:
            return
        try:
            await self._call("unload")
        except Exception:
            logger.exception("model '%s' unload() raised", self.name)

    unload = close

    def _set_ready(self, ready: bool) -> None:
        try:
            self.runtime.ready = ready
        except AttributeError:  # a read-only property: the runtime keeps its own state
            pass

    # -- requests ------------------------------------------------------------------------------

    def _request(self, raw: Any, request: Any) -> Any:
        """``raw`` as the runtime's ``InferenceRequest``; 400 naming the model if it is not one."""
        cls = self._types.InferenceRequest
        if isinstance(raw, cls):
            return raw
        if isinstance(raw, msgspec.Struct):  # Podium's own InferenceRequest
            raw = request_builtins(raw)
        elif isinstance(raw, bytes | bytearray | str):
            try:
                raw = msgspec.json.decode(raw)
            except JSON_ERRORS as exc:
                raise InvalidInput(
                    f"model '{self.name}' is an MLServer runtime and takes an Open Inference "
                    f"Protocol inference request as JSON; the body is not JSON: "
                    f"{json_problem(exc, raw)}"
                ) from exc
        if not isinstance(raw, dict):
            raise InvalidInput(
                f"model '{self.name}' is an MLServer runtime and takes an Open Inference Protocol "
                f'inference request ({{"inputs": [...]}}), not a JSON {type(raw).__name__}'
            )
        try:
            payload = cls.model_validate(raw)
        except Exception as exc:  # pydantic's ValidationError, whichever pydantic it is
            failed = validation_failed(
                exc, f"model '{self.name}' takes an Open Inference Protocol inference request"
            )
            if failed is None:
                raise
            raise failed from exc
        if payload.id is None:
            # MLServer's data plane gives every request an id: Podium's is the request's own
            # (the access log's, podium.request_id()), else a fresh uuid
            payload.id = request_id() or str(uuid.uuid4())
        headers = getattr(request, "headers", None)
        if headers is not None:
            if payload.parameters is None:
                payload.parameters = self._types.Parameters()
            payload.parameters.headers = dict(headers.items())
        return payload

    async def preprocess(self, inputs: Any, request: Any) -> Any:
        return self._request(inputs, request)

    # -- responses -----------------------------------------------------------------------------

    def _response(self, result: Any, request_id: str | None) -> InferenceResponse:
        """The runtime's ``InferenceResponse`` as Podium's; its ``id`` is the request's.
        ``parameters.headers`` stays: the data plane turns it into response headers, as
        MLServer does."""
        if not hasattr(result, "outputs"):
            raise BadModelOutput(
                f"model '{self.name}' predict must return an InferenceResponse, "
                f"got {type(result).__name__}"
            )
        outputs = []
        for out in result.outputs or []:
            datatype = str(getattr(out.datatype, "value", out.datatype))
            data = getattr(out.data, "root", out.data)
            if datatype == "BYTES":
                data = _text(data)
            outputs.append(
                ResponseOutput(
                    name=out.name,
                    shape=[int(d) for d in out.shape],
                    datatype=datatype,
                    parameters=_dump(out.parameters),
                    data=data,
                )
            )
        parameters = _dump(result.parameters)
        return InferenceResponse(
            outputs=outputs,
            model_name=getattr(result, "model_name", None) or self.name,
            model_version=getattr(result, "model_version", None),
            id=request_id,
            parameters=parameters or None,
        )

    # -- inference -----------------------------------------------------------------------------

    async def _predict(self, payload: Any) -> Any:
        try:
            return await self._call("predict", payload)
        except Exception as exc:
            raise runtime_error(self.name, "predict", exc) from exc

    async def endpoint(self, name: str, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        """Call the custom handler ``name`` (one of ``capabilities.handler_routes``) for the
        HTTP request ``request``, whose path gave ``inputs`` (its path parameters): one
        :class:`Returned`. A handler's ``MLServerError`` keeps its status, as with predict."""
        if not any(route.name == name for route in self.capabilities.handler_routes):
            raise ModelError(f"model '{self.name}' has no custom handler '{name}'")
        method = getattr(self.runtime, name)
        arguments = await call_arguments(method, request, inputs or {})
        try:
            with recording_to(self._metrics):  # a sync handler: in the pool, as FastAPI runs it
                result = await call_method(
                    functools.partial(method, **arguments), executor=self._executor
                )
        except Exception as exc:
            raise runtime_error(self.name, name, exc) from exc
        yield Returned(rendered(result))

    async def predict(self, inputs: Any, request: Any) -> Any:
        """One request's response; with batching, a list of responses for a list of requests."""
        if not self._batched:
            payload = self._request(inputs, request)
            return self._response(await self._predict(payload), payload.id)
        payloads = [self._request(raw, req) for raw, req in zip(inputs, request, strict=True)]
        dumped = [p.model_dump() for p in payloads]
        merged = self._types.InferenceRequest.model_validate(_batch.merge(dumped))
        result = self._response(await self._predict(merged), None)
        rows = [_batch.rows_of(d) for d in dumped]
        return _batch.split(self.name, result, rows, [p.id for p in payloads])

    def predict_stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        """The runtime's ``predict_stream`` fed this one request; one response per item."""
        payload = self._request(inputs, request)

        async def one() -> AsyncGenerator[Any, None]:
            yield payload

        return self._stream(one(), payload.id)

    async def predict_input_stream(
        self, inputs: AsyncIterator[Any], request: Any
    ) -> AsyncGenerator[Any, None]:
        """Many requests in, many responses out (gRPC ``ModelStreamInfer``): the runtime's
        ``predict_stream`` reads the requests as it decides. As in MLServer, every request after
        the first takes the first one's ``id``, and so does every response."""
        iterator = aiter(inputs)
        try:
            first = self._request(await anext(iterator), request)
        except StopAsyncIteration:
            return

        async def payloads() -> AsyncGenerator[Any, None]:
            yield first
            async for raw in iterator:
                payload = self._request(raw, request)
                payload.id = first.id
                yield payload

        async for item in self._stream(payloads(), first.id):
            yield item

    async def _stream(
        self, payloads: AsyncGenerator[Any, None], request_id: str | None
    ) -> AsyncGenerator[Any, None]:
        metrics = self._metrics  # mlserver.log inside records to this version's metrics
        try:
            with recording_to(metrics):
                items = self.runtime.predict_stream(payloads)
                if inspect.isawaitable(items):  # a coroutine returning an async iterator
                    items = await items
        except Exception as exc:
            await payloads.aclose()
            raise runtime_error(self.name, "predict_stream", exc) from exc
        try:
            while True:
                try:
                    with recording_to(metrics):
                        item = await anext(items)
                except StopAsyncIteration:
                    return
                except Exception as exc:
                    raise runtime_error(self.name, "predict_stream", exc) from exc
                yield self._response(item, request_id)
        finally:
            close = getattr(items, "aclose", None)
            if close is not None:
                await close()
            await payloads.aclose()
