"""Cases for the harness's own trusses (``trusses/own``): one truss per group of features that
issue 21 names and Truss's test trusses leave out."""

from __future__ import annotations

import time
from typing import Any

from .cases import Ctx, case, probes, truss

OWN = "own"

# --- features: secrets, environment, packages/, sibling modules, data/, config, pre/post ----

truss(
    "features",
    OWN,
    env={"TRUSS_SECRET_from_env": "from-the-environment"},
    secret_files={"from_file": "from-the-file"},
)
F = "features"


@case(F, "everything", "POST :predict {'x': 1}: what the model sees of its truss")
def features(ctx: Ctx) -> Any:
    return ctx.predict({"x": 1})


@case(
    F, "secrets", "secrets: a default, TRUSS_SECRET_from_env, the file, a null one, an unknown one"
)
def secrets(ctx: Ctx) -> Any:
    names = ("greeting", "from_env", "from_file", "empty", "unknown")
    return {n: ctx.predict({"secret": n}) for n in names}


@case(F, "msgpack", "POST :predict_binary {'x': 1} (MessagePack through preprocess/postprocess)")
def features_msgpack(ctx: Ctx) -> Any:
    return ctx.post("/v1/models/model:predict_binary", msgpack_body={"x": 1})


@case(F, "is-healthy", "is_healthy turned false by a request: the probes; then true again")
def is_healthy(ctx: Ctx) -> Any:
    out: dict[str, Any] = {"set false": ctx.predict({"healthy": False})}
    out["unhealthy"] = probes(ctx)
    out["predict while unhealthy"] = ctx.predict({"x": 2})
    out["set true"] = ctx.predict({"healthy": True})
    out["healthy"] = probes(ctx)
    return out


# --- numpy values ---------------------------------------------------------------------------

truss("numpy_values", OWN)
N = "numpy_values"


@case(
    N,
    "json",
    "numpy arrays, scalars and a bare array; datetimes, decimals, uuids; NaN and infinity; "
    "a set: answered as JSON",
)
def numpy_json(ctx: Ctx) -> Any:
    kinds = ("array", "scalars", "bare", "datetime", "non_finite", "set")
    return {k: ctx.predict({"kind": k}) for k in kinds}


@case(N, "msgpack", "the same asked with MessagePack (msgpack-numpy answers)")
def numpy_msgpack(ctx: Ctx) -> Any:
    kinds = ("array", "scalars", "bare", "bytes", "datetime", "non_finite")
    return {k: ctx.predict(msgpack_body={"kind": k}) for k in kinds}


@case(N, "array-in", "a MessagePack request carrying a numpy array")
def numpy_in(ctx: Ctx) -> Any:
    import numpy as np

    arr = np.arange(4, dtype=np.float64)
    return ctx.predict(msgpack_body={"kind": "sum", "array": arr})


@case(N, "bytes-json", "bytes returned to a JSON request")
def numpy_bytes_json(ctx: Ctx) -> Any:
    return ctx.predict({"kind": "bytes"})


# --- pydantic input and output --------------------------------------------------------------

truss("pydantic_io", OWN)
P = "pydantic_io"


@case(P, "schema", "GET /v1/models/model/schema")
def pyd_schema(ctx: Ctx) -> Any:
    return ctx.get("/v1/models/model/schema")


@case(P, "valid", "POST :predict {'text': 'ab', 'times': 2}, JSON and MessagePack")
def pyd_valid(ctx: Ctx) -> Any:
    return {
        "json": ctx.predict({"text": "ab", "times": 2}),
        "msgpack": ctx.predict(msgpack_body={"text": "ab", "times": 2}),
    }


@case(P, "invalid", "validation errors: a missing field, two bad fields, extra field, not JSON")
def pyd_invalid(ctx: Ctx) -> Any:
    return {
        "missing": ctx.predict({}),
        "two bad": ctx.predict({"text": 1, "times": 9}),
        "extra": ctx.predict({"text": "a", "other": 1}),
        "not json": ctx.predict(body=b"nope", headers={"content-type": "application/json"}),
    }


# --- what predict returns or raises ---------------------------------------------------------

truss("responses", OWN)
R = "responses"
KEEP = ("x-harness", "location")


def _kinds(ctx: Ctx, kinds: tuple[str, ...]) -> dict[str, Any]:
    return {k: ctx.predict({"kind": k}, keep=KEEP) for k in kinds}


@case(R, "responses", "starlette Response, JSONResponse 201, error Response 418, redirect 307")
def responses(ctx: Ctx) -> Any:
    return _kinds(ctx, ("response", "json_response", "error_response", "redirect"))


@case(R, "streams", "StreamingResponse; a generator from a plain method (streamed, and gathered)")
def streams(ctx: Ctx) -> Any:
    out = _kinds(ctx, ("streaming_response", "generator"))
    out["generator, accept json"] = ctx.predict(
        {"kind": "generator"}, headers={"accept": "application/json"}
    )
    return out


