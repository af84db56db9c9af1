"""The traffic of bench/soak.py: every scenario it mixes, on every protocol Podium serves.

A scenario is one operation of one client: a request, a stream, a whole stateful sequence. It
records the outcome of every response it gets (:class:`Outcome`) and knows what it must get back:
the right answer to a good request, the documented refusal of a bad one, the model's own error
where a model raises on purpose, nothing at all where the client leaves on purpose. Anything else
is a failure, recorded with its reason; a 5xx (or a gRPC code a server gives for its own faults)
that no scenario expects is a server error, which the soak reports loudly.

The models are the bundled examples (``examples/``), served by one ``podium serve``:
``echo``, ``batch-sum`` (dynamic batching), ``cpu-heavy`` (process workers), ``io-bound``,
``cancellable``, ``text-stream`` (async generator), ``continuous-words`` (continuous batching),
``mlserver-text`` (an MLServer runtime), ``running-total`` (native stateful sequences),
``ts-sentiment`` (a batched TorchServe handler), ``stateful-sum`` and ``stateful-stream``
(TorchServe stateful handlers, the second streaming with continuous batching).
"""

from __future__ import annotations

import asyncio
import enum
import json
import random
import struct
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx
from grpc_messages import MODEL_INFER, MODEL_STREAM_INFER, TS_SERVICE, pb, torchserve_messages

TS_PREDICTIONS = f"/{TS_SERVICE}/Predictions"
TS_STREAM_PREDICTIONS = f"/{TS_SERVICE}/StreamPredictions"
SEQUENCE_HEADER = "ts_request_sequence_id"

#: The largest body the soak's server accepts (its --max-request-size and
#: --grpc-max-message-size), and the size of the oversize bodies sent to it.
BODY_LIMIT = 256 * 1024
OVERSIZE = BODY_LIMIT + 64 * 1024

#: Eight words: text-stream answers one item per word.
PROMPT = "the soak sends this prompt of eight words"
WORDS = len(PROMPT.split())
#: Seconds a client that means to leave waits before it goes.
LEAVE_AFTER = 0.3
#: Seconds any call may take before the client gives up (and the soak reports it).
TIMEOUT = 60.0


class Protocol(enum.StrEnum):
    OIP_REST = "oip_rest"
    TRUSS = "truss"
    TORCHSERVE_REST = "torchserve_rest"
    OIP_GRPC = "oip_grpc"
    TORCHSERVE_GRPC = "torchserve_grpc"


class Outcome(enum.StrEnum):
    """What one response was. The first four are expected; the last three are failures."""

    OK = "ok"  # the right answer
    REFUSED = "refused"  # a bad request got its documented 4xx / gRPC code
    MODEL_ERROR = "model error"  # a model raised on purpose: 500 / INTERNAL naming it
    LEFT = "left"  # the client left mid-request or mid-stream on purpose
    UNEXPECTED = "unexpected"  # a status (not 5xx) or an answer the scenario did not expect
    SERVER_ERROR = "server error"  # a 5xx / server-fault gRPC code nobody expected
    TRANSPORT = "transport error"  # the connection failed, or the call timed out


FAILURES = (Outcome.UNEXPECTED, Outcome.SERVER_ERROR, Outcome.TRANSPORT)

