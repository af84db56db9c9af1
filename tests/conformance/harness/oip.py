"""Open Inference Protocol scenarios: the same requests to the real Triton and to Podium.

Numbered like the items of issue 12; ``B*`` are the basics every client meets first. The models
are twins (``models/triton`` and ``models/podium``): ``simple`` (INT32 sum/difference),
``simple_string`` (the same over BYTES), ``simple_identity`` (BYTES), ``identity_fp32``,
``accumulator`` (a sequence: START begins afresh), ``versioned`` (versions 1 and 2) and
``repeat_int32`` (a stream of answers).
"""

from __future__ import annotations

import functools
import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.grpc import service_pb2, service_pb2_grpc

from .common import grpc_error, http, norm, scenario, status_and_shape

SIMPLE = {
    "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
    ]
}


def _url(addr: dict[str, str], path: str) -> str:
    return f"http://{addr['http']}{path}"


def _resp(r: dict[str, Any]) -> tuple[Any, Any]:
    return status_and_shape(r), r


def _outputs(body: Any) -> Any:
    """The part of an OIP infer answer that must match: outputs by name, shape, datatype, data."""
    if not isinstance(body, dict) or "outputs" not in body:
        return body
    return sorted(
        (
            {k: o.get(k) for k in ("name", "shape", "datatype", "data")}
            for o in body.get("outputs", [])
        ),
        key=lambda o: o["name"],
    )


# --- basics -------------------------------------------------------------------------------


@scenario("B1", "basic", "health: GET /v2/health/live and /ready, model ready", "oip")
def health(addr):
    out = {
        p: http("GET", _url(addr, p))["status"]
        for p in ("/v2/health/live", "/v2/health/ready", "/v2/models/simple/ready")
    }
    return out, out


@scenario("B2", "basic", "server metadata GET /v2 (name and version masked)", "oip")
def server_metadata(addr):
    r = http("GET", _url(addr, "/v2"))
    body = r.get("body") or {}
    compare = {
        "status": r["status"],
        "keys": sorted(body),
        "extensions": sorted(body.get("extensions", [])),
    }
    return compare, r


@scenario("B3", "basic", "model metadata GET /v2/models/simple", "oip")
def model_metadata(addr):
    r = http("GET", _url(addr, "/v2/models/simple"))
    body = r.get("body")
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in ("platform", "parameters")}
    return {"status": r["status"], "body": norm(body)}, r


@scenario("B4", "basic", "infer FP32/INT32 over REST JSON (simple)", "oip")
def infer_json(addr):
    r = http("POST", _url(addr, "/v2/models/simple/infer"), json=SIMPLE)
    return {"status": r["status"], "outputs": _outputs(r.get("body"))}, r


