"""System shared memory, Triton's ``system_shared_memory`` extension: :class:`SystemSharedMemory`.

A client on the server's host creates a POSIX shared memory object (``/dev/shm/<key>``;
``tritonclient.utils.shared_memory`` does it), writes its tensors into it and registers a
*region* of it by name: key, offset and byte size (REST ``POST /v2/systemsharedmemory/region/
{name}/register``, gRPC ``SystemSharedMemoryRegister``). The server maps the region once. From
then on an input whose parameters name a region (``shared_memory_region``,
``shared_memory_byte_size``, optionally ``shared_memory_offset``) carries no data: its tensor is
read from the region, numeric datatypes as a read-only numpy view of the mapping (no copy),
``BYTES`` from its length-prefixed raw form. A requested output with those parameters is written
into the region in the raw encoding once the model has answered, and comes back without data:
its parameters name the region and the offset, and ``shared_memory_byte_size`` says how many
bytes it took.

The registry is front-end neutral: it belongs to the data plane (:attr:`DataPlane.shared_memory`),
so REST and gRPC see the same regions, and the data plane places the tensors of every OIP call
(:meth:`SystemSharedMemory.place`), whichever route the call came by.

**Lifetime.** A call holds each region it uses (a count) until its answer is written. Unregistering
takes the name away at once (a new call naming it is refused, and the name may be registered
again); the mapping is closed when the last call holding it is done. A model that keeps an input
array beyond its call keeps the mapping alive (Python's buffer protocol refuses to unmap viewed
memory): it goes with the array.

**Safety.** The client owns the object and can shrink it; touching a mapped page past its new end
faults (SIGBUS), which would end the server. Every use checks the object's current size first (an
``fstat``), so a client that shrank its object gets a 400; only a shrink that races with the
model's own reading is not caught. With that, and with registration mapping any object the
server's user may open, the extension is off unless the operator turns it on (``--shared-memory
system``), may be limited to keys with a prefix, and is bounded in regions and bytes
(``docs/security.md``).
"""

from __future__ import annotations

import mmap
import os
import stat
from typing import Any

import msgspec
from msgspec.structs import replace

from .. import codecs
from ..config import SharedMemory
from ..errors import Conflict, Forbidden, InvalidInput, NotFound, PayloadTooLarge
from ..types import InferenceRequest, InferenceResponse, RequestInput, ResponseOutput

__all__ = [
    "REGION",
    "REGION_PARAMETERS",
    "RegionStatus",
    "SystemSharedMemory",
    "no_cuda",
    "no_cuda_region",
    "uses_shared_memory",
]

#: The tensor parameters of the extension.
REGION = "shared_memory_region"
BYTE_SIZE = "shared_memory_byte_size"
OFFSET = "shared_memory_offset"
#: The parameters of an output written into a region, in the data plane's answer.
REGION_PARAMETERS = frozenset((REGION, OFFSET, BYTE_SIZE))

#: Where Linux keeps POSIX shared memory objects (what ``shm_open`` opens).
SHM_DIR = "/dev/shm"
#: The longest region name; names are echoed in answers and logs.
MAX_NAME = 256
#: The longest object name (``NAME_MAX``).
MAX_KEY = 255


class RegionStatus(msgspec.Struct, frozen=True):
    """A registered region, as status answers it: its name, the key of its object, and the
    offset and byte size of the region in that object."""

    name: str
    key: str
    offset: int
    byte_size: int


def uses_shared_memory(request: InferenceRequest) -> bool:
    """Whether an input or a requested output of ``request`` names a region (the data plane's
    test on every OIP call: one dictionary lookup per tensor that has parameters)."""
    for inp in request.inputs:
        params = inp.parameters
        if params is not None and REGION in params:
            return True
    outputs = request.outputs
    if outputs is not None:
        for out in outputs:
            params = out.parameters
            if params is not None and REGION in params:
                return True
    return False


def no_cuda(name: str) -> InvalidInput:
    """The refusal of a CUDA shared memory registration (every front end says the same, as
    Triton built without GPU support answers it: ``INVALID_ARGUMENT``)."""
    return InvalidInput(
        f"cannot register CUDA shared memory region '{name}': Podium has no CUDA shared memory "
        "(it maps no GPU memory of its clients); pass tensors in system shared memory "
        "(--shared-memory system) or in the request"
    )


def no_cuda_region(name: str) -> NotFound:
    """The answer to the status of a named CUDA shared memory region: there are none."""
    return NotFound(
        f"no CUDA shared memory region named '{name}': Podium has no CUDA shared memory"
    )


