"""OpenTelemetry spans, end to end (docs/operations.md, "Traces").

A real Podium runs in this process (its listeners on real sockets, real HTTP and gRPC clients),
making its spans with a ``TracerProvider`` that exports to the SDK's ``InMemorySpanExporter``,
and the tests read the spans each request made: the server span (a child of the client's W3C
``traceparent``), ``queue``, ``preprocess``, ``predict``, ``postprocess``, a batch's span with
its links both ways, a process worker's ``predict``. In this process, because the in-memory
exporter is an object the test must read (a server process would have to ship its spans to the
test some other way: the console exporter's test below does that for the real ``podium serve``
and its ``OTEL_*`` variables). The provider is the process's global one too, as ``podium serve``
makes its own: a model's own spans nest under its ``predict``. Then: without tracing nothing of
OpenTelemetry is imported and nothing on a request's path changes, and the standard variables
turn it on.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import httpx
import pytest
from conftest import ROOT, TEST_MODELS, run_server
from grpc_helpers import Stubs, infer_request, podium_messages

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind  # noqa: E402

from podium import tracing  # noqa: E402
from podium.config import ServerConfig  # noqa: E402
from podium.server import Podium  # noqa: E402
from podium.server._otel import _exporters, wanted  # noqa: E402

LOG_MODELS = TEST_MODELS / "logs"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
BODY = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}

#: One provider and exporter for the whole module: OpenTelemetry's global provider can be set
#: once per process, and a model's own spans go to the global one.
EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))


@pytest.fixture(scope="module", autouse=True)
def global_provider() -> None:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(PROVIDER)
    if trace.get_tracer_provider() is not PROVIDER:
        pytest.skip("another test set OpenTelemetry's global provider in this process")


@asynccontextmanager
async def serving(*models: str) -> AsyncIterator[tuple[Podium, InMemorySpanExporter]]:
    EXPORTER.clear()
    config = ServerConfig(
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        management_port=0,
        grpc_management_port=0,
        auth=False,
    )
    podium = Podium(config, [LOG_MODELS / m for m in models], tracer_provider=PROVIDER)
    try:
        await podium.start()
        yield podium, EXPORTER
    finally:
        await podium.stop()
    assert tracing.hooks is None  # off again once the server has stopped


async def spans(exporter: InMemorySpanExporter, count: int) -> list[ReadableSpan]:
    """The spans exported so far, once there are ``count`` (a server span ends just after its
    response has left)."""
    for _ in range(500):  # 10 s at most
        if len(exporter.get_finished_spans()) >= count:
            break
        await asyncio.sleep(0.02)
    return list(exporter.get_finished_spans())


def named(found: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in found if s.name == name]


def child_of(span: ReadableSpan, parent: ReadableSpan) -> bool:
    assert span.parent is not None, span.name
    return (span.parent.span_id, span.context.trace_id) == (
        parent.context.span_id,
        parent.context.trace_id,
    )


@pytest.mark.anyio
async def test_an_http_request_is_a_server_span_under_the_clients_trace() -> None:
    async with serving("tell") as (podium, exporter):
        url = podium.addresses["http-inference"]
        async with httpx.AsyncClient() as client:
            response = await client.post(
                f"{url}/v2/models/tell/infer",
                json=BODY,
                headers={"traceparent": TRACEPARENT, "X-Request-ID": "traced-1"},
            )
        assert response.status_code == 200
        found = await spans(exporter, 2)
    (server,) = named(found, "POST /v2/models/{model}/infer")
    assert server.kind is SpanKind.SERVER
    assert format(server.context.trace_id, "032x") == TRACE_ID
    assert server.parent is not None and format(server.parent.span_id, "016x") == PARENT_ID
    attributes = dict(server.attributes or {})
    assert attributes["http.route"] == "/v2/models/{model}/infer"
    assert attributes["http.response.status_code"] == 200
    assert attributes["podium.request_id"] == "traced-1"
    assert (attributes["podium.model"], attributes["podium.protocol"]) == ("tell", "oip_rest")
    (predict,) = named(found, "predict")
    assert child_of(predict, server)
    assert not named(found, "queue")  # a free slot: nothing waited


@pytest.mark.anyio
async def test_a_request_without_a_traceparent_starts_a_trace_of_its_own() -> None:
    async with serving("tell") as (podium, exporter):
        url = podium.addresses["http-inference"]
        async with httpx.AsyncClient() as client:
            for _ in range(2):
                await client.post(f"{url}/v2/models/tell/infer", json=BODY)
        found = await spans(exporter, 4)
    servers = named(found, "POST /v2/models/{model}/infer")
    assert len(servers) == 2
    assert all(s.parent is None for s in servers)
    assert servers[0].context.trace_id != servers[1].context.trace_id


@pytest.mark.anyio
async def test_a_request_its_client_did_not_sample_records_nothing() -> None:
    async with serving("batch-tell", "tell") as (podium, exporter):
        url = podium.addresses["http-inference"]
        unsampled = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00"}
        async with httpx.AsyncClient() as client:
            answers = await asyncio.gather(
                *(
                    client.post(f"{url}/v2/models/batch-tell/infer", json=BODY, headers=unsampled)
                    for _ in range(2)
                )
            )
            assert [a.status_code for a in answers] == [200, 200]
            # then a sampled one: its spans are there, so none were missed by waiting too little
            await client.post(f"{url}/v2/models/tell/infer", json=BODY)
        found = await spans(exporter, 1)
    assert not named(found, "batch") and not named(found, "queue")
    # the sampled request's two; and the model's own span, a root now (no batch span around it)
    assert {s.name for s in found} <= {"POST /v2/models/{model}/infer", "predict", "model.work"}
    assert all(s.parent is None for s in named(found, "model.work"))
    assert all(format(s.context.trace_id, "032x") != TRACE_ID for s in found)


@pytest.mark.anyio
async def test_a_grpc_call_is_a_server_span_under_the_metadatas_trace() -> None:
    pb = podium_messages()
    async with serving("tell") as (podium, exporter):
        async with grpc.aio.insecure_channel(podium.addresses["grpc-inference"]) as channel:
            stubs = Stubs(channel, pb)
            await stubs.ModelInfer(
                infer_request(pb, "tell", x=1.0), metadata=(("traceparent", TRACEPARENT),)
            )
        found = await spans(exporter, 2)
    (server,) = named(found, "inference.GRPCInferenceService/ModelInfer")
    assert server.kind is SpanKind.SERVER
    assert format(server.context.trace_id, "032x") == TRACE_ID
    attributes = dict(server.attributes or {})
    assert (attributes["rpc.system"], attributes["rpc.method"]) == ("grpc", "ModelInfer")
    assert attributes["rpc.grpc.status_code"] == 0
    (predict,) = named(found, "predict")
    assert child_of(predict, server)


@pytest.mark.anyio
async def test_a_request_that_waits_for_the_slot_has_a_queue_span() -> None:
    async with serving("slow-tell") as (podium, exporter):
        url = podium.addresses["http-inference"]
        async with httpx.AsyncClient() as client:
            await asyncio.gather(
                *(client.post(f"{url}/v2/models/slow-tell/infer", json=BODY) for _ in range(2))
            )
        found = await spans(exporter, 5)
    (queue,) = named(found, "queue")
    servers = named(found, "POST /v2/models/{model}/infer")
    assert any(child_of(queue, s) for s in servers)
    assert queue.end_time - queue.start_time > 50_000_000  # it waited for the other's 0.2 s


@pytest.mark.anyio
async def test_batched_requests_and_their_batch_link_to_each_other() -> None:
    async with serving("batch-tell") as (podium, exporter):
        url = podium.addresses["http-inference"]
        async with httpx.AsyncClient() as client:
            answers = await asyncio.gather(
                *(client.post(f"{url}/v2/models/batch-tell/infer", json=BODY) for _ in range(2))
            )
        assert [a.json()["outputs"][0]["data"] for a in answers] == [[2], [2]]
        # two servers, two preprocess, two queue, two postprocess, batch, predict, model.work
        found = await spans(exporter, 11)
    servers = named(found, "POST /v2/models/{model}/infer")
    (batch,) = named(found, "batch")
    (predict,) = named(found, "predict")
    (work,) = named(found, "model.work")
    assert len(servers) == 2
    assert batch.parent is None  # a trace of its own
    assert dict(batch.attributes or {})["podium.batch.size"] == 2
    linked = {link.context.span_id for link in batch.links}
    assert linked == {s.context.span_id for s in servers}
    assert child_of(predict, batch)
    assert child_of(work, predict)  # the model's own span, from its worker thread
    for phase in ("preprocess", "queue", "postprocess"):
        spans_of_phase = named(found, phase)
        assert len(spans_of_phase) == 2
        for server in servers:
            assert sum(child_of(s, server) for s in spans_of_phase) == 1, phase
    for queue in named(found, "queue"):
        assert [link.context.span_id for link in queue.links] == [batch.context.span_id]


@pytest.mark.anyio
async def test_a_process_workers_request_has_its_predict_span_from_the_server() -> None:
    async with serving("tell-proc") as (podium, exporter):
        url = podium.addresses["http-inference"]
        async with httpx.AsyncClient() as client:
            response = await client.post(
                f"{url}/v2/models/tell-proc/infer", json=BODY, headers={"traceparent": TRACEPARENT}
            )
        assert response.status_code == 200
        found = await spans(exporter, 2)
    (server,) = named(found, "POST /v2/models/{model}/infer")
    (predict,) = named(found, "predict")
    assert child_of(predict, server)
    attributes = dict(predict.attributes or {})
    assert attributes["podium.model"] == "tell-proc"
    assert attributes["podium.worker.pid"] not in (0, os.getpid())  # its worker process


@pytest.mark.anyio
async def test_a_process_workers_stream_has_one_predict_span_to_its_end() -> None:
    async with serving("count-proc") as (podium, exporter):
        url = podium.addresses["http-inference"]
        async with (
            httpx.AsyncClient() as client,
            client.stream("POST", f"{url}/v2/models/count-proc/infer_stream", json=BODY) as sse,
        ):
            events = [line async for line in sse.aiter_lines() if line.startswith("data:")]
        assert len(events) == 3
        found = await spans(exporter, 2)
    (server,) = named(found, "POST /v2/models/{model}/infer_stream")
    (predict,) = named(found, "predict")
    assert child_of(predict, server)
    assert dict(predict.attributes or {})["podium.worker.pid"] not in (0, os.getpid())
    assert server.start_time <= predict.start_time <= predict.end_time <= server.end_time


# -- off by default; on by the standard variables ------------------------------------------------

_PROBE = """
import asyncio, sys
from pathlib import Path
from podium.config import ServerConfig
from podium.server import Podium