def _simple_inputs(mod):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [
        mod.InferInput("INPUT0", [1, 16], "INT32"),
        mod.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


@scenario("B5", "basic", "tritonclient.http infer (binary tensors) on simple", "oip")
def infer_tc_http(addr):
    with thttp.InferenceServerClient(addr["http"]) as c:
        res = c.infer("simple", _simple_inputs(thttp))
        out = {n: res.as_numpy(n).tolist() for n in ("OUTPUT0", "OUTPUT1")}
    return out, out


@scenario("B6", "basic", "tritonclient.grpc infer on simple", "oip")
def infer_tc_grpc(addr):
    with tgrpc.InferenceServerClient(addr["grpc"]) as c:
        res = c.infer("simple", _simple_inputs(tgrpc))
        out = {n: res.as_numpy(n).tolist() for n in ("OUTPUT0", "OUTPUT1")}
    return out, out


def _string_inputs(mod):
    a = np.array([str(i).encode() for i in range(16)], dtype=object).reshape(1, 16)
    b = np.array([b"1"] * 16, dtype=object).reshape(1, 16)
    inputs = [
        mod.InferInput("INPUT0", [1, 16], "BYTES"),
        mod.InferInput("INPUT1", [1, 16], "BYTES"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


@scenario("B7", "basic", "tritonclient http + grpc infer BYTES (simple_string)", "oip")
def infer_tc_bytes(addr):
    out = {}
    for kind, mod, url in (("http", thttp, addr["http"]), ("grpc", tgrpc, addr["grpc"])):
        try:
            with mod.InferenceServerClient(url) as c:
                res = c.infer("simple_string", _string_inputs(mod))
                out[kind] = [x.decode() for x in res.as_numpy("OUTPUT0").ravel().tolist()]
        except Exception as exc:
            out[kind] = grpc_error(exc)["code"]
    return out, out


def _kserve(kind: str, addr: str) -> tuple[Any, Any]:
    p = subprocess.run(
        [sys.executable, "-m", "harness.kserve_probe", kind, addr],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        out = {"exception": "probe failed", "message": (p.stdout + p.stderr)[-500:]}
    compare = {k: v for k, v in out.items() if k != "message"}
    return compare, out


@scenario("B8", "basic", "KServe SDK InferenceRESTClient (v2): model ready, infer on simple", "oip")
def kserve_rest(addr):
    return _kserve("rest", addr["http"])


@scenario("B9", "basic", "KServe SDK InferenceGRPCClient: model ready, infer on simple", "oip")
def kserve_grpc(addr):
    return _kserve("grpc", addr["grpc"])


# --- 1. REST model repository -------------------------------------------------------------


@scenario("1", "1", "REST repository: index, unload, load of simple", "oip")
def repository(addr):
    raw = {
        "index": http("POST", _url(addr, "/v2/repository/index"), json={}),
        "unload": http("POST", _url(addr, "/v2/repository/models/simple/unload"), json={}),
        "ready_after_unload": http("GET", _url(addr, "/v2/models/simple/ready")),
        "load": http("POST", _url(addr, "/v2/repository/models/simple/load"), json={}),
        "ready_after_load": http("GET", _url(addr, "/v2/models/simple/ready")),
    }
    index = raw["index"].get("body")
    compare = {k: v["status"] for k, v in raw.items()}
    if isinstance(index, list):
        compare["index_entry_keys"] = sorted({k for e in index for k in e})
        compare["simple_entry"] = norm([e for e in index if e.get("name") == "simple"])
    return compare, raw


# --- 2. sequences ---------------------------------------------------------------------------


def _seq_infer(addr, seq_id, value, start=False, end=False):
    body = {
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [value]}],
        "parameters": {"sequence_id": seq_id, "sequence_start": start, "sequence_end": end},
    }
    r = http("POST", _url(addr, "/v2/models/accumulator/infer"), json=body)
    b = r.get("body")
    if r["status"] == 200 and isinstance(b, dict):
        return r["status"], b["outputs"][0]["data"][0], r
    return r["status"], None, r


@scenario("2", "2", "sequence START on a new, a live and an ended id (accumulator, REST)", "oip")
def sequence_start(addr):
    steps = [
        ("start new id 5001 with 3", 5001, 3, True, False),
        ("continue with 4", 5001, 4, False, False),
        ("START again on the live id with 10", 5001, 10, True, False),
        ("continue with 1 and end", 5001, 1, False, True),
        ("START on the ended id with 2", 5001, 2, True, False),
        ("end it with 0", 5001, 0, False, True),
        ("string id: start", "seq-a", 7, True, False),
        ("string id: end with 1", "seq-a", 1, False, True),
    ]
    compare, raw = [], {}
    for label, sid, value, start, end in steps:
        status, out, r = _seq_infer(addr, sid, value, start, end)
        compare.append([label, status, out])
        raw[label] = r
    return compare, raw


# --- 3 and 13. ModelStreamInfer ------------------------------------------------------------


def _raw_stream(addr, requests, expect, timeout=30.0):
    """Send ``requests`` back to back on one ModelStreamInfer stream and read ``expect``
    messages. Each message is decoded in Triton's framing (ModelStreamInferResponse) or, when
    that does not fit, as a bare ModelInferResponse (MLServer's framing)."""
    channel = grpc.insecure_channel(addr["grpc"])
    try:
        call = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=service_pb2.ModelInferRequest.SerializeToString,
            response_deserializer=lambda b: b,
        )
        out: list[Any] = []
        stream = call(iter(requests), timeout=timeout)
        try:
            for message in stream:
                out.append(_decode(message))
                if len(out) >= expect:
                    break
        except grpc.RpcError as exc:
            out.append({"rpc_error": grpc_error(exc)})
        finally:
            stream.cancel()
        return out
    finally:
        channel.close()


def _decode(message: bytes) -> dict[str, Any]:
    plain = service_pb2.ModelInferResponse()
    with_frame = service_pb2.ModelStreamInferResponse()
    try:
        with_frame.ParseFromString(message)
        if with_frame.error_message or with_frame.infer_response.outputs:
            return {
                "framing": "triton",
                **_msg(with_frame.infer_response, with_frame.error_message),
            }
    except Exception:
        pass
    plain.ParseFromString(message)
    return {"framing": "mlserver", **_msg(plain, "")}


def _msg(resp, error: str) -> dict[str, Any]:
    if error:
        return {"error": error}
    values = []
    for i, o in enumerate(resp.outputs):
        if i < len(resp.raw_output_contents):
            dtype = {"INT32": np.int32, "UINT32": np.uint32, "INT64": np.int64}.get(o.datatype)
            data = (
                np.frombuffer(resp.raw_output_contents[i], dtype=dtype).tolist() if dtype else "?"
            )
        else:
            data = list(o.contents.int_contents) or list(o.contents.int64_contents)
        values.append([o.name, data])
    params = {k: str(v).strip() for k, v in resp.parameters.items()}
    return {"id": resp.id, "outputs": values, "parameters": params}


def _acc_request(seq, value, start, end, rid):
    req = service_pb2.ModelInferRequest(model_name="accumulator", id=rid)
    t = req.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1])
    t.contents.int_contents.append(value)
    req.parameters["sequence_id"].int64_param = seq
    req.parameters["sequence_start"].bool_param = start
    req.parameters["sequence_end"].bool_param = end
    return req


