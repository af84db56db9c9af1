"""The HTTP application: the three front ends over one data plane, and their route table.

Pure ASGI (no framework on the hot path): :data:`INFERENCE_ROUTES` (at the end) is every route
the inference listener serves, compiled (``_routing.Router``) into a trie that finds a route
by one walk over the path's segments; the body is decoded with msgspec, and the data plane does the
rest. Each handler turns its wire format into a :class:`podium.types.Call` and the data plane's
answer back into its wire format.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ...config import SETTINGS
from ...dataplane import DataPlane, ModelVersion, StatisticsResponse
from ...errors import InvalidInput, MethodNotAllowed, PodiumError
from ...types import (
    Answer,
    AnswerStream,
    Call,
    InferenceRequest,
    Reply,
    WireProtocol,
    is_response,
)
from .. import _repository, _sequences
from .._access import adopt
from .._asgi import Message, Receive, Scope, Send, serve_other_scope
from .._headers import http_headers
from .._ts_errors import NoRoute
from ..openai import _routes as _openai
from . import _custom, _memory, _oip, _responses, _truss, _ts_explain
from ._docs import PAGE
from ._exchange import Exchange
from ._openapi import description
from ._responses import JSON, chunk_of, send_body, send_error, send_json
from ._routing import Api, Route, RouteTable

__all__ = ["INFERENCE_ROUTES", "HttpApp"]

logger = logging.getLogger("podium.http")

# The protocols the handlers name on every request, read off their enum once: on Python 3.11 a
# member read off its class (``WireProtocol.OIP_REST``) goes through ``EnumType.__getattr__``,
# as dear as a function call.
_OIP_REST = WireProtocol.OIP_REST
_TORCHSERVE_REST = WireProtocol.TORCHSERVE_REST


class HttpApp:
    """The ASGI application serving OIP REST, Truss-style and TorchServe inference routes."""

    def __init__(
        self,
        dataplane: DataPlane,
        *,
        max_request_size: int = SETTINGS["max_request_size"].default,
        sequence_header: str = SETTINGS["sequence_header"].default,
    ) -> None:
        self.dataplane = dataplane
        self.max_request_size = max_request_size
        self.sequence_header = sequence_header
        self._router = INFERENCE_ROUTES.compile(self)
        self._document = description(INFERENCE_ROUTES)
        self._description = _responses.encoder.encode(self._document)
        #: the document as served under a root path (``--root-path``: one per server), and it
        self._rooted: tuple[str, bytes] = ("", self._description)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # An HTTP request is served here, not in a method of its own: one coroutine less each
        if scope["type"] != "http":
            await self._other(scope, receive, send)
            return
        ex = Exchange(scope, receive, self.max_request_size)
        try:
            found = self._router.match(scope["method"], scope["path"])
            if found is None:
                # a model's own route (MLServer's custom handlers), else none
                if await _custom.serve(self.dataplane, ex, scope, send):
                    return
                raise NoRoute(f"no route for {scope['method']} {scope['path']}")
            handler, args = found
            await handler(ex, send, *args)
        except PodiumError as exc:
            await _fail(ex, send, exc)
        except asyncio.CancelledError:
            if ex.failure is None and not ex.disconnected:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            if ex.failure is not None and not ex.disconnected:
                await _fail(ex, send, ex.failure)
        except Exception as exc:
            logger.exception("unexpected error serving %s %s", scope["method"], scope["path"])
            await _fail(ex, send, PodiumError(f"internal error: {type(exc).__name__}: {exc}"))
        finally:
            ex.close()

    async def _other(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A scope other than an HTTP request: Truss's WebSockets, else what ASGI says."""
        if scope["type"] == "websocket" and _truss.is_websocket_path(scope["path"]):
            await _truss.serve_websocket(self.dataplane, scope, receive, send)
        else:
            await serve_other_scope(scope, receive, send)

    # -- health and metadata ---------------------------------------------------------------

    async def _server_metadata(self, ex: Exchange, send: Send) -> None:
        await send_json(send, 200, self.dataplane.server_metadata())

    async def _live(self, ex: Exchange, send: Send) -> None:
        await send_json(send, 200, {"live": True})

    async def _ready(self, ex: Exchange, send: Send) -> None:
        ready = self.dataplane.ready()
        await send_json(send, 200 if ready else 503, {"ready": ready})

    async def _model_metadata(
        self, ex: Exchange, send: Send, model: str, version: str | None
    ) -> None:
        await send_json(send, 200, self.dataplane.model_metadata(model, version))

    async def _model_ready(self, ex: Exchange, send: Send, model: str, version: str | None) -> None:
        ready = self.dataplane.model_ready(model, version)
        body = {"name": model, "ready": ready}
        if version:
            body["version"] = version
        await send_json(send, 200 if ready else 503, body)

    async def _model_config(
        self, ex: Exchange, send: Send, model: str, version: str | None
    ) -> None:
        await send_json(send, 200, self.dataplane.model_config(model, version))

    # -- the model repository (OIP's extension, as Triton serves it) -------------------------

    async def _body_object(self, ex: Exchange, what: str) -> dict[str, Any]:
        ex.check_length()
        return _oip.parse_object(await ex.body(), what)

    async def _repository_index(self, ex: Exchange, send: Send) -> None:
        body = await self._body_object(ex, "repository index request")
        ready = body.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidInput(
                f"'ready' of a repository index request must be true or false, got {ready!r}"
            )
        index = self.dataplane.repository.index(ready_only=ready)
        await send_json(send, 200, [_repository.index_entry(model) for model in index])

    async def _repository_load(self, ex: Exchange, send: Send, model: str) -> None:
        repository = self.dataplane.repository
        # Refused first: a client that may not load learns nothing else about its request.
        repository.check_control(f"loading model '{model}'", WireProtocol.OIP_REST)
        what = "repository load request"
        parameters = _oip.parameters_of(await self._body_object(ex, what), what)
        config = _repository.load_config(parameters, model)
        await repository.load(model, via=WireProtocol.OIP_REST, config=config)
        await send_body(send, 200, JSON, b"")  # Triton's answer: 200, nothing more

    async def _repository_unload(self, ex: Exchange, send: Send, model: str) -> None:
        repository = self.dataplane.repository
        repository.check_control(f"unloading model '{model}'", WireProtocol.OIP_REST)
        what = "repository unload request"
        parameters = _oip.parameters_of(await self._body_object(ex, what), what)
        _repository.unload_dependents(parameters, model)  # checked; nothing depends on a model
        await repository.unload(model, via=WireProtocol.OIP_REST)
        await send_body(send, 200, JSON, b"")

    async def _statistics(
        self, ex: Exchange, send: Send, model: str | None, version: str | None
    ) -> None:
        """The statistics extension (Triton's): every model's, one model's, one version's."""
        await send_json(send, 200, StatisticsResponse(self.dataplane.statistics(model, version)))

    async def _ping(self, ex: Exchange, send: Send) -> None:
        """TorchServe's ``/ping``; on a server of one truss, Truss's (SageMaker's probe)."""
        truss = self.dataplane.sole_truss()
        if truss is not None:
            await _truss.loaded(self, ex, send, truss)
            return
        health = self.dataplane.torchserve_health()
        await send_json(send, 200 if health == "Healthy" else 500, {"status": health})

    # -- the API description -----------------------------------------------------------------

    async def _api_description(self, ex: Exchange, send: Send) -> None:
        await send_body(send, 200, _responses.JSON, self._described(ex.scope.get("root_path")))

    def _described(self, root: str | None) -> bytes:
        """The OpenAPI document; under a root path (a proxy's prefix, ``--root-path``) with
        that path as its server, as FastAPI serves it (and so MLServer): a client that reads
        the document calls the operations under the prefix."""
        root = (root or "").rstrip("/")
        if not root:
            return self._description
        if self._rooted[0] != root:  # made once: a server has one root path
            document = {**self._document, "servers": [{"url": root}]}
            self._rooted = (root, _responses.encoder.encode(document))
        return self._rooted[1]

    async def _docs_page(self, ex: Exchange, send: Send) -> None:
        await send_body(send, 200, _responses.HTML, PAGE)

    # -- inference -------------------------------------------------------------------------

    def _start(
        self,
        ex: Exchange,
        model: str,
        version: str | None,
        protocol: WireProtocol,
        header: bytes,
    ) -> tuple[ModelVersion, Call, bytes | None]:
        """Find the model (404/503 before the body is touched) and the call's pieces; and the
        request's ``header`` (the handler's next question: OIP's binary header, the content
        type), found on the length check's walk over the headers."""
        mv = self.dataplane.resolve(model, version, protocol)
        # the limit holds for a model that reads the body itself too
        found = ex.check_length(header)
        caps = mv.instance.capabilities
        request = ex.request() if caps.needs_request else None
        call = Call(model, version, protocol, None, request)
        if mv.config.sequence_batching:
            name = self.sequence_header
            call.sequence = _sequences.from_headers(lambda h: ex.header(h.lower().encode()), name)
        return mv, call, found

    def _sender(self, answer: Answer | AnswerStream, send: Send) -> Send:
        """``send``, adding the sequence's headers (its id, its end, what the model set) to the
        response of a call to a sequence model (the callers ask only for a model with
        ``config.sequence_batching``: no call for any other), as the answer says them when the
        response starts. A header the response has already (one a TorchServe handler set, as
        TorchServe's stateful examples set the id) is not sent twice: HTTP clients would join
        the two lines into ``"id, id"``."""
        name = self.sequence_header

        async def send_with_sequence(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = _sequences.response_headers(answer.sequence, name)
                if extra:
                    headers = list(message.get("headers", ()))
                    extra = _sequences.without(extra, {k.lower() for k, _ in headers})
                    message = {**message, "headers": [*headers, *extra]}
            await send(message)

        return send_with_sequence

    async def _read(
        self, ex: Exchange, mv: ModelVersion, call: Call, parse: Callable[[bytes], Any]
    ) -> None:
        """Read and parse the body if the model takes the inputs; then watch for disconnects.
        An OIP request's ``id`` is the request's id if no ``X-Request-ID`` came (``_access``). A
        body that cannot be read or parsed is counted as a refused call of the model."""
        if mv.instance.capabilities.needs_inputs:
            try:
                payload = call.payload = parse(await ex.body())
            except PodiumError as exc:
                self.dataplane.refused(mv, call.protocol, exc)
                raise
            if type(payload) is InferenceRequest:
                if payload.id:
                    adopt(payload.id)
                if mv.config.sequence_batching:
                    found = _sequences.from_parameters(payload.parameters)
                    call.sequence = _sequences.merged(call.sequence, found)
        ex.watch()

    async def _oip(
        self, ex: Exchange, send: Send, model: str, version: str | None, action: str
    ) -> None:
        # The binary tensor extension's header is found on the length check's walk (_start):
        # a plain JSON request pays no look-up of its own for it.
        mv, call, header = self._start(ex, model, version, _OIP_REST, _oip.BINARY_HEADER)
        if action != "infer" and _openai.generates(mv):  # an OpenAI model (docs/openai.md)
            return await _openai.serve_generate(self.dataplane, ex, send, mv, action)
        if action == "infer":
            if header is None:
                await self._read(ex, mv, call, _oip.parse_request)
            else:
                await self._read(ex, mv, call, lambda body: _oip.parse_binary(body, header))
            answer = await self.dataplane.infer(call, mv, ex.task)
            if mv.config.sequence_batching:
                send = self._sender(answer, send)
            response = answer.value
            binary = _oip.binary_outputs(call.payload)
            if binary is None and header is None:
                body = _oip.encode_response(response)
                await send_body(send, 200, JSON, body, answer.headers)
                return
            body, json_length = _oip.render_binary(response, binary)
            if json_length is None:
                await send_body(send, 200, JSON, body, answer.headers)
            else:
                length = (_oip.BINARY_HEADER, str(json_length).encode())
                extra = http_headers(answer.headers) if answer.headers else []
                await send_body(send, 200, [*_responses.OCTETS, length, *extra], body)
            return
        form = _oip.Form()
        if header is None:
            signature = mv.config.signature
            await self._read(ex, mv, call, lambda body: _oip.parse(body, action, form, signature))
        else:
            form.binary = True  # binary inputs; these routes answer in JSON
            await self._read(ex, mv, call, lambda body: _oip.parse_binary(body, header))
        if action == "generate":
            answer = await self.dataplane.infer(call, mv, ex.task)
            if mv.config.sequence_batching:
                send = self._sender(answer, send)
            # Triton's generate joins a stream's text (unless the model answers infer itself).
            caps = mv.instance.capabilities
            joined = form.triton and caps.streaming and not caps.predict_on_infer
            body = _oip.render(answer.value, form, join=joined)
            await send_body(send, 200, JSON, body, answer.headers)
            return
        await self._stream(
            ex,
            send,
            call,
            mv,
            lambda item: _responses.sse_event_raw(_oip.render(item, form)),
            _responses.SSE,
            sse=True,
        )

    async def _torchserve(
        self,
        ex: Exchange,
        send: Send,
        model: str,
        version: str | None,
        url_path: str = "",
        explain: bool = False,
    ) -> None:
        """TorchServe's ``/predictions/{m}[/{v}[/{url_path}]]`` and ``/explanations/...``
        (the same call, the handler told by the ``explain`` header); errors in TorchServe's
        shape."""
        # As TorchServe's frontend, the request headers tell the handler the path's segments
        # after the version (url_path, "" when none) and whether this is an explanation (its
        # BaseHandler.handle then calls explain_handle). (Errors are answered in TorchServe's
        # shape: _fail does it for every path under its prefixes.)
        scope = ex.scope
        scope["headers"] = [
            *scope["headers"],
            (b"url_path", url_path.encode()),
            (b"explain", b"True" if explain else b"False"),
        ]
        mv, call, found = self._start(ex, model, version, _TORCHSERVE_REST, b"content-type")
        content_type = (found or b"").split(b";")[0].strip().lower()
        is_json = content_type == b"application/json" or content_type.endswith(b"+json")
        await self._read(ex, mv, call, _oip.decode_json if is_json else bytes)
        # Stream the items, or answer the result: an ASGI response the model made, a Reply
        # (the status and headers a handler set), bytes and text as they are, else JSON.
        if mv.instance.capabilities.streaming:
            await self._stream(ex, send, call, mv, chunk_of, _responses.OCTETS, sse=False)
            return
        answer = await self.dataplane.infer(call, mv, ex.task)
        if mv.config.sequence_batching:
            send = self._sender(answer, send)
        result = answer.value
        if is_response(result):
            await result(ex.scope, ex.app_receive, send)
        elif isinstance(result, Reply):
            await _responses.send_reply(send, result)
        elif isinstance(result, bytes):
            await send_body(send, 200, _responses.OCTETS, result)
        elif isinstance(result, str):
            await send_body(send, 200, _responses.TEXT, result.encode())
        else:
            await send_body(send, 200, JSON, _responses.encode_json(result), answer.headers)

    async def _stream(
        self,
        ex: Exchange,
        send: Send,
        call: Call,
        mv: ModelVersion,
        encode: Callable[[Any], bytes],
        headers: list[tuple[bytes, bytes]],
        *,
        sse: bool,
    ) -> None:
        items = self.dataplane.stream(call, mv)
        if mv.config.sequence_batching:
            send = self._sender(items, send)

        def failed(exc: Exception) -> bytes:
            if not isinstance(exc, PodiumError):
                raise exc
            logger.warning("stream of model '%s' failed: %s", call.model, exc.message)
            error = _responses.error_body(exc)
            return _responses.sse_event(error) if sse else _responses.encode_json(error) + b"\n"

        try:
            first = await anext(items, _responses.NOTHING)
            await _responses.send_stream(send, first, items, headers, encode, failed)
        finally:
            await items.aclose()


_TS_PREFIXES = ("/predictions", "/explanations")


async def _fail(ex: Exchange, send: Send, exc: PodiumError) -> None:
    """The error response: ``{"error": ...}``; Truss's shape on its routes (``ex.errors``),
    OpenAI's on its paths, TorchServe's under ``/predictions``; a 405 lists what is allowed."""
    if ex.errors is not None:
        await ex.errors(send, exc)
        return
    scope = ex.scope
    extra = []
    if isinstance(exc, MethodNotAllowed):
        extra.append((b"allow", ", ".join(exc.allowed).encode()))
    if _openai.is_openai_path(scope["path"]):
        return await _openai.send_openai_error(send, exc, extra)
    await send_error(send, exc, extra, torchserve=scope["path"].startswith(_TS_PREFIXES))


_OIP, _TRUSS, _TS = Api.OIP_REST, Api.TRUSS, Api.TORCHSERVE_REST
_UNVERSIONED = {"version": None}


def _versioned(
    method: str, rest: str, endpoint: Any, name: str, *, first: str = "{model}", **args: Any
) -> tuple[Route, Route]:
    """An OIP route of a model (``/v2/models/{model}`` and ``rest``: its default version) and
    its twin of one version (``.../versions/{version}``), named ``name`` and ``name`` with
    ``model`` made ``modelVersion`` (Triton's pairs); ``args`` go to both."""
    return (
        Route(
            method, f"/v2/models/{first}{rest}", endpoint, _OIP, name, args={**_UNVERSIONED, **args}
        ),
        Route(
            method,
            f"/v2/models/{{model}}/versions/{{version}}{rest}",
            endpoint,
            _OIP,
            name.replace("model", "modelVersion", 1),
            args=args,
        ),
    )


#: Every route of the inference listener, in the order the protocols document them. HEAD is
#: served wherever GET is. A path that matches with another method is a 405 with ``Allow``.
INFERENCE_ROUTES = RouteTable(
    [
        # Open Inference Protocol v2, REST
        Route("GET", "/v2", HttpApp._server_metadata, _OIP, "serverMetadata"),
        Route("GET", "/v2/health/live", HttpApp._live, _OIP, "serverLive"),
        Route("GET", "/v2/health/ready", HttpApp._ready, _OIP, "serverReady"),
        # /v2/models/stats is the statistics of every model, not a model's metadata
        *_versioned("GET", "", HttpApp._model_metadata, "modelMetadata", first="{model:!stats}"),
        *_versioned("GET", "/ready", HttpApp._model_ready, "modelReady"),
        # The statistics extension (Triton's)
        Route(
            "GET",
            "/v2/models/stats",
            HttpApp._statistics,
            _OIP,
            "statistics",
            args={"model": None, "version": None},
        ),
        *_versioned("GET", "/stats", HttpApp._statistics, "modelStatistics"),
        *_versioned("GET", "/config", HttpApp._model_config, "modelConfig"),
        *(
            route
            for action, name in (
                ("infer", "modelInfer"),
                ("infer_stream", "modelInferStream"),
                ("generate", "modelGenerate"),
                ("generate_stream", "modelGenerateStream"),
            )
            for route in _versioned("POST", f"/{action}", HttpApp._oip, name, action=action)
        ),
        # The model repository extension (load and unload: --model-control inference)
        Route("POST", "/v2/repository/index", HttpApp._repository_index, _OIP, "repositoryIndex"),
        Route(
            "POST",
            "/v2/repository/models/{model}/load",
            HttpApp._repository_load,
            _OIP,
            "repositoryModelLoad",
        ),
        Route(
            "POST",
            "/v2/repository/models/{model}/unload",
            HttpApp._repository_unload,
            _OIP,
            "repositoryModelUnload",
        ),
        # Triton's shared memory extensions (system; CUDA answered as without GPUs)
        *_memory.ROUTES,
        # TorchServe's inference API
        Route(("GET", "POST"), "/ping", HttpApp._ping, _TS, "ping"),
        # TorchServe runs the handler whatever the method; GET (a body-less call) is the one
        # clients use besides POST and PUT. Segments after the version reach the handler as
        # the request header url_path, as TorchServe sends them.
        Route(
            ("POST", "PUT", "GET"),
            "/predictions/{model}",
            HttpApp._torchserve,
            _TS,
            "predictions",
            args=_UNVERSIONED,
        ),
        Route(
            ("POST", "PUT", "GET"),
            "/predictions/{model}/{version}",
            HttpApp._torchserve,
            _TS,
            "versionPredictions",
        ),
        Route(
            ("POST", "PUT", "GET"),
            "/predictions/{model}/{version}/{url_path:path}",
            HttpApp._torchserve,
            _TS,
            "versionPredictionsPath",
        ),
        *_ts_explain.ROUTES,
        # Truss's server (_truss.py): a ':' in the last segment is a verb, so readiness takes
        # names without one
        Route("GET", "/", _truss.live, _TRUSS, "trussLive"),
        # OpenAI's model object for a model that serves OpenAI's API, else Truss's readiness
        # (server/openai/_routes.py has the one rule)
        Route("GET", "/v1/models/{model:noverb}", _openai.model, _TRUSS, "trussReady"),
        Route("GET", "/v1/models/{model}/loaded", _truss.loaded, _TRUSS, "trussLoaded"),
        Route("GET", "/v1/models/{model}/schema", _truss.schema, _TRUSS, "trussSchema"),
        Route("POST", "/v1/models/{model}:predict", _truss.predict, _TRUSS, "trussPredict"),
        Route(
            "POST",
            "/v1/models/{model}:predict_binary",
            _truss.predict,
            _TRUSS,
            "trussPredictBinary",
        ),
        Route("POST", "/invocations", _truss.invocations, _TRUSS, "trussInvocations"),
        # OpenAI's API (server/openai/: the rule that gives Truss's methods its paths there)
        *_openai.ROUTES,
        # Truss's other OpenAI-style paths: the model method of their name
        *(
            Route("POST", path, _truss.endpoint, _TRUSS, name, args={"method": method})
            for path, (method, name) in _truss.ENDPOINT_PATHS.items()
            if path not in _openai.PATHS
        ),
        # The API description:
        # MLServer's place, a page to try it, and TorchServe's places
        Route("GET", "/v2/docs/openapi.json", HttpApp._api_description, _OIP, "openApiDocument"),
        Route("GET", "/v2/docs", HttpApp._docs_page, _OIP, "docsPage"),
        Route("OPTIONS", "/", HttpApp._api_description, _TS, "inferenceApiDescription"),
        Route(
            "GET",
            "/api-description",
            HttpApp._api_description,
            _TS,
            "inferenceApiDescriptionLegacy",
        ),
    ],
    leading=("ex", "send"),
    head=True,
)
