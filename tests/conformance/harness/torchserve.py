"""TorchServe scenarios: the same requests to the real TorchServe 0.12 and to Podium, both
serving the same ``.mar`` files built by the real ``torch-model-archiver`` from
``models/torchserve``: ``ts_echo`` (a plain handler), ``ts_stateful`` (a running sum per
sequence, written as TorchServe's stateful example writes it) and ``ts_stream`` (continuous
batching inside a sequence, with ``context.stopping_criteria``)."""

from __future__ import annotations

import importlib
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import httpx

from .common import TIMEOUT, grpc_error, http, norm, scenario, shape, status_and_shape

SEQ = "ts_request_sequence_id"


def _inf(addr, path: str) -> str:
    return f"http://{addr['http']}{path}"


def _mgmt(addr, path: str) -> str:
    return f"http://{addr['management']}{path}"


@scenario("T1", "basic", "GET /ping, POST /predictions/ts_echo (JSON), GET /models", "torchserve")
def basics(addr):
    raw = {
        "ping": http("GET", _inf(addr, "/ping")),
        "predict": http("POST", _inf(addr, "/predictions/ts_echo"), json={"a": 1}),
        "list": http("GET", _mgmt(addr, "/models")),
    }
    compare = {k: status_and_shape(v) for k, v in raw.items()}
    # One Podium serves the Triton scenarios' models too: compare the TorchServe models only.
    listed = compare["list"].get("body")
    if isinstance(listed, dict) and isinstance(listed.get("models"), list):
        listed["models"] = [
            m for m in listed["models"] if str(m.get("modelName", "")).startswith("ts_")
        ]
    return compare, raw


def _ts_stubs():
    """TorchServe's gRPC stubs, generated at install time from the protos Podium declares
    (wire-compatible with TorchServe's own files) into the venv's ``ts_protos``."""
    where = Path(sys.prefix) / "ts_protos"
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))
    names = (
        "torchserve_inference_pb2",
        "torchserve_inference_pb2_grpc",
        "torchserve_management_pb2",
        "torchserve_management_pb2_grpc",
    )
    return [importlib.import_module(n) for n in names]


@scenario("T2", "basic", "TorchServe gRPC Predictions to ts_echo", "torchserve")
def grpc_predict(addr):
    inf_pb2, inf_grpc, _, _ = _ts_stubs()
    channel = grpc.insecure_channel(addr["grpc"])
    try:
        stub = inf_grpc.InferenceAPIsServiceStub(channel)
        try:
            r = stub.Predictions(
                inf_pb2.PredictionsRequest(model_name="ts_echo", input={"data": b'{"a": 1}'}),
                timeout=TIMEOUT,
            )
            out = {"prediction": norm(_json(r.prediction))}
        except grpc.RpcError as exc:
            out = grpc_error(exc)
        return out, out
    finally:
        channel.close()


def _json(b: bytes) -> Any:
    import json

    try:
        return json.loads(b)
    except ValueError:
        return b.decode(errors="replace")


# --- 15. the sequence id header -----------------------------------------------------------


@scenario(
    "15", "15", "sequence id header lines when the handler also sets it (ts_stateful)", "torchserve"
)
def header_twice(addr):
    first = http("POST", _inf(addr, "/predictions/ts_stateful"), content=b"3")
    lines = first.get("headers", {}).get(SEQ, [])
    joined = ", ".join(lines)
    # What an HTTP client that joins repeated header lines sends back (RFC 9110).
    second = http(
        "POST", _inf(addr, "/predictions/ts_stateful"), content=b"4", headers={SEQ: joined}
    )
    http(
        "POST",
        _inf(addr, "/predictions/ts_stateful"),
        content=b"0",
        headers={SEQ: lines[0] if lines else ""},
    )
    compare = {
        "first status": first["status"],
        "id header lines": len(lines),
        "first answer": first.get("body"),
        "joined id sent back, status": second["status"],
        "joined id sent back, answer (7 = same sequence)": second.get("body")
        if second["status"] == 200
        else shape(second.get("body")),
    }
    return compare, {"first": first, "second": second}


# --- 16. continuous batching inside a sequence --------------------------------------------