@scenario(
    "3",
    "3",
    "8 requests of one sequence written back to back on one ModelStreamInfer stream",
    "oip",
)
def stream_pipelined(addr):
    reqs = [_acc_request(6001, i + 1, i == 0, i == 7, f"r{i}") for i in range(8)]
    got = _raw_stream(addr, reqs, 8)
    compare = ["error" if "error" in g else g.get("outputs") or g.get("rpc_error") for g in got]
    return compare, got


@scenario(
    "13", "13", "tritonclient's stream API: one request to simple, 3 items of repeat_int32", "oip"
)
def stream_tritonclient(addr):
    results: queue.Queue[Any] = queue.Queue()

    def callback(result, error):
        results.put(error if error is not None else result)

    out: dict[str, Any] = {}
    with tgrpc.InferenceServerClient(addr["grpc"]) as c:
        c.start_stream(callback=callback, stream_timeout=30)
        try:
            c.async_stream_infer("simple", _simple_inputs(tgrpc), request_id="s1")
            out["simple"] = _take(results, 1)
            ins = [
                tgrpc.InferInput("IN", [3], "INT32"),
                tgrpc.InferInput("DELAY", [3], "UINT32"),
                tgrpc.InferInput("WAIT", [1], "UINT32"),
            ]
            ins[0].set_data_from_numpy(np.array([100, 101, 102], dtype=np.int32))
            ins[1].set_data_from_numpy(np.array([10, 10, 10], dtype=np.uint32))
            ins[2].set_data_from_numpy(np.array([0], dtype=np.uint32))
            c.async_stream_infer(
                "repeat_int32", ins, request_id="r1", enable_empty_final_response=True
            )
            out["repeat_int32"] = _take(results, 4)
        finally:
            c.stop_stream(cancel_requests=True)
    return out, out


