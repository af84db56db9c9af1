"""Archives and downloads cannot fill the disk or run forever, and registration reads only
where it may: end to end, against a real ``podium serve`` with default limits.

A 6 MB ``.mar`` that expands to 6 GiB and a ``.tar.gz`` of the same are refused, and the
server's private extraction directory does not grow; a download that trickles is cut at
``--download-timeout``; unregistering a model removes what was extracted or downloaded for it
(once no version uses it); a failed registration leaves nothing; ``..`` and symbolic links out
of the model store are refused, naming the rule and the flag that lifts it.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import io
import json
import os
import struct
import subprocess
import sys
import tarfile
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server

from podium.model.torchserve._archive import MANIFEST, archive_model

HANDLER = TEST_MODELS / "torchserve" / "module-style" / "handler.py"
MiB = 1 << 20
GiB = 1 << 30
MANIFEST_JSON = json.dumps({"runtime": "python", "model": {"modelName": "bomb", "handler": "h.py"}})


# -- archives that expand to 6 GiB, made in a second -------------------------------------


def zip_bomb(path: Path, size: int = 6 * GiB) -> Path:
    """A .mar whose member 'weights.bin' is ``size`` zeros, deflated (a genuine stream, with
    its CRC): about 1 KiB per MiB, so 6 GiB come in 6 MB. Written by hand, zip64 for the big
    member, because zipfile would spend minutes compressing the zeros."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    # After a full flush the compressor starts afresh: every MiB of zeros deflates the same.
    block = compressor.compress(bytes(MiB)) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush(zlib.Z_FINISH)
    crc = 0
    zeros = bytes(64 * MiB)
    for _ in range(size // len(zeros)):
        crc = zlib.crc32(zeros, crc)
    compressed = block * (size // MiB) + end
    entries = [
        (MANIFEST.encode(), 0, zlib.crc32(MANIFEST_JSON.encode()), MANIFEST_JSON.encode(), None),
        (b"weights.bin", 8, crc, compressed, size),
    ]
    out = io.BytesIO()
    central = []
    for name, method, entry_crc, data, big in entries:
        offset = out.tell()
        if big is None:
            extra = b""
            sizes = (len(data), len(data))
        else:  # zip64: the sizes live in the extra field
            extra = struct.pack("<HHQQ", 1, 16, big, len(data))
            sizes = (0xFFFFFFFF, 0xFFFFFFFF)
        version = 45 if big else 20
        out.write(
            struct.pack(
                "<4sHHHHHIIIHH",
                b"PK\x03\x04",
                version,
                0,
                method,
                0,
                0x21,
                entry_crc,
                *sizes,
                len(name),
                len(extra),
            )  # fmt: skip
            + name
            + extra
            + data
        )
        central.append(
            struct.pack(
                "<4sHHHHHHIIIHHHHHII",
                b"PK\x01\x02",
                version,
                version,
                0,
                method,
                0,
                0x21,
                entry_crc,
                *sizes,
                len(name),
                len(extra),
                0,
                0,
                0,
                0o644 << 16,
                offset,
            )  # fmt: skip
            + name
            + extra
        )
    start = out.tell()
    directory = b"".join(central)
    out.write(directory)
    out.write(struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 2, 2, len(directory), start, 0))
    path.write_bytes(out.getvalue())
    return path


def tar_bomb(path: Path, size: int = 6 * GiB) -> Path:
    """A .tar.gz holding the manifest, then 'weights.bin' of ``size`` zeros: gzip members one
    after the other (gzip allows that), one per MiB of zeros, so it is made at once."""
    manifest = MANIFEST_JSON.encode()
    info = tarfile.TarInfo(MANIFEST)
    info.size = len(manifest)
    header = tarfile.TarInfo("weights.bin")
    header.size = size  # a multiple of 512: no padding after it
    prefix = (
        info.tobuf(format=tarfile.GNU_FORMAT)
        + manifest
        + bytes(-len(manifest) % 512)
        + header.tobuf(format=tarfile.GNU_FORMAT)
    )
    zeros = gzip.compress(bytes(MiB), compresslevel=9)
    with path.open("wb") as out:
        out.write(gzip.compress(prefix))
        for _ in range(size // MiB):
            out.write(zeros)
        out.write(gzip.compress(bytes(1024)))  # the end-of-archive blocks
    return path


def test_the_bombs_are_what_they_claim(tmp_path: Path) -> None:
    import zipfile

    mar = zip_bomb(tmp_path / "bomb.mar")
    assert mar.stat().st_size < 7 * MiB
    with zipfile.ZipFile(mar) as zf:
        info = zf.getinfo("weights.bin")
        assert info.file_size == 6 * GiB
        with zf.open(info) as member:
            assert member.read(4 * MiB) == bytes(4 * MiB)  # it is real data
    tgz = tar_bomb(tmp_path / "bomb.tar.gz")
    assert tgz.stat().st_size < 7 * MiB
    with tarfile.open(tgz, "r:gz") as tf:
        names = {m.name: m.size for m in (tf.next(), tf.next()) if m is not None}
    assert names == {MANIFEST: len(MANIFEST_JSON), "weights.bin": 6 * GiB}


# -- an origin that trickles ---------------------------------------------------------------


def _mar(directory: Path, name: str, handler: Path = HANDLER) -> Path:
    return archive_model(model_name=name, handler=handler, export_path=directory)


class _Origin(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if self.path == "/models/trickle.mar":
            self.send_response(200)
            self.send_header("content-length", str(10 * MiB))
            self.end_headers()
            deadline = time.monotonic() + 20  # never forever, whoever is (not) reading
            with contextlib.suppress(OSError):
                while time.monotonic() < deadline:
                    self.wfile.write(b"#")  # a byte each 50 ms: each read is quick
                    self.wfile.flush()
                    time.sleep(0.05)
            return
        body = self.files.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("content-length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    made = tmp_path_factory.mktemp("origin")
    _Origin.files = {
        "/models/fetched.mar": _mar(made, "fetched").read_bytes(),
        "/models/fetched_broken.mar": _mar(made, "fetched_broken", _broken(made)).read_bytes(),
    }
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _broken(directory: Path) -> Path:
    handler = directory / "broken" / "handler.py"
    handler.parent.mkdir(exist_ok=True)
    handler.write_text("raise RuntimeError('this handler cannot be imported')\n")
    return handler


# -- the server -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("registration-limits").resolve()
    store, started, elsewhere, temp = (root / n for n in ("store", "started", "elsewhere", "tmp"))
    for directory in (store, started, elsewhere, temp):
        directory.mkdir()
    _mar(started, "at-start")
    _mar(store, "kept")
    _mar(store, "broken", _broken(root))
    zip_bomb(store / "bomb.mar")
    tar_bomb(store / "bomb.tar.gz")
    (elsewhere / "outside.py").write_bytes(
        (TEST_MODELS / "management" / "store_echo.py").read_bytes()
    )
    (store / "escape.py").symlink_to(elsewhere / "outside.py")
    (store / "escape-dir").symlink_to(elsewhere)
    return {"store": store, "started": started, "elsewhere": elsewhere, "tmp": temp}


@pytest.fixture(scope="module")
def server(places: dict[str, Path], origin: str) -> Iterator[Server]:
    """Default limits, but for a short --download-timeout; its temporary files (the private
    extraction directory) in a directory of the test's own."""
    with run_server(
        places["started"] / "at-start.mar",
        args=(
            "--model-store",
            str(places["store"]),
            "--allowed-urls",
            origin.replace(".", r"\.") + "/models/.*",
            "--download-timeout",
            "2",
        ),  # fmt: skip
        env={"TMPDIR": str(places["tmp"])},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def extractions(server: Server, places: dict[str, Path]) -> Path:
    """The server's private extraction directory (made for its start-up archive)."""
    (root,) = places["tmp"].glob("podium-torchserve-*")
    return root


def usage(directory: Path) -> tuple[int, list[str]]:
    """Bytes allocated under ``directory``, and what is there."""
    paths = sorted(directory.rglob("*"))
    allocated = sum(p.lstat().st_blocks * 512 for p in paths)
    return allocated, [str(p.relative_to(directory)) for p in paths]


def register(server: Server, url: str, **params: str) -> httpx.Response:
    return httpx.post(f"{server.management_url}/models", params={"url": url, **params}, timeout=60)


def unregister(server: Server, name: str) -> None:
    answer = httpx.delete(f"{server.management_url}/models/{name}", timeout=30)
    assert answer.status_code == 200, answer.text


def refused(answer: httpx.Response) -> str:
    assert answer.status_code == 400, answer.text
    assert answer.json()["type"] == "BadRequestException"
    return str(answer.json()["message"])


# -- archives --------------------------------------------------------------------------------


@pytest.mark.parametrize("bomb", ["bomb.mar", "bomb.tar.gz"])
def test_an_archive_bomb_is_refused_and_the_disk_does_not_grow(
    server: Server, extractions: Path, bomb: str
) -> None:
    before = usage(extractions)
    started = time.monotonic()
    message = refused(register(server, bomb))
    assert time.monotonic() - started < 30  # not 6 GiB written, then removed
    assert "at member 'weights.bin'" in message
    assert "the most --max-archive-ratio allows; refused" in message
    assert usage(extractions) == before
    assert httpx.get(f"{server.management_url}/models/bomb").status_code == 404


def test_unregistering_removes_the_extraction_once_no_version_uses_it(
    server: Server, extractions: Path
) -> None:
    before = set(extractions.iterdir())
    first = register(server, "kept.mar")
    assert first.status_code == 200, first.text
    (made,) = set(extractions.iterdir()) - before
    copy = register(server, "kept.mar", model_name="kept-copy")  # the same extraction
    assert copy.status_code == 200, copy.text
    assert set(extractions.iterdir()) - before == {made}
    unregister(server, "kept")
    assert (made / MANIFEST).is_file()  # kept-copy still uses it
    unregister(server, "kept-copy")
    assert set(extractions.iterdir()) == before
    again = register(server, "kept.mar")  # extracted afresh
    assert again.status_code == 200, again.text
    unregister(server, "kept")
    assert set(extractions.iterdir()) == before


def test_a_failed_registration_leaves_nothing(
    server: Server, extractions: Path, origin: str, places: dict[str, Path]
) -> None:
    before = usage(extractions)
    store = sorted(p.name for p in places["store"].iterdir())
    assert "this handler cannot be imported" in refused(register(server, "broken.mar"))
    fetched = register(server, f"{origin}/models/fetched_broken.mar")
    assert "this handler cannot be imported" in refused(fetched)
    assert usage(extractions) == before
    assert sorted(p.name for p in places["store"].iterdir()) == store  # nor the download


# -- downloads -------------------------------------------------------------------------------


def test_a_download_is_removed_with_the_model(
    server: Server, extractions: Path, origin: str, places: dict[str, Path]
) -> None:
    before = set(extractions.iterdir())
    answer = register(server, f"{origin}/models/fetched.mar")
    assert answer.status_code == 200, answer.text
    assert (places["store"] / "fetched.mar").is_file()
    unregister(server, "fetched")
    assert not (places["store"] / "fetched.mar").exists()  # as TorchServe does
    assert set(extractions.iterdir()) == before


def test_a_download_that_trickles_is_cut_at_the_deadline(
    server: Server, origin: str, places: dict[str, Path]
) -> None:
    store = sorted(p.name for p in places["store"].iterdir())
    started = time.monotonic()
    message = refused(register(server, f"{origin}/models/trickle.mar"))
    took = time.monotonic() - started
    assert "took longer than --download-timeout (2 s)" in message
    assert "partial file was removed" in message
    assert 1.5 < took < 15
    assert sorted(p.name for p in places["store"].iterdir()) == store  # no partial file


# -- local paths -----------------------------------------------------------------------------

RULE = "registration reads models only under the model store"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("../elsewhere/outside.py", "it climbs with '..'"),
        ("{store}/../elsewhere/outside.py", "it climbs with '..'"),
        ("escape.py", "it is a symbolic link to {elsewhere}/outside.py, outside those places"),
        ("escape-dir/outside.py", "it is a symbolic link to {elsewhere}/outside.py"),
        ("{elsewhere}/outside.py", RULE),
        ("file://{elsewhere}/outside.py", RULE),
        ("{elsewhere}/absent.py", RULE),  # refused the same way: no probing of the disk
    ],
)
def test_local_paths_out_of_the_store_are_refused(
    server: Server, places: dict[str, Path], url: str, why: str
) -> None:
    url = url.format(**places)
    message = refused(register(server, url, model_name="escaped"))
    assert why.format(**places) in message
    assert RULE in message and "--allow-any-local-path" in message
    assert httpx.get(f"{server.management_url}/models/escaped").status_code == 404


def test_the_paths_given_at_start_may_be_registered_again(
    server: Server, places: dict[str, Path]
) -> None:
    answer = register(server, str(places["started"] / "at-start.mar"), model_name="again")
    assert answer.status_code == 200, answer.text
    unregister(server, "again")


# -- the flags, at start -----------------------------------------------------------------------


def _serve_fails(*args: str, temp: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "podium", "serve", *args, "--http-port", "0", "--grpc-port", "0",
         "--management-port", "0", "--grpc-management-port", "0", "--metrics-port", "0"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "TMPDIR": str(temp)},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stderr


def test_the_archive_flags_reach_the_extraction(tmp_path: Path) -> None:
    mar = tmp_path / "w.mar"
    import zipfile

    manifest = json.dumps({"runtime": "python", "model": {"modelName": "w", "handler": "h.py"}})
    with zipfile.ZipFile(mar, "w") as zf:
        zf.writestr(MANIFEST, manifest)
        zf.writestr("h.py", "def handle(data, context):\n    return data\n")
        zf.writestr("w.bin", os.urandom(MiB))
    stderr = _serve_fails(str(mar), "--max-archive-size", str(MiB // 2), temp=tmp_path)
    assert "the most --max-archive-size allows; refused" in stderr
    bomb = zip_bomb(tmp_path / "b.mar", 128 * MiB)  # 128 KiB: 1000:1
    stderr = _serve_fails(str(bomb), "--max-archive-ratio", "10", temp=tmp_path)
    assert "10 times the archive's own" in stderr and "--max-archive-ratio" in stderr
    assert not list(tmp_path.glob("podium-torchserve-*/*"))  # nothing extracted is left
