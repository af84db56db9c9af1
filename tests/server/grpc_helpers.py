"""Helpers shared by the end-to-end gRPC tests (the fixtures are in ``grpc_fixtures``).

Three kinds of client talk to a real ``podium serve``:

- ``tritonclient.grpc``, as Triton users do (always raw tensor contents);
- :class:`Stubs` over message classes from a private descriptor pool: Podium's own messages
  (:func:`podium_messages`, whose fields a test checks against Triton's generated ones), or an
  MLServer-style client compiled at test time from :data:`MLSERVER_PROTO` (:func:`compile_proto`),
  a declaration of ``inference.GRPCInferenceService`` as MLServer's ``dataplane.proto`` makes it
  (``ModelStreamInfer``: ``stream ModelInferRequest`` → ``stream ModelInferResponse``). Private
  pools, because ``tritonclient`` already holds ``inference.*`` in protobuf's default pool.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from conftest import Server
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

SERVICE = "inference.GRPCInferenceService"


def target(server: Server) -> str:
    """``host:port`` of the server's gRPC inference listener, from its ready line."""
    return server.addresses["grpc-inference"]


# -- message classes from private pools ---------------------------------------------------------


def compile_proto(text: str, directory: Path, name: str = "client.proto") -> SimpleNamespace:
    """Compile ``text`` with grpcio-tools into a private pool; its message classes by short name,
    plus ``service`` (the first service's descriptor) and ``pool``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)
    out = directory / (name + ".pb")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{directory}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            name,
        ],
        check=True,
        capture_output=True,
    )
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    pool = descriptor_pool.DescriptorPool()
    for proto in files:
        pool.Add(proto)
    found = pool.FindFileByName(name)
    classes = {
        short: message_factory.GetMessageClass(descriptor)
        for short, descriptor in found.message_types_by_name.items()
    }
    service = next(iter(found.services_by_name.values()))
    return SimpleNamespace(pool=pool, service=service, **classes)


def podium_messages() -> SimpleNamespace:
    """Podium's own OIP message classes, used as a plain client's."""
    from podium.server.grpc._pool import POOL

    found = POOL.FindFileByName("inference.proto")
    classes = {
        short: message_factory.GetMessageClass(descriptor)
        for short, descriptor in found.message_types_by_name.items()
    }
    return SimpleNamespace(
        pool=POOL, service=found.services_by_name["GRPCInferenceService"], **classes
    )


class Stubs:
    """One callable per method of ``messages.service``, over ``channel`` (sync or aio).

    ``stream_output`` overrides the response type of ``ModelStreamInfer`` (the framing).
    """

    def __init__(self, channel: Any, messages: SimpleNamespace, stream_output: Any = None) -> None:
        service = messages.service
        for method in service.methods:
            path = f"/{service.full_name}/{method.name}"
            request = message_factory.GetMessageClass(method.input_type)
            response = message_factory.GetMessageClass(method.output_type)
            if method.name == "ModelStreamInfer" and stream_output is not None:
                response = stream_output
            if method.client_streaming and method.server_streaming:
                make = channel.stream_stream
            elif method.server_streaming:
                make = channel.unary_stream
            elif method.client_streaming:
                make = channel.stream_unary
            else:
                make = channel.unary_unary
            setattr(
                self,
                method.name,
                make(
                    path,
                    request_serializer=request.SerializeToString,
                    response_deserializer=response.FromString,
                ),
            )


# -- requests and responses ------------------------------------------------------------------------

_TYPED = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def infer_request(messages: SimpleNamespace, model: str, **inputs: Any) -> Any:
    """A ModelInferRequest with typed contents: str → BYTES (content_type str), int → INT64,
    float → FP64, bool → BOOL; a ``(datatype, shape, values)`` tuple as given."""
    request = messages.ModelInferRequest(model_name=model)
    for name, value in inputs.items():
        if isinstance(value, tuple):
            datatype, shape, values = value
        elif isinstance(value, str):
            datatype, shape, values = "BYTES", [1], [value.encode()]
        elif isinstance(value, bool):
            datatype, shape, values = "BOOL", [1], [value]
        elif isinstance(value, int):
            datatype, shape, values = "INT64", [1], [value]
        else:
            datatype, shape, values = "FP64", [1], [value]
        tensor = request.inputs.add(name=name, datatype=datatype, shape=shape)
        if isinstance(value, str):
            tensor.parameters["content_type"].string_param = "str"
        if datatype in _TYPED:
            getattr(tensor.contents, _TYPED[datatype]).extend(values)
    return request


_NUMPY = {
    "BOOL": np.bool_,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}


def raw_bytes_elements(buf: bytes) -> list[bytes]:
    """A raw BYTES tensor: each element a 4-byte little-endian length, then its bytes."""
    items, at = [], 0
    while at < len(buf):
        (size,) = struct.unpack_from("<I", buf, at)
        items.append(buf[at + 4 : at + 4 + size])
        at += 4 + size
    return items


def outputs(response: Any) -> dict[str, Any]:
    """Output name → flat list of values, from typed or raw contents (BYTES as bytes)."""
    found: dict[str, Any] = {}
    raw = list(response.raw_output_contents)
    for index, out in enumerate(response.outputs):
        if raw:
            if out.datatype == "BYTES":
                found[out.name] = raw_bytes_elements(raw[index])
            else:
                found[out.name] = np.frombuffer(raw[index], dtype=_NUMPY[out.datatype]).tolist()
        else:
            found[out.name] = list(getattr(out.contents, _TYPED[out.datatype]))
    return found


def info(response: Any) -> Any:
    """The ``info`` JSON the probe models return."""
    return json.loads(outputs(response)["info"][0])


# -- MLServer's declaration of the service ----------------------------------------------------------

#: The service as MLServer's dataplane.proto declares it (written for these tests from its field
#: list): ModelStreamInfer answers with bare ModelInferResponse messages.
MLSERVER_PROTO = """
syntax = "proto3";
package inference;

