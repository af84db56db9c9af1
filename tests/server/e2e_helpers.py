"""Helpers shared by the end-to-end HTTP tests (the fixtures are in ``e2e_fixtures``).

The test models under ``tests/models/serve`` append JSON lines to the file named by
``PODIUM_E2E_EVENTS``; :class:`EventLog` reads it, so tests assert what happened and in which
order, never how long it took. Gates are files a model waits for; the test creates them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
from conftest import TEST_MODELS

SERVE_MODELS = TEST_MODELS / "serve"
FAILING_MODELS = TEST_MODELS / "failing-load"
SLOW_MODELS = TEST_MODELS / "slow-load"
BROKEN_MODELS = TEST_MODELS / "broken"

#: --max-request-size of the main test server: big enough for every ordinary test body.
MAX_REQUEST_SIZE = 1024 * 1024

#: How long a helper waits for something that should happen; a failure safety net only.
PATIENCE = 10.0


class EventLog:
    """The events the test models recorded, by tag."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def of(self, tag: str) -> list[dict[str, Any]]:
        return [e for e in self._all() if e["tag"] == tag]

    def across(self, *tags: str) -> list[tuple[str, str]]:
        """(tag, event) for every event of any of ``tags``, in the order they were recorded."""
        wanted = set(tags)
        return [(e["tag"], e["event"]) for e in self._all() if e["tag"] in wanted]

    def _all(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]

    def names(self, tag: str) -> list[str]:
        return [e["event"] for e in self.of(tag)]

    async def wait_for(self, tag: str, event: str, count: int = 1) -> list[dict[str, Any]]:
        """Wait until ``event`` was recorded ``count`` times for ``tag``; fail after PATIENCE."""
        with anyio.move_on_after(PATIENCE):
            while True:
                found = [e for e in self.of(tag) if e["event"] == event]
                if len(found) >= count:
                    return found
                await anyio.sleep(0.01)
        raise AssertionError(f"{event!r} x{count} never recorded for {tag}: {self.of(tag)}")


class Gates:
    """Files that models wait for. Every gate is opened at teardown, so no model stays blocked."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._made: list[Path] = []
        self._count = itertools.count()

    def new(self) -> str:
        path = self.directory / f"gate-{next(self._count)}"
        self._made.append(path)
        return str(path)

    @staticmethod
    def open(path: str) -> None:
        Path(path).touch()

    def open_all(self) -> None:
        for path in self._made:
            path.touch()


# -- OIP request bodies -------------------------------------------------------------------------


def tensor(name: str, datatype: str, shape: list[int], data: Any, **parameters: Any) -> dict:
    out: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape, "data": data}
    if parameters:
        out["parameters"] = parameters
    return out


def text(name: str, value: str) -> dict:
    """A one-element BYTES input that the model receives as ``[value]`` (content_type str)."""
    return tensor(name, "BYTES", [1], [value], content_type="str")


def oip(**fields: Any) -> dict:
    """An inference request whose inputs are the given fields (str → text, int → INT64)."""
    inputs = []
    for name, value in fields.items():
        if isinstance(value, str):
            inputs.append(text(name, value))
        elif isinstance(value, float):
            inputs.append(tensor(name, "FP64", [1], [value]))
        else:
            inputs.append(tensor(name, "INT64", [1], [value]))
    return {"inputs": inputs}


def outputs_by_name(body: dict) -> dict[str, dict]:
    return {o["name"]: o for o in body["outputs"]}


def info(body: dict) -> Any:
    """The ``info`` JSON string the probe models return, from an OIP, Triton or JSON answer."""
    if "outputs" in body:
        return json.loads(outputs_by_name(body)["info"]["data"][0])
    return json.loads(body["info"])


# -- raw HTTP/1.1 over a socket: exact framing, and disconnecting at a moment the test picks ---


class RawHttp:
    """One HTTP/1.1 connection driven by hand."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, url: str) -> RawHttp:
        parts = urlsplit(url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        return cls(reader, writer)

    async def send(
        self,
        method: str,
        path: str,
        body: bytes | list[bytes] = b"",
        headers: dict[str, str] | None = None,
    ) -> None:
        """Send a request; a list body goes out chunked, one chunk per element."""
        lines = [f"{method} {path} HTTP/1.1", "Host: podium"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if isinstance(body, list):
            lines.append("Transfer-Encoding: chunked")
            payload = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in body if c) + b"0\r\n\r\n"
        else:
            lines.append(f"Content-Length: {len(body)}")
            payload = body
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        await self.writer.drain()

    async def head(self) -> tuple[int, dict[str, str]]:
        """The status and headers (names lower-cased) of the response."""
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = raw.decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        return int(status_line.split()[1]), headers

    async def chunk(self) -> bytes | None:
        """The next chunk of a chunked body, exactly as framed; None after the last one."""
        size_line = await self.reader.readuntil(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        data = await self.reader.readexactly(size + 2)
        if size == 0:
            return None
        return data[:-2]

    async def chunks(self) -> list[bytes]:
        found = []
        while (piece := await self.chunk()) is not None:
            found.append(piece)
        return found

    async def body(self, headers: dict[str, str]) -> bytes:
        if headers.get("transfer-encoding") == "chunked":
            return b"".join(await self.chunks())
        return await self.reader.readexactly(int(headers.get("content-length", "0")))

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


def error_text(response: Any) -> str:
    """An error answer's message: ``{"error": ...}``, or on TorchServe's routes TorchServe's
    ``{"code", "type", "message"}`` (checked to be that shape there)."""
    body = response.json()
    if response.request.url.path.startswith("/predictions"):
        assert {"code", "type", "message"} <= set(body), body
        assert body["code"] == response.status_code, body
        return str(body["message"])
    return str(body["error"])