#: gRPC codes a server gives for its own faults: reported as server errors when unexpected.
SERVER_CODES = frozenset(
    {
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DATA_LOSS,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)


class Failed(Exception):
    """A response the scenario did not expect: its outcome and what was wrong."""

    def __init__(self, outcome: Outcome, detail: str) -> None:
        super().__init__(detail)
        self.outcome = outcome
        self.detail = detail


@dataclass
class Tally:
    """Responses by (protocol, scenario, outcome), the first failures of each scenario, and the
    stateful sequences left open on purpose (to idle out)."""

    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    failures: dict[str, list[str]] = field(default_factory=dict)
    abandoned: int = 0

    def add(self, scenario: Scenario, outcome: Outcome, detail: str | None = None) -> None:
        self.counts[(scenario.protocol.value, scenario.name, outcome.value)] += 1
        if outcome in FAILURES:
            kept = self.failures.setdefault(scenario.name, [])
            if len(kept) < 5:
                kept.append(f"{outcome.value}: {detail}")

    def failed(self) -> int:
        return sum(n for (_, _, o), n in self.counts.items() if o in FAILURES)

    def server_errors(self) -> int:
        return sum(n for (_, _, o), n in self.counts.items() if o == Outcome.SERVER_ERROR)

    def total(self) -> int:
        return sum(self.counts.values())


class Rec:
    """Records one scenario's responses into a tally."""

    def __init__(self, tally: Tally, scenario: Scenario) -> None:
        self.tally = tally
        self.scenario = scenario

    def add(self, outcome: Outcome = Outcome.OK) -> None:
        self.tally.add(self.scenario, outcome)

    def abandoned(self) -> None:
        self.tally.abandoned += 1

    @staticmethod
    def check(response: httpx.Response, status: int = 200, text: str | None = None) -> None:
        """Raise :class:`Failed` unless ``response`` has ``status`` (and ``text`` in its body)."""
        try:
            body = response.content.decode("utf-8", "replace")
        except httpx.ResponseNotRead:
            body = ""
        if response.status_code == status and (text is None or text in body):
            return
        outcome = Outcome.SERVER_ERROR if response.status_code >= 500 else Outcome.UNEXPECTED
        want = f"{status}" + (f" with {text!r}" if text else "")
        raise Failed(outcome, f"HTTP {response.status_code} (expected {want}): {body[:200]}")

    def refused(self, response: httpx.Response, status: int, text: str | None = None) -> None:
        self.check(response, status, text)
        self.add(Outcome.REFUSED)

    def model_error(self, response: httpx.Response, text: str) -> None:
        self.check(response, 500, text)
        self.add(Outcome.MODEL_ERROR)

    async def grpc_refused(
        self,
        call: Awaitable[Any],
        code: grpc.StatusCode,
        text: str | None = None,
        outcome: Outcome = Outcome.REFUSED,
    ) -> None:
        """Await ``call``, which must fail with ``code`` (and ``text`` in its details)."""
        try:
            await call
        except grpc.aio.AioRpcError as exc:
            if exc.code() == code and (text is None or text in (exc.details() or "")):
                self.add(outcome)
                return
            raise
        raise Failed(Outcome.UNEXPECTED, f"expected {code.name}, the call succeeded")


def expect(condition: bool, what: str) -> None:
    """A wrong answer is a failure of the scenario."""
    if not condition:
        raise Failed(Outcome.UNEXPECTED, f"wrong answer: {what}")


@dataclass(frozen=True)
class Scenario:
    name: str
    protocol: Protocol
    weight: int
    run: Callable[[Traffic, Rec], Awaitable[None]]


SCENARIOS: list[Scenario] = []


def scenario(
    protocol: Protocol, weight: int
) -> Callable[
    [Callable[[Traffic, Rec], Awaitable[None]]], Callable[[Traffic, Rec], Awaitable[None]]
]:
    """Register a scenario (named after its function) with its weight in the mix."""

    def register(
        run: Callable[[Traffic, Rec], Awaitable[None]],
    ) -> Callable[[Traffic, Rec], Awaitable[None]]:
        SCENARIOS.append(Scenario(run.__name__.replace("_", "-"), protocol, weight, run))
        return run

    return register


class Traffic:
    """The clients of one phase: one httpx client (its own pool of keep-alive connections) and
    one gRPC channel, shared by every simulated client; closed on exit, so that the server's
    count of open connections goes back to where it was."""

    def __init__(self, http_port: int, grpc_port: int, rng: random.Random) -> None:
        self.http_url = f"http://127.0.0.1:{http_port}"
        self.grpc_target = f"127.0.0.1:{grpc_port}"
        self.rng = rng
        self.ts_request, self.ts_response = torchserve_messages()

    async def __aenter__(self) -> Traffic:
        self.http = httpx.AsyncClient(
            base_url=self.http_url,
            timeout=TIMEOUT,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )
        self.channel = self.open_channel()
        self._stubs(self.channel)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()
        await self.channel.close()

    def open_channel(self) -> grpc.aio.Channel:
        limit = 2 * BODY_LIMIT  # the client may send oversize messages: the server must refuse
        return grpc.aio.insecure_channel(
            self.grpc_target,
            options=[
                ("grpc.max_send_message_length", limit),
                ("grpc.max_receive_message_length", limit),
            ],
        )

    def _stubs(self, channel: grpc.aio.Channel) -> None:
        self.infer = channel.unary_unary(
            MODEL_INFER,
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        self.stream_infer = channel.stream_stream(
            MODEL_STREAM_INFER,
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelStreamInferResponse.FromString,
        )
        self.predictions = channel.unary_unary(
            TS_PREDICTIONS,
            request_serializer=self.ts_request.SerializeToString,
            response_deserializer=self.ts_response.FromString,
        )
        self.stream_predictions = channel.unary_stream(
            TS_STREAM_PREDICTIONS,
            request_serializer=self.ts_request.SerializeToString,
            response_deserializer=self.ts_response.FromString,
        )

    def unknown_model(self) -> str:
        # A new name each time: a server that kept anything per unknown name would grow.
        return f"soak-unknown-{self.rng.randrange(10**9)}"

    def ts(self, model: str, sequence_id: str = "", **inputs: bytes) -> Any:
        return self.ts_request(model_name=model, input=inputs, sequence_id=sequence_id)

    async def run(self, scenario: Scenario, tally: Tally) -> None:
        """Run one scenario; whatever goes wrong is recorded, never raised."""
        rec = Rec(tally, scenario)
        try:
            await scenario.run(self, rec)
        except Failed as exc:
            tally.add(scenario, exc.outcome, exc.detail)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            outcome = Outcome.SERVER_ERROR if code in SERVER_CODES else Outcome.UNEXPECTED
            tally.add(scenario, outcome, f"gRPC {code.name}: {(exc.details() or '')[:200]}")
        except httpx.TransportError as exc:
            tally.add(scenario, Outcome.TRANSPORT, f"{type(exc).__name__}: {exc}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a client-side surprise is still a failed scenario
            tally.add(scenario, Outcome.UNEXPECTED, f"{type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------- bodies

ECHO_DATA = [1.0, 2.0, 3.0, 4.0]
ECHO_BODY = {
    "inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": ECHO_DATA}]
}


def _prompt_input(name: str = "prompt") -> dict[str, Any]:
    return {"name": name, "shape": [1], "datatype": "BYTES", "data": [PROMPT]}


def _binary(header: dict[str, Any], raw: bytes) -> tuple[bytes, dict[str, str]]:
    """An OIP request in the binary tensor extension: JSON header, then the raw tensors."""
    head = json.dumps(header).encode()
    return head + raw, {
        "Inference-Header-Content-Length": str(len(head)),
        "Content-Type": "application/octet-stream",
    }


def _oversize_json() -> bytes:
    pad = "x" * OVERSIZE
    return json.dumps(
        {"inputs": [{"name": "p", "shape": [1], "datatype": "BYTES", "data": [pad]}]}
    ).encode()


def _sse_events(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(part[5:]) for part in body.split(b"\n\n") if part.startswith(b"data:")]


def _oip_value(model: str, name: str, datatype: str, values: list[Any]) -> Any:
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name=name, datatype=datatype, shape=[len(values)])
    if datatype == "BYTES":
        tensor.contents.bytes_contents.extend(
            v.encode() if isinstance(v, str) else v for v in values
        )
    elif datatype == "INT64":
        tensor.contents.int64_contents.extend(values)
    else:
        tensor.contents.fp32_contents.extend(values)
    return request


def _grpc_number(response: Any, name: str | None = None) -> float:
    """The first number of a ModelInferResponse's output ``name`` (else its first), typed or raw."""
    names = [out.name for out in response.outputs]
    position = names.index(name) if name in names else 0
    if name is not None and name not in names:
        raise Failed(Outcome.UNEXPECTED, f"no output {name!r} in {names}")
    out = response.outputs[position]
    if response.raw_output_contents:
        fmt = {"FP64": "<d", "FP32": "<f", "INT64": "<q", "INT32": "<i"}[out.datatype]
        return float(struct.unpack_from(fmt, response.raw_output_contents[position])[0])
    c = out.contents
    for values in (c.fp64_contents, c.fp32_contents, c.int64_contents, c.int_contents):
        if values:
            return float(values[0])
    raise Failed(Outcome.UNEXPECTED, f"no number in output {out.name!r}")


def _output(outputs: list[dict[str, Any]], name: str) -> Any:
    for out in outputs:
        if out["name"] == name:
            return out["data"][0]
    raise Failed(Outcome.UNEXPECTED, f"no output {name!r} in {outputs}")


# --------------------------------------------------------------------------- OIP REST

P = Protocol.OIP_REST


@scenario(P, 10)
async def oip_echo(t: Traffic, r: Rec) -> None:
    resp = await t.http.post("/v2/models/echo/infer", json=ECHO_BODY)
    r.check(resp)
    expect(resp.json()["outputs"][0]["data"] == ECHO_DATA, resp.text[:200])
    r.add()


@scenario(P, 4)
async def oip_echo_binary(t: Traffic, r: Rec) -> None:
    header = {
        "inputs": [
            {
                "name": "input-0",
                "shape": [1, 4],
                "datatype": "FP32",
                "parameters": {"binary_data_size": 16},
            }
        ]
    }
    body, headers = _binary(header, struct.pack("<4f", *ECHO_DATA))
    resp = await t.http.post("/v2/models/echo/infer", content=body, headers=headers)
    r.check(resp)
    r.add()


@scenario(P, 4)
async def oip_batched_binary(t: Traffic, r: Rec) -> None:
    """batch-sum (dynamic batching), a binary input and a binary output."""
    header = {
        "inputs": [
            {"name": "x", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}
        ],
        "outputs": [{"name": "sum", "parameters": {"binary_data": True}}],
    }
    body, headers = _binary(header, struct.pack("<4f", 1, 2, 3, 4))
    resp = await t.http.post("/v2/models/batch-sum/infer", content=body, headers=headers)
    r.check(resp)
    size = int(resp.headers.get("inference-header-content-length", "-1"))
    expect(size > 0, f"no Inference-Header-Content-Length: {resp.content[:200]!r}")
    raw = resp.content[size:]
    expect(struct.unpack("<d", raw[:8])[0] == 10.0, f"sum {raw!r}")
    r.add()


@scenario(P, 3)
async def oip_generate_stream(t: Traffic, r: Rec) -> None:
    resp = await t.http.post("/v2/models/text-stream/generate_stream", json={"prompt": PROMPT})
    r.check(resp)
    events = _sse_events(resp.content)
    expect("".join(e["output"] for e in events) == PROMPT, f"{len(events)} events")
    r.add()


@scenario(P, 2)
async def oip_infer_stream(t: Traffic, r: Rec) -> None:
    resp = await t.http.post(
        "/v2/models/text-stream/infer_stream", json={"inputs": [_prompt_input()]}
    )
    r.check(resp)
    expect(len(_sse_events(resp.content)) == WORDS, resp.text[:200])
    r.add()


async def _leave_after_first(t: Traffic, r: Rec, path: str, **request: Any) -> None:
    """A client that POSTs a streaming request, reads its first chunk and goes (a refusal is
    checked as any answer is)."""
    async with t.http.stream("POST", path, **request) as resp:
        if resp.status_code != 200:
            await resp.aread()
            r.check(resp)
        async for _ in resp.aiter_raw():
            break
    r.add(Outcome.LEFT)


@scenario(P, 2)
async def oip_stream_leave(t: Traffic, r: Rec) -> None:
    """A client that reads the first event of a stream and goes."""
    await _leave_after_first(
        t, r, "/v2/models/text-stream/generate_stream", json={"prompt": PROMPT}
    )


@scenario(P, 2)
async def oip_mlserver(t: Traffic, r: Rec) -> None:
    body = {"inputs": [{**_prompt_input(), "parameters": {"content_type": "str"}}]}
    resp = await t.http.post("/v2/models/mlserver-text/infer", json=body)
    r.check(resp)
    expect(_output(resp.json()["outputs"], "output") == PROMPT, resp.text[:200])
    r.add()


@scenario(P, 2)
async def oip_sequence(t: Traffic, r: Rec) -> None:
    """A whole sequence on running-total, named by OIP request parameters."""
    ident = uuid.uuid4().hex
    total = 0
    for i, flags in enumerate(({"sequence_start": True}, {}, {"sequence_end": True})):
        total += i + 1
        body = {
            "parameters": {"sequence_id": ident, **flags},
            "inputs": [{"name": "value", "shape": [1], "datatype": "INT64", "data": [i + 1]}],
        }
        resp = await t.http.post("/v2/models/running-total/infer", json=body)
        r.check(resp)
        expect(_output(resp.json()["outputs"], "total") == total, resp.text[:200])
        r.add()


@scenario(P, 2)
async def oip_bad_json(t: Traffic, r: Rec) -> None:
    resp = await t.http.post(
        "/v2/models/echo/infer",
        content=b'{"inputs": [{"name": "x", "shape": [1',
        headers={"Content-Type": "application/json"},
    )
    r.refused(resp, 400, "malformed JSON")


@scenario(P, 2)
async def oip_bad_shape(t: Traffic, r: Rec) -> None:
    body = {"inputs": [{"name": "x", "shape": [4], "datatype": "FP32", "data": [1, 2, 3]}]}
    resp = await t.http.post("/v2/models/batch-sum/infer", json=body)
    r.refused(resp, 400, "shape")


@scenario(P, 2)
async def oip_unknown_model(t: Traffic, r: Rec) -> None:
    resp = await t.http.post(f"/v2/models/{t.unknown_model()}/infer", json=ECHO_BODY)
    r.refused(resp, 404, "not known")


@scenario(P, 1)
async def oip_oversize(t: Traffic, r: Rec) -> None:
    resp = await t.http.post(
        "/v2/models/echo/infer",
        content=_oversize_json(),
        headers={"Content-Type": "application/json"},
    )
    r.refused(resp, 413)


@scenario(P, 1)
async def oip_wrong_method(t: Traffic, r: Rec) -> None:
    resp = await t.http.get("/v2/models/echo/infer")
    r.refused(resp, 405)


@scenario(P, 1)
async def oip_model_error(t: Traffic, r: Rec) -> None:
    """cpu-heavy (a process worker) raises on a seed that is not a number."""
    body = {"inputs": [{"name": "seed", "shape": [1], "datatype": "BYTES", "data": ["x"]}]}
    resp = await t.http.post("/v2/models/cpu-heavy/infer", json=body)
    r.model_error(resp, "predict raised")


# --------------------------------------------------------------------------- Truss

P = Protocol.TRUSS


@scenario(P, 5)
async def truss_batched(t: Traffic, r: Rec) -> None:
    resp = await t.http.post("/v1/models/batch-sum:predict", json={"x": [1, 2, 3]})
    r.check(resp)
    expect(resp.json() == {"sum": 6.0}, resp.text[:200])
    r.add()


@scenario(P, 4)
async def truss_process_worker(t: Traffic, r: Rec) -> None:
    seed = t.rng.randrange(1000)
    resp = await t.http.post("/v1/models/cpu-heavy:predict", json={"seed": seed, "rounds": 3000})
    r.check(resp)
    expect(resp.json().get("rounds") == 3000, resp.text[:200])
    r.add()


@scenario(P, 2)
async def truss_io_bound(t: Traffic, r: Rec) -> None:
    resp = await t.http.post("/v1/models/io-bound:predict", json={"url": "http://x/y"})
    r.check(resp)
    expect(resp.json() == {"length": 10}, resp.text[:200])
    r.add()


@scenario(P, 1)
async def truss_cancellable(t: Traffic, r: Rec) -> None:
    resp = await t.http.post("/v1/models/cancellable:predict", json={"steps": 1})
    r.check(resp)
    expect(resp.json() == {"completed": True, "steps": 1}, resp.text[:200])
    r.add()


@scenario(P, 2)
async def truss_leave_request(t: Traffic, r: Rec) -> None:
    """A client that gives up on a 5 s job after LEAVE_AFTER s: the server cancels it."""
    try:
        resp = await t.http.post(
            "/v1/models/cancellable:predict",
            json={"steps": 50},
            timeout=httpx.Timeout(TIMEOUT, read=LEAVE_AFTER),
        )
    except httpx.ReadTimeout:
        r.add(Outcome.LEFT)
        return
    r.check(resp)
    raise Failed(
        Outcome.UNEXPECTED, f"a 5 s job answered within {LEAVE_AFTER} s: {resp.text[:200]}"
    )


@scenario(P, 2)
async def truss_stream(t: Traffic, r: Rec) -> None:
    resp = await t.http.post("/v1/models/text-stream:predict", json={"prompt": PROMPT})
    r.check(resp)
    expect(resp.text == PROMPT, resp.text[:200])
    r.add()


@scenario(P, 2)
async def truss_stream_leave(t: Traffic, r: Rec) -> None:
    await _leave_after_first(t, r, "/v1/models/text-stream:predict", json={"prompt": PROMPT})


@scenario(P, 2)
async def truss_continuous(t: Traffic, r: Rec) -> None:
    """continuous-words: continuous batching, joining the running batch."""
    resp = await t.http.post("/v1/models/continuous-words:predict", json={"n": 6})
    r.check(resp)
    expect(len(resp.text.split()) == 6, resp.text[:200])
    r.add()


@scenario(P, 1)
async def truss_continuous_leave(t: Traffic, r: Rec) -> None:
    await _leave_after_first(t, r, "/v1/models/continuous-words:predict", json={"n": 40})


async def _truss_sequence(t: Traffic, r: Rec, values: list[int], end: bool) -> None:
    """running-total: the first request starts a sequence (its id comes back in a header)."""
    headers: dict[str, str] = {}
    total = 0
    for i, value in enumerate(values):
        total += value
        last = end and i == len(values) - 1
        body = {"value": value, "done": True} if last else {"value": value}
        resp = await t.http.post("/v1/models/running-total:predict", json=body, headers=headers)
        r.check(resp)
        expect(resp.json()["total"] == total, resp.text[:200])
        ident = resp.headers.get(SEQUENCE_HEADER)
        expect(bool(ident), f"no {SEQUENCE_HEADER} header")
        if last:
            expect(resp.headers.get(f"{SEQUENCE_HEADER}_end") == "true", "sequence not ended")
        headers = {SEQUENCE_HEADER: str(ident)}
        r.add()
    if not end:
        r.abandoned()


@scenario(P, 2)
async def truss_sequence(t: Traffic, r: Rec) -> None:
    await _truss_sequence(t, r, [1, 2, 3, 4], end=True)


@scenario(P, 1)
async def truss_sequence_abandoned(t: Traffic, r: Rec) -> None:
    """A sequence its client never ends: it must idle out (sequence_max_idle_ms)."""
    await _truss_sequence(t, r, [5, 6], end=False)


@scenario(P, 1)
async def truss_model_error(t: Traffic, r: Rec) -> None:
    # Not batch-sum: a model error fails every request of its batch, good ones too.
    resp = await t.http.post("/v1/models/cpu-heavy:predict", json={"seed": "x"})
    r.model_error(resp, "predict raised")


@scenario(P, 1)
async def truss_unknown_model(t: Traffic, r: Rec) -> None:
    resp = await t.http.post(f"/v1/models/{t.unknown_model()}:predict", json={"x": [1]})
    r.refused(resp, 404, "not known")


@scenario(P, 1)
async def truss_oversize(t: Traffic, r: Rec) -> None:
    resp = await t.http.post(
        "/v1/models/batch-sum:predict",
        content=_oversize_json(),
        headers={"Content-Type": "application/json"},
    )
    r.refused(resp, 413)


@scenario(P, 1)
async def truss_bad_json(t: Traffic, r: Rec) -> None:
    resp = await t.http.post(
        "/v1/models/batch-sum:predict",
        content=b'{"x": [1, 2',
        headers={"Content-Type": "application/json"},
    )
    r.refused(resp, 400)


# --------------------------------------------------------------------------- TorchServe REST

P = Protocol.TORCHSERVE_REST
TEXT = {"Content-Type": "text/plain"}


@scenario(P, 5)
async def ts_batched_handler(t: Traffic, r: Rec) -> None:
    resp = await t.http.post("/predictions/ts-sentiment", content=b"what a great day", headers=TEXT)
    r.check(resp)
    expect(resp.json().get("label") in {"positive", "negative", "neutral"}, resp.text[:200])
    r.add()


@scenario(P, 3)
async def ts_process_worker(t: Traffic, r: Rec) -> None:
    resp = await t.http.post("/predictions/cpu-heavy", json={"seed": 7, "rounds": 3000})
    r.check(resp)
    expect("digest" in resp.json(), resp.text[:200])
    r.add()


async def _ts_sum_sequence(t: Traffic, r: Rec, values: list[int], end: bool) -> None:
    """stateful-sum: a TorchServe stateful handler; it ends a sequence when it is sent 0."""
    headers = dict(TEXT)
    total = 0
    for value in [*values, 0] if end else values:
        total += value
        resp = await t.http.post("/predictions/stateful-sum", content=str(value), headers=headers)
        r.check(resp)
        expect(resp.json() == total, f"sum {resp.text[:200]} (expected {total})")
        ident = resp.headers.get(SEQUENCE_HEADER)
        expect(bool(ident), f"no {SEQUENCE_HEADER} header")
        headers[SEQUENCE_HEADER] = str(ident)
        r.add()
    if not end:
        r.abandoned()


@scenario(P, 2)
async def ts_sequence(t: Traffic, r: Rec) -> None:
    await _ts_sum_sequence(t, r, [3, 4, 5], end=True)


@scenario(P, 1)
async def ts_sequence_abandoned(t: Traffic, r: Rec) -> None:
    await _ts_sum_sequence(t, r, [6, 7], end=False)


@scenario(P, 1)
async def ts_streaming_sequence(t: Traffic, r: Rec) -> None:
    """stateful-stream: a streaming sequence with continuous batching (1 item, 3 items, end).

    Never abandoned: the example handler keeps each sequence's state until it is sent 0, as
    TorchServe's example does (TorchServe tells a handler nothing when a sequence idles out)."""
    headers = dict(TEXT)
    for value, items in ((1, 1), (3, 3), (0, 0)):
        resp = await t.http.post(
            "/predictions/stateful-stream", content=str(value), headers=headers
        )
        r.check(resp)
        lines = resp.text.splitlines()
        expect(sum(line.startswith("item ") for line in lines) == items, resp.text[:200])
        if value == 0:
            expect(lines[-1:] == ["ended; total 4"], resp.text[:200])
        ident = resp.headers.get(SEQUENCE_HEADER)
        expect(bool(ident), f"no {SEQUENCE_HEADER} header")
        headers[SEQUENCE_HEADER] = str(ident)
        r.add()


@scenario(P, 1)
async def ts_stream_leave(t: Traffic, r: Rec) -> None:
    await _leave_after_first(
        t, r, "/predictions/text-stream", content=PROMPT.encode(), headers=TEXT
    )


@scenario(P, 1)
async def ts_unknown_model(t: Traffic, r: Rec) -> None:
    resp = await t.http.post(f"/predictions/{t.unknown_model()}", content=b"1", headers=TEXT)
    r.refused(resp, 404, "not known")


# --------------------------------------------------------------------------- OIP gRPC

P = Protocol.OIP_GRPC


@scenario(P, 8)
async def grpc_echo(t: Traffic, r: Rec) -> None:
    request = pb.ModelInferRequest(model_name="echo")
    tensor = request.inputs.add(name="input-0", datatype="FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend(ECHO_DATA)
    response = await t.infer(request, timeout=TIMEOUT)
    expect(list(response.outputs[0].contents.fp32_contents) == ECHO_DATA, str(response)[:200])
    r.add()


@scenario(P, 4)
async def grpc_echo_raw(t: Traffic, r: Rec) -> None:
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="input-0", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(struct.pack("<4f", *ECHO_DATA))
    response = await t.infer(request, timeout=TIMEOUT)
    expect(list(response.raw_output_contents) == list(request.raw_input_contents), "raw echo")
    r.add()


@scenario(P, 4)
async def grpc_batched(t: Traffic, r: Rec) -> None:
    request = pb.ModelInferRequest(model_name="batch-sum")
    request.inputs.add(name="x", datatype="FP32", shape=[4])
    request.raw_input_contents.append(struct.pack("<4f", 1, 2, 3, 4))
    response = await t.infer(request, timeout=TIMEOUT)
    expect(_grpc_number(response) == 10.0, str(response)[:200])
    r.add()


def _stream_request(model: str = "text-stream") -> Any:
    return _oip_value(model, "prompt", "BYTES", [PROMPT])


@scenario(P, 3)
async def grpc_stream(t: Traffic, r: Rec) -> None:
    """ModelStreamInfer, Triton's framing: one response per word, then the stream ends."""
    words = []
    async for item in t.stream_infer(iter([_stream_request()]), timeout=TIMEOUT):
        expect(not item.error_message, item.error_message)
        words.append(item.infer_response.outputs[0].contents.bytes_contents[0].decode())
    expect("".join(words) == PROMPT, repr(words))
    r.add()


@scenario(P, 1)
async def grpc_stream_two(t: Traffic, r: Rec) -> None:
    """Two requests on one ModelStreamInfer stream, and an in-band error for a third."""
    requests = [_stream_request(), _stream_request("soak-unknown"), _stream_request()]
    items = errors = 0
    async for item in t.stream_infer(iter(requests), timeout=TIMEOUT):
        if item.error_message:
            expect("not known" in item.error_message, item.error_message)
            errors += 1
        else:
            items += 1
    expect((items, errors) == (2 * WORDS, 1), f"{items} items, {errors} errors")
    r.add()


@scenario(P, 2)
async def grpc_stream_leave(t: Traffic, r: Rec) -> None:
    call = t.stream_infer(iter([_stream_request()]), timeout=TIMEOUT)
    async for _ in call:
        break
    call.cancel()
    r.add(Outcome.LEFT)


async def _grpc_sequence(t: Traffic, r: Rec, values: list[int], end: bool) -> None:
    ident = uuid.uuid4().hex
    total = 0
    for i, value in enumerate(values):
        total += value
        request = _oip_value("running-total", "value", "INT64", [value])
        request.parameters["sequence_id"].string_param = ident
        if i == 0:
            request.parameters["sequence_start"].bool_param = True
        if end and i == len(values) - 1:
            request.parameters["sequence_end"].bool_param = True
        response = await t.infer(request, timeout=TIMEOUT)
        expect(_grpc_number(response, "total") == total, str(response)[:200])
        r.add()
    if not end:
        r.abandoned()


@scenario(P, 2)
async def grpc_sequence(t: Traffic, r: Rec) -> None:
    await _grpc_sequence(t, r, [1, 2, 3], end=True)


@scenario(P, 1)
async def grpc_sequence_abandoned(t: Traffic, r: Rec) -> None:
    await _grpc_sequence(t, r, [4, 5], end=False)


@scenario(P, 1)
async def grpc_leave_request(t: Traffic, r: Rec) -> None:
    """io-bound's preprocess takes 0.2 s; the client's deadline is shorter."""
    request = _oip_value("io-bound", "url", "BYTES", ["http://x/y"])
    await r.grpc_refused(
        t.infer(request, timeout=0.05), grpc.StatusCode.DEADLINE_EXCEEDED, outcome=Outcome.LEFT
    )


@scenario(P, 1)
async def grpc_unknown_model(t: Traffic, r: Rec) -> None:
    request = _oip_value(t.unknown_model(), "x", "FP32", [1.0])
    await r.grpc_refused(t.infer(request, timeout=TIMEOUT), grpc.StatusCode.NOT_FOUND)


@scenario(P, 1)
async def grpc_bad_shape(t: Traffic, r: Rec) -> None:
    request = pb.ModelInferRequest(model_name="batch-sum")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[4])
    tensor.contents.fp32_contents.extend([1.0, 2.0, 3.0])
    await r.grpc_refused(t.infer(request, timeout=TIMEOUT), grpc.StatusCode.INVALID_ARGUMENT)


@scenario(P, 1)
async def grpc_oversize(t: Traffic, r: Rec) -> None:
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="input-0", datatype="UINT8", shape=[OVERSIZE])
    request.raw_input_contents.append(bytes(OVERSIZE))
    await r.grpc_refused(t.infer(request, timeout=TIMEOUT), grpc.StatusCode.RESOURCE_EXHAUSTED)


