"""Cases for Truss's own test trusses (``trusses/upstream``, from ``truss/tests/test_data``),
many of them the requests of Truss's own integration tests (``truss/tests/test_model_inference.py``)."""

from __future__ import annotations

import threading
import time
from typing import Any

from .cases import Ctx, case, probes, truss

UP = "upstream"

# --- test_basic_truss: the protocol surface, with a model that echoes its input -----------------

truss("test_basic_truss", UP)
B = "test_basic_truss"


@case(B, "probes", "GET /, /v1/models/model, /v1/models/model/loaded, /ping")
def basic_probes(ctx: Ctx) -> Any:
    return probes(ctx)


@case(B, "any-name", "GET /v1/models/other-name and its /loaded (Truss ignores the name)")
def any_name(ctx: Ctx) -> Any:
    return {
        "ready": ctx.get("/v1/models/other-name"),
        "loaded": ctx.get("/v1/models/other-name/loaded"),
    }


@case(B, "predict-json", "POST /v1/models/model:predict {'a': 1, 'b': [1, 2.5, 'x']}")
def predict_json(ctx: Ctx) -> Any:
    return ctx.predict({"a": 1, "b": [1, 2.5, "x"]})


@case(B, "predict-any-name", "POST /v1/models/whatever:predict (any model name)")
def predict_any_name(ctx: Ctx) -> Any:
    return ctx.post("/v1/models/whatever:predict", json_body={"x": 1})


@case(B, "json-kinds", "POST :predict with a JSON array, string, number, null, unicode")
def json_kinds(ctx: Ctx) -> Any:
    values: list[Any] = [[1, 2], "text", 3.25, None, {"ü": "✓"}]
    return {repr(v): ctx.predict(json_body=v) for v in values}


@case(B, "predict-binary", "POST :predict_binary with a MessagePack body")
def predict_binary(ctx: Ctx) -> Any:
    return ctx.post("/v1/models/model:predict_binary", msgpack_body={"a": [1, 2], "s": "x"})


@case(B, "predict-msgpack", "POST :predict, content-type application/octet-stream (MessagePack)")
def predict_msgpack(ctx: Ctx) -> Any:
    return ctx.predict(msgpack_body={"a": 1, "nested": {"b": [True, None]}})


@case(B, "invocations", "POST /invocations (SageMaker) with JSON")
def invocations(ctx: Ctx) -> Any:
    return ctx.post("/invocations", json_body={"a": 1})


@case(B, "bad-json", "POST :predict with invalid JSON ('{oops')")
def bad_json(ctx: Ctx) -> Any:
    return ctx.predict(body=b"{oops", headers={"content-type": "application/json"})


@case(B, "empty-body", "POST :predict with an empty body")
def empty_body(ctx: Ctx) -> Any:
    return ctx.predict(body=b"")


@case(B, "bad-msgpack", "POST :predict, octet-stream with bytes that are not MessagePack")
def bad_msgpack(ctx: Ctx) -> Any:
    return ctx.predict(body=b"\xc1\xc1", headers={"content-type": "application/octet-stream"})


@case(
    B, "bad-bodies", "MessagePack cut short or with extra bytes; JSON not UTF-8; a lone surrogate"
)
def bad_bodies(ctx: Ctx) -> Any:
    octet = {"content-type": "application/octet-stream"}
    js = {"content-type": "application/json"}
    return {
        "msgpack cut short": ctx.predict(body=b"\x92\x01", headers=octet),
        "msgpack extra bytes": ctx.predict(body=b"\x01\x02", headers=octet),
        "msgpack, a datetime of 5": ctx.predict(body=_bad_datetime(), headers=octet),
        "JSON not UTF-8": ctx.predict(body=b'"\xff"', headers=js),
        "JSON lone surrogate": ctx.predict(body=b'"\\ud800"', headers=js),
    }


def _bad_datetime() -> bytes:
    import msgpack

    # Truss's own datetime extension, with an int where its ISO text goes.
    return msgpack.packb({b"__dt_datetime_iso__": True, b"data": 5})


@case(B, "text-plain", "POST :predict, content-type text/plain with a JSON text")
def text_plain(ctx: Ctx) -> Any:
    return ctx.predict(body=b'{"a": 1}', headers={"content-type": "text/plain"})


@case(B, "no-schema", "GET /v1/models/model/schema of a model without pydantic types")
def no_schema(ctx: Ctx) -> Any:
    return ctx.get("/v1/models/model/schema")


