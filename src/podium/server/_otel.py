"""OpenTelemetry tracing, opt-in: the SDK, its exporter, and Podium's hooks (``podium.tracing``).

:func:`start` turns tracing on when ``--otel`` says so or the standard variables do
(``OTEL_TRACES_EXPORTER`` other than ``none``, or ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; ``OTEL_SDK_DISABLED=true`` turns it off whatever else
says). Only then is the SDK imported (``pip install 'podium[otel]'``): this module imports none
of it at its top, and ``podium.tracing.hooks`` stays None, so a server without tracing never
loads OpenTelemetry and its hot path pays nothing for it.

The exporter is the SDK's, as the variables say: ``OTEL_TRACES_EXPORTER`` ``otlp`` (the
default) over ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``
(``http/protobuf``, the default, or ``grpc``), or ``console``; endpoint, headers, timeouts,
sampler (``OTEL_TRACES_SAMPLER``), batching (``OTEL_BSP_*``), resource (``OTEL_SERVICE_NAME``,
default ``podium``; ``OTEL_RESOURCE_ATTRIBUTES``) and propagators (``OTEL_PROPAGATORS``: W3C
``traceparent`` / ``tracestate`` and baggage by default) are the SDK's to read. The provider is
the global one too, so spans a model makes with ``opentelemetry.trace.get_tracer(...)`` nest
under the ``predict`` span of the request that runs it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator, Mapping
from typing import Any

from .. import __version__, tracing
from ..types import ModelInstance

__all__ = ["TracingUnavailable", "Tracing", "start", "wanted"]


class TracingUnavailable(RuntimeError):
    """Tracing was asked for and the OpenTelemetry SDK is not installed."""


def wanted(asked: bool, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether tracing is on: ``--otel`` (``asked``) or the standard variables (see the
    module's docstring)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if asked:
        return True
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


class Tracing:
    """Tracing while it is on: the provider, and :meth:`close` to flush and turn it off."""

    def __init__(self, provider: Any, *, owned: bool) -> None:
        self.provider = provider
        self._owned = owned

    def close(self) -> None:
        """Export what is left and stop: ``podium.tracing.hooks`` is None again. A provider
        Podium made is shut down; one it was given is only flushed (its owner shuts it down)."""
        tracing.hooks = None
        if self._owned:
            self.provider.shutdown()
        else:
            self.provider.force_flush()


def start(asked: bool, *, provider: Any = None) -> Tracing | None:
    """Turn tracing on if :func:`wanted` (or a ``provider`` is given: an SDK ``TracerProvider``
    that Podium makes its spans with and neither sets as the global one nor shuts down; tests
    pass one with the SDK's ``InMemorySpanExporter``); None if it stays off. Raises
    :class:`TracingUnavailable` without the SDK."""
    if provider is not None:
        tracing.hooks = OtelHooks(provider.get_tracer("podium", __version__))
        return Tracing(provider, owned=False)
    if not wanted(asked):
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingUnavailable(
            f"tracing needs the OpenTelemetry SDK: pip install 'podium[otel]' ({exc})"
        ) from None
    attributes: dict[str, Any] = {"service.version": __version__}
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    if not named:
        attributes["service.name"] = "podium"
    made = TracerProvider(resource=Resource.create(attributes))
    for exporter in _exporters():
        made.add_span_processor(BatchSpanProcessor(exporter))
    # The global provider too, so that a model's own spans (opentelemetry.trace.get_tracer)
    # nest under its predict span. The first one set stays (OpenTelemetry's rule): one server
    # per process.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(made)
    tracing.hooks = OtelHooks(made.get_tracer("podium", __version__))
    return Tracing(made, owned=True)


def _exporters() -> list[Any]:
    """The span exporters ``OTEL_TRACES_EXPORTER`` names (``otlp`` by default)."""
    names = [n.strip().lower() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    made: list[Any] = []
    for name in names:
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            made.append(ConsoleSpanExporter())
        elif name == "otlp":
            protocol = (
                os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf"
            )
            module = "grpc" if protocol == "grpc" else "http"
            try:
                exporters = importlib.import_module(
                    f"opentelemetry.exporter.otlp.proto.{module}.trace_exporter"
                )
            except ImportError as exc:
                raise TracingUnavailable(
                    f"the OTLP exporter ({protocol}) is not installed: pip install "
                    f"'podium[otel]' ({exc})"
                ) from None
            made.append(exporters.OTLPSpanExporter())
        elif name and name != "none":
            raise TracingUnavailable(
                f"OTEL_TRACES_EXPORTER={name!r}: Podium exports with otlp or console"
            )
    return made


# -- the hooks --------------------------------------------------------------------------------

#: gRPC codes that are the server's failure (OpenTelemetry's semantic conventions for servers).
_GRPC_SERVER_ERRORS = frozenset({2, 4, 12, 13, 14, 15})


class OtelHooks:
    """``podium.tracing.Hooks`` over an OpenTelemetry tracer (see ``podium.tracing``)."""

    def __init__(self, tracer: Any) -> None:
        from opentelemetry import context, propagate, trace
        from opentelemetry.context import Context
        from opentelemetry.trace import Link, NonRecordingSpan, SpanKind, Status, StatusCode

        self._tracer = tracer
        self._context = context
        self._propagate = propagate
        self._trace = trace
        self._Context = Context
        self._Link = Link
        self._NonRecordingSpan = NonRecordingSpan
        self._server = SpanKind.SERVER
        self._error = Status(StatusCode.ERROR)

    # -- requests -----------------------------------------------------------------------------

    def _begin(self, name: str, carrier: Any, getter: Any, attributes: dict[str, Any]) -> Any:
        # Extracted into an empty context: without a traceparent a request starts a trace of
        # its own, whatever the task had current before.
        parent = self._propagate.extract(carrier, context=self._Context(), getter=getter)
        span = self._tracer.start_span(
            name, context=parent, kind=self._server, attributes=attributes
        )
        token = self._context.attach(self._trace.set_span_in_context(span, parent))
        return span, token

    def _common(self, span: Any, access: Any) -> None:
        span.set_attribute("podium.request_id", access.id)
        span.set_attribute("podium.protocol", access.protocol or "")
        if access.model:
            span.set_attribute("podium.model", access.model)
        if access.version:
            span.set_attribute("podium.version", access.version)

    def http_request(self, scope: Any) -> Any:
        method = scope["method"]
        return self._begin(
            method,
            scope["headers"],
            _PAIRS,
            {"http.request.method": method, "url.scheme": scope.get("scheme", "http")},
        )

    def http_ended(self, handle: Any, access: Any, template: str | None) -> None:
        span, token = handle
        if template is not None:
            span.update_name(f"{access.method} {template}")
            span.set_attribute("http.route", template)
        span.set_attribute("url.path", access.path)
        span.set_attribute("http.response.status_code", access.status)
        self._common(span, access)
        if access.status >= 500:
            span.set_status(self._error)
        span.end()
        self._context.detach(token)

    def grpc_request(self, path: str, metadata: Any) -> Any:
        service, _, method = path[1:].partition("/")
        span, _ = self._begin(
            path[1:],
            metadata or (),
            _PAIRS,
            {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method},
        )
        return span  # the call's own task: its context ends with it (no detach)

    def grpc_ended(self, span: Any, access: Any) -> None:
        span.set_attribute("rpc.grpc.status_code", access.status)
        self._common(span, access)
        if access.status in _GRPC_SERVER_ERRORS:
            span.set_status(self._error)
        span.end()

    # -- inside the runtime -------------------------------------------------------------------

    def instance(self, instance: ModelInstance, model: str, version: str | None) -> ModelInstance:
        return _TracedInstance(instance, self._tracer, _model_attributes(model, version))

    def queue(self) -> Any:
        if not self._trace.get_current_span().is_recording():
            return contextlib.nullcontext()  # no request here to wait for (a collector)
        return self._tracer.start_as_current_span("queue")

    def waiting(self) -> Any:
        span = self._trace.get_current_span()
        if not span.is_recording():
            return None
        return span.get_span_context(), time.time_ns()

    @contextlib.contextmanager
    def remote(self, model: str, version: str | None, pid: int | None) -> Iterator[None]:
        # Not made current: a stream's generator ends in whichever context closes it, and
        # nothing in this process runs under it.
        if not self._trace.get_current_span().is_recording():
            yield
            return
        attributes = _model_attributes(model, version)
        attributes["podium.worker.pid"] = pid or 0
        with _ending(self._tracer.start_span("predict", attributes=attributes)):
            yield

    @contextlib.contextmanager
    def batch(self, waiting: list[Any]) -> Iterator[Any]:
        found = [w for w in waiting if w is not None]
        if not found:  # no request of the batch is recorded (the sampler left them out)
            yield None
            return
        links = [self._Link(context) for context, _ in found]
        with self._tracer.start_as_current_span(
            "batch",
            context=self._Context(),  # a trace of its own, linked to each request's
            links=links,
            attributes={"podium.batch.size": len(waiting)},
        ) as span:
            now = time.time_ns()
            to_batch = [self._Link(span.get_span_context())]
            for context, since in found:  # each request's wait, ended now, linked to the batch
                parent = self._trace.set_span_in_context(self._NonRecordingSpan(context))
                self._tracer.start_span(
                    "queue", context=parent, links=to_batch, start_time=since
                ).end(end_time=now)
            yield span


class _TracedInstance:
    """A model instance with a span around each ``preprocess``, ``predict`` (a stream: from its
    first item asked to its end) and ``postprocess``; everything else is the instance's own.

    Only under a span that records: a request the sampler left out (its server span does not
    record) runs the instance's own methods, with no span made for it."""

    def __init__(self, inner: ModelInstance, tracer: Any, attributes: dict[str, Any]) -> None:
        from opentelemetry.trace import get_current_span

        self._inner = inner
        self._tracer = tracer
        self._current = get_current_span
        self.capabilities = inner.capabilities
        self._attributes = attributes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def _traced(self, name: str, method: Any, value: Any, request: Any) -> Any:
        if not self._current().is_recording():
            return await method(value, request)
        with self._tracer.start_as_current_span(name, attributes=self._attributes):
            return await method(value, request)

    def preprocess(self, inputs: Any, request: Any) -> Coroutine[Any, Any, Any]:
        return self._traced("preprocess", self._inner.preprocess, inputs, request)

    def predict(self, inputs: Any, request: Any) -> Coroutine[Any, Any, Any]:
        return self._traced("predict", self._inner.predict, inputs, request)

    def postprocess(self, outputs: Any, request: Any) -> Coroutine[Any, Any, Any]:
        return self._traced("postprocess", self._inner.postprocess, outputs, request)

    def predict_stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        items = self._inner.predict_stream(inputs, request)
        return self._stream(items) if self._current().is_recording() else items

    def predict_input_stream(
        self, inputs: AsyncIterator[Any], request: Any
    ) -> AsyncGenerator[Any, None]:
        items = self._inner.predict_input_stream(inputs, request)
        return self._stream(items) if self._current().is_recording() else items

    async def _stream(self, items: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        # Not made current: an async generator's frames run in whichever context reads it.
        with _ending(self._tracer.start_span("predict", attributes=self._attributes)):
            async with contextlib.aclosing(items):
                async for item in items:
                    yield item


def _model_attributes(model: str, version: str | None) -> dict[str, Any]:
    attributes = {"podium.model": model}
    if version:
        attributes["podium.version"] = version
    return attributes


@contextlib.contextmanager
def _ending(span: Any) -> Iterator[None]:
    """Around a span's work: an exception is recorded on it (status error), and it ends."""
    try:
        yield
    except Exception as exc:
        from opentelemetry.trace import Status, StatusCode

        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR))
        raise
    finally:
        span.end()


class _PairsGetter:
    """OpenTelemetry's ``Getter`` over ``(name, value)`` pairs: ASGI headers (lower-case byte
    strings) or gRPC invocation metadata (lower-case names; ``-bin`` values as bytes)."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        name = key.lower()
        found = [_text(v) for k, v in carrier if _text(k) == name]
        return found or None

    def keys(self, carrier: Any) -> list[str]:
        return [_text(k) for k, _ in carrier]


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("latin-1")


_PAIRS = _PairsGetter()