@case(
    "responses",
    "stream-items",
    "generators of str, empty str, bytes and non-ASCII; of an int; of nothing; an iterator",
)
def stream_items(ctx: Ctx) -> Any:
    out = _kinds(ctx, ("mixed_generator", "int_generator", "empty_generator", "iterator"))
    out["mixed, accept json"] = ctx.predict(
        {"kind": "mixed_generator"}, headers={"accept": "application/json"}
    )
    return out


@case(R, "plain-values", "None, bytes, a string; the request object's headers and method")
def plain_values(ctx: Ctx) -> Any:
    out = _kinds(ctx, ("none", "text"))
    out["bytes (JSON request)"] = ctx.predict({"kind": "bytes"})
    out["bytes (MessagePack request)"] = ctx.predict(msgpack_body={"kind": "bytes"})
    out["header"] = ctx.predict({"kind": "header"}, headers={"x-harness": "sent"})
    return out


@case(R, "errors", "ValueError, KeyError, HTTPException 422 and 409 with a dict detail")
def model_errors(ctx: Ctx) -> Any:
    return _kinds(ctx, ("error", "key_error", "http_exception", "http_exception_dict"))


@case(R, "stream-error-first", "a generator that raises before its first item")
def stream_error_first(ctx: Ctx) -> Any:
    return ctx.predict({"kind": "stream_error_first"}, timeout=10)


@case(R, "errors-msgpack", "ValueError and HTTPException asked with MessagePack")
def errors_msgpack(ctx: Ctx) -> Any:
    return {k: ctx.predict(msgpack_body={"kind": k}) for k in ("error", "http_exception")}


# --- a predict that takes only the request --------------------------------------------------

truss("raw_request", OWN)


@case("raw_request", "raw", "bodies the server must not parse: bad JSON, bytes, empty; a query")
def raw_request(ctx: Ctx) -> Any:
    return {
        "bad json": ctx.predict(body=b"{oops", headers={"content-type": "application/json"}),
        "bytes": ctx.predict(body=b"\x00\xff", headers={"content-type": "application/x-thing"}),
        "empty": ctx.predict(body=b""),
        "query": ctx.post("/v1/models/model:predict?a=1&b=two", json_body={}),
    }


# --- a websocket model ------------------------------------------------------------------------

truss("websocket_echo", OWN)
W = "websocket_echo"


@case(W, "echo", "text and bytes echoed, then 'bye' (the model returns: closed 1000)")
def ws_echo(ctx: Ctx) -> Any:
    return ctx.ws(["one", b"two", "bye"])


@case(W, "model-error", "'fail': the model raises (closed 1011)")
def ws_fail(ctx: Ctx) -> Any:
    return ctx.ws(["one", "fail"], receive=None)


@case(W, "model-close", "'close4000': the model closes with its own code")
def ws_close(ctx: Ctx) -> Any:
    return ctx.ws(["close4000"], receive=0)


@case(W, "http-routes", "POST :predict and the probes of a websocket-only model")
def ws_http(ctx: Ctx) -> Any:
    return {"predict": ctx.predict({}), "probes": probes(ctx)}


# --- OpenAI-style methods ---------------------------------------------------------------------

truss("openai_methods", OWN)
O = "openai_methods"  # noqa: E741
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello there world"}]}


@case(O, "chat", "POST /v1/chat/completions, not streamed")
def chat(ctx: Ctx) -> Any:
    return ctx.post("/v1/chat/completions", json_body=CHAT)


@case(O, "chat-stream", "POST /v1/chat/completions stream=true (SSE text from a generator)")
def chat_stream(ctx: Ctx) -> Any:
    return ctx.post("/v1/chat/completions", json_body={**CHAT, "stream": True})


@case(O, "chat-stream-openai-ua", "the same with the OpenAI SDK's accept and user-agent headers")
def chat_stream_ua(ctx: Ctx) -> Any:
    headers = {"accept": "application/json", "user-agent": "OpenAI/Python 1.61.0"}
    return ctx.post("/v1/chat/completions", json_body={**CHAT, "stream": True}, headers=headers)


@case(O, "completions", "POST /v1/completions (an async generator)")
def completions(ctx: Ctx) -> Any:
    return ctx.post("/v1/completions", json_body={"n": 3})


@case(O, "missing", "POST /v1/embeddings, /v1/messages (no such methods)")
def missing(ctx: Ctx) -> Any:
    return {p: ctx.post(p, json_body={}) for p in ("/v1/embeddings", "/v1/messages")}


# --- rules Truss checks at request time, and one it checks at load ----------------------------

truss("definition_rules", OWN)


@case(
    "definition_rules", "postprocess", "a generator, and a Response, from predict with postprocess"
)
def definition_rules(ctx: Ctx) -> Any:
    return {k: ctx.predict({"kind": k}) for k in ("plain", "generator", "response")}


truss("bad_signature", OWN, wait="exit")