async def main():
    config = ServerConfig(host="127.0.0.1", http_port=0, grpc_port=0, management_port=0,
                          grpc_management_port=0, auth=False)
    podium = Podium(config, [Path(sys.argv[1])])
    await podium.start()
    # nothing on a request's path is traced: no hooks, the model instance is the adapter's own
    from podium import tracing
    assert tracing.hooks is None and podium.tracing is None
    (version,) = podium.dataplane.repository.versions()
    assert type(version.instance).__name__ == "NativeModel", type(version.instance)
    import httpx
    async with httpx.AsyncClient() as client:
        url = podium.addresses["http-inference"]
        body = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
        assert (await client.post(url + "/v2/models/tell/infer", json=body)).status_code == 200
    await podium.stop()
    print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))

asyncio.run(main())
"""


def test_without_tracing_nothing_of_opentelemetry_is_imported() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(LOG_MODELS / "tell")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_standard_variables_turn_tracing_on() -> None:
    assert not wanted(False, {})
    assert wanted(True, {})
    assert not wanted(True, {"OTEL_SDK_DISABLED": "true"})
    assert wanted(False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert wanted(False, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318"})
    assert wanted(False, {"OTEL_TRACES_EXPORTER": "console"})
    assert not wanted(False, {"OTEL_TRACES_EXPORTER": "none"})


def test_tracing_asked_for_without_the_sdk_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from podium.server import TracingUnavailable
    from podium.server._otel import start

    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    with pytest.raises(TracingUnavailable, match=r"pip install 'podium\[otel\]'"):
        start(True)
    assert tracing.hooks is None
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    assert start(False) is None  # not asked: nothing is imported, nothing refused


def test_the_exporter_is_the_one_the_variables_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from podium.server import TracingUnavailable

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    assert [type(e).__name__ for e in _exporters()] == ["ConsoleSpanExporter"]
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    for protocol, module in (("grpc", "grpc"), ("http/protobuf", "http")):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        made: Any = _exporters()
        assert [type(e).__module__.split(".")[4] for e in made] == [module]
        for exporter in made:
            exporter.shutdown()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(TracingUnavailable, match="otlp or console"):
        _exporters()


def test_a_served_request_reaches_the_console_exporter() -> None:
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "50"}
    with run_server(LOG_MODELS / "tell", env=env) as server:
        httpx.post(f"{server.url}/v2/models/tell/infer", json=BODY)
        deadline = time.monotonic() + 10
        while '"name": "POST /v2/models/{model}/infer"' not in server.log:
            assert time.monotonic() < deadline, server.log
            time.sleep(0.05)
        assert "tracing on" in server.log


def test_a_predict_that_fails_records_its_error_on_its_span() -> None:
    """A process worker's predict span (and a stream's, the same way) records the exception
    the model raised, with an error status, and ends."""
    from opentelemetry.trace import StatusCode

    from podium.server._otel import OtelHooks

    EXPORTER.clear()
    tracer = PROVIDER.get_tracer("test")
    hooks = OtelHooks(tracer)
    with tracer.start_as_current_span("request"), pytest.raises(ValueError):
        with hooks.remote("m", "2", 42):
            raise ValueError("the model broke")
    predict = next(s for s in EXPORTER.get_finished_spans() if s.name == "predict")
    assert predict.status.status_code is StatusCode.ERROR
    assert [e.name for e in predict.events] == ["exception"]
    assert predict.attributes is not None and predict.attributes["podium.worker.pid"] == 42