@case(B, "wrong-method", "GET /v1/models/model:predict; POST /v1/models/model; PUT /")
def wrong_method(ctx: Ctx) -> Any:
    from . import wire

    return {
        "GET predict": ctx.get("/v1/models/model:predict"),
        "POST ready": ctx.post("/v1/models/model", json_body={}),
        "PUT /": wire.request(ctx.addr, "PUT", "/", body=b""),
    }


@case(B, "head-options", "HEAD /, HEAD /v1/models/model, OPTIONS /v1/models/model:predict")
def head_options(ctx: Ctx) -> Any:
    from . import wire

    return {
        "HEAD /": wire.request(ctx.addr, "HEAD", "/"),
        "HEAD ready": wire.request(ctx.addr, "HEAD", "/v1/models/model"),
        "OPTIONS predict": wire.request(ctx.addr, "OPTIONS", "/v1/models/model:predict"),
    }


@case(B, "unknown-path", "GET /v2/nothing-here; GET /v1/models")
def unknown_path(ctx: Ctx) -> Any:
    return {"/v2/nothing-here": ctx.get("/v2/nothing-here"), "/v1/models": ctx.get("/v1/models")}


@case(
    B,
    "no-chat",
    "POST /v1/chat/completions, /v1/completions, /v1/embeddings to a predict-only model",
)
def no_chat(ctx: Ctx) -> Any:
    return {
        p: ctx.post(p, json_body={"messages": []})
        for p in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
    }


@case(B, "no-websocket", "/v1/websocket on a model without a websocket method")
def no_websocket(ctx: Ctx) -> Any:
    return ctx.ws(["hello"], receive=0)


@case(B, "metrics", "GET /metrics (status and content type only)")
def metrics(ctx: Ctx) -> Any:
    r = ctx.get("/metrics")
    return {"status": r.get("status"), "content-type": r.get("headers", {}).get("content-type")}


@case(B, "hot-reload", "POST /hot-reload (Truss's development reload of model/)")
def hot_reload(ctx: Ctx) -> Any:
    return ctx.post("/hot-reload", body=b"")


@case(B, "request-id", "POST :predict with x-baseten-request-id (headers of the answer)")
def request_id(ctx: Ctx) -> Any:
    return ctx.predict(
        {"a": 1}, headers={"x-baseten-request-id": "req-123"}, keep=("x-baseten-request-id",)
    )


# --- the others -------------------------------------------------------------------------------

truss("test_async_truss", UP)


@case(
    "test_async_truss", "pre-post", "POST :predict {} and {'a': 1} (async preprocess/postprocess)"
)
def async_pre_post(ctx: Ctx) -> Any:
    return {"{}": ctx.predict({}), "{'a': 1}": ctx.predict({"a": 1})}


truss("test_concurrency_truss", UP)


@case(
    "test_concurrency_truss",
    "concurrency-2",
    "3 concurrent :predict (2 s each, predict_concurrency 2): which finish within 3 s",
)
def concurrency(ctx: Ctx) -> Any:
    results: list[Any] = [None, None, None]

    def call(i: int) -> None:
        results[i] = ctx.predict({"i": i}, timeout=10)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for i, t in enumerate(threads):
        t.start()
        if i == 1:
            time.sleep(0.3)  # the third starts a little after the first two, as Truss's test
    for t in threads:
        t.join(15)
    return {
        "statuses": [r.get("status") if r else None for r in results],
        "bodies": [r.get("body") if r else None for r in results],
        "within_3s": sorted((r or {}).get("_seconds", 99) < 3.0 for r in results),
        "_seconds": [(r or {}).get("_seconds") for r in results],
    }


def _stream_pair(ctx: Ctx) -> dict[str, Any]:
    return {
        "streamed": ctx.predict({}),
        "accept json (gathered)": ctx.predict({}, headers={"accept": "application/json"}),
        "MessagePack request": ctx.predict(msgpack_body={}),
    }


for _name in ("test_streaming_truss", "test_streaming_async_generator_truss"):
    truss(_name, UP)
    case(
        _name, "stream", "POST :predict {} streamed; with accept: application/json; as MessagePack"
    )(_stream_pair)


@case(
    "test_streaming_truss",
    "headers-early",
    "POST :predict {} streamed (the first item after 2 s): are the status and headers sent "
    "before it (within 1 s)",
)
def headers_early(ctx: Ctx) -> Any:
    r = ctx.predict({})
    return {"status": r.get("status"), "headers within 1 s": r.get("_first_byte_s", 99) < 1.0}


truss("test_streaming_truss_with_error", UP)