@case("bad_signature", "refused", "predict(self, a, b, c): does the server exit; probes after")
def bad_signature(ctx: Ctx) -> Any:
    svc = ctx.service
    deadline = time.monotonic() + 20
    while svc.alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    return {"exited": not svc.alive(), "_returncode": svc.proc.returncode, "GET /": ctx.get("/")}


# --- every folder and name moved ----------------------------------------------------------------

truss("custom_layout", OWN)


@case(
    "custom_layout",
    "predict",
    "POST :predict {} (class file and name, data_dir, bundled_packages_dir moved)",
)
def custom_layout(ctx: Ctx) -> Any:
    return {"predict": ctx.predict({}), "probes": probes(ctx)}


truss("custom_module_dir", OWN, wait="any")


@case("custom_module_dir", "predict", "model_module_dir: src; does it load; POST :predict {}")
def custom_module_dir(ctx: Ctx) -> Any:
    time.sleep(2)  # a failed load ends Truss's server within a second
    return {"serving": ctx.service.alive(), "predict": ctx.predict({"a": 1}, timeout=5)}


# --- pydantic with a streaming predict; the request through pre/predict/post ---------------------

truss("pydantic_stream", OWN)


@case("pydantic_stream", "stream", "GET schema; POST :predict {'upto': 3}; an invalid input")
def pydantic_stream(ctx: Ctx) -> Any:
    return {
        "schema": ctx.get("/v1/models/model/schema"),
        "stream": ctx.predict({"upto": 3}),
        "invalid": ctx.predict({"upto": "x"}),
    }


truss("request_everywhere", OWN)


@case("request_everywhere", "request", "POST :predict with x-harness: the request in each method")
def request_everywhere(ctx: Ctx) -> Any:
    return ctx.predict({"a": 1}, headers={"x-harness": "h"})


# --- a client that leaves a stream --------------------------------------------------------------

truss("slow_stream", OWN)


@case(
    "slow_stream",
    "client-leaves",
    "a stream of 10 items 0.5 s apart left after its first item; then a one-item request: "
    "is it answered within 2 s (the slot freed)",
)
def client_leaves(ctx: Ctx) -> Any:
    from . import wire

    left = wire.leave_after_first_chunk(ctx.addr, "/v1/models/model:predict", {"n": 10})
    time.sleep(0.2)
    after = ctx.predict({"n": 1, "gap": 0}, timeout=10)
    return {
        "left": left,
        "next": after,
        "next answered within 2 s": after.get("_seconds", 99) < 2.0,
    }


# --- loading and health ---------------------------------------------------------------------

truss("flaky_load", OWN, wait="any")


@case("flaky_load", "retried", "load() fails once: is the model served; POST :predict {}")
def flaky_load(ctx: Ctx) -> Any:
    deadline = time.monotonic() + 10
    while ctx.service.alive() and time.monotonic() < deadline:
        if ctx.get("/v1/models/model", timeout=2).get("status") == 200:
            break
        time.sleep(0.5)
    return {"serving": ctx.service.alive(), "predict": ctx.predict({}, timeout=5)}


truss("health_checks", OWN, wait="live")


@case(
    "health_checks",
    "during-and-after-load",
    "the probes while load() runs (3 s), once loaded, and when is_healthy raises",
)
def health_checks(ctx: Ctx) -> Any:
    out: dict[str, Any] = {"loading": probes(ctx)}
    out["loading"]["POST :predict"] = ctx.predict({})
    out["loading"]["websocket"] = ctx.ws(["x"], receive=0, timeout=3, linger=1)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if ctx.get("/v1/models/model/loaded", timeout=3).get("status") == 200:
            break
        time.sleep(0.5)
    out["loaded"] = probes(ctx)
    out["set raise"] = ctx.predict({"raise": True})
    out["is_healthy raises"] = probes(ctx)
    ctx.predict({"raise": False})
    return out


truss("stream_fn_postprocess", OWN, wait="any")


@case(
    "stream_fn_postprocess",
    "refused-when",
    "a generator function as predict with postprocess: served? POST :predict {}",
)
def stream_fn_postprocess(ctx: Ctx) -> Any:
    time.sleep(2)  # a load that fails ends the server within a second
    return {"serving": ctx.service.alive(), "predict": ctx.predict({}, timeout=5)}


# --- what predict_concurrency bounds --------------------------------------------------------------

truss("preprocess_bound", OWN)


@case(
    "preprocess_bound",
    "overlap",
    "2 concurrent requests (preprocess, predict, postprocess 1 s each; predict_concurrency 1): "
    "both done within 5 s (pre/post outside the bound: ~4 s) or not (~6 s)",
)
def preprocess_bound(ctx: Ctx) -> Any:
    import threading

    results: list[Any] = [None, None]

    def call(i: int) -> None:
        results[i] = ctx.predict({"i": i}, timeout=15)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    took = time.monotonic() - t0
    return {
        "bodies": [r.get("body") if r else None for r in results],
        "both within 5 s": took < 5.0,
        "_seconds": round(took, 2),
    }