@scenario(
    "16",
    "16",
    "continuous batching in a sequence: stream 5 items, cancel with -1 (ts_stream)",
    "torchserve",
)
def continuous_sequence(addr):
    first = http("POST", _inf(addr, "/predictions/ts_stream"), content=b"2")
    ids = first.get("headers", {}).get(SEQ, [])
    if not ids:
        return {"first": status_and_shape(first), "no sequence id": True}, first
    sid = ids[0].split(",")[0].strip()
    chunks: list[str] = []
    status: dict[str, Any] = {}
    started = threading.Event()

    def stream() -> None:
        try:
            with httpx.stream(
                "POST",
                _inf(addr, "/predictions/ts_stream"),
                content=b"5",
                headers={SEQ: sid},
                timeout=TIMEOUT,
            ) as r:
                status["stream"] = r.status_code
                for chunk in r.iter_text():
                    chunks.append(chunk)
                    started.set()
        except httpx.HTTPError as exc:
            status["stream"] = type(exc).__name__
        finally:
            started.set()

    t = threading.Thread(target=stream)
    t.start()
    started.wait(TIMEOUT)
    t0 = time.monotonic()
    cancel = http("POST", _inf(addr, "/predictions/ts_stream"), content=b"-1", headers={SEQ: sid})
    cancel_s = time.monotonic() - t0
    t.join(TIMEOUT)
    text = "".join(chunks)
    compare = {
        "first": first["status"],
        "stream status": status.get("stream"),
        "stream chunks > 1 (streamed)": len(chunks) > 1,
        "stream stopped before item 4": "item 4" not in text,
        "cancel status": cancel["status"],
        "cancel answered while the stream ran": cancel_s < 0.9,
    }
    raw = {
        "first": first,
        "stream chunks": chunks,
        "cancel": cancel,
        "cancel_seconds": round(cancel_s, 2),
    }
    return compare, raw


# --- 17. default version after registering v2 ---------------------------------------------


@scenario(
    "17", "17", "register ts_echo 2.0: which version answers /predictions/ts_echo", "torchserve"
)
def default_version(addr):
    raw: dict[str, Any] = {}
    raw["register v2"] = http(
        "POST",
        _mgmt(addr, "/models?url=ts_echo_v2.mar&initial_workers=1&synchronous=true"),
        timeout=120,
    )
    raw["predict"] = http("POST", _inf(addr, "/predictions/ts_echo"), json={"a": 1})
    raw["describe all"] = http("GET", _mgmt(addr, "/models/ts_echo/all"))
    raw["unregister v2"] = http("DELETE", _mgmt(addr, "/models/ts_echo/2.0"))
    body = raw["predict"].get("body")
    described = raw["describe all"].get("body")
    compare = {
        "register v2": raw["register v2"]["status"],
        "version answering": body.get("version") if isinstance(body, dict) else None,
        "default flags": sorted((d.get("modelVersion"), d.get("isDefault")) for d in described)
        if isinstance(described, list)
        else None,
        "unregister v2": raw["unregister v2"]["status"],
    }
    return compare, raw


# --- 18. TorchServe's sequence flags ------------------------------------------------------


@scenario(
    "18",
    "18",
    "ts_request_sequence_start / _end headers on ts_stateful",
    "torchserve",
    improvement="TorchServe 0.12 hands the flags to the handler only (and times out here); Podium "
    "begins a new sequence on the start flag, ends it after the end flag, and refuses the ended "
    "id with a 410 instead of a silent new sequence (docs/sequences.md)",
)
def sequence_flags(addr):
    raw: dict[str, Any] = {}
    first = http("POST", _inf(addr, "/predictions/ts_stateful"), content=b"5")
    raw["no id, 5"] = first
    sid = (first.get("headers", {}).get(SEQ) or [""])[0].split(",")[0].strip()
    steps = [
        ("id, 2", b"2", {}),
        ("id + ts_request_sequence_start, 10", b"10", {"ts_request_sequence_start": "true"}),
        ("id + ts_request_sequence_end, 1", b"1", {"ts_request_sequence_end": "true"}),
        ("id after the end, 1", b"1", {}),
    ]
    for label, body, extra in steps:
        raw[label] = http(
            "POST",
            _inf(addr, "/predictions/ts_stateful"),
            content=body,
            headers={SEQ: sid, **extra},
        )
    compare = {
        k: [v["status"], v.get("body") if v["status"] == 200 else shape(v.get("body"))]
        for k, v in raw.items()
    }
    return compare, raw


# --- 19. HTTP details ---------------------------------------------------------------------


@scenario(
    "19",
    "19",
    "GET /predictions, extra path segments, error body, unknown version",
    "torchserve",
    improvement="a handler that raises is a 500 InternalServerException (Podium's one error "
    "table: the model failed, the server did not), where TorchServe answers 503; the rest is "
    "TorchServe's (docs/torchserve.md, Differences from TorchServe)",
)
def http_details(addr):
    raw = {
        "GET /predictions/ts_echo": http("GET", _inf(addr, "/predictions/ts_echo")),
        "POST /predictions/ts_echo/1.0/extra/path": http(
            "POST", _inf(addr, "/predictions/ts_echo/1.0/extra/path"), json={"a": 1}
        ),
        "handler raises": http("POST", _inf(addr, "/predictions/ts_echo"), json={"fail": "x"}),
        "unknown version 9.9": http("POST", _inf(addr, "/predictions/ts_echo/9.9"), json={"a": 1}),
        "unknown model": http("POST", _inf(addr, "/predictions/nope"), json={"a": 1}),
    }
    compare = {k: status_and_shape(v) for k, v in raw.items()}
    for k in ("unknown version 9.9", "handler raises"):
        body = raw[k].get("body")
        if isinstance(body, dict) and "type" in body:
            compare[k]["type"] = body["type"]
    return compare, raw


