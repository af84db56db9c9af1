"""``mlserver.types``: the Open Inference Protocol messages a runtime receives and returns."""

from .dataplane import (
    Datatype,
    InferenceErrorResponse,
    InferenceRequest,
    InferenceResponse,
    MetadataModelErrorResponse,
    MetadataModelResponse,
    MetadataServerErrorResponse,
    MetadataServerResponse,
    MetadataTensor,
    Parameters,
    RequestInput,
    RequestOutput,
    ResponseOutput,
    TensorData,
)
from .model_repository import (
    RepositoryIndexRequest,
    RepositoryIndexResponse,
    RepositoryIndexResponseItem,
    RepositoryLoadErrorResponse,
    RepositoryUnloadErrorResponse,
    State,
)

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
    "RepositoryIndexRequest",
    "RepositoryIndexResponse",
    "RepositoryIndexResponseItem",
    "RepositoryLoadErrorResponse",
    "RepositoryUnloadErrorResponse",
    "RequestInput",
    "RequestOutput",
    "ResponseOutput",
    "State",
    "TensorData",
]