def _take(results: queue.Queue[Any], n: int, timeout: float = 15.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        try:
            item = results.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        if isinstance(item, Exception):
            got.append({"error": grpc_error(item)["message"][:200]})
            continue
        resp = item.get_response()
        final = resp.parameters.get("triton_final_response")
        entry: dict[str, Any] = {
            "outputs": {o.name: item.as_numpy(o.name).ravel().tolist() for o in resp.outputs}
        }
        if final is not None:
            entry["triton_final_response"] = final.bool_param
        got.append(entry)
    if len(got) < n:
        got.append({"timeout": f"{len(got)} of {n} answers within {timeout:.0f} s"})
    return got


# --- 4. BYTES in JSON ---------------------------------------------------------------------


@scenario("4", "4", "BYTES outputs in a plain JSON answer (simple_string)", "oip")
def bytes_json(addr):
    body = {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [1, 16],
                "datatype": "BYTES",
                "data": [str(i) for i in range(16)],
            },
            {"name": "INPUT1", "shape": [1, 16], "datatype": "BYTES", "data": ["1"] * 16},
        ]
    }
    r = http("POST", _url(addr, "/v2/models/simple_string/infer"), json=body)
    return {"status": r["status"], "outputs": _outputs(r.get("body"))}, r


# --- 5. invalid inputs --------------------------------------------------------------------


def _one(name="INPUT0", datatype="FP32", shape=None, data=None):
    return {
        "inputs": [
            {"name": name, "datatype": datatype, "shape": shape or [2], "data": data or [1.0, 2.0]}
        ]
    }


INVALID = {
    "datatype INT322": _one(datatype="INT322"),
    "shape [2] with 3 elements": _one(data=[1.0, 2.0, 3.0]),
    'data {"a": 1}': _one(data={"a": 1}),  # type: ignore[arg-type]
    "strings as FP32 data": _one(data=["x", "y"]),  # type: ignore[list-item]
    "missing declared input (INPUT9 sent)": _one(name="INPUT9"),
    "wrong datatype for the declared input (INT32)": _one(datatype="INT32", data=[1, 2]),
    "wrong rank for the declared input ([1, 2])": _one(shape=[1, 2]),
}


@scenario("5", "5", "invalid inputs over REST JSON to identity_fp32 (status per case)", "oip")
def invalid_rest(addr):
    raw = {
        k: http("POST", _url(addr, "/v2/models/identity_fp32/infer"), json=v)
        for k, v in INVALID.items()
    }
    return {k: v["status"] for k, v in raw.items()}, raw


@scenario(
    "5g", "5", "invalid inputs over gRPC typed contents to identity_fp32 (code per case)", "oip"
)
def invalid_grpc(addr):
    cases = {
        "datatype INT322": ("INPUT0", "INT322", [2], [1.0, 2.0]),
        "shape [2] with 3 elements": ("INPUT0", "FP32", [2], [1.0, 2.0, 3.0]),
        "missing declared input (INPUT9 sent)": ("INPUT9", "FP32", [2], [1.0, 2.0]),
        "wrong rank for the declared input ([1, 2])": ("INPUT0", "FP32", [1, 2], [1.0, 2.0]),
    }
    channel = grpc.insecure_channel(addr["grpc"])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    compare, raw = {}, {}
    try:
        for label, (name, dt, shp, data) in cases.items():
            req = service_pb2.ModelInferRequest(model_name="identity_fp32")
            t = req.inputs.add(name=name, datatype=dt, shape=shp)
            t.contents.fp32_contents.extend(data)
            try:
                resp = stub.ModelInfer(req, timeout=30)
                compare[label] = "OK"
                raw[label] = {
                    "outputs": [(o.name, o.datatype, list(o.shape)) for o in resp.outputs]
                }
            except grpc.RpcError as exc:
                compare[label] = exc.code().name
                raw[label] = grpc_error(exc)
    finally:
        channel.close()
    return compare, raw


# --- 6. versions --------------------------------------------------------------------------


@scenario("6", "6", "version '1' of simple, metadata versions of simple and versioned", "oip")
def versions(addr):
    raw = {
        "infer simple v1 (REST)": http(
            "POST", _url(addr, "/v2/models/simple/versions/1/infer"), json=SIMPLE
        ),
        "metadata simple": http("GET", _url(addr, "/v2/models/simple")),
        "metadata versioned": http("GET", _url(addr, "/v2/models/versioned")),
        "metadata versioned v1": http("GET", _url(addr, "/v2/models/versioned/versions/1")),
        "infer versioned (no version)": http(
            "POST",
            _url(addr, "/v2/models/versioned/infer"),
            json=_one(data=[1.0, 2.0]),
        ),
    }
    compare: dict[str, Any] = {k: v["status"] for k, v in raw.items()}
    for k in ("metadata simple", "metadata versioned", "metadata versioned v1"):
        body = raw[k].get("body")
        compare[k + " versions"] = body.get("versions") if isinstance(body, dict) else None
    body = raw["infer versioned (no version)"].get("body")
    compare["default version answers"] = _outputs(body)
    with tgrpc.InferenceServerClient(addr["grpc"]) as c:
        try:
            c.infer("simple", _simple_inputs(tgrpc), model_version="1")
            compare["tritonclient.grpc infer simple model_version='1'"] = "OK"
        except Exception as exc:
            compare["tritonclient.grpc infer simple model_version='1'"] = grpc_error(exc)["code"]
    return compare, raw


