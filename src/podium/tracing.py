"""Where Podium's spans come from, without OpenTelemetry: the hooks each layer calls.

Tracing is opt-in (``podium serve --otel``, or the standard ``OTEL_*`` variables; docs/
operations.md, "Traces"). Until it is turned on, :data:`hooks` is None, this module imports
nothing, and the hot path pays one test of a module attribute where a span could start (none
at all for preprocess, predict and postprocess: their spans come from a wrapper around the model
instance, made only when tracing is on). ``server/_otel.py`` imports the OpenTelemetry SDK and
sets :data:`hooks` once, at start-up, before any model is loaded.

A request's spans: its server span (the front end's: HTTP or gRPC, a child of the client's
W3C ``traceparent``), and under it ``queue`` (the wait for a predict slot, where it waited),
``preprocess``, ``predict`` and ``postprocess``. A batched request's ``queue`` ends when its
batch starts and links to the ``batch`` span, which runs the batch's ``predict`` and links to
every request in it. A process worker's request has one ``predict`` span, seen from the server:
its worker process runs preprocess, predict and postprocess untraced.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from .types import ModelInstance

__all__ = ["Hooks", "hooks"]


class Hooks(Protocol):
    """What the layers call while tracing is on (``server/_otel.py`` implements it)."""

    def http_request(self, scope: Any) -> Any:
        """An HTTP request arrived (its ASGI scope): its server span, made current; what
        :meth:`http_ended` gets back."""
        ...

    def http_ended(self, span: Any, access: Any, template: str | None) -> None:
        """The request (its access record, its route's path template if any) has ended."""
        ...

    def grpc_request(self, path: str, metadata: Any) -> Any:
        """A gRPC call arrived (``/service/Method``, its invocation metadata): its server span,
        made current."""
        ...

    def grpc_ended(self, span: Any, access: Any) -> None:
        """The call (its access record) has ended."""
        ...

    def instance(self, instance: ModelInstance, model: str, version: str | None) -> ModelInstance:
        """``instance`` with a span around each ``preprocess``, ``predict`` and
        ``postprocess``."""
        ...

    def queue(self) -> AbstractContextManager[Any]:
        """The current request waits for a predict slot."""
        ...

    def waiting(self) -> Any:
        """The current request joins a batch queue: what :meth:`batch` gets for it."""
        ...

    def remote(
        self, model: str, version: str | None, pid: int | None
    ) -> AbstractContextManager[Any]:
        """A request (or a batch) runs in a process worker (``pid``): the ``predict`` span seen
        from the server, around the worker process's preprocess, predict and postprocess."""
        ...

    def batch(self, waiting: list[Any]) -> AbstractContextManager[Any]:
        """A batch of requests (what :meth:`waiting` gave for each) runs: its span."""
        ...


#: The hooks, while tracing is on; None (the default) when it is off.
hooks: Hooks | None = None