class _Region:
    """One registered region: its mapping (which starts at the page boundary at or before the
    region's offset), how many calls hold it, and whether it was unregistered meanwhile."""

    __slots__ = ("status", "_map", "_skip", "users", "closing")

    def __init__(self, status: RegionStatus, mapped: mmap.mmap, skip: int) -> None:
        self.status = status
        self._map = mapped
        self._skip = skip  # bytes of the mapping before the region's offset
        self.users = 0
        self.closing = False

    def view(self, offset: int, size: int, what: str, *, writable: bool) -> memoryview:
        """Bytes ``[offset, offset + size)`` of the region, once the object is known to still
        hold them."""
        status = self.status
        end = status.offset + status.byte_size
        try:
            now = self._map.size()  # fstat: the object's size now
        except (OSError, ValueError) as exc:
            raise InvalidInput(
                f"{what}: shared memory region '{status.name}' cannot be used: {exc}"
            ) from exc
        if now < end:
            raise InvalidInput(
                f"{what}: the shared memory object '{status.key}' of region '{status.name}' "
                f"shrank to {now} bytes since it was registered ({end} bytes needed); "
                "register the region again"
            )
        begin = self._skip + offset
        view = memoryview(self._map)[begin : begin + size]
        return view if writable else view.toreadonly()

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:
            pass  # a model still holds an array over it: unmapped when the array goes