# --- 7. readiness of an unknown model -----------------------------------------------------


@scenario("7", "7", "readiness of an unknown model: gRPC is_model_ready, REST /ready", "oip")
def unknown_ready(addr):
    out: dict[str, Any] = {}
    with tgrpc.InferenceServerClient(addr["grpc"]) as c:
        try:
            out["grpc is_model_ready('nope')"] = c.is_model_ready("nope")
        except Exception as exc:
            out["grpc is_model_ready('nope')"] = {"raises": grpc_error(exc)["code"]}
    out["REST GET /v2/models/nope/ready"] = http("GET", _url(addr, "/v2/models/nope/ready"))[
        "status"
    ]
    return out, out


# --- 8. statistics ------------------------------------------------------------------------


def _keys(value: Any, prefix: str = "") -> list[str]:
    """Every key path of a JSON value (lists: their first element), for comparing shapes."""
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append(prefix + k)
            out.extend(_keys(v, prefix + k + "."))
    elif isinstance(value, list) and value:
        out.extend(_keys(value[0], prefix))
    return sorted(set(out))


@scenario("8", "8", "statistics: GET /v2/models/simple/stats and gRPC ModelStatistics", "oip")
def statistics(addr):
    http("POST", _url(addr, "/v2/models/simple/infer"), json=SIMPLE)
    rest = http("GET", _url(addr, "/v2/models/simple/stats"))
    compare: dict[str, Any] = {"REST status": rest["status"]}
    if rest["status"] == 200 and isinstance(rest.get("body"), dict):
        compare["REST keys"] = _keys(rest["body"])
        stats = rest["body"].get("model_stats") or [{}]
        compare["REST inference_count"] = stats[0].get("inference_count")
    with tgrpc.InferenceServerClient(addr["grpc"]) as c:
        try:
            g = c.get_inference_statistics("simple", as_json=True)
            compare["gRPC keys"] = _keys(g)
        except Exception as exc:
            g = grpc_error(exc)
            compare["gRPC"] = g["code"]
    return compare, {"rest": rest, "grpc": g}


# --- 9. model config ----------------------------------------------------------------------


def _config_view(cfg: Any) -> Any:
    if not isinstance(cfg, dict):
        return cfg
    cfg = cfg.get("config", cfg)

    def io(items):
        return [
            {"name": i.get("name"), "data_type": i.get("data_type"), "dims": i.get("dims")}
            for i in items or []
        ]

    return {
        "name": cfg.get("name"),
        "max_batch_size": cfg.get("max_batch_size", 0),
        "input": io(cfg.get("input")),
        "output": io(cfg.get("output")),
        "has sequence_batching": "sequence_batching" in cfg,
    }


@scenario("9", "9", "model configuration: GET /v2/models/{m}/config, gRPC ModelConfig", "oip")
def model_config(addr):
    rest = {m: http("GET", _url(addr, f"/v2/models/{m}/config")) for m in ("simple", "accumulator")}
    compare: dict[str, Any] = {
        m: {"status": r["status"], "config": _config_view(r.get("body"))}
        if r["status"] == 200
        else {"status": r["status"]}
        for m, r in rest.items()
    }
    with tgrpc.InferenceServerClient(addr["grpc"]) as c:
        try:
            g = c.get_model_config("simple", as_json=True)
            compare["gRPC simple"] = _config_view(g)
        except Exception as exc:
            g = grpc_error(exc)
            compare["gRPC simple"] = g["code"]
    return compare, {"rest": rest, "grpc": g}


