"""Podium's protobuf descriptors: compiled from the committed .proto files, kept out of protobuf's
default pool, and wire-compatible with Triton's generated messages, with tritonclient imported in
the same process in either order."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import EXAMPLES, ROOT
from google.protobuf import descriptor_pb2, descriptor_pool


def test_committed_descriptors_match_the_proto_files() -> None:
    from podium.server.grpc.protos import _descriptors, build

    assert build.compile_descriptor_set() == _descriptors.FILE_DESCRIPTOR_SET, (
        "a .proto file changed: run `python -m podium.server.grpc.protos.build`"
    )
    assert build.render_module(_descriptors.FILE_DESCRIPTOR_SET) == build.TARGET.read_text()


def test_messages_live_in_a_private_pool_under_their_wire_names() -> None:
    from podium.server.grpc._pool import POOL, message_class

    request = message_class("inference.ModelInferRequest")
    assert request.DESCRIPTOR.full_name == "inference.ModelInferRequest"
    assert request.DESCRIPTOR.file.pool is POOL
    assert POOL is not descriptor_pool.Default()
    service = POOL.FindServiceByName("inference.GRPCInferenceService")
    assert [m.name for m in service.methods] == [
        "ServerLive",
        "ServerReady",
        "ModelReady",
        "ServerMetadata",
        "ModelMetadata",
        "ModelConfig",
        "ModelInfer",
        "ModelStreamInfer",
        "RepositoryIndex",
        "RepositoryModelLoad",
        "RepositoryModelUnload",
        "SystemSharedMemoryStatus",
        "SystemSharedMemoryRegister",
        "SystemSharedMemoryUnregister",
        "CudaSharedMemoryStatus",
        "CudaSharedMemoryRegister",
        "CudaSharedMemoryUnregister",
        "ModelStatistics",
    ]
    stream = service.methods_by_name["ModelStreamInfer"]
    assert stream.input_type.full_name == "inference.ModelInferRequest"
    assert stream.output_type.full_name == "inference.ModelStreamInferResponse"


def _fields(descriptor: descriptor_pb2.DescriptorProto) -> dict[str, tuple[int, int, int, str]]:
    found = {}
    for field in descriptor.field:
        found[field.name] = (field.number, field.type, field.label, field.type_name)
    for nested in descriptor.nested_type:
        for name, spec in _fields(nested).items():
            found[f"{nested.name}.{name}"] = spec
    return found


TRITON_MESSAGES = [
    "ServerLiveRequest",
    "ServerLiveResponse",
    "ServerReadyRequest",
    "ServerReadyResponse",
    "ModelReadyRequest",
    "ModelReadyResponse",
    "ServerMetadataRequest",
    "ServerMetadataResponse",
    "ModelMetadataRequest",
    "ModelConfigRequest",
    "ModelConfigResponse",
    "InferParameter",
    "InferTensorContents",
    "ModelInferRequest",
    "ModelInferResponse",
    "ModelStreamInferResponse",
    "ModelRepositoryParameter",
    "RepositoryIndexRequest",
    "RepositoryIndexResponse",
    "RepositoryModelLoadRequest",
    "RepositoryModelUnloadRequest",
    "SystemSharedMemoryStatusRequest",
    "SystemSharedMemoryStatusResponse",
    "SystemSharedMemoryRegisterRequest",
    "SystemSharedMemoryRegisterResponse",
    "SystemSharedMemoryUnregisterRequest",
    "SystemSharedMemoryUnregisterResponse",
    "CudaSharedMemoryStatusRequest",
    "CudaSharedMemoryStatusResponse",
    "CudaSharedMemoryRegisterRequest",
    "CudaSharedMemoryRegisterResponse",
    "CudaSharedMemoryUnregisterRequest",
    "CudaSharedMemoryUnregisterResponse",
]


@pytest.mark.parametrize("name", TRITON_MESSAGES)
def test_every_field_matches_tritons_generated_messages(name: str) -> None:
    """Same numbers, types and labels as tritonclient's own grpc_service.proto."""
    from tritonclient.grpc import service_pb2

    from podium.server.grpc._pool import POOL

    def proto_of(descriptor: object) -> descriptor_pb2.DescriptorProto:
        proto = descriptor_pb2.DescriptorProto()
        descriptor.CopyToProto(proto)  # type: ignore[attr-defined]
        return proto

    theirs = proto_of(service_pb2.DESCRIPTOR.message_types_by_name[name])
    ours = proto_of(POOL.FindMessageTypeByName(f"inference.{name}"))
    assert _fields(ours) == _fields(theirs)


def test_extensions_beyond_triton_are_new_fields_only() -> None:
    """MLServer's metadata parameters and KServe's load/unload answers add fields; none changes."""
    from tritonclient.grpc import service_pb2

    from podium.server.grpc._pool import POOL

    for name in ("ModelMetadataResponse", "RepositoryModelLoadResponse"):
        theirs = descriptor_pb2.DescriptorProto()
        service_pb2.DESCRIPTOR.message_types_by_name[name].CopyToProto(theirs)
        ours = descriptor_pb2.DescriptorProto()
        POOL.FindMessageTypeByName(f"inference.{name}").CopyToProto(ours)
        theirs_fields, ours_fields = _fields(theirs), _fields(ours)
        assert {k: ours_fields[k] for k in theirs_fields} == theirs_fields


