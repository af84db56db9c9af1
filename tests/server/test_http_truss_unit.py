"""Truss's routes over fake models (what a truss offers besides predict: streams decided per
call, OpenAI-style methods, WebSockets, health checks, schemas), through the whole HTTP app and a
real data plane, in memory (starlette's TestClient). A real server and real models:
test_http_truss.py."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import AsyncGenerator, Callable, Iterator
from decimal import Decimal
from typing import Any

import msgpack
import msgpack_numpy
import numpy as np
import pytest
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from podium.config import ModelConfig
from podium.dataplane import DataPlane
from podium.errors import ModelError, ModelStatus
from podium.runtime.registry import ModelVersion, Registry
from podium.server.http import HttpApp
from podium.server.http._truss_wire import decode_msgpack, encode_json, encode_msgpack
from podium.types import Capabilities, ModelState, Returned

Behaviour = Callable[[Any, Any], Any]


class Truss:
    """A fake instance of a truss: ``predict`` (through :class:`Scheduler`) runs ``behaviour``,
    whose value may be a generator; its other methods are ``methods``."""

    def __init__(
        self,
        behaviour: Behaviour = lambda inputs, request: inputs,
        *,
        methods: dict[str, Behaviour] | None = None,
        websocket: Callable[[Any], Any] | None = None,
        healthy: bool | None = None,
        io_schema: dict[str, Any] | None = None,
    ) -> None:
        self.behaviour = behaviour
        self.methods = methods or {}
        self.serve = websocket
        self.healthy = healthy
        self.capabilities = Capabilities(
            returns_streams=True,
            needs_request=True,
            endpoints=frozenset(self.methods),
            websocket=websocket is not None,
            health_check=healthy is not None,
            io_schema=io_schema,
        )

    async def is_healthy(self) -> bool:
        return bool(self.healthy)

    async def endpoint(self, name: str, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        async for item in _items(self.methods[name](inputs, request)):
            yield item

    async def websocket(self, websocket: Any) -> None:
        assert self.serve is not None
        await self.serve(websocket)


async def _items(value: Any) -> AsyncGenerator[Any, None]:
    """Truss's rule: a generator's items, else the value as one ``Returned``."""
    if isinstance(value, Iterator) and not isinstance(value, dict | list | str | bytes):
        for item in value:
            yield item
    else:
        yield Returned(value)


class Scheduler:
    def __init__(self, instance: Truss) -> None:
        self.instance = instance

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def statistics(self) -> dict[str, int]:
        return {"waiting": 0, "busy": 0}

    async def infer(self, inputs: Any, request: Any) -> Any:
        return self.instance.behaviour(inputs, request)

    async def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        async for item in _items(self.instance.behaviour(inputs, request)):
            yield item


def served(*models: tuple[str, Truss], state: ModelState = ModelState.READY) -> TestClient:
    registry = Registry()
    for name, instance in models:
        mv = ModelVersion(ModelConfig(name=name), instance, Scheduler(instance))  # type: ignore[arg-type]
        mv.state = state
        registry.add(mv)
    return TestClient(HttpApp(DataPlane(registry)))


def truss_error(r: Any, status: int, code: str, message: str) -> None:
    assert (r.status_code, r.json()) == (status, {"error": message})
    assert r.headers["x-baseten-error-source"] == "04"
    assert r.headers["x-baseten-error-code"] == code


# -- which model ---------------------------------------------------------------------------------


def test_one_model_answers_whatever_the_name() -> None:
    client = served(("echo", Truss()))
    for name in ("echo", "model", "anything"):
        r = client.post(f"/v1/models/{name}:predict", json={"a": [1, 2]})
        assert (r.status_code, r.content) == (200, b'{"a":[1,2]}')  # compact, as all of Podium's
        assert r.headers["content-type"] == "application/json"
        assert client.get(f"/v1/models/{name}").content == b"{}"
    r = client.post("/invocations", json={"sagemaker": True})
    assert (r.status_code, r.json()) == (200, {"sagemaker": True})


def test_several_models_are_reached_by_name() -> None:
    client = served(("a", Truss(lambda x, r: "from a")), ("b", Truss(lambda x, r: "from b")))
    assert client.post("/v1/models/b:predict", json={}).json() == "from b"
    r = client.post("/v1/models/c:predict", json={})
    assert r.status_code == 404 and "'c'" in r.json()["error"]
    assert r.headers["x-baseten-error-code"] == "700"
    r = client.post("/invocations", json={})
    assert r.status_code == 404 and "several" in r.json()["error"]
    assert client.get("/v1/models/c").status_code == 404


# -- health and schema ---------------------------------------------------------------------------


def test_liveness_readiness_loaded() -> None:
    client = served(("m", Truss()))
    r = client.get("/")
    assert (r.status_code, r.content, r.headers["content-type"]) == (
        200,
        b"true",
        "application/json",
    )
    assert client.get("/v1/models/m/loaded").content == b"{}"


def test_not_ready_is_503_in_truss_shape() -> None:
    client = served(("slow", Truss()), state=ModelState.LOADING)
    for path in ("/v1/models/slow", "/v1/models/slow/loaded"):
        truss_error(client.get(path), 503, "600", "Model with name slow is not ready.")
    r = client.post("/v1/models/slow:predict", json={})  # Truss's words, then Podium's reason
    truss_error(r, 503, "600", "Model with name slow is not ready. it is still loading.")
    r = client.get("/v1/models/slow/schema")
    truss_error(r, 503, "600", "Schema not available, please try again later.")


def test_readiness_follows_the_models_health_check_but_loaded_does_not() -> None:
    instance = Truss(healthy=False)
    client = served(("m", instance))
    truss_error(client.get("/v1/models/m"), 503, "600", "Model with name m is not ready.")
    assert client.get("/v1/models/m/loaded").status_code == 200
    instance.healthy = True
    assert client.get("/v1/models/m").status_code == 200


def test_schema() -> None:
    schema = {
        "input_schema": {"type": "object"},
        "output_schema": None,
        "supports_streaming": False,
    }
    r = served(("m", Truss(io_schema=schema))).get("/v1/models/m/schema")
    assert (r.status_code, r.json()) == (200, schema)
    truss_error(served(("m", Truss())).get("/v1/models/m/schema"), 404, "600", "No schema found")


# -- bodies --------------------------------------------------------------------------------------


def test_malformed_json_is_truss_400() -> None:
    client = served(("m", Truss()))
    r = client.post("/v1/models/m:predict", content=b"{broken")
    truss_error(
        r,
        400,
        "700",
        "Invalid JSON payload: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)",
    )
    truss_error(
        client.post("/v1/models/m:predict", content=b""),
        400,
        "700",
        "Invalid JSON payload: Expecting value: line 1 column 1 (char 0)",
    )
    # What only the standard library reads, as Truss reads it.
    r = client.post("/v1/models/m:predict", content=b'{"big": 123456789012345678901234567890}')
    assert r.content == b'{"big":123456789012345678901234567890}'


MSGPACK = {"content-type": "application/octet-stream"}


def _truss_pack(value: Any) -> bytes:
    """Truss's truss_msgpack_serialize, as the client library does it (for numpy values)."""
    return msgpack.packb(value, default=msgpack_numpy.encode)