# --- 10. system shared memory -------------------------------------------------------------


@scenario(
    "10", "10", "system shared memory: register, status, infer from/to regions, unregister", "oip"
)
def shared_memory(addr):
    import tritonclient.utils.shared_memory as shm

    compare: dict[str, Any] = {}
    for kind, mod, url in (("http", thttp, addr["http"]), ("grpc", tgrpc, addr["grpc"])):
        key = f"/podium_conf_{kind}_{threading.get_ident()}"
        handle = shm.create_shared_memory_region(f"conf_{kind}", key, 64 * 4)
        steps: dict[str, Any] = {}
        try:
            with mod.InferenceServerClient(url) as c:
                a = np.arange(16, dtype=np.int32).reshape(1, 16)
                b = np.ones((1, 16), dtype=np.int32)
                shm.set_shared_memory_region(handle, [a, b])
                for name, call in (
                    ("unregister all", lambda c=c: c.unregister_system_shared_memory()),
                    (
                        "register",
                        lambda c=c, key=key, kind=kind: c.register_system_shared_memory(
                            f"conf_{kind}", key, 256
                        ),
                    ),
                    ("status", lambda c=c: len(c.get_system_shared_memory_status())),
                ):
                    try:
                        result = call()
                        steps[name] = "OK" if name != "status" else result
                    except Exception as exc:
                        steps[name] = grpc_error(exc)["code"]
                try:
                    ins = [
                        mod.InferInput("INPUT0", [1, 16], "INT32"),
                        mod.InferInput("INPUT1", [1, 16], "INT32"),
                    ]
                    ins[0].set_shared_memory(f"conf_{kind}", 64, 0)
                    ins[1].set_shared_memory(f"conf_{kind}", 64, 64)
                    outs = [
                        mod.InferRequestedOutput("OUTPUT0"),
                        mod.InferRequestedOutput("OUTPUT1"),
                    ]
                    outs[0].set_shared_memory(f"conf_{kind}", 64, 128)
                    outs[1].set_shared_memory(f"conf_{kind}", 64, 192)
                    c.infer("simple", ins, outputs=outs)
                    got = shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=128)
                    steps["infer via regions, OUTPUT0"] = got.ravel().tolist()[:4]
                except Exception as exc:
                    steps["infer via regions, OUTPUT0"] = grpc_error(exc)["code"]
                try:
                    ins = [
                        mod.InferInput("INPUT0", [1, 16], "INT32"),
                        mod.InferInput("INPUT1", [1, 16], "INT32"),
                    ]
                    ins[0].set_shared_memory(f"conf_{kind}", 64, 250)
                    ins[1].set_shared_memory(f"conf_{kind}", 64, 0)
                    c.infer("simple", ins)
                    steps["offset past the region"] = "OK"
                except Exception as exc:
                    steps["offset past the region"] = grpc_error(exc)["code"]
                try:
                    c.unregister_system_shared_memory(f"conf_{kind}")
                    steps["unregister"] = "OK"
                except Exception as exc:
                    steps["unregister"] = grpc_error(exc)["code"]
        finally:
            shm.destroy_shared_memory_region(handle)
        compare[kind] = steps
    return compare, compare


# --- 11. raw output contents --------------------------------------------------------------


@scenario("11", "11", "gRPC ModelInfer with raw_input_contents: is the answer raw?", "oip")
def raw_outputs(addr):
    channel = grpc.insecure_channel(addr["grpc"])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    try:
        out = {}
        for label, typed in (("raw request", False), ("typed request", True)):
            req = service_pb2.ModelInferRequest(model_name="simple")
            for name, values in (("INPUT0", list(range(16))), ("INPUT1", [1] * 16)):
                t = req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
                if typed:
                    t.contents.int_contents.extend(values)
                else:
                    req.raw_input_contents.append(np.array(values, dtype=np.int32).tobytes())
            resp = stub.ModelInfer(req, timeout=30)
            out[label] = {
                "raw_output_contents": len(resp.raw_output_contents),
                "typed int_contents": [len(o.contents.int_contents) for o in resp.outputs],
            }
        return out, out
    finally:
        channel.close()


