"""The gRPC messages of the gRPC benchmark, shared by bench/grpc_bench.py and bench/grpc_echo.py.

OIP messages come from tritonclient's generated `service_pb2` (package `inference`, the wire
names every OIP server serves); it is imported only in the benchmark's own processes, never in
a server under test. TorchServe's two inference messages used by the optional
`StreamPredictions` measurement are built here in a private descriptor pool, so nothing is
registered in protobuf's default pool under TorchServe's package name.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from tritonclient.grpc import service_pb2 as _service_pb2

pb: Any = _service_pb2  # generated module: untyped

SERVICE = "inference.GRPCInferenceService"
MODEL_INFER = f"/{SERVICE}/ModelInfer"
MODEL_STREAM_INFER = f"/{SERVICE}/ModelStreamInfer"
SERVER_READY = f"/{SERVICE}/ServerReady"
TS_SERVICE = "org.pytorch.serve.grpc.inference.InferenceAPIsService"
TS_STREAM_PREDICTIONS = f"/{TS_SERVICE}/StreamPredictions"

ECHO_DATA = (1.0, 2.0, 3.0, 4.0)
ECHO_SHAPE = (1, 4)


# --------------------------------------------------------------------------- OIP requests


def infer_request(model: str = "echo", raw: bool = False) -> Any:
    """ModelInfer on the echo model: FP32 "input-0", shape [1,4], data [1,2,3,4].

    `raw=True` sends the tensor in `raw_input_contents` (little-endian bytes), as
    `tritonclient.grpc` always does; otherwise in the typed `contents.fp32_contents`.
    """
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="input-0", datatype="FP32", shape=list(ECHO_SHAPE))
    if raw:
        request.raw_input_contents.append(struct.pack(f"<{len(ECHO_DATA)}f", *ECHO_DATA))
    else:
        tensor.contents.fp32_contents.extend(ECHO_DATA)
    return request


def request_variants(model: str = "echo") -> dict[str, Any]:
    """The request forms the benchmark sends, by name."""
    return {"typed": infer_request(model, raw=False), "raw": infer_request(model, raw=True)}


def echo_response(request: Any) -> Any:
    """The ModelInferResponse an echo server returns: inputs as outputs, raw if they were."""
    response = pb.ModelInferResponse(
        model_name=request.model_name, model_version=request.model_version, id=request.id
    )
    for tensor in request.inputs:
        out = response.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if tensor.HasField("contents"):
            out.contents.CopyFrom(tensor.contents)
    response.raw_output_contents.extend(request.raw_input_contents)
    return response


def check_echo(response: Any) -> str | None:
    """None when `response` is the echo of [1,2,3,4] (typed or raw), else what is wrong."""
    if len(response.outputs) != 1:
        return f"{len(response.outputs)} outputs, expected 1"
    out = response.outputs[0]
    if out.datatype != "FP32" or tuple(out.shape) != ECHO_SHAPE:
        return f"output {out.name!r} is {out.datatype} {list(out.shape)}, expected FP32 [1, 4]"
    if response.raw_output_contents:
        raw = response.raw_output_contents[0]
        if len(raw) != 4 * len(ECHO_DATA):
            return f"raw output of {len(raw)} bytes, expected {4 * len(ECHO_DATA)}"
        data = struct.unpack(f"<{len(ECHO_DATA)}f", raw)
    else:
        data = tuple(out.contents.fp32_contents)
    if data != ECHO_DATA:
        return f"echo returned {list(data)}, expected {list(ECHO_DATA)}"
    return None


def framed(message: bytes) -> bytes:
    """One gRPC length-prefixed message: flag 0 (uncompressed), 4-byte big-endian length."""
    return struct.pack(">BI", 0, len(message)) + message


# --------------------------------------------------------------------------- streaming


def stream_request(model: str = "stream1000", n: int = 1000) -> Any:
    """ModelStreamInfer request: INT64 input "n" = N, typed contents."""
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="n", datatype="INT64", shape=[1])
    tensor.contents.int64_contents.append(n)
    return request


def stream_count(request: Any, default: int = 1000) -> int:
    """N from a stream request's INT64 input "n" (typed or raw), else `default`."""
    for position, tensor in enumerate(request.inputs):
        if tensor.name != "n":
            continue
        if tensor.contents.int64_contents:
            return int(tensor.contents.int64_contents[0])
        if position < len(request.raw_input_contents):
            return int(struct.unpack("<q", request.raw_input_contents[position][:8])[0])
    return default


