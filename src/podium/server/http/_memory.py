"""The shared memory extensions over REST (Triton's ``/v2/systemsharedmemory`` and
``/v2/cudasharedmemory`` routes): handlers of :class:`HttpApp` over the data plane's
:class:`~podium.dataplane.SystemSharedMemory`.

System shared memory: ``GET /v2/systemsharedmemory[/region/{name}]/status`` answers a JSON list
of ``{"name", "key", "offset", "byte_size"}``; ``POST .../region/{name}/register`` takes
``{"key", "offset", "byte_size"}`` (``offset`` may be left out: 0); ``POST
/v2/systemsharedmemory[/region/{name}]/unregister`` unregisters one region or all. Success is 200
with an empty body, as Triton answers.

CUDA shared memory: Podium serves no GPU memory of clients, so it answers as Triton built
without GPU support does: status lists no regions, unregister has nothing to do, and register is a
400 saying to use system shared memory.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...dataplane import no_cuda, no_cuda_region
from .._asgi import Send
from . import _oip
from ._exchange import Exchange
from ._responses import JSON, send_body, send_json
from ._routing import Api, Route

__all__ = [
    "ROUTES",
    "RegionRegister",
    "cuda_register",
    "cuda_status",
    "cuda_unregister",
    "system_register",
    "system_status",
    "system_unregister",
]


class RegionRegister(msgspec.Struct):
    """The body of a system shared memory register request: the shared memory object (its key)
    and the region in it."""

    key: str
    byte_size: int
    offset: int = 0


_register_decoder = msgspec.json.Decoder(RegionRegister)


async def system_status(self: Any, ex: Exchange, send: Send, name: str | None = None) -> None:
    regions = self.dataplane.shared_memory.status(name)
    await send_json(send, 200, regions)


async def system_register(self: Any, ex: Exchange, send: Send, name: str) -> None:
    shm = self.dataplane.shared_memory
    shm.check_on(f"registering shared memory region '{name}'")  # before the body is read
    # an empty body too is a 400 naming what was expected
    request = _oip.decode_as(_register_decoder, await ex.body(), "shared memory register request")
    shm.register(name, request.key, request.offset, request.byte_size)
    await send_body(send, 200, JSON, b"")


async def system_unregister(self: Any, ex: Exchange, send: Send, name: str | None = None) -> None:
    self.dataplane.shared_memory.unregister(name)
    await send_body(send, 200, JSON, b"")


async def cuda_status(self: Any, ex: Exchange, send: Send, name: str | None = None) -> None:
    if name:
        raise no_cuda_region(name)
    await send_json(send, 200, [])


async def cuda_register(self: Any, ex: Exchange, send: Send, name: str) -> None:
    raise no_cuda(name)


async def cuda_unregister(self: Any, ex: Exchange, send: Send, name: str | None = None) -> None:
    await send_body(send, 200, JSON, b"")


def _routes(kind: str, name: str, status: Any, register: Any, unregister: Any) -> list[Route]:
    """One extension's five routes (``/v2/<kind>sharedmemory``), named ``<name>Status`` ..."""
    every = f"/v2/{kind}sharedmemory"
    one = every + "/region/{name}"
    return [
        Route("GET", f"{every}/status", status, Api.OIP_REST, f"{name}Status"),
        Route("GET", f"{one}/status", status, Api.OIP_REST, f"{name}RegionStatus"),
        Route("POST", f"{one}/register", register, Api.OIP_REST, f"{name}Register"),
        Route("POST", f"{every}/unregister", unregister, Api.OIP_REST, f"{name}UnregisterAll"),
        Route("POST", f"{one}/unregister", unregister, Api.OIP_REST, f"{name}Unregister"),
    ]


#: The extensions' routes, in ``INFERENCE_ROUTES``.
ROUTES = [
    *_routes("system", "shm", system_status, system_register, system_unregister),
    *_routes("cuda", "cudaShm", cuda_status, cuda_register, cuda_unregister),
]