# --- 12. Triton's generate ----------------------------------------------------------------


@scenario("12", "12", 'generate with nested lists {"INPUT0": [[...]]} on identity_fp32', "oip")
def generate_nested(addr):
    raw = {
        "nested [[1.5, 2.5]]": http(
            "POST", _url(addr, "/v2/models/identity_fp32/generate"), json={"INPUT0": [[1.5, 2.5]]}
        ),
        "flat [1.5, 2.5]": http(
            "POST", _url(addr, "/v2/models/identity_fp32/generate"), json={"INPUT0": [1.5, 2.5]}
        ),
    }
    compare = {}
    for k, r in raw.items():
        body = r.get("body")
        compare[k] = {
            "status": r["status"],
            "OUTPUT0": body.get("OUTPUT0") if isinstance(body, dict) else None,
        }
    return compare, raw


# --- 14. perf_analyzer ---------------------------------------------------------------------

_ROOT = Path(__file__).resolve().parents[3]
#: perf_analyzer's modes run against each server: what it sends, and over which protocol.
_PERF_MODES = {
    "http": ("http", []),
    "grpc": ("grpc", []),
    "http -x 1": ("http", ["-x", "1"]),
    "grpc --async": ("grpc", ["--async"]),
    "grpc --streaming": ("grpc", ["--streaming"]),
    "http --shared-memory system": ("http", ["--shared-memory", "system"]),
    "grpc --shared-memory system": ("grpc", ["--shared-memory", "system"]),
}


@functools.cache
def _perf_analyzer() -> tuple[str | None, str]:
    """perf_analyzer (tritonclient 2.51.0's binary), as ``bench/perf_analyzer.py --setup``
    installs it, or None and why not."""
    done = subprocess.run(
        [sys.executable, str(_ROOT / "bench" / "perf_analyzer.py"), "--setup"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        return None, (done.stdout + done.stderr)[-1000:]
    return done.stdout.strip().splitlines()[-1], ""


@scenario(
    "14",
    "14",
    "perf_analyzer (2.51) on identity_fp32: REST, gRPC, a pinned version, async, streaming, "
    "system shared memory; does it read the server's statistics?",
    "oip",
)
def perf_analyzer(addr):
    binary, why = _perf_analyzer()
    if binary is None:
        return {"perf_analyzer": "cannot be installed"}, {"setup": why}
    compare: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    for mode, (protocol, extra) in _PERF_MODES.items():
        argv = [binary, "-m", "identity_fp32", "-u", addr[protocol], "-i", protocol]
        argv += ["--shape", "INPUT0:16", "--concurrency-range", "2", "-p", "300"]
        argv += ["-s", "1000", "-r", "3", *extra]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        said = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        if done.returncode == 0:
            compare[mode] = "measured, server statistics read" if "Server:" in said else "measured"
            raw[mode] = [line for line in said if "throughput" in line.lower()][-1:]
        else:
            compare[mode] = f"failed (exit {done.returncode})"
            raw[mode] = said[-3:]
    return compare, raw


# Last of the OIP scenarios, each on its own: Triton 2.51 crashes (SIGSEGV) on such a shape over
# REST; the harness restarts a server that died and says so in the row.


@scenario("5h", "5", "shape [2**62] over REST JSON to identity_fp32", "oip")
def huge_shape_rest(addr):
    r = http("POST", _url(addr, "/v2/models/identity_fp32/infer"), json=_one(shape=[2**62]))
    return {"status": r["status"]}, r


@scenario("5hg", "5", "shape [2**62] over gRPC typed contents to identity_fp32", "oip")
def huge_shape_grpc(addr):
    channel = grpc.insecure_channel(addr["grpc"])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    try:
        req = service_pb2.ModelInferRequest(model_name="identity_fp32")
        t = req.inputs.add(name="INPUT0", datatype="FP32", shape=[2**62])
        t.contents.fp32_contents.extend([1.0, 2.0])
        try:
            stub.ModelInfer(req, timeout=30)
            return {"code": "OK"}, {"code": "OK"}
        except grpc.RpcError as exc:
            return {"code": exc.code().name}, grpc_error(exc)
    finally:
        channel.close()