def _enums(descriptor: descriptor_pb2.DescriptorProto) -> dict[str, dict[str, int]]:
    found = {e.name: {v.name: v.number for v in e.value} for e in descriptor.enum_type}
    for nested in descriptor.nested_type:
        for name, values in _enums(nested).items():
            found[f"{nested.name}.{name}"] = values
    return found


def test_model_config_is_a_subset_of_tritons_field_for_field() -> None:
    """model_config.proto declares Triton's ModelConfig messages with only the fields Podium
    fills: each is Triton's (number, type, label, type), and every enum has all of Triton's
    values, so tritonclient reads Podium's ModelConfig as its own."""
    from tritonclient.grpc import model_config_pb2

    from podium.server.grpc._pool import POOL

    ours_file = descriptor_pb2.FileDescriptorProto()
    POOL.FindFileByName("model_config.proto").CopyToProto(ours_file)
    theirs_file = descriptor_pb2.FileDescriptorProto()
    model_config_pb2.DESCRIPTOR.CopyToProto(theirs_file)
    assert (ours_file.package, ours_file.syntax) == (theirs_file.package, "proto3")
    theirs = {m.name: m for m in theirs_file.message_type}
    assert len(ours_file.message_type) >= 10
    for message in ours_file.message_type:
        ours_fields, theirs_fields = _fields(message), _fields(theirs[message.name])
        assert {k: theirs_fields[k] for k in ours_fields} == ours_fields, message.name
        for name, values in _enums(message).items():
            assert values == _enums(theirs[message.name])[name], name
    their_enums = {e.name: {v.name: v.number for v in e.value} for e in theirs_file.enum_type}
    for enum in ours_file.enum_type:
        assert {v.name: v.number for v in enum.value} == their_enums[enum.name]
    # The oneofs a client switches on have Triton's names.
    config = POOL.FindMessageTypeByName("inference.ModelConfig")
    assert set(config.oneofs_by_name) == {"scheduling_choice"}
    policy = POOL.FindMessageTypeByName("inference.ModelVersionPolicy")
    assert set(policy.oneofs_by_name) == {"policy_choice"}


# -- tritonclient in the same process, in either order ------------------------------------------

_SAME_PROCESS = """
import asyncio, sys
from pathlib import Path

import numpy as np

order = sys.argv[1]
if order == "triton-first":
    import tritonclient.grpc as triton
    from podium.server.grpc import _tensors
else:
    from podium.server.grpc import _tensors
    import tritonclient.grpc as triton

import grpc
from google.protobuf import descriptor_pool
from podium.config import ServerConfig
from podium.server._runner import Podium

assert triton.service_pb2.ModelInferRequest.DESCRIPTOR.file.pool is descriptor_pool.Default()
assert _tensors.ModelInferRequest.DESCRIPTOR.file.pool is not descriptor_pool.Default()


async def main() -> None:
    config = ServerConfig(
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        management_port=0,
        grpc_management_port=0,
        metrics_port=0,
    )
    podium = Podium(config, [Path(sys.argv[2])])
    await podium.start()
    target = podium.addresses["grpc-inference"]
    try:
        def with_tritonclient():
            client = triton.InferenceServerClient(target)
            x = triton.InferInput("x", [2], "INT32")
            x.set_data_from_numpy(np.array([4, 5], dtype=np.int32))
            return client.infer("echo", [x]).as_numpy("x").tolist()

        assert await asyncio.to_thread(with_tritonclient) == [4, 5]

        # Podium's own message classes as a client's: typed contents this time.
        async with grpc.aio.insecure_channel(target) as channel:
            infer = channel.unary_unary(
                "/inference.GRPCInferenceService/ModelInfer",
                request_serializer=_tensors.ModelInferRequest.SerializeToString,
                response_deserializer=_tensors.ModelInferResponse.FromString,
            )
            request = _tensors.ModelInferRequest(model_name="echo")
            tensor = request.inputs.add(name="y", datatype="INT64", shape=[1])
            tensor.contents.int64_contents.append(9)
            response = await infer(request)
            assert list(response.outputs[0].contents.int64_contents) == [9]
    finally:
        await podium.stop()
    print("both work")


asyncio.run(main())
"""


@pytest.mark.parametrize("order", ["triton-first", "podium-first"])
def test_tritonclient_and_podium_in_one_process(order: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_SAME_PROCESS), order, str(EXAMPLES / "echo")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert "both work" in result.stdout
    assert "duplicate symbol" not in result.stderr


def test_nested_message_classes_live_as_long_as_the_server() -> None:
    """protobuf drops the class of a nested type (here ``InferInputTensor``) with its last
    message and builds a new Python type for the next one: a cost on every call. The pool holds
    one class per type instead."""
    import gc
    import weakref

    from podium.server.grpc._pool import message_class

    request = message_class("inference.ModelInferRequest")()
    tensor = request.inputs.add()
    nested = weakref.ref(type(tensor))
    del request, tensor
    gc.collect()
    assert nested() is not None