@scenario(P, 1)
async def grpc_model_error(t: Traffic, r: Rec) -> None:
    request = _oip_value("cpu-heavy", "seed", "BYTES", ["x"])
    await r.grpc_refused(
        t.infer(request, timeout=TIMEOUT),
        grpc.StatusCode.INTERNAL,
        "predict raised",
        outcome=Outcome.MODEL_ERROR,
    )


@scenario(P, 1)
async def grpc_new_channel(t: Traffic, r: Rec) -> None:
    """A client with its own short-lived connection: one call, then it closes."""
    channel = t.open_channel()
    try:
        infer = channel.unary_unary(
            MODEL_INFER,
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        await infer(_oip_value("batch-sum", "x", "FP32", [1.0, 2.0]), timeout=TIMEOUT)
        r.add()
    finally:
        await channel.close()


# --------------------------------------------------------------------------- TorchServe gRPC

P = Protocol.TORCHSERVE_GRPC


@scenario(P, 4)
async def tsg_batched_handler(t: Traffic, r: Rec) -> None:
    response = await t.predictions(t.ts("ts-sentiment", data=b"what a great day"), timeout=TIMEOUT)
    expect(b"label" in response.prediction, repr(response.prediction[:200]))
    r.add()


@scenario(P, 2)
async def tsg_process_worker(t: Traffic, r: Rec) -> None:
    response = await t.predictions(t.ts("cpu-heavy", seed=b"11", rounds=b"3000"), timeout=TIMEOUT)
    expect(b"digest" in response.prediction, repr(response.prediction[:200]))
    r.add()


@scenario(P, 2)
async def tsg_stream(t: Traffic, r: Rec) -> None:
    items = [
        item.prediction
        async for item in t.stream_predictions(
            t.ts("text-stream", data=PROMPT.encode()), timeout=TIMEOUT
        )
    ]
    expect(b"".join(items).decode() == PROMPT, repr(items))
    r.add()


@scenario(P, 1)
async def tsg_stream_leave(t: Traffic, r: Rec) -> None:
    call = t.stream_predictions(t.ts("text-stream", data=PROMPT.encode()), timeout=TIMEOUT)
    async for _ in call:
        break
    call.cancel()
    r.add(Outcome.LEFT)


@scenario(P, 2)
async def tsg_sequence(t: Traffic, r: Rec) -> None:
    """stateful-sum over gRPC: the first call starts a sequence, its id comes back."""
    ident = ""
    total = 0
    for value in (2, 3, 0):
        total += value
        response = await t.predictions(
            t.ts("stateful-sum", sequence_id=ident, data=str(value).encode()), timeout=TIMEOUT
        )
        expect(response.prediction == str(total).encode(), repr(response.prediction[:200]))
        expect(bool(response.sequence_id), "no sequence_id in the response")
        ident = response.sequence_id
        r.add()


@scenario(P, 1)
async def tsg_leave_request(t: Traffic, r: Rec) -> None:
    await r.grpc_refused(
        t.predictions(t.ts("io-bound", url=b"http://x/y"), timeout=0.05),
        grpc.StatusCode.DEADLINE_EXCEEDED,
        outcome=Outcome.LEFT,
    )


@scenario(P, 1)
async def tsg_unknown_model(t: Traffic, r: Rec) -> None:
    await r.grpc_refused(
        t.predictions(t.ts(t.unknown_model(), data=b"1"), timeout=TIMEOUT),
        grpc.StatusCode.NOT_FOUND,
    )