# --- 20. management details ---------------------------------------------------------------


@scenario(
    "20",
    "20",
    "describe fields (REST) and gRPC management msg texts",
    "torchserve",
    improvement="describe has every field of TorchServe 0.12's, then Podium's additions "
    "(jobQueueSize, default, state, workerKind, queue; per worker kind and busy): "
    "docs/management.md",
)
def management(addr):
    described = http("GET", _mgmt(addr, "/models/ts_stateful"))
    body = described.get("body")
    entry = body[0] if isinstance(body, list) and body else {}
    compare: dict[str, Any] = {
        "describe keys": sorted(entry) if isinstance(entry, dict) else None,
        "worker keys": sorted((entry.get("workers") or [{}])[0])
        if isinstance(entry, dict)
        else None,
    }
    _, _, m_pb2, m_grpc = _ts_stubs()
    channel = grpc.insecure_channel(addr["grpc_management"])
    msgs: dict[str, Any] = {}
    try:
        stub = m_grpc.ManagementAPIsServiceStub(channel)
        calls = [
            (
                "register ts_echo_v2.mar",
                stub.RegisterModel,
                m_pb2.RegisterModelRequest(
                    url="ts_echo_v2.mar", initial_workers=1, synchronous=True
                ),
            ),
            (
                "scale ts_echo 2.0 to 1",
                stub.ScaleWorker,
                m_pb2.ScaleWorkerRequest(
                    model_name="ts_echo", model_version="2.0", min_worker=1, synchronous=True
                ),
            ),
            (
                "set-default ts_echo 2.0",
                stub.SetDefault,
                m_pb2.SetDefaultRequest(model_name="ts_echo", model_version="2.0"),
            ),
            (
                "set-default ts_echo 1.0",
                stub.SetDefault,
                m_pb2.SetDefaultRequest(model_name="ts_echo", model_version="1.0"),
            ),
            (
                "unregister ts_echo 2.0",
                stub.UnregisterModel,
                m_pb2.UnregisterModelRequest(model_name="ts_echo", model_version="2.0"),
            ),
        ]
        for label, call, req in calls:
            try:
                msgs[label] = call(req, timeout=120).msg
            except grpc.RpcError as exc:
                msgs[label] = grpc_error(exc)
    finally:
        channel.close()
    compare["gRPC msg"] = norm(msgs)
    return compare, {"describe": described, "grpc": msgs}


# --- 21. sequence capacity ----------------------------------------------------------------


@scenario(
    "21",
    "21",
    "six anonymous requests to ts_capacity (maxNumSequence not set)",
    "torchserve",
    improvement="TorchServe's default maxNumSequence (1) locks new sequences out; Podium's "
    "default is 10,000 open sequences (docs/sequences.md, why these defaults)",
)
def capacity(addr):
    raw = [http("POST", _inf(addr, "/predictions/ts_capacity"), content=b"1") for _ in range(6)]
    return [r["status"] for r in raw], raw


# --- intermediate responses and explanations (issue 22) ----------------------------------


def _rpc(call: Any) -> Any:
    """``call()``'s answer, or the gRPC error it ended with."""
    try:
        return call()
    except grpc.RpcError as exc:
        return grpc_error(exc)


