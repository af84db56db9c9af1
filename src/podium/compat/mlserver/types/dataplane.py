"""Open Inference Protocol messages as MLServer's runtimes see them (pydantic v2 models)."""

from __future__ import annotations

import enum
from typing import Any

from pydantic import ConfigDict, Field, RootModel

from .base import BaseModel, ListRoot

__all__ = [
    "Datatype",
    "InferenceErrorResponse",
    "InferenceRequest",
    "InferenceResponse",
    "MetadataModelErrorResponse",
    "MetadataModelResponse",
    "MetadataServerErrorResponse",
    "MetadataServerResponse",
    "MetadataTensor",
    "Parameters",
    "RequestInput",
    "RequestOutput",
    "ResponseOutput",
    "TensorData",
]


class Datatype(enum.Enum):
    """The tensor datatypes MLServer knows (no BF16, as in MLServer)."""

    BOOL = "BOOL"
    UINT8 = "UINT8"
    UINT16 = "UINT16"
    UINT32 = "UINT32"
    UINT64 = "UINT64"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FP16 = "FP16"
    FP32 = "FP32"
    FP64 = "FP64"
    BYTES = "BYTES"


class Parameters(BaseModel):
    """Free-form parameters; ``content_type`` picks a codec, ``headers`` carries the call's
    HTTP headers (or gRPC metadata) into the runtime."""

    model_config = ConfigDict(extra="allow")

    content_type: str | None = None
    headers: dict[str, Any] | None = None


class TensorData(ListRoot, RootModel[list[Any] | Any]):  # type: ignore[misc]
    """A tensor's elements: a (possibly nested) list, or whatever a codec put there."""

    root: list[Any] | Any = Field(..., title="TensorData")


class MetadataServerResponse(BaseModel):
    name: str
    version: str
    extensions: list[str]


class MetadataServerErrorResponse(BaseModel):
    error: str


class MetadataModelErrorResponse(BaseModel):
    error: str


class InferenceErrorResponse(BaseModel):
    error: str | None = None


class MetadataTensor(BaseModel):
    name: str
    datatype: Datatype
    shape: list[int]
    parameters: Parameters | None = None


class RequestInput(BaseModel):
    name: str
    shape: list[int]
    datatype: Datatype
    parameters: Parameters | None = None
    data: TensorData


class RequestOutput(BaseModel):
    name: str
    parameters: Parameters | None = None


class ResponseOutput(BaseModel):
    name: str
    shape: list[int]
    datatype: Datatype
    parameters: Parameters | None = None
    data: TensorData


class InferenceRequest(BaseModel):
    id: str | None = None
    parameters: Parameters | None = None
    inputs: list[RequestInput]
    outputs: list[RequestOutput] | None = None


class InferenceResponse(BaseModel):
    model_name: str
    model_version: str | None = None
    id: str | None = None
    parameters: Parameters | None = None
    outputs: list[ResponseOutput]


class MetadataModelResponse(BaseModel):
    name: str
    versions: list[str] | None = None
    platform: str
    inputs: list[MetadataTensor] | None = None
    outputs: list[MetadataTensor] | None = None
    parameters: Parameters | None = None
