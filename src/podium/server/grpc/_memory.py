"""The shared memory extensions over gRPC: ``SystemSharedMemoryStatus`` / ``Register`` /
``Unregister`` over the data plane's :class:`~podium.dataplane.SystemSharedMemory`, and the
``CudaSharedMemory*`` RPCs answered as Triton built without GPU support answers them (no
regions; registering one is ``INVALID_ARGUMENT``). Part of ``inference.GRPCInferenceService``
(:mod:`._oip` adds these methods)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from ...dataplane import DataPlane, no_cuda, no_cuda_region
from ._pool import message_class

__all__ = ["methods"]

_m = message_class
Unary = Callable[[Callable[[Any, Any], Awaitable[Any]], str], grpc.RpcMethodHandler]


def methods(dataplane: DataPlane, unary: Unary) -> dict[str, grpc.RpcMethodHandler]:
    """The six RPCs' method handlers, each made by ``unary`` (the service's wrapper that turns
    every failure into its status) from the RPC's name."""
    shm = dataplane.shared_memory

    async def system_status(message: Any, context: Any) -> Any:
        response = _m("inference.SystemSharedMemoryStatusResponse")()
        for region in shm.status(message.name or None):
            entry = response.regions[region.name]
            entry.name = region.name
            entry.key = region.key
            entry.offset = region.offset
            entry.byte_size = region.byte_size
        return response

    async def system_register(message: Any, context: Any) -> Any:
        shm.register(message.name, message.key, message.offset, message.byte_size)
        return _m("inference.SystemSharedMemoryRegisterResponse")()

    async def system_unregister(message: Any, context: Any) -> Any:
        shm.unregister(message.name or None)
        return _m("inference.SystemSharedMemoryUnregisterResponse")()

    async def cuda_status(message: Any, context: Any) -> Any:
        if message.name:
            raise no_cuda_region(message.name)
        return _m("inference.CudaSharedMemoryStatusResponse")()

    async def cuda_register(message: Any, context: Any) -> Any:
        raise no_cuda(message.name)

    async def cuda_unregister(message: Any, context: Any) -> Any:
        return _m("inference.CudaSharedMemoryUnregisterResponse")()

    handlers = {
        "SystemSharedMemoryStatus": system_status,
        "SystemSharedMemoryRegister": system_register,
        "SystemSharedMemoryUnregister": system_unregister,
        "CudaSharedMemoryStatus": cuda_status,
        "CudaSharedMemoryRegister": cuda_register,
        "CudaSharedMemoryUnregister": cuda_unregister,
    }
    return {rpc: unary(handler, rpc) for rpc, handler in handlers.items()}