@scenario(
    "T3",
    "22",
    "a handler that sends intermediate responses (TorchServe's own test handler): REST "
    "/predictions, unary gRPC Predictions, StreamPredictions",
    "torchserve",
    improvement="unary Predictions answers the first item on both; TorchServe 0.12's worker then "
    "answers no further call (DEADLINE_EXCEEDED), Podium stops the handler at its next send and "
    "serves on (docs/torchserve.md, Streaming)",
)
def intermediate(addr):
    inf_pb2, inf_grpc, _, _ = _ts_stubs()
    chunks: list[str] = []
    with httpx.Client(timeout=TIMEOUT) as client:
        with client.stream("POST", _inf(addr, "/predictions/ts_intermediate"), json=42) as r:
            for chunk in r.iter_raw():
                if chunk:
                    chunks.append(chunk.decode(errors="replace"))
            rest = {
                "status": r.status_code,
                "chunked": r.headers.get("transfer-encoding"),
                "body": "".join(chunks),
            }
    out: dict[str, Any] = {"rest": rest}
    channel = grpc.insecure_channel(addr["grpc"])
    try:
        stub = inf_grpc.InferenceAPIsServiceStub(channel)
        request = inf_pb2.PredictionsRequest(model_name="ts_intermediate", input={"data": b"42"})

        def unary() -> str:
            return stub.Predictions(request, timeout=TIMEOUT).prediction.decode(errors="replace")

        def streamed() -> list[str]:
            calls = stub.StreamPredictions(request, timeout=TIMEOUT)
            return [r.prediction.decode(errors="replace") for r in calls]

        out["grpc_predictions"] = _rpc(unary)
        out["grpc_stream"] = _rpc(streamed)
        # is the worker free again? a second unary call
        out["grpc_predictions_again"] = _rpc(unary)
    finally:
        channel.close()
    return out, out


@scenario(
    "T4",
    "22",
    "/explanations on a BaseHandler subclass with get_insights; /predictions beside it",
    "torchserve",
)
def explanations(addr):
    body = {"x": 3, "target": 1}
    raw = {
        "predict": http("POST", _inf(addr, "/predictions/ts_explain"), json=body),
        "explain": http("POST", _inf(addr, "/explanations/ts_explain"), json=body),
        "explain_version": http("POST", _inf(addr, "/explanations/ts_explain/1.0"), json=body),
        "explain_unknown": http("POST", _inf(addr, "/explanations/nope"), json=body),
    }
    return {k: status_and_shape(v) for k, v in raw.items()}, raw


# --- one config.properties, one start command (issue 22) ----------------------------------

#: TorchServe's frontend names (its default metrics.yaml; system metrics are off) and the
#: custom_metrics handler's, declared in its metrics.yaml or auto-detected.
TS_NAMES = (
    "ts_inference_requests_total", "ts_inference_latency_microseconds",
    "ts_queue_latency_microseconds", "Requests2XX", "Requests4XX", "Requests5XX", "QueueTime",
    "WorkerThreadTime", "WorkerLoadTime", "HandlerTime", "PredictionTime",
    "InferenceRequestCount", "InitializeCallCount", "PreprocessCallCount",
    "PostprocessCallCount", "RequestBatchSize", "SizeOfImage", "HandlerMethodTime",
    "ExamplePercentMetric",
)  # fmt: skip
#: Values that both servers must agree on after the scenario's requests.
COUNTED = ("ts_inference_requests_total", "InferenceRequestCount", "PreprocessCallCount",
           "RequestBatchSize", "InitializeCallCount")  # fmt: skip


def _exposition(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """Prometheus text by metric name (a counter's ``_total`` sample under its own name): each
    sample's name, labels and value."""
    import re

    found: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        if m is None or line.startswith("#"):
            continue
        sample, labels, value = (
            m.group(1),
            dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")),
            m.group(3),
        )
        base = (
            sample[: -len("_total")]
            if sample.endswith("_total") and sample[:-6] in TS_NAMES
            else sample
        )
        found.setdefault(base, []).append((sample, labels, float(value)))
    return found


@scenario(
    "T5",
    "22",
    "TorchServe's custom_metrics example, served by the same start command and config.properties "
    "(metrics_mode=prometheus, metrics_config, models={...}): predictions, then the TorchServe "
    "names on /metrics",
    "ts_setup",
)
def custom_metrics_setup(addr):
    answers = [http("POST", _inf(addr, "/predictions/ts_metrics"), json={"a": i}) for i in range(3)]
    answers.append(http("POST", _inf(addr, "/predictions/ts_metrics/1.0"), json={"a": 9}))
    scraped = httpx.get(f"http://{addr['metrics']}/metrics", timeout=TIMEOUT).text
    samples = _exposition(scraped)
    names: dict[str, Any] = {}
    for name in TS_NAMES:
        rows = samples.get(name, [])
        names[name] = {
            "sample_names": sorted({r[0] for r in rows}),
            # labels TorchServe has: Podium adds model/version to handler metrics
            "labels": sorted({k for r in rows for k in r[1] if k not in ("model", "version")}),
        }
        if name in COUNTED:
            names[name]["values"] = sorted(
                (
                    ",".join(f"{k}={v}" for k, v in sorted(r[1].items())
                             if k not in ("model", "version", "hostname", "Hostname")),
                    r[2],
                )
                for r in rows
            )  # fmt: skip
    compare = {
        "answers": [status_and_shape(a) for a in answers],
        "metrics": names,
    }
    return compare, {"answers": answers, "metrics": scraped[-6000:]}