class SystemSharedMemory:
    """The system shared memory regions clients registered with this server.

    ``settings`` (``--shared-memory`` and the others, checked there): whether clients may
    register regions (``mode`` "system"); when off, status answers no regions and register,
    unregister and every call naming a region are refused (``Forbidden``, naming the flag).
    Only objects whose names (after the leading ``/``) start with ``key_prefix`` may be mapped
    (empty: any); ``max_regions`` and ``max_size`` bound how many regions and how many bytes are
    mapped at once.
    """

    def __init__(self, settings: SharedMemory | None = None) -> None:
        settings = SharedMemory() if settings is None else settings
        self.enabled = settings.mode == "system"
        self.key_prefix = settings.key_prefix.lstrip("/")
        self.max_regions = settings.max_regions
        self.max_size = settings.max_size
        self._regions: dict[str, _Region] = {}
        self._mapped = 0

    # -- the extension's API ---------------------------------------------------------------

    def status(self, name: str | None = None) -> list[RegionStatus]:
        """Every region (``name`` empty or None), or the one named; ``NotFound`` if it is not."""
        if not name:
            return [region.status for region in self._regions.values()]
        region = self._regions.get(name)
        if region is None:
            raise NotFound(f"no system shared memory region named '{name}' is registered")
        return [region.status]

    def register(self, name: str, key: str, offset: int, byte_size: int) -> RegionStatus:
        """Map ``byte_size`` bytes at ``offset`` of the object ``key`` as region ``name``.

        Refused: when the extension is off or the key lacks the prefix (``Forbidden``); a name
        taken (``Conflict``); a malformed name or key, an object that does not exist, cannot be
        opened or is smaller than ``offset + byte_size`` (``InvalidInput``); past the bounds
        (``PayloadTooLarge``).
        """
        self.check_on(f"registering shared memory region '{name}'")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
            raise InvalidInput(
                f"a shared memory region needs a name of 1 to {MAX_NAME} characters, got {name!r}"
            )
        bare = self._check_key(name, key)
        _counts(
            f"cannot register shared memory region '{name}'", offset=offset, byte_size=byte_size
        )
        if byte_size == 0:
            raise InvalidInput(f"cannot register shared memory region '{name}': byte_size is 0")
        taken = self._regions.get(name)
        if taken is not None:
            raise Conflict(
                f"shared memory region '{name}' is already registered (key '{taken.status.key}'); "
                "unregister it first"
            )
        if len(self._regions) >= self.max_regions:
            raise PayloadTooLarge(
                f"cannot register shared memory region '{name}': {len(self._regions)} regions "
                f"are registered, the most this server maps (--max-shm-regions "
                f"{self.max_regions}); unregister one first"
            )
        if self._mapped + byte_size > self.max_size:
            raise PayloadTooLarge(
                f"cannot register shared memory region '{name}' of {byte_size} bytes: "
                f"{self._mapped} bytes are mapped, and this server maps at most {self.max_size} "
                "(--max-shm-size); unregister regions first"
            )
        mapped, skip = _map(name, key, bare, offset, byte_size)
        status = RegionStatus(name=name, key=key, offset=offset, byte_size=byte_size)
        self._regions[name] = _Region(status, mapped, skip)
        self._mapped += byte_size
        return status

    def unregister(self, name: str | None = None) -> None:
        """Unregister the region named (every region when ``name`` is empty or None). A name
        that is not registered is no error (as Triton). Calls holding a region keep it until
        they are done (see the module docstring)."""
        self.check_on(
            f"unregistering shared memory region '{name}'"
            if name
            else "unregistering shared memory regions"
        )
        names = [name] if name else list(self._regions)
        for each in names:
            region = self._regions.pop(each, None)
            if region is None:
                continue
            self._mapped -= region.status.byte_size
            region.closing = True
            if region.users == 0:
                region.close()

    def close(self) -> None:
        """Unmap every region (the server stops)."""
        regions, self._regions, self._mapped = list(self._regions.values()), {}, 0
        for region in regions:
            region.close()

    # -- the tensors of a call -------------------------------------------------------------

    def place(self, request: InferenceRequest) -> Placement:
        """The tensors of ``request`` that name regions (:func:`uses_shared_memory`), found:
        the request with those inputs read from their regions, and where those outputs go.

        ``InvalidInput`` names the tensor for an unknown region, parameters of the wrong type, a
        span outside its region, an input that also has data (or whose byte size is not its
        tensor's), or an output also asked for as binary data. The regions used are held until
        :meth:`Placement.release`.
        """
        held: list[_Region] = []
        try:
            inputs = [
                self._read(inp, held)
                if inp.parameters is not None and REGION in inp.parameters
                else inp
                for inp in request.inputs
            ]
            targets: dict[str, tuple[_Region, int, int]] = {}
            for out in request.outputs or ():
                params = out.parameters
                if params is not None and REGION in params:
                    what = f"output '{out.name}'"
                    if params.get("binary_data") is True:
                        raise InvalidInput(
                            f"{what} asks for both shared_memory_region and binary_data; it can "
                            "come back in one of them"
                        )
                    targets[out.name] = self._span(params, what, held)
        except BaseException:
            Placement.let_go(held)
            raise
        return Placement(replace(request, inputs=inputs), held, targets)

    def _read(self, inp: RequestInput, held: list[_Region]) -> RequestInput:
        params = inp.parameters or {}
        what = f"input '{inp.name}'"
        if inp.data is not None:
            raise InvalidInput(
                f"{what} has both data and the shared memory region '{params[REGION]}'; its "
                "tensor comes from one of them"
            )
        region, offset, size = self._span(params, what, held)
        view = region.view(offset, size, what, writable=False)
        data = codecs.decode_raw(inp.name, inp.datatype, inp.shape, view)
        rest = {k: v for k, v in params.items() if k not in (REGION, BYTE_SIZE, OFFSET)}
        return RequestInput(
            name=inp.name,
            shape=inp.shape,
            datatype=inp.datatype,
            parameters=rest or None,
            data=data,
        )

    def _span(
        self, params: dict[str, Any], what: str, held: list[_Region]
    ) -> tuple[_Region, int, int]:
        """The region, offset and byte size a tensor's parameters name, checked; the region
        is held from here on."""
        name = params[REGION]
        if not isinstance(name, str) or not name:
            raise InvalidInput(
                f"{what}: {REGION} must be the name of a registered region, got {name!r}"
            )
        self.check_on(f"{what} naming shared memory region '{name}'")
        size = params.get(BYTE_SIZE)
        if size is None:
            raise InvalidInput(f"{what}: {REGION} '{name}' needs {BYTE_SIZE} as well")
        offset = params.get(OFFSET, 0)
        _counts(what, **{BYTE_SIZE: size, OFFSET: offset})
        region = self._regions.get(name)
        if region is None:
            raise InvalidInput(
                f"{what} names shared memory region '{name}', which is not registered"
            )
        total = region.status.byte_size
        if offset >= total:
            raise InvalidInput(
                f"{what}: {OFFSET} {offset} is outside shared memory region '{name}' "
                f"({total} bytes)"
            )
        if offset + size > total:
            raise InvalidInput(
                f"{what}: {size} bytes at offset {offset} go past the end of shared memory region "
                f"'{name}' ({total} bytes)"
            )
        region.users += 1
        held.append(region)
        return region, offset, size

    # -- checks ------------------------------------------------------------------------------

    def check_on(self, action: str) -> None:
        """Refuse ``action`` (words such as ``"registering shared memory region 'r'"``) with
        ``Forbidden``, naming the flag, when the extension is off."""
        if not self.enabled:
            raise Forbidden(
                f"{action} is refused: system shared memory is off on this server; start it "
                "with --shared-memory system to let clients on its host pass tensors through "
                "shared memory (docs/security.md)"
            )

    def _check_key(self, name: str, key: Any) -> str:
        """The object name of ``key`` (without its leading ``/``), if this server may map it."""
        bare = key.lstrip("/") if isinstance(key, str) else ""
        if not bare or len(bare) > MAX_KEY or "/" in bare or "\0" in bare or bare in (".", ".."):
            raise InvalidInput(
                f"cannot register shared memory region '{name}': key {key!r} is not the name of "
                f"a POSIX shared memory object ('/' and 1 to {MAX_KEY} characters without '/')"
            )
        if bare.startswith("sem."):
            # glibc keeps named semaphores there (the server's own multiprocessing locks too).
            raise Forbidden(
                f"cannot register shared memory region '{name}': key '{key}' names a POSIX "
                "semaphore, not a shared memory object"
            )
        if self.key_prefix and not bare.startswith(self.key_prefix):
            raise Forbidden(
                f"cannot register shared memory region '{name}': this server maps only shared "
                f"memory objects whose names start with '{self.key_prefix}' (--shm-key-prefix), "
                f"got key '{key}'"
            )
        return bare