def test_msgpack_round_trip_with_numpy_and_truss_types() -> None:
    seen: list[Any] = []

    def predict(inputs: Any, request: Any) -> Any:
        seen.append(inputs)
        return {"doubled": inputs["x"] * 2, "when": inputs["when"], "id": inputs["id"]}

    client = served(("m", Truss(predict)))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    ident = uuid.UUID(int=7)
    body = encode_msgpack({"x": x, "when": when, "id": ident})
    for path in ("/v1/models/m:predict_binary", "/v1/models/m:predict"):
        r = client.post(path, content=body, headers=MSGPACK)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/octet-stream"
        answer = decode_msgpack(r.content)
        np.testing.assert_array_equal(answer["doubled"], x * 2)
        assert answer["doubled"].dtype == np.float32
        assert (answer["when"], answer["id"]) == (when, ident)
    assert isinstance(seen[0]["x"], np.ndarray)
    # The bytes are Truss's own: msgpack + msgpack-numpy with its datetime map.
    assert r.content == msgpack.packb(
        {
            "doubled": msgpack_numpy.encode(x * 2),
            "when": {b"__dt_datetime_iso__": True, b"data": "2026-01-02T03:04:05Z"},
            "id": {b"__uuid__": True, b"data": str(ident)},
        }
    )
    assert decode_msgpack(_truss_pack({"s": np.int64(3)})) == {"s": np.int64(3)}
    assert decode_msgpack(encode_msgpack(Decimal("1.5"))) == Decimal("1.5")


def test_malformed_msgpack_is_400() -> None:
    client = served(("m", Truss()))
    r = client.post("/v1/models/m:predict", content=b"\xc1\xc1", headers=MSGPACK)
    assert r.status_code == 400
    assert r.json()["error"].startswith("Invalid msgpack payload: ")
    assert r.headers["x-baseten-error-code"] == "700"


