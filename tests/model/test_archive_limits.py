"""How far a TorchServe archive may expand (--max-archive-size, --max-archive-ratio), what a
zip's or a tar's declared sizes are worth, and who owns an extraction: the versions that hold
it, until the last lets go."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import struct
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from ts_kit import archive, extract

from podium.errors import DefinitionError
from podium.model import Hold, Shared
from podium.model.discovery import discover
from podium.model.torchserve import _archive as _ts_archive
from podium.model.torchserve._archive import (
    MANIFEST,
    ArchiveLimits,
    extract_owned,
)

MANIFEST_JSON = json.dumps({"runtime": "python", "model": {"modelName": "x", "handler": "h.py"}})
MiB = 1 << 20


def _files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()]


def _bomb_zip(path: Path, size: int, name: str = "zeros.bin") -> Path:
    """A .mar whose member ``name`` is ``size`` zeros: it deflates about a thousandfold."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(MANIFEST, MANIFEST_JSON)
        with zf.open(name, "w", force_zip64=True) as out:
            for _ in range(size // MiB):
                out.write(bytes(MiB))
    return path


@contextlib.contextmanager
def _extracted(archive: Path, limits: ArchiveLimits | None = None) -> Iterator[Path]:
    """The archive extracted for the test's duration (this process's temp dir stays clean)."""
    directory, hold = extract_owned(archive, limits)
    try:
        yield directory
    finally:
        hold.release()


def _tar(path: Path, members: list[tuple[str, bytes]], **kwargs: object) -> Path:
    with tarfile.open(path, "w:gz", **kwargs) as tf:  # type: ignore[call-overload]
        for name, data in [(MANIFEST, MANIFEST_JSON.encode()), *members]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


# -- the limits ---------------------------------------------------------------------------


def test_the_limits_default_and_are_checked() -> None:
    limits = ArchiveLimits()
    assert (limits.max_size, limits.max_ratio) == (4 << 30, 100.0)
    assert limits.allowed(1 << 20) == 100 << 20  # a multiple of its size...
    assert limits.allowed(1) == _ts_archive.RATIO_FLOOR  # ...but never below the floor
    assert limits.allowed(1 << 30) == 4 << 30  # ...nor above the size
    for bad in ({"max_size": 0}, {"max_size": 1.5}, {"max_size": True}):
        with pytest.raises(ValueError, match="max-archive-size must be an integer >= 1"):
            ArchiveLimits(**bad)  # type: ignore[arg-type]
    for bad_ratio in (0.5, -1, float("nan"), True):
        with pytest.raises(ValueError, match="max-archive-ratio must be a number >= 1"):
            ArchiveLimits(max_ratio=bad_ratio)


def test_a_zip_over_the_size_limit_is_refused_before_writing(tmp_path: Path) -> None:
    mar = tmp_path / "big.mar"
    with zipfile.ZipFile(mar, "w") as zf:  # stored: no compression, so no ratio to blame
        zf.writestr(MANIFEST, MANIFEST_JSON)
        zf.writestr("a.bin", os.urandom(MiB))
        zf.writestr("b.bin", os.urandom(MiB))
    before = _files(_ts_archive._private_root())
    with pytest.raises(
        DefinitionError,
        match=r"more than 1\.5 MiB \(at member 'b.bin'\), the most --max-archive-size allows; "
        "refused",
    ):
        extract(mar, ArchiveLimits(max_size=3 * MiB // 2))
    assert _files(_ts_archive._private_root()) == before  # not even a.bin was written


def test_a_zip_bomb_is_refused_by_its_ratio_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ts_archive, "RATIO_FLOOR", MiB)
    mar = _bomb_zip(tmp_path / "bomb.mar", 8 * MiB)
    assert mar.stat().st_size < 64 << 10  # 8 MiB in under 64 KiB
    root = _ts_archive._private_root()
    before = _files(root)
    with pytest.raises(
        DefinitionError,
        match=r"more than 1\.0 MiB \(at member 'zeros.bin'\), 100 times the archive's own "
        r".*: the most --max-archive-ratio allows; refused",
    ):
        extract(mar)
    assert _files(root) == before
    # A looser ratio lets it through, within the size limit.
    with _extracted(mar, ArchiveLimits(max_ratio=10_000)) as extracted:
        assert (extracted / "zeros.bin").stat().st_size == 8 * MiB


def test_the_ratio_spares_small_archives(tmp_path: Path) -> None:
    mar = _bomb_zip(tmp_path / "sparse.mar", 4 * MiB)  # ~1000:1, but only 4 MiB
    with _extracted(mar) as extracted:
        assert (extracted / "zeros.bin").stat().st_size == 4 * MiB


def _lie_about_size(mar: Path, name: bytes, size: int, crc: int | None = None) -> None:
    """Rewrite the declared uncompressed size (and CRC) of member ``name`` in ``mar``'s local
    header and central directory, leaving its data as it is."""
    data = bytearray(mar.read_bytes())
    local = data.find(b"PK\x03\x04")
    while local != -1:
        if data[local + 30 : local + 30 + len(name)] == name:
            struct.pack_into("<I", data, local + 22, size)
            if crc is not None:
                struct.pack_into("<I", data, local + 14, crc)
        local = data.find(b"PK\x03\x04", local + 4)
    central = data.find(b"PK\x01\x02")
    while central != -1:
        if data[central + 46 : central + 46 + len(name)] == name:
            struct.pack_into("<I", data, central + 24, size)
            if crc is not None:
                struct.pack_into("<I", data, central + 16, crc)
        central = data.find(b"PK\x01\x02", central + 4)
    mar.write_bytes(bytes(data))


def test_a_zip_member_never_writes_more_than_it_declares(tmp_path: Path) -> None:
    import zlib

    real = os.urandom(256 << 10)
    mar = tmp_path / "liar.mar"
    with zipfile.ZipFile(mar, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(MANIFEST, MANIFEST_JSON)
        zf.writestr("w.bin", real)
    # It declares 1 KiB (with the CRC of those first bytes): zipfile stops there, the rest of
    # its data is never written, and the CRC check passes.
    _lie_about_size(mar, b"w.bin", 1024, zlib.crc32(real[:1024]))
    with zipfile.ZipFile(mar) as zf:
        assert zf.getinfo("w.bin").file_size == 1024
        assert zf.read("w.bin") == real[:1024]
    with _extracted(mar) as extracted:
        assert (extracted / "w.bin").read_bytes() == real[:1024]


def test_a_zip_member_whose_data_disagrees_is_refused_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    mar = tmp_path / "liar2.mar"
    with zipfile.ZipFile(mar, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(MANIFEST, MANIFEST_JSON)
        zf.writestr("w.bin", bytes(4 * MiB))
    _lie_about_size(mar, b"w.bin", 4096)  # the CRC is the whole data's
    with zipfile.ZipFile(mar) as zf, zf.open("w.bin") as src:
        got = 0
        with pytest.raises(zipfile.BadZipFile, match="CRC"):
            while chunk := src.read(1024):
                got += len(chunk)
        assert got <= 4096  # never more than declared, even from a lying member
    root = _ts_archive._private_root()
    before = _files(root)
    with pytest.raises(DefinitionError, match="not a readable archive: Bad CRC-32"):
        extract(mar)
    assert _files(root) == before


def test_a_tar_bomb_stops_at_the_member_that_crosses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ts_archive, "RATIO_FLOOR", MiB)
    path = _tar(tmp_path / "bomb.tar.gz", [("a.bin", bytes(MiB // 2)), ("w.bin", bytes(8 * MiB))])
    root = _ts_archive._private_root()
    before = _files(root)
    with pytest.raises(DefinitionError, match=r"at member 'w.bin'\).*--max-archive-ratio"):
        extract(path)
    assert _files(root) == before  # a.bin was written, then removed with the rest
    with pytest.raises(DefinitionError, match=r"at member 'w.bin'\).*--max-archive-size"):
        extract(path, ArchiveLimits(max_size=MiB, max_ratio=10_000))


def test_a_tar_header_too_big_to_hold_in_memory_is_refused(tmp_path: Path) -> None:
    # A pax header is read into memory whole: 20 MiB of it deflate to a few KiB.
    path = _tar(
        tmp_path / "pax.tar.gz",
        [("h.py", b"")],
        format=tarfile.PAX_FORMAT,
        pax_headers={"comment": "x" * (20 * MiB)},
    )
    with pytest.raises(DefinitionError, match=r"a tar header of 20\.0 MiB .*16\.0 MiB.*refused"):
        extract(path, ArchiveLimits(max_ratio=1e9))


def test_a_tar_stream_cannot_decompress_past_its_limits(tmp_path: Path) -> None:
    # Headers the members never account for (here a 10 MiB pax header, under the header cap):
    # reading stops once the stream outgrows what the members so far may take.
    path = _tar(
        tmp_path / "padded.tar.gz",
        [("h.py", b"")],
        format=tarfile.PAX_FORMAT,
        pax_headers={"comment": "x" * (10 * MiB)},
    )
    with pytest.raises(DefinitionError, match="tar stream goes on past what its members declare"):
        extract(path, ArchiveLimits(max_size=MiB))
    with _extracted(path, ArchiveLimits(max_ratio=1e9)) as extracted:
        assert (extracted / "h.py").is_file()  # else it is fine


@pytest.mark.parametrize("mode", ["w:gz", "w:bz2", "w:xz", "w"])
def test_every_tar_compression_is_still_read(tmp_path: Path, mode: str) -> None:
    path = tmp_path / f"m-{mode.replace(':', '')}.tar.gz"
    with tarfile.open(path, mode) as tf:  # type: ignore[call-overload]
        for name, data in ((MANIFEST, MANIFEST_JSON.encode()), ("h.py", b"x = 1\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    with _extracted(path) as extracted:
        assert (extracted / "h.py").read_bytes() == b"x = 1\n"


def test_the_server_sets_the_limits_for_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from podium.model import torchserve

    monkeypatch.setattr(_ts_archive, "_limits", _ts_archive._limits)
    torchserve.set_archive_limits(ArchiveLimits(max_size=1024))
    mar = tmp_path / "small.mar"
    with zipfile.ZipFile(mar, "w") as zf:
        zf.writestr(MANIFEST, MANIFEST_JSON)
        zf.writestr("w.bin", os.urandom(2048))
    with pytest.raises(DefinitionError, match="--max-archive-size"):
        discover(mar)


# -- who owns an extraction ---------------------------------------------------------------


def test_an_extraction_goes_when_its_last_hold_is_released(tmp_path: Path) -> None:
    path = archive("module-style", tmp_path, "default", model_name="owned-once")
    first, hold_a = extract_owned(path)
    again, hold_b = extract_owned(path)
    assert again == first
    hold_a.release()
    hold_a.release()  # once only: the second call does nothing
    assert (first / "handler.py").is_file()
    hold_b.release()
    assert not first.exists()
    # Extracted again when asked again, in a directory of its own.
    fresh, hold_c = extract_owned(path)
    assert (fresh / "handler.py").is_file() and fresh != first
    hold_c.release()
    assert not fresh.exists()


def test_plain_extract_keeps_its_directory(tmp_path: Path) -> None:
    path = archive("module-style", tmp_path, "tgz", model_name="kept")
    kept = extract(path)
    directory, hold = extract_owned(path)
    assert directory == kept
    hold.release()
    assert (kept / "handler.py").is_file()


def test_a_source_owns_its_extraction_and_a_pickled_hold_owns_nothing(tmp_path: Path) -> None:
    path = archive("module-style", tmp_path, "default", model_name="pickled")
    (source,) = discover(path)
    (hold,) = source.owned
    copy = pickle.loads(pickle.dumps(source))  # as it reaches a worker process
    copy.owned[0].release()
    assert source.model_dir.exists()
    hold.release()
    assert not source.model_dir.exists()
    (directory_source,) = discover(archive("module-style", tmp_path, "no-archive"))
    assert directory_source.owned == ()  # a directory is the user's, not Podium's


def test_shared_removes_once_and_refuses_holds_after() -> None:
    removed: list[int] = []
    shared = Shared(lambda: removed.append(1), "a thing")
    holds = shared.holds(50)
    threads = [threading.Thread(target=h.release) for h in holds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert removed == [1]
    assert shared.hold() is None and shared.holds(2) == []
    inert = pickle.loads(pickle.dumps(Hold(lambda: removed.append(2))))
    inert.release()
    assert removed == [1]


def test_a_failing_remove_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def fail() -> None:
        raise PermissionError(13, "Permission denied")

    hold = Shared(fail, "the thing").hold()
    assert hold is not None
    hold.release()
    assert "cannot remove the thing" in caplog.text
