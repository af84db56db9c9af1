"""The gRPC front end: Podium's services on one listener (a ``grpc.server`` whose calls are
relayed to the event loop, or ``grpc.aio`` where the relay's start-up check fails).

Layout: ``protos/`` holds the ``.proto`` files and their compiled descriptor set; ``_pool`` loads
it into a private descriptor pool (never protobuf's default one) and makes the message classes;
``_server`` builds the listener from a list of :class:`Service` (plus health and reflection);
``_limits`` holds what a listener allows its clients (:class:`GrpcLimits`: connections, streams,
pings, connection age);
``bridge/`` (a subpackage) relays the coroutine handlers' calls from grpc's polling thread to the
loop through grpcio's internals, where a start-up check finds them as expected;
``_errors`` is the one place an exception becomes a status (``status_of``); ``_call`` is what a model sees of a
call (metadata as headers, disconnect); ``_tensors`` converts OIP messages; ``_oip`` is the
Open Inference Protocol service; ``_torchserve`` TorchServe's inference API.

To serve another service on the same listener, write a module that builds a :class:`Service`
(method handlers over the data plane, failures through ``_errors.abort_with``), put its
``.proto`` file in ``protos/`` (then run ``python -m podium.server.grpc.protos.build``), and add
it to :func:`inference_services`.
"""

from __future__ import annotations

from ...config import Protocols
from ...dataplane import DataPlane
from ._limits import GrpcLimits
from ._oip import OipService
from ._server import GrpcServer, Service
from ._torchserve import TorchServeInference

__all__ = [
    "GrpcLimits",
    "GrpcServer",
    "OipService",
    "Service",
    "inference_services",
]


def inference_services(dataplane: DataPlane, wire: Protocols) -> list[Service]:
    """Every service of the gRPC inference listener (``--grpc-port``), as the server's
    ``wire`` settings say."""
    return [
        OipService(
            dataplane,
            stream_format=wire.grpc_stream_format,
            output_contents=wire.grpc_output_contents,
        ).service(),
        TorchServeInference(dataplane, sequence_header=wire.sequence_header).service(),
    ]