def test_json_answers_carry_truss_values_compactly() -> None:
    assert encode_json({"a": np.arange(3), "b": np.float32(0.5), "c": "é"}) == (
        '{"a":[0,1,2],"b":0.5,"c":"é"}'.encode()
    )
    assert encode_json(float("nan")) == b"null"  # Truss writes NaN, which is no JSON
    assert encode_json({"raw": b"\x00"}) == b'{"raw":"AA=="}'  # where Truss gives up


def test_an_answer_that_cannot_be_encoded_is_500_naming_the_type() -> None:
    client = served(("m", Truss(lambda x, r: {"x": object()})))
    r = client.post("/v1/models/m:predict", json={})
    truss_error(
        r,
        500,
        "500",
        "Unhandled exception: TypeError: Object of type object is not JSON serializable",
    )
    r = client.post("/v1/models/m:predict", content=encode_msgpack({}), headers=MSGPACK)
    assert r.status_code == 500 and "object" in r.json()["error"]


def test_pydantic_answers() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Out(pydantic.BaseModel):
        n: int
        when: dt.date

    client = served(("m", Truss(lambda x, r: Out(n=1, when=dt.date(2026, 1, 2)))))
    r = client.post("/v1/models/m:predict", json={})
    assert r.content == b'{"n":1,"when":"2026-01-02"}'  # pydantic's own JSON, as Truss sends
    r = client.post("/v1/models/m:predict", content=encode_msgpack({}), headers=MSGPACK)
    assert decode_msgpack(r.content) == {"n": 1, "when": dt.date(2026, 1, 2)}


# -- errors --------------------------------------------------------------------------------------


def _raise(exc: Exception) -> Behaviour:
    def behaviour(inputs: Any, request: Any) -> Any:
        raise exc

    return behaviour


def test_model_error_hides_its_message() -> None:
    client = served(("m", Truss(_raise(ModelError("model 'm' predict raised ValueError: x")))))
    r = client.post("/v1/models/m:predict", json={})
    truss_error(r, 500, "600", "Internal Server Error (in model/chainlet).")


def test_http_exception_keeps_status_and_detail() -> None:
    client = served(("m", Truss(_raise(ModelStatus("no such user", 418)))))
    truss_error(client.post("/v1/models/m:predict", json={}), 418, "600", "no such user")


def test_responses_the_model_makes_are_sent_as_they_are() -> None:
    ok = served(("m", Truss(lambda x, r: PlainTextResponse("hi", headers={"x-mine": "1"}))))
    r = ok.post("/v1/models/m:predict", json={})
    assert (r.status_code, r.text, r.headers["x-mine"]) == (200, "hi", "1")
    assert "x-baseten-error-code" not in r.headers
    bad = served(("m", Truss(lambda x, r: JSONResponse({"why": "no"}, status_code=409))))
    r = bad.post("/v1/models/m:predict", json={})
    assert (r.status_code, r.json()) == (409, {"why": "no"})
    assert (r.headers["x-baseten-error-source"], r.headers["x-baseten-error-code"]) == ("04", "700")


# -- streams -------------------------------------------------------------------------------------


def _words(fail: bool = False) -> Behaviour:
    def behaviour(inputs: Any, request: Any) -> Any:
        def gen() -> Iterator[Any]:
            yield "one "
            yield b"two "
            if fail:
                raise ModelError("model 'm' broke")
            yield "three"

        return gen()

    return behaviour


def test_a_returned_generator_streams_as_octets() -> None:
    client = served(("m", Truss(_words())))
    with client.stream("POST", "/v1/models/m:predict", json={}) as r:
        assert r.headers["content-type"] == "application/octet-stream"
        assert r.read() == b"one two three"


def test_a_stream_that_fails_midway_just_ends() -> None:
    client = served(("m", Truss(_words(fail=True))))
    r = client.post("/v1/models/m:predict", json={})
    assert (r.status_code, r.content) == (200, b"one two ")


@pytest.mark.parametrize(
    ("headers", "gathered"),
    [
        ({"accept": "application/json"}, True),
        ({"accept": "application/json", "user-agent": "OpenAI/Python 1.61.0"}, False),
        ({"accept": "application/json, text/plain"}, False),
    ],
)
def test_accept_json_gathers_a_stream(headers: dict[str, str], gathered: bool) -> None:
    client = served(("m", Truss(_words(), methods={"chat_completions": _words()})))
    for path in ("/v1/models/m:predict", "/v1/chat/completions"):
        r = client.post(path, json={}, headers=headers)
        if gathered:
            assert (r.headers["content-type"], r.content) == (
                "application/json",
                b'"one two three"',
            )
        else:
            assert (r.headers["content-type"], r.content) == (
                "application/octet-stream",
                b"one two three",
            )


