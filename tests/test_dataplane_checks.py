"""The data plane's checks of OIP requests and Triton's model configuration (issue 12, items 5
and 9), on fake model versions: every input kind gets only requests the protocol allows and
the model's declared inputs match; a version's configuration as Triton's ``ModelConfig``; a
repository load's ``config``."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from test_dataplane import FakeInstance, FakeScheduler, fake, plane

from podium.config import ModelConfig, signature_of
from podium.dataplane import ControlPolicy, ModelControl
from podium.errors import DefinitionError, InvalidInput, InvalidTensor, NotFound
from podium.runtime.registry import ModelVersion
from podium.types import (
    Call,
    Capabilities,
    InferenceRequest,
    InputKind,
    RequestInput,
    WireProtocol,
)

DECLARED = {
    "max_batch_size": 8,
    "inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]},
        {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 16]},
    ],
    "outputs": [{"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 16]}],
}


def tensor(name: str = "INPUT0", datatype: str = "INT32", shape: Any = None, data: Any = None):
    shape = [1, 16] if shape is None else shape
    return RequestInput(
        name=name, shape=shape, datatype=datatype, data=list(range(16)) if data is None else data
    )


def request(*inputs: RequestInput) -> InferenceRequest:
    return InferenceRequest(inputs=list(inputs))


def version(name: str, kind: InputKind, **config: Any) -> ModelVersion:
    """A fake version whose model answers ``{"y": 1}``."""
    return fake(name, instance=FakeInstance(kind), scheduler=FakeScheduler({"y": 1}), **config)


async def infer(mv: ModelVersion, payload: Any, protocol: WireProtocol = WireProtocol.OIP_REST):
    dp = plane(mv)
    await dp.infer(Call(mv.name, mv.version, protocol, payload))
    return mv.scheduler.calls[-1][1]  # type: ignore[attr-defined]


# -- the protocol, for every input kind ------------------------------------------------------

KINDS = [InputKind.DEFAULT, InputKind.OIP_REQUEST, InputKind.RAW, InputKind.WIRE, InputKind.SCHEMA]

BAD = [
    (tensor(datatype="INT322"), "unknown datatype 'INT322'"),
    (tensor(shape=[2], data=[1, 2, 3]), "has shape [2] (2 elements) but 3 data elements"),
    (tensor(shape=[2**62], data=[1, 2]), "larger than any tensor can be"),
    (tensor(shape=[1], data={"a": 1}), "has a JSON object as data"),
    (tensor(shape=[2], data=["x", "y"]), "must hold numbers"),
    (tensor(shape=[1], data=[300], datatype="INT8"), "outside the range [-128, 127]"),
    (tensor(shape=[-1], data=[]), "a shape must be a list of non-negative integers"),
]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("inp", "words"), BAD)
async def test_no_model_sees_a_request_the_protocol_refuses(
    kind: InputKind, inp: RequestInput, words: str
) -> None:
    for protocol in (WireProtocol.OIP_REST, WireProtocol.OIP_GRPC):
        mv = version("echo", kind)
        with pytest.raises(InvalidTensor) as caught:
            await infer(mv, request(inp), protocol)
        assert words in caught.value.message and "'INPUT0'" in caught.value.message
        assert mv.scheduler.calls == []  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_the_request_itself_reaches_the_model_untouched() -> None:
    mv = version("echo", InputKind.OIP_REQUEST)
    sent = request(tensor(), tensor("INPUT1"))
    assert await infer(mv, sent) is sent
    assert sent.inputs[0].data == list(range(16))  # not decoded in place


@pytest.mark.anyio
async def test_a_request_converted_from_another_protocol_is_checked_too() -> None:
    mv = version("echo", InputKind.OIP_REQUEST)
    body = {"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0]}]}
    with pytest.raises(InvalidTensor, match="has shape \\[2\\] \\(2 elements\\) but 1 data"):
        await infer(mv, body, WireProtocol.TRUSS)


# -- the declared inputs ----------------------------------------------------------------------

DECLARED_BAD = [
    (request(tensor()), "model 'simple' needs input INPUT1 (INT32 [-1, 16]), missing"),
    (
        request(tensor(), tensor("INPUT1"), tensor("INPUT9")),
        "model 'simple' has no input 'INPUT9'; it declares INPUT0 (INT32 [-1, 16]), INPUT1",
    ),
    (
        request(tensor(), tensor("INPUT1", "FP32", data=[0.5] * 16)),
        "input 'INPUT1' has datatype FP32, but model 'simple' declares it INT32",
    ),
    (
        request(tensor(), tensor("INPUT1", shape=[16])),
        "input 'INPUT1' has shape [16], but model 'simple' declares [-1, 16] (-1: any size)",
    ),
    (
        request(tensor(), tensor("INPUT1", shape=[2, 8])),
        "input 'INPUT1' has shape [2, 8], but model 'simple' declares [-1, 16]",
    ),
    (
        request(
            tensor(shape=[9, 16], data=[0] * 144), tensor("INPUT1", shape=[9, 16], data=[0] * 144)
        ),
        "input 'INPUT0' has batch size 9 (its first dimension), but model 'simple' takes at most 8",
    ),
    (
        request(tensor(shape=[2, 16], data=[0] * 32), tensor("INPUT1")),
        "inputs 'INPUT0' and 'INPUT1' have different batch sizes (first dimensions) 2 and 1",
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("sent", "words"), DECLARED_BAD)
async def test_requests_are_checked_against_the_declared_inputs(
    kind: InputKind, sent: InferenceRequest, words: str
) -> None:
    mv = version("simple", kind, model_metadata=DECLARED)
    with pytest.raises(InvalidTensor) as caught:
        await infer(mv, sent)
    assert words in caught.value.message


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_request_that_fits_the_declaration_passes(kind: InputKind) -> None:
    mv = version("simple", kind, model_metadata=DECLARED)
    both = [0] * 64
    await infer(
        mv, request(tensor(shape=[4, 16], data=both), tensor("INPUT1", shape=[4, 16], data=both))
    )
    await infer(mv, request(tensor("INPUT1"), tensor()))  # any order


@pytest.mark.anyio
async def test_a_model_whose_declared_inputs_are_hints_is_not_held_to_them() -> None:
    # An MLServer runtime: model-settings.json's inputs are content types, not a contract.
    instance = FakeInstance(InputKind.RAW)
    instance.capabilities = Capabilities(input_kind=InputKind.RAW, checks_declared_inputs=False)
    mv = fake("mls", instance=instance, scheduler=FakeScheduler({"y": 1}), model_metadata=DECLARED)
    await infer(mv, request(tensor("other", shape=[2], data=[1, 2])))
    with pytest.raises(InvalidTensor, match="has shape \\[2\\] \\(2 elements\\) but 1 data"):
        await infer(mv, request(tensor("other", shape=[2], data=[1])))  # the protocol still holds


# -- the declaration itself ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "words"),
    [
        ({"inputs": {"x": 1}}, "'model_metadata.inputs' must be a list of tensors"),
        ({"inputs": ["x"]}, "'model_metadata.inputs[0]' must be a mapping"),
        ({"inputs": [{"name": "x", "datatype": "FP32"}]}, "'model_metadata.inputs[0].shape'"),
        (
            {"inputs": [{"name": "x", "datatype": "F32", "shape": [1]}]},
            "'model_metadata.inputs[0].datatype' must be an OIP datatype",
        ),
        (
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-2]}]},
            "must be a list of integers >= -1",
        ),
        (
            {"outputs": [{"name": "y", "datatype": "FP32", "shape": [1], "dtype": "x"}]},
            "'model_metadata.outputs[0]' has unknown key(s) dtype",
        ),
        (
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1]}] * 2},
            "'model_metadata.inputs' names x more than once",
        ),
        ({"max_batch_size": -1}, "'model_metadata.max_batch_size' must be an integer >= 0"),
        (
            {"max_batch_size": 4, "inputs": [{"name": "x", "datatype": "FP32", "shape": [3]}]},
            "every declared shape starts with the batch dimension -1; inputs x has shape [3]",
        ),
    ],
)
def test_a_malformed_declaration_is_refused_when_the_config_is_made(
    metadata: dict[str, Any], words: str
) -> None:
    with pytest.raises(ValueError) as caught:
        signature_of(metadata)
    assert words in str(caught.value)
    with pytest.raises(DefinitionError, match="model 'm'"):
        ModelConfig(name="m", model_metadata=metadata)


def test_the_declaration_is_read_once_with_the_config() -> None:
    signature = ModelConfig(name="m", model_metadata=DECLARED).signature
    assert signature.max_batch_size == 8
    assert [s.describe() for s in signature.inputs] == [
        "INPUT0 (INT32 [-1, 16])",
        "INPUT1 (INT32 [-1, 16])",
    ]
    assert set(signature.by_name) == {"INPUT0", "INPUT1"}
    assert ModelConfig(name="m").signature.inputs == ()


# -- Triton's model configuration -------------------------------------------------------------


def as_json(value: Any) -> Any:
    return msgspec.json.decode(msgspec.json.encode(value))


def test_a_version_configuration_is_tritons_model_config() -> None:
    dp = plane(fake("simple", model_metadata={**DECLARED, "platform": "onnx"}))
    assert as_json(dp.model_config("simple")) == {
        "name": "simple",
        "platform": "onnx",
        "backend": "podium",
        "version_policy": {"all": {}},
        "max_batch_size": 8,
        "input": [
            {
                "name": name,
                "data_type": "TYPE_INT32",
                "format": "FORMAT_NONE",
                "dims": [16],
                "is_shape_tensor": False,
                "allow_ragged_batch": False,
                "optional": False,
            }
            for name in ("INPUT0", "INPUT1")
        ],
        "output": [
            {
                "name": "OUTPUT0",
                "data_type": "TYPE_INT32",
                "dims": [16],
                "label_filename": "",
                "is_shape_tensor": False,
            }
        ],
        "instance_group": [{"name": "simple_0", "kind": "KIND_MODEL", "count": 1}],
    }


def test_batching_sequences_streaming_and_workers_in_the_configuration() -> None:
    batching = fake("b", batch_size=4, max_batch_delay_ms=2.5, max_queue_size=50, min_workers=2)
    sequences = fake(
        "s",
        sequence_batching=True,
        sequence_max_idle_ms=60_000,
        model_metadata={"inputs": [{"name": "X", "datatype": "BYTES", "shape": [1, 1]}]},
    )
    streaming = fake("g", instance=FakeInstance(streaming=True))
    dp = plane(batching, sequences, streaming)
    b = as_json(dp.model_config("b"))
    assert b["dynamic_batching"] == {
        "preferred_batch_size": [4],
        "max_queue_delay_microseconds": 2500,
        "default_queue_policy": {"max_queue_size": 50},
    }
    assert (b["max_batch_size"], b["input"], b["instance_group"][0]["count"]) == (0, [], 2)
    assert "sequence_batching" not in b and "model_transaction_policy" not in b
    bounded = fake(
        "t",
        batch_size=4,
        max_queue_size=50,
        max_queue_delay_ms=125,
        priority_levels=3,
        default_priority=2,
    )
    dynamic = as_json(plane(bounded).model_config("t"))["dynamic_batching"]
    assert dynamic["default_queue_policy"] == {
        "max_queue_size": 50,
        "default_timeout_microseconds": 125_000,
    }
    assert (dynamic["priority_levels"], dynamic["default_priority_level"]) == (3, 2)
    s = as_json(dp.model_config("s", "1"))
    assert s["sequence_batching"] == {"max_sequence_idle_microseconds": 60_000_000}
    assert "dynamic_batching" not in s
    assert (s["input"][0]["data_type"], s["input"][0]["dims"]) == ("TYPE_STRING", [1, 1])
    assert as_json(dp.model_config("g"))["model_transaction_policy"] == {"decoupled": True}
    with pytest.raises(NotFound):
        dp.model_config("nope")


# -- a load's config (Triton's load_model(config=...)) ----------------------------------------


def opened(*versions: ModelVersion):  # type: ignore[no-untyped-def]
    dp = plane(*versions)
    dp.repository.control = ControlPolicy(ModelControl.INFERENCE)
    return dp


@pytest.mark.anyio
async def test_a_load_config_changes_what_the_model_declares_until_a_plain_load() -> None:
    dp = opened(fake("simple", model_metadata=DECLARED))
    via = WireProtocol.OIP_REST
    await dp.repository.load("simple", via=via, config='{"max_batch_size": "16"}')
    assert dp.model_config("simple").max_batch_size == 16
    assert dp.model_metadata("simple").inputs == DECLARED["inputs"]  # shapes as declared
    changed = (
        '{"input": [{"name": "X", "data_type": "TYPE_FP32", "dims": ["3"]}], "max_batch_size": 0}'
    )
    await dp.repository.load("simple", via=via, config=changed)
    config = dp.model_config("simple")
    assert (config.max_batch_size, [(i.name, i.dims) for i in config.input]) == (0, [("X", [3])])
    assert dp.model_metadata("simple").inputs == [{"name": "X", "datatype": "FP32", "shape": [3]}]
    # What GET .../config says may be sent back as it is.
    await dp.repository.load("simple", via=via, config=msgspec.json.encode(config).decode())
    await dp.repository.load("simple", via=via)  # as found again
    assert dp.model_config("simple").max_batch_size == 8
    assert dp.model_metadata("simple").inputs == DECLARED["inputs"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("config", "words"),
    [
        (
            '"parameters": {"config": {{"max_batch_size": "16"}}}',
            "its 'config' parameter is not JSON",
        ),
        ("[1]", "must be a JSON object (Triton's ModelConfig)"),
        ('{"max_batch_size": "many"}', "its 'config' has an invalid 'max_batch_size'"),
        ('{"max_batch_size": -2}', "max_batch_size to -2; it must be >= 0"),
        ('{"name": "other"}', "sets 'name' to 'other', but that is not changed by a load"),
        ('{"instance_group": [{"count": 4, "kind": "KIND_CPU"}]}', "workers are scaled"),
        ('{"dynamic_batching": {}}', "batching is set by batch_size and max_batch_delay"),
        ('{"version_policy": {"latest": {"num_versions": 1}}}', "Podium serves every version"),
        ('{"optimization": {"priority": "PRIORITY_MAX"}}', "'optimization', which Podium has no"),
        (
            '{"input": [{"name": "x", "data_type": "TYPE_FP33", "dims": [1]}]}',
            "data_type 'TYPE_FP33'",
        ),
        (
            '{"input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [1], "optional": true}]}',
            "optional",
        ),
        (
            '{"max_batch_size": 4, "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [-2]}]}',
            "does not fit the model",
        ),
    ],
)
async def test_a_load_config_podium_cannot_apply_is_refused_and_changes_nothing(
    config: str, words: str
) -> None:
    dp = opened(fake("simple", model_metadata=DECLARED))
    with pytest.raises(InvalidInput) as caught:
        await dp.repository.load("simple", via=WireProtocol.OIP_GRPC, config=config)
    assert caught.value.message.startswith("failed to load model 'simple': ")
    assert words in caught.value.message
    assert dp.model_config("simple").max_batch_size == 8


@pytest.mark.anyio
async def test_a_load_config_of_triton_defaults_asks_nothing() -> None:
    dp = opened(fake("simple", model_metadata=DECLARED))
    await dp.repository.load(
        "simple",
        via=WireProtocol.OIP_REST,
        config='{"model_warmup": [], "parameters": {}, "default_model_filename": "", "max_batch_size": 8}',
    )
    assert dp.model_config("simple").max_batch_size == 8


@pytest.mark.anyio
async def test_an_unknown_model_fails_to_load() -> None:
    dp = opened(fake("simple"))
    with pytest.raises(
        NotFound, match="failed to load: Request for unknown model: 'nope' is not found"
    ):
        await dp.repository.load("nope", via=WireProtocol.OIP_REST)