service GRPCInferenceService {
  rpc ServerLive(ServerLiveRequest) returns (ServerLiveResponse) {}
  rpc ServerReady(ServerReadyRequest) returns (ServerReadyResponse) {}
  rpc ModelReady(ModelReadyRequest) returns (ModelReadyResponse) {}
  rpc ServerMetadata(ServerMetadataRequest) returns (ServerMetadataResponse) {}
  rpc ModelMetadata(ModelMetadataRequest) returns (ModelMetadataResponse) {}
  rpc ModelInfer(ModelInferRequest) returns (ModelInferResponse) {}
  rpc ModelStreamInfer(stream ModelInferRequest) returns (stream ModelInferResponse) {}
  rpc RepositoryIndex(RepositoryIndexRequest) returns (RepositoryIndexResponse) {}
  rpc RepositoryModelLoad(RepositoryModelLoadRequest) returns (RepositoryModelLoadResponse) {}
  rpc RepositoryModelUnload(RepositoryModelUnloadRequest) returns (RepositoryModelUnloadResponse) {}
}

message ServerLiveRequest {}
message ServerLiveResponse { bool live = 1; }
message ServerReadyRequest {}
message ServerReadyResponse { bool ready = 1; }
message ModelReadyRequest { string name = 1; string version = 2; }
message ModelReadyResponse { bool ready = 1; }
message ServerMetadataRequest {}
message ServerMetadataResponse { string name = 1; string version = 2; repeated string extensions = 3; }
message ModelMetadataRequest { string name = 1; string version = 2; }
message ModelMetadataResponse {
  message TensorMetadata {
    string name = 1;
    string datatype = 2;
    repeated int64 shape = 3;
    map<string, InferParameter> parameters = 4;
  }
  string name = 1;
  repeated string versions = 2;
  string platform = 3;
  repeated TensorMetadata inputs = 4;
  repeated TensorMetadata outputs = 5;
  map<string, InferParameter> parameters = 6;
}
message ModelInferRequest {
  message InferInputTensor {
    string name = 1;
    string datatype = 2;
    repeated int64 shape = 3;
    map<string, InferParameter> parameters = 4;
    InferTensorContents contents = 5;
  }
  message InferRequestedOutputTensor {
    string name = 1;
    map<string, InferParameter> parameters = 2;
  }
  string model_name = 1;
  string model_version = 2;
  string id = 3;
  map<string, InferParameter> parameters = 4;
  repeated InferInputTensor inputs = 5;
  repeated InferRequestedOutputTensor outputs = 6;
  repeated bytes raw_input_contents = 7;
}
message ModelInferResponse {
  message InferOutputTensor {
    string name = 1;
    string datatype = 2;
    repeated int64 shape = 3;
    map<string, InferParameter> parameters = 4;
    InferTensorContents contents = 5;
  }
  string model_name = 1;
  string model_version = 2;
  string id = 3;
  map<string, InferParameter> parameters = 4;
  repeated InferOutputTensor outputs = 5;
  repeated bytes raw_output_contents = 6;
}
message InferParameter {
  oneof parameter_choice {
    bool bool_param = 1;
    int64 int64_param = 2;
    string string_param = 3;
  }
}
message InferTensorContents {
  repeated bool bool_contents = 1;
  repeated int32 int_contents = 2;
  repeated int64 int64_contents = 3;
  repeated uint32 uint_contents = 4;
  repeated uint64 uint64_contents = 5;
  repeated float fp32_contents = 6;
  repeated double fp64_contents = 7;
  repeated bytes bytes_contents = 8;
}
message ModelRepositoryParameter {
  oneof parameter_choice {
    bool bool_param = 1;
    int64 int64_param = 2;
    string string_param = 3;
    bytes bytes_param = 4;
  }
}
message RepositoryIndexRequest { string repository_name = 1; bool ready = 2; }
message RepositoryIndexResponse {
  message ModelIndex { string name = 1; string version = 2; string state = 3; string reason = 4; }
  repeated ModelIndex models = 1;
}
message RepositoryModelLoadRequest {
  string repository_name = 1;
  string model_name = 2;
  map<string, ModelRepositoryParameter> parameters = 3;
}
message RepositoryModelLoadResponse {}
message RepositoryModelUnloadRequest {
  string repository_name = 1;
  string model_name = 2;
  map<string, ModelRepositoryParameter> parameters = 3;
}
message RepositoryModelUnloadResponse {}
"""