def stream_item(model: str, index: int) -> Any:
    """Item `index` of a stream: a ModelInferResponse with INT64 output "output" = [index]."""
    response = pb.ModelInferResponse(model_name=model)
    out = response.outputs.add(name="output", datatype="INT64", shape=[1])
    out.contents.int64_contents.append(index)
    return response


def stream_item_index(data: bytes, framing: str) -> int:
    """The index an item of the stream carries (output "output", INT64, typed or raw).

    `framing` is `mlserver` (each message a bare ModelInferResponse) or `triton`
    (ModelStreamInferResponse, error in-band).
    """
    if framing == "triton":
        wrapper = pb.ModelStreamInferResponse.FromString(data)
        if wrapper.error_message:
            raise ValueError(f"in-band error: {wrapper.error_message}")
        response = wrapper.infer_response
    else:
        response = pb.ModelInferResponse.FromString(data)
    if not response.outputs:
        raise ValueError("item has no outputs")
    if response.raw_output_contents:
        raw = response.raw_output_contents[0]
        return int(struct.unpack("<q", raw[:8])[0])
    contents = response.outputs[0].contents
    values = list(contents.int64_contents) or list(contents.int_contents)
    if not values:
        raise ValueError(f"item carries no INT64 value: {response}")
    return int(values[0])


@functools.cache
def _torchserve_messages() -> tuple[Any, Any]:
    """PredictionsRequest and PredictionResponse, as in TorchServe's inference.proto
    (same package, names and field numbers; only the fields the benchmarks use)."""
    file = descriptor_pb2.FileDescriptorProto(
        name="podium_bench/torchserve_inference.proto",
        package="org.pytorch.serve.grpc.inference",
        syntax="proto3",
    )
    F = descriptor_pb2.FieldDescriptorProto
    req = file.message_type.add(name="PredictionsRequest")
    req.field.add(name="model_name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    req.field.add(name="model_version", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry = req.nested_type.add(name="InputEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL)
    req.field.add(
        name="input",
        number=3,
        type=F.TYPE_MESSAGE,
        label=F.LABEL_REPEATED,
        type_name=".org.pytorch.serve.grpc.inference.PredictionsRequest.InputEntry",
    )
    # sequence_id (bench/soak.py's stateful sequences): empty is "none", as the server reads it
    req.field.add(name="sequence_id", number=4, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    resp = file.message_type.add(name="PredictionResponse")
    resp.field.add(name="prediction", number=1, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL)
    resp.field.add(name="sequence_id", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(file.SerializeToString())
    return (
        message_factory.GetMessageClass(
            pool.FindMessageTypeByName("org.pytorch.serve.grpc.inference.PredictionsRequest")
        ),
        message_factory.GetMessageClass(
            pool.FindMessageTypeByName("org.pytorch.serve.grpc.inference.PredictionResponse")
        ),
    )


def torchserve_stream_request(model: str = "stream1000", n: int = 1000) -> bytes:
    """Serialized PredictionsRequest for StreamPredictions: input {"n": b"N"}.

    Podium hands a TorchServe `input` map with several keys, or a key other than `data` /
    `body`, to a native model as that mapping, so bench/models/stream1000 reads N from it.
    """
    request_cls, _ = _torchserve_messages()
    request = request_cls(model_name=model)
    request.input["n"] = str(n).encode()
    return bytes(request.SerializeToString())


def torchserve_prediction(data: bytes) -> bytes:
    """The `prediction` bytes of one serialized PredictionResponse."""
    _, response_cls = _torchserve_messages()
    return bytes(response_cls.FromString(data).prediction)


def torchserve_messages() -> tuple[Any, Any]:
    """TorchServe's `PredictionsRequest` and `PredictionResponse` classes (private pool), with
    `model_name`, `model_version`, `input`, `sequence_id` / `prediction`, `sequence_id`."""
    return _torchserve_messages()