@case(
    "test_streaming_truss_with_error",
    "stream-error",
    "POST :predict {'throw_error': true} (fails after 3 items), then {'throw_error': false}",
)
def stream_error(ctx: Ctx) -> Any:
    return {
        "error": ctx.predict({"throw_error": True}, timeout=10),
        "after": ctx.predict({"throw_error": False}, timeout=10),
    }


truss("test_streaming_read_timeout", UP)


@case(
    "test_streaming_read_timeout",
    "read-timeout",
    "POST :predict {} streamed (items 3 s apart, streaming_read_timeout 1 s)",
)
def read_timeout(ctx: Ctx) -> Any:
    return ctx.predict({}, timeout=25)


truss("test_pyantic_v2", UP)


@case("test_pyantic_v2", "predict", "POST :predict {} (returns a pydantic model's JSON text)")
def pydantic_v2(ctx: Ctx) -> Any:
    return ctx.predict({})


truss("annotated_types_truss", UP)
A = "annotated_types_truss"


@case(A, "schema", "GET /v1/models/model/schema")
def annotated_schema(ctx: Ctx) -> Any:
    return ctx.get("/v1/models/model/schema")


@case(A, "valid", "POST :predict {'prompt': 'hi'} (JSON and MessagePack)")
def annotated_valid(ctx: Ctx) -> Any:
    return {
        "json": ctx.predict({"prompt": "hi"}),
        "msgpack": ctx.predict(msgpack_body={"prompt": "hi"}),
    }


@case(A, "invalid", "POST :predict {} and {'prompt': 3} and [] (validation errors)")
def annotated_invalid(ctx: Ctx) -> Any:
    return {
        "{}": ctx.predict({}),
        "{'prompt': 3}": ctx.predict({"prompt": 3}),
        "[]": ctx.predict([]),
        "msgpack {}": ctx.predict(msgpack_body={}),
        "bad json": ctx.predict(body=b"{", headers={"content-type": "application/json"}),
    }


truss("server_conformance_test_truss", UP, wait="live")


@case(
    "server_conformance_test_truss",
    "slow-load",
    "probes and POST /invocations while load() sleeps 20 s, the probes once loaded, "
    "and while a 20 s predict runs",
)
def slow_load(ctx: Ctx) -> Any:
    during = probes(ctx)
    during["GET schema"] = ctx.get("/v1/models/model/schema")
    during["POST /invocations"] = ctx.post("/invocations", json_body={})
    during["POST :predict"] = ctx.predict({})
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        if ctx.get("/v1/models/model", timeout=3).get("status") == 200:
            break
        time.sleep(1)
    loaded = probes(ctx)
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(r=ctx.predict({}, timeout=30)))
    worker.start()
    time.sleep(2)
    busy = probes(ctx)
    worker.join(30)
    return {"loading": during, "loaded": loaded, "predicting": busy, "predict": result.get("r")}


truss("model_load_failure_test", UP, wait="exit")


@case("model_load_failure_test", "load-fails", "load() raises: does the server exit; probes after")
def load_fails(ctx: Ctx) -> Any:
    svc = ctx.service
    deadline = time.monotonic() + 20
    while svc.alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    return {
        "exited": not svc.alive(),
        "_returncode": svc.proc.returncode,
        "GET /": ctx.get("/", timeout=3),
        "POST :predict": ctx.predict({}, timeout=3),
    }


truss("test_openai", UP)


@case("test_openai", "routes", "POST to each OpenAI-style route and :predict")
def openai_routes(ctx: Ctx) -> Any:
    paths = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/messages"]
    paths += ["/v1/responses", "/v1/models/model:predict"]
    return {p: ctx.post(p, json_body={"model": "x"}) for p in paths}


truss("test_build_commands_truss", UP)


@case(
    "test_build_commands_truss",
    "predict",
    "POST :predict {} (a constant from packages/; the build command that rewrites it is not run)",
)
def build_commands_truss(ctx: Ctx) -> Any:
    return ctx.predict({})


truss("test_build_commands", UP)


@case("test_build_commands", "predict", "POST :predict {} (build_commands in the config)")
def build_commands(ctx: Ctx) -> Any:
    return ctx.predict({})


truss("test_truss", UP)


@case("test_truss", "predict", "POST :predict {'inputs': [[0]]} (the example input)")
def test_truss_predict(ctx: Ctx) -> Any:
    return {"predict": ctx.predict({"inputs": [[0]]}), "probes": probes(ctx)}


truss("test_truss_with_error", UP)


@case("test_truss_with_error", "model-error", "POST :predict {} (the model raises, from packages/)")
def truss_with_error(ctx: Ctx) -> Any:
    return {"json": ctx.predict({}), "msgpack": ctx.predict(msgpack_body={})}