class Placement:
    """The regions one call uses: :attr:`request` (its inputs read from their regions), where
    its outputs go (:meth:`write`), and its hold on the regions until :meth:`release`."""

    __slots__ = ("request", "_held", "_targets")

    def __init__(
        self,
        request: InferenceRequest,
        held: list[_Region],
        targets: dict[str, tuple[_Region, int, int]],
    ) -> None:
        self.request = request
        self._held = held
        self._targets = targets

    def write(self, response: InferenceResponse) -> None:
        """Write each output asked for in a region into it (raw encoding), and leave it in
        ``response`` without data, with parameters saying where it is and its byte size.
        ``InvalidInput`` names an output larger than the byte size its request gave."""
        targets = self._targets
        if not targets:
            return
        outputs = response.outputs
        for index, out in enumerate(outputs):
            target = targets.get(out.name)
            if target is None:
                continue
            region, offset, size = target
            blob = codecs.encode_raw(out)
            if len(blob) > size:
                raise InvalidInput(
                    f"output '{out.name}' of model '{response.model_name}' takes {len(blob)} "
                    f"bytes, more than the {size} bytes ({BYTE_SIZE}) given in shared memory "
                    f"region '{region.status.name}'"
                )
            view = region.view(offset, len(blob), f"output '{out.name}'", writable=True)
            view[:] = blob
            params = dict(out.parameters) if out.parameters else {}
            params[REGION] = region.status.name
            params[OFFSET] = offset
            params[BYTE_SIZE] = len(blob)
            outputs[index] = ResponseOutput(
                name=out.name, shape=out.shape, datatype=out.datatype, parameters=params
            )

    def release(self) -> None:
        """Let go of the regions (once); a region unregistered meanwhile is unmapped by its
        last call."""
        held, self._held = self._held, []
        self.let_go(held)

    @staticmethod
    def let_go(held: list[_Region]) -> None:
        for region in held:
            region.users -= 1
            if region.users == 0 and region.closing:
                region.close()


def _counts(where: str, **values: Any) -> None:
    """Refuse (``InvalidInput``, after ``where``) any of ``values`` that is not an integer >= 0."""
    for label, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInput(f"{where}: {label} must be a non-negative integer, got {value!r}")


def _map(name: str, key: str, bare: str, offset: int, byte_size: int) -> tuple[mmap.mmap, int]:
    """Map ``[offset, offset + byte_size)`` of the object; the mapping and how many bytes of it
    precede ``offset`` (mappings start at a page boundary)."""
    where = f"cannot register shared memory region '{name}'"
    path = os.path.join(SHM_DIR, bare)
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InvalidInput(
            f"{where}: there is no shared memory object with key '{key}' ({path}); create it "
            "first (tritonclient.utils.shared_memory.create_shared_memory_region)"
        ) from None
    except OSError as exc:
        raise InvalidInput(f"{where}: cannot open key '{key}': {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInput(f"{where}: key '{key}' is not a shared memory object")
        if offset + byte_size > info.st_size:
            raise InvalidInput(
                f"{where}: offset {offset} + byte_size {byte_size} go past the end of the "
                f"object with key '{key}' ({info.st_size} bytes)"
            )
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        try:
            mapped = mmap.mmap(fd, offset + byte_size - start, mmap.MAP_SHARED, offset=start)
        except (OSError, ValueError) as exc:
            raise InvalidInput(f"{where}: cannot map key '{key}': {exc}") from None
    finally:
        os.close(fd)  # the mapping keeps its own descriptor (its size() is an fstat)
    return mapped, offset - start
