"""The data plane on its own: fake models and schedulers behind a real registry, no sockets.

What a front end hands it (a ``Call``) and what it answers (an ``Answer`` / ``AnswerStream``,
metadata structs, the repository's typed descriptions), cell by cell.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from podium.config import ModelConfig
from podium.dataplane import (
    ConfigOverrides,
    ControlPolicy,
    DataPlane,
    ModelControl,
    ModelRepository,
)
from podium.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    ModelError,
    ModelNotReady,
    NotFound,
    PodiumError,
    UnsupportedRepresentation,
)
from podium.runtime.registry import ModelVersion, Registry
from podium.types import (
    Answer,
    AnswerStream,
    Call,
    Capabilities,
    InferenceRequest,
    InferenceResponse,
    InputKind,
    ModelMetadata,
    ModelState,
    Reply,
    RepositoryModel,
    RequestInput,
    RequestOutput,
    ResponseOutput,
    SequenceRef,
    ServerMetadata,
    WireInput,
    WireProtocol,
)

pytestmark = pytest.mark.anyio

OIP = WireProtocol.OIP_REST


class FakeInstance:
    """What the data plane reads of a model: its capabilities and ``validate``."""

    def __init__(
        self,
        kind: InputKind = InputKind.DEFAULT,
        *,
        streaming: bool = False,
        predict_on_infer: bool = False,
        needs_inputs: bool = True,
    ) -> None:
        self.capabilities = Capabilities(
            input_kind=kind,
            streaming=streaming,
            predict_on_infer=predict_on_infer,
            needs_inputs=needs_inputs,
        )
        self.loads = 0
        self.fail_load = False

    async def load(self) -> None:
        self.loads += 1
        if self.fail_load:
            raise RuntimeError("no weights")

    def validate(self, value: Any) -> Any:
        return ("validated", value)


class FakeScheduler:
    """Answers with ``result`` (``infer``) or ``items`` (``stream``) and records what it got;
    as a sequence scheduler it fills in the ref it is given, as the real one does."""

    def __init__(self, result: Any = None, items: list[Any] | None = None) -> None:
        self.result = result
        self.items = items or []
        self.calls: list[tuple[str, Any, Any]] = []
        self.refs: list[SequenceRef] = []
        self.closed_streams = 0
        self.model_headers: dict[str, str] = {}
        self.made = 0

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def statistics(self) -> dict[str, int]:
        return {"waiting": 0, "busy": 0}

    async def infer(self, inputs: Any, request: Any) -> Any:
        self.calls.append(("infer", inputs, request))
        return self.result

    async def stream(self, inputs: Any, request: Any) -> AsyncGenerator[Any, None]:
        self.calls.append(("stream", inputs, request))
        try:
            for item in self.items:
                yield item
        finally:
            self.closed_streams += 1

    async def stream_inputs(
        self, inputs: AsyncIterator[Any], request: Any
    ) -> AsyncGenerator[Any, None]:
        async for value in inputs:
            self.calls.append(("stream_inputs", value, request))
            yield self.result

    def _open(self, ref: SequenceRef) -> None:
        self.refs.append(ref)
        if ref.id is None:
            self.made += 1
            ref.id, ref.created = f"made-{self.made}", True

    def _finish(self, ref: SequenceRef) -> None:
        ref.headers.update(self.model_headers)
        ref.ended = ref.end

    async def infer_in(self, sequence: SequenceRef, inputs: Any, request: Any) -> Any:
        self._open(sequence)
        self.calls.append(("infer_in", inputs, request))
        self._finish(sequence)
        return self.result

    async def stream_in(
        self, sequence: SequenceRef, inputs: Any, request: Any
    ) -> AsyncGenerator[Any, None]:
        self._open(sequence)
        self.calls.append(("stream_in", inputs, request))
        try:
            for item in self.items:
                yield item
        finally:
            self._finish(sequence)
            self.closed_streams += 1


def fake(
    name: str = "m",
    version: str | None = None,
    *,
    instance: FakeInstance | None = None,
    scheduler: FakeScheduler | None = None,
    state: ModelState = ModelState.READY,
    **config: Any,
) -> ModelVersion:
    mv = ModelVersion(
        ModelConfig(name=name, version=version, **config),
        instance or FakeInstance(),  # type: ignore[arg-type]
        scheduler or FakeScheduler(),  # type: ignore[arg-type]
        source=f"/models/{name}",
    )
    mv.state = state
    return mv


def plane(*versions: ModelVersion) -> DataPlane:
    registry = Registry()
    for mv in versions:
        registry.add(mv)
    return DataPlane(registry)


def oip_request(**extra: Any) -> InferenceRequest:
    inputs = [RequestInput(name="x", shape=[2], datatype="FP32", data=[1.0, 2.0])]
    return InferenceRequest(inputs=inputs, **extra)


def scheduler_of(mv: ModelVersion) -> FakeScheduler:
    scheduler = mv.scheduler
    assert isinstance(scheduler, FakeScheduler)
    return scheduler


# -- resolving a call ---------------------------------------------------------------------------


async def test_resolve_finds_the_ready_version_or_says_why_not() -> None:
    dp = plane(fake("m", "1"), fake("m", "2"), fake("slow", state=ModelState.LOADING))
    assert dp.resolve("m").version == "2"
    assert dp.resolve("m", "1").version == "1"
    with pytest.raises(NotFound, match="Request for unknown model: 'nope' is not found"):
        dp.resolve("nope")
    with pytest.raises(NotFound, match="Request for unknown model: 'm' version 7 is not found"):
        dp.resolve("m", "7")
    with pytest.raises(ModelNotReady, match="still loading"):
        dp.resolve("slow")


async def test_infer_without_a_version_resolves_it_itself() -> None:
    dp = plane(fake(scheduler=FakeScheduler(result="ok")))
    answer = await dp.infer(Call("m", None, WireProtocol.TRUSS, {"a": 1}))
    assert answer == Answer("ok")
    with pytest.raises(ModelNotReady):
        await plane(fake(state=ModelState.FAILED)).infer(Call("m", None, WireProtocol.TRUSS))


# -- inputs: what the model's first parameter asks for, per protocol ------------------------------


async def infer_inputs(kind: InputKind, protocol: WireProtocol, payload: Any) -> Any:
    mv = fake(instance=FakeInstance(kind), scheduler=FakeScheduler(result={"y": 1}))
    await plane(mv).infer(Call("m", None, protocol, payload, "the request"), mv)
    ((_, inputs, request),) = scheduler_of(mv).calls
    assert request == "the request"  # passed through untouched
    return inputs


async def test_oip_inputs_are_decoded_tensors_by_default() -> None:
    inputs = await infer_inputs(InputKind.DEFAULT, OIP, oip_request())
    assert set(inputs) == {"x"} and isinstance(inputs["x"], np.ndarray)
    assert inputs["x"].dtype == np.float32 and inputs["x"].tolist() == [1.0, 2.0]


async def test_oip_request_kind_gets_the_request_itself() -> None:
    request = oip_request()
    assert await infer_inputs(InputKind.OIP_REQUEST, WireProtocol.OIP_GRPC, request) is request


async def test_raw_and_wire_kinds_get_the_oip_request_as_json_like_data() -> None:
    raw = await infer_inputs(InputKind.RAW, OIP, oip_request(id="r1"))
    assert raw == {
        "inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}],
        "id": "r1",
    }
    wire = await infer_inputs(InputKind.WIRE, WireProtocol.OIP_GRPC, oip_request(id="r1"))
    assert wire == WireInput(WireProtocol.OIP_GRPC, raw)


async def test_numpy_and_raw_bytes_become_plain_data_for_raw_kinds() -> None:
    request = InferenceRequest(
        inputs=[
            RequestInput(name="a", shape=[2], datatype="INT32", data=np.array([1, 2])),
            RequestInput(name="b", shape=[1], datatype="BYTES", data=[b"\xff"]),
        ]
    )
    raw = await infer_inputs(InputKind.RAW, WireProtocol.OIP_GRPC, request)
    assert [i["data"] for i in raw["inputs"]] == [[1, 2], [b"\xff"]]


async def test_schema_kind_validates_the_decoded_inputs_as_json() -> None:
    validated = await infer_inputs(InputKind.SCHEMA, OIP, oip_request())
    assert validated == ("validated", {"x": [1.0, 2.0]})
    assert await infer_inputs(InputKind.SCHEMA, WireProtocol.TRUSS, {"q": 1}) == (
        "validated",
        {"q": 1},
    )


async def test_other_protocols_give_the_payload_as_it_came() -> None:
    for kind in (InputKind.DEFAULT, InputKind.RAW):
        assert await infer_inputs(kind, WireProtocol.TRUSS, {"q": 1}) == {"q": 1}
        assert await infer_inputs(kind, WireProtocol.TORCHSERVE_REST, b"\x00") == b"\x00"


async def test_wire_kind_gets_the_protocol_with_the_payload() -> None:
    for protocol in (WireProtocol.TORCHSERVE_REST, WireProtocol.TORCHSERVE_GRPC):
        wire = await infer_inputs(InputKind.WIRE, protocol, {"data": b"x"})
        assert wire == WireInput(protocol, {"data": b"x"})


async def test_an_inference_request_is_read_from_other_protocols() -> None:
    body = {"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [3]}]}
    for payload in (body, msgspec.json.encode(body), msgspec.json.encode(body).decode()):
        request = await infer_inputs(InputKind.OIP_REQUEST, WireProtocol.TRUSS, payload)
        assert isinstance(request, InferenceRequest) and request.inputs[0].data == [3]
    with pytest.raises(InvalidInput, match="model 'm' takes an inference request"):
        await infer_inputs(InputKind.OIP_REQUEST, WireProtocol.TORCHSERVE_REST, b"{not json")
    with pytest.raises(InvalidInput, match="model 'm' takes an inference request"):
        await infer_inputs(InputKind.OIP_REQUEST, WireProtocol.TRUSS, {"inputs": 3})


async def test_a_model_that_takes_no_inputs_gets_none() -> None:
    mv = fake(instance=FakeInstance(needs_inputs=False), scheduler=FakeScheduler(result=1))
    await plane(mv).infer(Call("m", None, OIP, "never looked at"), mv)
    assert scheduler_of(mv).calls == [("infer", None, None)]


# -- the answer ------------------------------------------------------------------------------------


async def test_an_oip_answer_is_a_completed_inference_response() -> None:
    mv = fake("m", "3", scheduler=FakeScheduler(result={"y": np.array([1.5], np.float32)}))
    answer = await plane(mv).infer(Call("m", "3", OIP, oip_request(id="r9")), mv)
    assert answer.headers is None and answer.sequence is None
    response = answer.value
    assert isinstance(response, InferenceResponse)
    assert (response.model_name, response.model_version, response.id) == ("m", "3", "r9")
    assert [(o.name, o.datatype, o.shape, o.data) for o in response.outputs] == [
        ("y", "FP32", [1], [1.5])
    ]


async def test_oip_answers_keep_only_the_outputs_asked_for() -> None:
    mv = fake(scheduler=FakeScheduler(result={"a": 1, "b": 2}))
    request = oip_request(outputs=[RequestOutput(name="b")])
    answer = await plane(mv).infer(Call("m", None, OIP, request), mv)
    assert [o.name for o in answer.value.outputs] == ["b"]


async def test_a_value_oip_cannot_carry_names_the_model() -> None:
    mv = fake(scheduler=FakeScheduler(result=object()))
    with pytest.raises(UnsupportedRepresentation, match="model 'm' returned a value"):
        await plane(mv).infer(Call("m", None, OIP, oip_request()), mv)


async def test_headers_the_model_set_leave_the_body_for_the_answer() -> None:
    own = InferenceResponse(parameters={"headers": {"x-a": 1, "x-gone": None}, "k": "v"})
    mv = fake(scheduler=FakeScheduler(result=own))
    answer = await plane(mv).infer(Call("m", None, OIP, oip_request()), mv)
    assert answer.headers == {"x-a": "1"}
    assert answer.value is own and own.parameters == {"k": "v"}
    only = InferenceResponse(parameters={"headers": {"x-b": "2"}})
    scheduler_of(mv).result = only
    answer = await plane(mv).infer(Call("m", None, OIP, oip_request()), mv)
    assert answer.headers == {"x-b": "2"} and only.parameters is None


async def test_headers_parameter_that_is_not_a_mapping_stays_in_the_body() -> None:
    own = InferenceResponse(parameters={"headers": "x"})
    mv = fake(scheduler=FakeScheduler(result=own))
    answer = await plane(mv).infer(Call("m", None, OIP, oip_request()), mv)
    assert answer.headers is None and own.parameters == {"headers": "x"}


async def test_other_protocols_answer_with_the_models_own_value() -> None:
    for value in ({"y": 1}, "text", b"bytes", Reply(b"x", 201)):
        mv = fake(scheduler=FakeScheduler(result=value))
        assert await plane(mv).infer(Call("m", None, WireProtocol.TRUSS, {}), mv) == Answer(value)
    # an InferenceResponse a model returns anywhere still gives up its headers
    own = InferenceResponse(parameters={"headers": {"x-a": "1"}})
    mv = fake(scheduler=FakeScheduler(result=own))
    answer = await plane(mv).infer(Call("m", None, WireProtocol.TORCHSERVE_REST, b""), mv)
    assert answer.value is own and answer.headers == {"x-a": "1"}


# -- stateful sequences: the call goes one way, the outcome comes back in the answer -------------


def sequence_model(**scheduler: Any) -> ModelVersion:
    return fake(scheduler=FakeScheduler(**scheduler), sequence_batching=True)


async def test_a_call_that_names_no_sequence_starts_one_and_learns_its_id() -> None:
    mv = sequence_model(result={"y": 1})
    call = Call("m", None, WireProtocol.TRUSS, {})
    answer = await plane(mv).infer(call, mv)
    assert answer.sequence is not None
    assert (answer.sequence.id, answer.sequence.created, answer.sequence.ended) == (
        "made-1",
        True,
        False,
    )
    assert call.sequence is None  # never written to


async def test_the_scheduler_fills_in_a_copy_never_the_calls_own_ref() -> None:
    mv = sequence_model(result={"y": 1})
    scheduler_of(mv).model_headers = {"X-Step": "2"}
    asked = SequenceRef(id="s1", start=True, end=True)
    call = Call("m", None, WireProtocol.TRUSS, {}, sequence=asked)
    answer = await plane(mv).infer(call, mv)
    (given,) = scheduler_of(mv).refs
    assert given is not asked and (given.id, given.start, given.end) == ("s1", True, True)
    assert asked == SequenceRef(id="s1", start=True, end=True)  # untouched
    assert answer.sequence is not None
    assert (answer.sequence.id, answer.sequence.created, answer.sequence.ended) == (
        "s1",
        False,
        True,
    )
    assert answer.sequence.headers == {"X-Step": "2"}


async def test_oip_responses_of_a_sequence_name_it() -> None:
    mv = sequence_model(result={"y": 1})
    call = Call("m", None, OIP, oip_request(), sequence=SequenceRef(id="s", end=True))
    answer = await plane(mv).infer(call, mv)
    assert answer.value.parameters == {"sequence_id": "s", "sequence_end": True}
    answer = await plane(mv).infer(Call("m", None, OIP, oip_request()), mv)
    assert answer.value.parameters == {"sequence_id": "made-1"}


async def test_a_models_own_response_is_completed_as_it_is() -> None:
    # Its outputs are the answer's (not a copy) when the request names none; named by the
    # version and the request's id.
    outputs = [ResponseOutput(name="y", shape=[1], datatype="FP32", data=[1.0])]
    own = InferenceResponse(outputs=outputs, model_name="other", id="its-own")
    mv = fake(version="2", scheduler=FakeScheduler(result=own))
    answer = await plane(mv).infer(Call("m", "2", OIP, oip_request(id="r-1")), mv)
    assert answer.value is own and own.outputs is outputs
    assert (own.model_name, own.model_version, own.id) == ("m", "2", "r-1")
    own.id = "its-own"
    answer = await plane(mv).infer(Call("m", "2", OIP, oip_request()), mv)
    assert answer.value.id == "its-own"  # a request without an id keeps the model's


async def test_a_models_own_response_gives_the_outputs_asked_for() -> None:
    outputs = [ResponseOutput(name=name, shape=[1], datatype="FP32", data=[1.0]) for name in "abc"]
    own = InferenceResponse(outputs=outputs)
    mv = fake(scheduler=FakeScheduler(result=own))
    asked = oip_request(outputs=[RequestOutput(name="c"), RequestOutput(name="a")])
    answer = await plane(mv).infer(Call("m", None, OIP, asked), mv)
    assert [out.name for out in answer.value.outputs] == ["c", "a"]
    assert [out.name for out in outputs] == ["a", "b", "c"]  # the model's list as it was
    with pytest.raises(InvalidInput, match="'d'"):
        asked = oip_request(outputs=[RequestOutput(name="d")])
        await plane(mv).infer(Call("m", None, OIP, asked), mv)


async def test_a_model_without_sequences_ignores_the_sequence_asked_for() -> None:
    mv = fake(scheduler=FakeScheduler(result=1))
    call = Call("m", None, WireProtocol.TRUSS, {}, sequence=SequenceRef(id="s"))
    assert (await plane(mv).infer(call, mv)).sequence is None
    assert [kind for kind, *_ in scheduler_of(mv).calls] == ["infer"]


async def test_a_streams_sequence_is_read_as_it_goes() -> None:
    mv = sequence_model(items=["a", "b"])
    scheduler_of(mv).model_headers = {"x-h": "1"}
    call = Call("m", None, WireProtocol.TORCHSERVE_GRPC, b"", sequence=SequenceRef(end=True))
    stream = plane(mv).stream(call, mv)
    assert stream.sequence is None  # not in its sequence before the first item is asked for
    seen = []
    async for item in stream:
        outcome = stream.sequence
        assert outcome is not None
        seen.append((item, outcome.id, outcome.ended))
    assert seen == [("a", "made-1", False), ("b", "made-1", False)]
    await stream.aclose()
    outcome = stream.sequence
    assert outcome is not None and outcome.ended and outcome.headers == {"x-h": "1"}
    assert call.sequence == SequenceRef(end=True)


async def test_each_oip_item_of_a_sequence_names_it() -> None:
    mv = sequence_model(items=[{"y": 1}, {"y": 2}])
    call = Call("m", None, OIP, oip_request(), sequence=SequenceRef(id="s"))
    stream = plane(mv).stream(call, mv)
    items = [item async for item in stream]
    assert [i.parameters for i in items] == [{"sequence_id": "s"}, {"sequence_id": "s"}]


# -- streams and gathering ------------------------------------------------------------------------


def streaming(items: list[Any], **kwargs: Any) -> ModelVersion:
    return fake(
        instance=FakeInstance(streaming=True, **kwargs),
        scheduler=FakeScheduler(result="infer's answer", items=items),
    )


async def test_a_stream_is_gathered_for_a_call_that_is_not_streamed() -> None:
    cases: list[tuple[list[Any], Any]] = [
        (["a", "b"], "ab"),
        ([b"a", b"b"], b"ab"),
        ([{"a": 1}, "b"], [{"a": 1}, "b"]),
        ([], []),
    ]
    for items, gathered in cases:
        mv = streaming(items)
        answer = await plane(mv).infer(Call("m", None, WireProtocol.TRUSS, {}), mv)
        assert answer == Answer(gathered)
        assert scheduler_of(mv).closed_streams == 1


async def test_gathered_replies_keep_the_first_replys_status_and_headers() -> None:
    mv = streaming([Reply("a", 206, {"x": "1"}, "text/plain"), Reply("b", 500), "c"])
    answer = await plane(mv).infer(Call("m", None, WireProtocol.TORCHSERVE_REST, b""), mv)
    assert answer.value == Reply("abc", 206, {"x": "1"}, "text/plain")


async def test_gathered_oip_outputs_are_concatenated() -> None:
    mv = streaming([{"y": np.array([1], np.int64)}, {"y": np.array([2, 3], np.int64)}])
    answer = await plane(mv).infer(Call("m", None, OIP, oip_request(id="r")), mv)
    (out,) = answer.value.outputs
    assert (out.name, out.shape, out.data, answer.value.id) == ("y", [3], [1, 2, 3], "r")


async def test_a_model_that_answers_infer_itself_is_not_gathered() -> None:
    mv = streaming(["a", "b"], predict_on_infer=True)
    answer = await plane(mv).infer(Call("m", None, WireProtocol.TRUSS, {}), mv)
    assert answer == Answer("infer's answer")
    assert [kind for kind, *_ in scheduler_of(mv).calls] == ["infer"]


async def test_stream_items_are_oip_responses_for_oip() -> None:
    mv = streaming([{"y": 1}, {"y": 2}])
    stream = plane(mv).stream(Call("m", None, WireProtocol.OIP_GRPC, oip_request(id="q")), mv)
    assert isinstance(stream, AnswerStream)
    items = [item async for item in stream]
    assert [(i.id, i.outputs[0].data) for i in items] == [("q", [1]), ("q", [2])]
    assert stream.sequence is None


async def test_closing_a_stream_early_closes_the_models_stream() -> None:
    mv = streaming(["a", "b", "c"])
    stream = plane(mv).stream(Call("m", None, WireProtocol.TRUSS, {}), mv)
    async for item in stream:
        assert item == "a"
        break
    assert await stream.__anext__() == "b"  # the same stream, read on
    await stream.aclose()
    assert scheduler_of(mv).closed_streams == 1


async def test_a_payload_that_does_not_convert_fails_from_the_stream() -> None:
    mv = fake(instance=FakeInstance(InputKind.OIP_REQUEST), scheduler=FakeScheduler(items=[1]))
    stream = plane(mv).stream(Call("m", None, WireProtocol.TRUSS, b"{"), mv)  # no error yet
    with pytest.raises(InvalidInput):
        await stream.__anext__()
    await stream.aclose()


async def test_a_stream_of_calls_is_converted_call_by_call() -> None:
    mv = fake(instance=FakeInstance(InputKind.RAW), scheduler=FakeScheduler(result={"y": 1}))

    async def calls() -> AsyncIterator[Call]:
        for i in range(2):
            yield Call("m", None, WireProtocol.OIP_GRPC, oip_request(id=str(i)))

    stream = plane(mv).stream_inputs(mv, calls(), WireProtocol.OIP_GRPC, "req")
    answers = [item async for item in stream]
    assert all(isinstance(a, InferenceResponse) for a in answers) and len(answers) == 2
    assert [(c[1]["id"], c[2]) for c in scheduler_of(mv).calls] == [("0", "req"), ("1", "req")]


# -- health and metadata ----------------------------------------------------------------------------


def test_health() -> None:
    dp = plane(fake("a"), fake("b", state=ModelState.UNLOADED))
    assert dp.live() and dp.ready()
    assert dp.model_ready("a") and not dp.model_ready("b")
    with pytest.raises(NotFound):
        dp.model_ready("c")
    assert not plane(fake("a"), fake("c", state=ModelState.FAILED)).ready()


async def test_server_readiness_rule() -> None:
    # Before start-up ends (load_all), a version still loading keeps the server unready.
    loading = fake("b", state=ModelState.LOADING)
    dp = plane(fake("a"), loading)
    assert not dp.ready()
    loading.state = ModelState.READY
    await dp.repository.load_all()
    assert dp.ready()
    # Serving: a version loading (registered, or loaded again) does not count until it ends...
    loading.state = ModelState.LOADING
    assert dp.ready() and not dp.model_ready("b")
    # ... then counts: a failed version makes the server unready, an unloaded one does not.
    loading.state = ModelState.FAILED
    assert not dp.ready()
    loading.state = ModelState.UNLOADED
    assert dp.ready() and not dp.model_ready("b")


def test_server_metadata_is_a_struct_with_the_same_json() -> None:
    meta = plane().server_metadata()
    assert isinstance(meta, ServerMetadata)
    before = {"name": "podium", "version": meta.version, "extensions": list(meta.extensions)}
    assert msgspec.json.encode(meta) == msgspec.json.encode(before)
    assert "binary_tensor_data" in meta.extensions


def test_model_metadata_is_a_struct_with_the_same_json() -> None:
    tensors = {
        "platform": "onnx",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [1]}],
        "owner": "search",
    }
    v1 = fake("m", "1", model_metadata=tensors)
    v2 = fake("m", "2", state=ModelState.FAILED, model_metadata=tensors)
    v2.reason = "load() raised"
    dp = plane(v1, v2, fake("plain"))
    meta = dp.model_metadata("m", "2")
    assert isinstance(meta, ModelMetadata)
    assert dp.model_metadata("m").versions == ["1", "2"]  # every version, asked for none
    before = {
        "name": "m",
        "versions": ["2"],  # the one asked for, as Triton answers /versions/{v}
        "platform": "onnx",
        "inputs": tensors["inputs"],
        "outputs": tensors["outputs"],
        "version": "2",
        "parameters": {"owner": "search", "state": "failed", "reason": "load() raised"},
    }
    assert msgspec.json.encode(meta) == msgspec.json.encode(before)
    plain = {  # an unversioned model is served as version "1" (Triton's default)
        "name": "plain",
        "versions": ["1"],
        "platform": "podium",
        "inputs": [],
        "outputs": [],
        "parameters": {"state": "ready"},
    }
    assert msgspec.json.encode(dp.model_metadata("plain")) == msgspec.json.encode(plain)
    assert msgspec.json.encode(dp.model_metadata("plain", "1")) == msgspec.json.encode(plain)
    with pytest.raises(NotFound):
        dp.model_metadata("m", "9")


# -- the model repository ---------------------------------------------------------------------------


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4, thread_name_prefix="test-repo") as pool:
        yield pool


def write_model(folder: Path, *, load: str = "pass", config: str = "") -> Path:
    """A native model directory: ``load`` is the body of its ``load()``."""
    folder.mkdir(parents=True)
    code = f"""
    class Model:
        def load(self):
            {load}

        def predict(self, inputs):
            return inputs
    """
    (folder / "model.py").write_text(textwrap.dedent(code))
    if config:
        (folder / "config.yaml").write_text(config)
    return folder


def repository(registry: Registry, executor: ThreadPoolExecutor) -> ModelRepository:
    return DataPlane(registry, executor=executor).repository


async def test_index_lists_every_version_by_name_then_version() -> None:
    failed = fake("b", "10", state=ModelState.FAILED)
    failed.reason = "broken"
    dp = plane(fake("b", "9"), failed, fake("a"))
    assert dp.repository.index() == [
        RepositoryModel("a", "1", ModelState.READY, ""),
        RepositoryModel("b", "9", ModelState.READY, ""),
        RepositoryModel("b", "10", ModelState.FAILED, "broken"),
    ]
    assert [m.name for m in dp.repository.index(ready_only=True)] == ["a", "b"]


async def test_load_and_unload() -> None:
    good, bad = fake("m", "1"), fake("m", "2")
    good_instance, bad_instance = good.instance, bad.instance
    assert isinstance(good_instance, FakeInstance) and isinstance(bad_instance, FakeInstance)
    dp = plane(good, bad)
    await dp.repository.unload("m", via=None)  # None: through a management listener
    assert {mv.state for mv in (good, bad)} == {ModelState.UNLOADED}
    assert not dp.model_ready("m", "1")
    bad_instance.fail_load = True
    with pytest.raises(ModelError, match=r"model 'm' failed to load: model 'm' version '2': "):
        await dp.repository.load("m", via=None)
    assert good.state is ModelState.READY and bad.state is ModelState.FAILED
    with pytest.raises(NotFound):
        await dp.repository.load("nope", via=None)
    with pytest.raises(NotFound):
        await dp.repository.unload("nope", via=None)


@pytest.mark.parametrize("protocol", list(WireProtocol))
async def test_inference_front_ends_may_not_load_or_unload_by_default(
    protocol: WireProtocol,
) -> None:
    mv = fake("m")
    dp = plane(mv)
    dp.repository.control.management = "http://127.0.0.1:8081, gRPC 127.0.0.1:7071"
    for action in (dp.repository.unload, dp.repository.load):
        with pytest.raises(Forbidden) as caught:
            await action("m", via=protocol)
        message = caught.value.message
        assert f"model 'm' is refused on the inference listener ({protocol.value})" in message
        assert "management API (http://127.0.0.1:8081, gRPC 127.0.0.1:7071)" in message
        assert "--model-control inference" in message
    with pytest.raises(Forbidden):  # refused before the name is even looked up
        await dp.repository.unload("nope", via=protocol)
    assert mv.state is ModelState.READY and dp.ready()
    assert dp.repository.index() == [RepositoryModel("m", "1", ModelState.READY, "")]


async def test_model_control_inference_opens_load_and_unload() -> None:
    mv = fake("m")
    dp = plane(mv)
    dp.repository.control = ControlPolicy(ModelControl.INFERENCE)
    await dp.repository.unload("m", via=WireProtocol.OIP_REST)
    assert mv.state is ModelState.UNLOADED
    await dp.repository.load("m", via=WireProtocol.OIP_GRPC)
    assert mv.state is ModelState.READY


async def test_register_describe_list_and_unregister(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    registry = Registry()
    repo = repository(registry, executor)
    path = write_model(tmp_path / "echo", config="version: '3'\n")
    registered = await repo.register(path, url="echo", overrides=ConfigOverrides(batch_size=1))
    assert (registered.name, registered.versions, registered.workers) == ("echo", ["3"], 1)
    await repo.load_registered(registered, synchronous=True)
    try:
        (described,) = repo.describe("echo")
        assert (described.name, described.version, described.url) == ("echo", "3", "echo")
        assert described.state is ModelState.READY and described.default
        assert not described.loaded_at_startup
        assert (described.min_workers, described.max_workers) == (1, 1)
        (worker,) = described.workers
        assert (worker.kind, worker.state, worker.busy) == ("thread", "ready", 0)
        assert [(m.name, m.url) for m in repo.models()] == [("echo", "echo")]
        with pytest.raises(Conflict, match="model 'echo' version '3' is already registered"):
            await repo.register(path, url="echo")
        await repo.scale("echo", None, 2, 2, synchronous=True)
        (described,) = repo.describe("echo", "3")
        assert (described.min_workers, len(described.workers)) == (2, 2)
    finally:
        await repo.unregister("echo")
    with pytest.raises(NotFound):
        repo.describe("echo")
    assert repo.models() == []


async def test_a_registration_whose_load_fails_leaves_nothing_registered(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    registry = Registry()
    repo = repository(registry, executor)
    path = write_model(tmp_path / "bad", load="raise RuntimeError('no weights')")
    registered = await repo.register(path, url="bad")
    with pytest.raises(PodiumError, match="failed to load: .*no weights.*was not registered"):
        await repo.load_registered(registered, synchronous=True)
    assert repo.index() == []


async def test_a_broken_registration_is_a_bad_request(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    repo = repository(Registry(), executor)
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "model.py").write_text("class Model:\n    pass\n")
    with pytest.raises(InvalidInput, match="cannot register 'broken-url'"):
        await repo.register(folder, url="broken-url")


async def test_background_loads_are_owned_and_cancelled_on_close(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    registry = Registry()
    dp = DataPlane(registry, executor=executor)
    path = write_model(tmp_path / "m")
    registered = await dp.repository.register(path, url="m")
    await dp.repository.load_registered(registered, synchronous=False)
    for _ in range(200):
        if dp.model_ready("m"):
            break
        await asyncio.sleep(0.01)
    assert dp.model_ready("m")
    await dp.close()


async def test_start_up_paths_are_loaded_at_startup(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    dp = DataPlane(executor=executor)
    write_model(tmp_path / "repo" / "a")
    write_model(tmp_path / "repo" / "b")
    await asyncio.get_running_loop().run_in_executor(
        executor, dp.repository.add_paths, [tmp_path / "repo"]
    )
    await dp.repository.load_all()
    try:
        assert [mv.name for mv in dp.repository.versions()] == ["a", "b"]
        assert all(d.loaded_at_startup for d in dp.repository.describe("a", every=True))
        assert dp.ready()
    finally:
        await dp.close()


async def test_start_up_models_are_listed_as_the_paths_given(
    tmp_path: Path, executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Relative paths stay relative; an absolute one is shown as given (the operator typed it).
    monkeypatch.chdir(tmp_path)
    write_model(tmp_path / "repo" / "a")
    single = write_model(tmp_path / "single")
    dp = DataPlane(executor=executor)
    await asyncio.get_running_loop().run_in_executor(
        executor, dp.repository.add_paths, [Path("repo"), single]
    )
    try:
        urls = {m.name: m.url for m in dp.repository.models()}
        assert urls == {"a": "repo/a/model.py", "single": f"{single}/model.py"}
        (described,) = dp.repository.describe("a")
        assert described.url == "repo/a/model.py"
    finally:
        await dp.close()


async def test_set_default_and_scale_name_what_is_missing() -> None:
    dp = plane(fake("m", "1"), fake("m", "2"))
    dp.repository.set_default("m", "1")
    assert dp.resolve("m").version == "1"
    assert [d.default for d in dp.repository.describe("m", every=True)] == [True, False]
    with pytest.raises(NotFound):
        dp.repository.set_default("m", "3")
    with pytest.raises(NotFound):
        await dp.repository.scale("nope", None, 1, 1, synchronous=True)
    with pytest.raises(PodiumError, match="cannot be scaled"):
        await dp.repository.scale("m", "1", 2, 2, synchronous=True)


async def test_a_repository_without_an_executor_cannot_build(tmp_path: Path) -> None:
    with pytest.raises(PodiumError, match="no executor"):
        await plane().repository.register(write_model(tmp_path / "m"), url="m")


async def test_a_remote_version_describes_its_model_and_runs_nothing_here() -> None:
    # What podium.ray's ingress registers: ready at once, answering metadata and telling front
    # ends what the model asks for; a call that reaches its instance or scheduler is refused.
    dp = plane()
    mv = dp.repository.add_remote(
        ModelConfig(name="far", version="2", default_version="2"), Capabilities(streaming=True)
    )
    assert dp.resolve("far") is mv and dp.model_ready("far")
    assert mv.instance.capabilities.streaming
    assert mv.scheduler.statistics() == {} and mv.scheduler.in_flight == 0
    refusals = [
        lambda: mv.scheduler.infer({}, None),
        lambda: mv.scheduler.stream({}, None),
        lambda: mv.instance.predict({}, None),
        lambda: mv.instance.predict_stream({}, None),
    ]
    for refused in refusals:
        with pytest.raises(PodiumError, match="model 'far' version '2' runs elsewhere"):
            refused()
    await mv.instance.load()
    await mv.scheduler.close()