# -- the OpenAI-style routes ---------------------------------------------------------------------


def test_methods_reach_the_model_that_defines_them() -> None:
    chat = Truss(methods={"chat_completions": lambda x, r: {"chat": x["messages"]}})
    embed = Truss(methods={"embeddings": lambda x, r: {"embedded": x["input"]}})
    client = served(("chat", chat), ("embed", embed), ("plain", Truss()))
    r = client.post("/v1/chat/completions", json={"model": "whatever", "messages": ["hi"]})
    assert (r.status_code, r.json()) == (200, {"chat": ["hi"]})
    assert client.post("/v1/embeddings", json={"input": "x"}).json() == {"embedded": "x"}
    r = client.post("/v1/completions", json={"prompt": "x"})
    truss_error(r, 404, "700", "`completions` must only be called if model has it.")


def test_several_models_with_a_method_are_told_apart_by_the_body() -> None:
    one = Truss(methods={"messages": lambda x, r: "one"})
    two = Truss(methods={"messages": lambda x, r: "two"})
    client = served(("one", one), ("two", two))
    assert client.post("/v1/messages", json={"model": "two"}).json() == "two"
    r = client.post("/v1/messages", json={"model": "three"})
    assert r.status_code == 404 and "one, two" in r.json()["error"]


def test_a_method_streams_and_its_errors_are_truss_shaped() -> None:
    client = served(
        ("m", Truss(methods={"responses": _words(), "messages": _raise(ModelError("x"))}))
    )
    with client.stream(
        "POST", "/v1/responses", json={}, headers={"user-agent": "OpenAI/Python"}
    ) as r:
        assert r.read() == b"one two three"
    r = client.post("/v1/messages", json={})
    truss_error(r, 500, "600", "Internal Server Error (in model/chainlet).")
    truss_error(
        client.post("/v1/messages", content=b"nope"),
        400,
        "700",
        "Invalid JSON payload: Expecting value: line 1 column 1 (char 0)",
    )


# -- WebSockets ----------------------------------------------------------------------------------


async def _echo(websocket: Any) -> None:
    while True:  # (accepted already, as Truss's server hands it over)
        text = await websocket.receive_text()
        if text == "bye":
            return
        if text == "fail":
            raise ModelError("model 'm' websocket raised")
        await websocket.send_text(f"echo {text}")


@pytest.mark.parametrize("path", ["/v1/websocket", "/v1/models/m/websocket"])
def test_websocket_echo(path: str) -> None:
    client = served(("m", Truss(websocket=_echo)))
    with client.websocket_connect(path) as ws:
        ws.send_text("hi")
        assert ws.receive_text() == "echo hi"
        ws.send_text("bye")
        assert ws.receive()["code"] == 1000


def test_websocket_of_a_model_that_raises_closes_1011() -> None:
    client = served(("m", Truss(websocket=_echo)))
    with client.websocket_connect("/v1/websocket") as ws:
        ws.send_text("fail")
        message = ws.receive()
    assert (message["code"], message["reason"]) == (
        1011,
        "Internal Server Error (in model/chainlet).",
    )


def test_websocket_while_the_model_loads_is_refused_with_503() -> None:
    client = served(("m", Truss(websocket=_echo)), state=ModelState.LOADING)
    with pytest.raises(WebSocketDenialResponse) as info:
        with client.websocket_connect("/v1/websocket"):
            pass
    denied = info.value
    assert denied.status_code == 503
    assert denied.json()["error"].startswith("Model with name m is not ready.")
    assert denied.headers["x-baseten-error-code"] == "600"


def test_websocket_without_a_model_for_it_closes_1003() -> None:
    client = served(("m", Truss()), ("n", Truss()))
    for path in ("/v1/websocket", "/v1/models/m/websocket", "/v1/models/ghost/websocket"):
        with client.websocket_connect(path) as ws:
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_text()
        assert closed.value.code == 1003
    with client.websocket_connect("/v1/websocket") as ws:
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    assert closed.value.reason == "WebSocket is not implemented on this deployment."


def test_websocket_on_other_paths_is_refused() -> None:
    client = served(("m", Truss(websocket=_echo)))
    with pytest.raises(WebSocketDisconnect) as closed:
        with client.websocket_connect("/v2/anything"):
            pass
    assert closed.value.code == 1003


def test_json_module_reads_what_truss_writes() -> None:
    assert json.loads(encode_json({"a": [1.5, None]})) == {"a": [1.5, None]}
