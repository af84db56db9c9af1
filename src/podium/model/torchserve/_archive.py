"""TorchServe model archives: reading ``.mar`` / ``.tar.gz`` files and writing them.

A ``.mar`` is a zip holding the handler, the model's files and ``MAR-INF/MANIFEST.json``; a
``.tar.gz`` holds the same (at its root, or in one top-level directory). An archive is extracted
once per process and content, into a private directory (mode 0700) removed when the process
exits, or earlier, once no model version holds it any more (:func:`extract_owned`). Extraction
never writes outside that directory: a member whose name is absolute, climbs with ``..``, or is
a link or a device is refused, naming the member.

Nor does it fill the disk or the memory. An archive is refused when its files come to more than
:class:`ArchiveLimits` allow (``--max-archive-size`` in all, and ``--max-archive-ratio`` times
the archive's own size, beyond :data:`RATIO_FLOOR`), when they would leave less than
:data:`KEEP_FREE` bytes free where it is extracted, or when it holds more than
:data:`MAX_MEMBERS` members. A zip declares every size up front, and Python's ``zipfile`` never
writes more than a member declares (a member whose data says otherwise fails its CRC check), so
a zip is refused before anything is written. A tar stream is refused at the member that crosses
a limit; reading it never decompresses more than the limits allow (with room for the tar
headers), and no single header may exceed :data:`MAX_HEADER` bytes (a pax or GNU long-name
header is read into memory whole).
"""

from __future__ import annotations

import atexit
import bz2
import contextlib
import gzip
import hashlib
import io
import json
import lzma
import os
import shutil
import stat
import tarfile
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from ...config import SETTINGS
from ...errors import DefinitionError
from .._owned import Owned, Shared
from .._source import read_json_object

__all__ = [
    "ARCHIVE_SUFFIXES",
    "MANIFEST",
    "ArchiveLimits",
    "archive_model",
    "extract_owned",
    "read_manifest",
    "set_limits",
    "write_archive",
]

MANIFEST = "MAR-INF/MANIFEST.json"
#: Free bytes an extraction must leave on its filesystem.
KEEP_FREE = 256 << 20
#: Most members an archive may hold (a model has a handful of files, or a few thousand).
MAX_MEMBERS = 100_000
#: What any archive may expand to, whatever its compression ratio (small archives of
#: repetitive files compress far better than --max-archive-ratio; they harm nobody).
RATIO_FLOOR = 64 << 20
#: Largest tar header (a pax extended header, a GNU long name) read into memory.
MAX_HEADER = 16 << 20
#: The names of TorchServe archives (any other path is a model directory).
ARCHIVE_SUFFIXES = (".mar", ".tar.gz", ".tgz")
_lock = threading.Lock()
_root: Path | None = None


_SIZE, _RATIO = SETTINGS["max_archive_size"], SETTINGS["max_archive_ratio"]


@dataclass(frozen=True, slots=True)
class ArchiveLimits:
    """How far an archive may expand: ``max_size`` bytes in all (``--max-archive-size``), and at
    most ``max_ratio`` times the archive's own size (``--max-archive-ratio``) where that is
    more than :data:`RATIO_FLOOR`. Defaults and checks are those settings' (``ValueError``)."""

    max_size: int = _SIZE.default
    max_ratio: float = _RATIO.default

    def __post_init__(self) -> None:
        _SIZE.check(self.max_size)
        _RATIO.check(self.max_ratio)

    def allowed(self, compressed: int) -> int:
        """The bytes an archive of ``compressed`` bytes may expand to."""
        return min(self.max_size, max(RATIO_FLOOR, int(self.max_ratio * compressed)))


_limits = ArchiveLimits()


def set_limits(limits: ArchiveLimits) -> None:
    """Make ``limits`` apply to every later extraction in this process (the server sets them
    at start from its flags; an archive already extracted is not checked again)."""
    global _limits
    _limits = limits


def read_manifest(model_dir: Path) -> dict[str, Any]:
    """The parsed ``MAR-INF/MANIFEST.json`` of an extracted model; ``DefinitionError`` if bad."""
    path = model_dir / MANIFEST
    data = read_json_object(path)
    if not isinstance(data.get("model"), dict):
        raise DefinitionError(f"{path}: must be an object with a 'model' object")
    return data


def _private_root() -> Path:
    global _root
    if _root is None:
        _root = Path(tempfile.mkdtemp(prefix="podium-torchserve-"))  # mode 0700: ours alone
        atexit.register(shutil.rmtree, _root, True)
    return _root


def _digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@dataclass(slots=True)
class _Extracted:
    target: Path  # the directory made for it (removed with everything in it)
    root: Path  # the one holding the manifest: target, or its only subdirectory
    shared: Shared


_extracted: dict[str, _Extracted] = {}


def extract_owned(archive: Path, limits: ArchiveLimits | None = None) -> tuple[Path, Owned]:
    """The directory holding ``archive``'s files (the one with ``MAR-INF/MANIFEST.json``),
    extracted once per process and content, and a hold on it: it is removed once every hold
    taken on it is released (by the model versions that use it), else when the process exits.

    Raises ``DefinitionError`` for an unreadable archive, a member that would land outside the
    directory, an archive past ``limits`` (default: those of :func:`set_limits`) or the disk's
    free space, or a missing manifest; then nothing of it is left on disk.
    """
    try:
        key = _digest(archive)
    except OSError as exc:
        raise DefinitionError(f"{archive}: cannot be read: {exc.strerror}") from exc
    with _lock:
        found = _extracted.get(key)
        hold = found.shared.hold() if found is not None else None
        if found is not None and hold is not None:
            return found.root, hold
        entry = _extract(archive, key, limits or _limits)
        _extracted[key] = entry
        hold = entry.shared.hold()
        assert hold is not None  # a new entry: nobody released it yet
        return entry.root, hold


def _extract(archive: Path, key: str, limits: ArchiveLimits) -> _Extracted:
    target = Path(tempfile.mkdtemp(prefix=key[:16] + "-", dir=_private_root()))
    try:
        if archive.name.endswith(".mar"):
            _extract_zip(archive, target, limits)
        else:
            _extract_tar(archive, target, limits)
    except DefinitionError:
        shutil.rmtree(target, ignore_errors=True)
        raise
    except (OSError, zipfile.BadZipFile, tarfile.TarError, EOFError, lzma.LZMAError) as exc:
        shutil.rmtree(target, ignore_errors=True)
        raise DefinitionError(f"{archive}: not a readable archive: {exc}") from exc
    root = _manifest_dir(target)
    if root is None:
        shutil.rmtree(target, ignore_errors=True)
        raise DefinitionError(f"{archive}: holds no {MANIFEST}")
    entry = _Extracted(target, root, Shared(lambda: _forget(key, entry), f"{archive}'s files"))
    return entry


def _forget(key: str, entry: _Extracted) -> None:
    """Remove an extraction nobody holds (its entry, unless a new extraction replaced it)."""
    with _lock:
        if _extracted.get(key) is entry:
            del _extracted[key]
    shutil.rmtree(entry.target)


def _manifest_dir(target: Path) -> Path | None:
    if (target / MANIFEST).is_file():
        return target
    subdirs = [p for p in target.iterdir() if p.is_dir()]
    if len(subdirs) == 1 and (subdirs[0] / MANIFEST).is_file():  # tgz of one directory
        return subdirs[0]
    return None


def _safe_path(target: Path, name: str, archive: Path) -> Path:
    """Where member ``name`` goes under ``target``; refuses names that would escape it."""
    pure = PurePosixPath(name.replace("\\", "/"))
    climbs = pure.is_absolute() or ".." in pure.parts or ":" in (pure.parts or ("",))[0]
    dest = (target / Path(*pure.parts)).resolve() if pure.parts and not climbs else target
    if climbs or (dest != target.resolve() and target.resolve() not in dest.parents):
        raise DefinitionError(
            f"{archive}: member '{name}' would be extracted outside the model directory; refused"
        )
    return dest


def _copy(source: IO[bytes], dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("wb") as out:
        shutil.copyfileobj(source, out, 1 << 20)


class _Room:
    """The bytes an extraction into ``target`` may still write, and its members so far."""

    def __init__(self, archive: Path, target: Path, limits: ArchiveLimits) -> None:
        self.archive = archive
        self.limits = limits
        self.compressed = archive.stat().st_size
        self.allowed = limits.allowed(self.compressed)
        self.free = shutil.disk_usage(target).free - KEEP_FREE
        self.written = 0
        self.members = 0

    def take(self, name: str, size: int) -> None:
        self.members += 1
        if self.members > MAX_MEMBERS:
            raise DefinitionError(
                f"{self.archive}: holds more than {MAX_MEMBERS:,} members; refused"
            )
        self.written += size
        if self.written > self.allowed:
            raise DefinitionError(self._too_big(name))
        if self.written > self.free:
            raise DefinitionError(
                f"{self.archive}: its files need {_size(self.written)} (at member '{name}'), "
                f"more than the {_size(max(self.free, 0))} that extracting it may use on this "
                f"disk ({_size(KEEP_FREE)} are kept free); refused"
            )

    def _too_big(self, name: str) -> str:
        head = f"{self.archive}: its files come to more than {_size(self.allowed)} (at member "
        if self.allowed == self.limits.max_size:
            return f"{head}'{name}'), the most --max-archive-size allows; refused"
        return (
            f"{head}'{name}'), {self.limits.max_ratio:g} times the archive's own "
            f"{_size(self.compressed)}: the most --max-archive-ratio allows; refused"
        )

    def stream_allowance(self) -> int:
        """Bytes of a tar stream that its members so far may take: their data, and a header
        and padding for each (with room to spare)."""
        return self.allowed + 2048 * (self.members + 1) + (1 << 20)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n:,} bytes"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:,.1f} {unit}"


def _extract_zip(archive: Path, target: Path, limits: ArchiveLimits) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        room = _Room(archive, target, limits)
        for info in infos:  # every size is declared: refuse before writing anything
            room.take(info.filename, info.file_size)
        for info in infos:
            dest = _safe_path(target, info.filename, archive)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise DefinitionError(
                    f"{archive}: member '{info.filename}' is a symbolic link; refused"
                )
            if info.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            with zf.open(info) as src:  # reads at most info.file_size bytes, then checks the CRC
                _copy(src, dest)


class _Inflated:
    """A tar stream, decompressed as tarfile reads it, never past what ``room`` allows."""

    def __init__(self, stream: IO[bytes], room: _Room) -> None:
        self._stream = stream
        self._room = room

    def _check(self, end: int) -> None:
        if end > self._room.stream_allowance():
            raise DefinitionError(
                f"{self._room.archive}: its tar stream goes on past what its members declare "
                f"({_size(self._room.written)} so far); refused"
            )

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > MAX_HEADER:
            raise DefinitionError(
                f"{self._room.archive}: holds a tar header of "
                f"{'unbounded size' if size is None or size < 0 else _size(size)} "
                f"(at most {_size(MAX_HEADER)}); refused"
            )
        self._check(self._stream.tell() + size)
        return self._stream.read(size)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_CUR:
            offset += self._stream.tell()
        elif whence != os.SEEK_SET:
            raise io.UnsupportedOperation("a tar stream is read forwards")
        self._check(offset)
        return self._stream.seek(offset)

    def tell(self) -> int:
        return self._stream.tell()


def _decompressed(raw: IO[bytes]) -> Any:
    """``raw`` decompressed as its first bytes say (gzip, bzip2, xz, or none), as tarfile's
    ``r:*`` reads it."""
    head = raw.read(6)
    raw.seek(0)
    if head.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if head.startswith(b"BZh"):
        return bz2.BZ2File(raw)
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)
    return raw


def _extract_tar(archive: Path, target: Path, limits: ArchiveLimits) -> None:
    room = _Room(archive, target, limits)
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(archive.open("rb"))
        stream = stack.enter_context(_decompressed(raw))
        fileobj: Any = _Inflated(stream, room)
        tf = stack.enter_context(tarfile.open(fileobj=fileobj, mode="r:"))
        for member in tf:  # a stream: sizes are known one member at a time
            room.take(member.name, member.size)
            dest = _safe_path(target, member.name, archive)
            if member.isdir():
                dest.mkdir(parents=True, exist_ok=True)
            elif member.isreg():
                src = tf.extractfile(member)
                if src is None:
                    continue
                with src:
                    _copy(src, dest)
            else:
                raise DefinitionError(
                    f"{archive}: member '{member.name}' is a link or a special file; refused"
                )


# -- writing ------------------------------------------------------------------------------


def _walk(files: Mapping[str, Path]) -> Iterator[tuple[str, Path]]:
    """(name in the archive, file on disk); a directory contributes its files under its name."""
    for name, path in files.items():
        if path.is_dir():
            for sub in sorted(path.rglob("*")):
                if sub.is_file() and "__pycache__" not in sub.parts:
                    yield f"{name}/{sub.relative_to(path).as_posix()}", sub
        else:
            yield name, path


def write_archive(
    dest: Path, files: Mapping[str, Path], manifest: Mapping[str, Any], archive_format: str
) -> Path:
    """Write ``files`` (archive name → path on disk) and ``manifest`` to ``dest``.

    ``archive_format`` is ``default`` (a ``.mar`` zip), ``tgz`` (a ``.tar.gz``) or
    ``no-archive`` (a directory), as torch-model-archiver's ``--archive-format``.
    """
    manifest_bytes = (json.dumps(manifest, indent=2) + "\n").encode()
    entries = list(_walk(files))
    if archive_format == "no-archive":
        dest.mkdir(parents=True, exist_ok=True)
        for name, path in entries:
            out = dest / name
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)
        (dest / MANIFEST).parent.mkdir(parents=True, exist_ok=True)
        (dest / MANIFEST).write_bytes(manifest_bytes)
        return dest
    partial = dest.with_name(dest.name + ".partial")
    if archive_format == "tgz":
        with tarfile.open(partial, "w:gz") as tf:
            for name, path in entries:
                tf.add(path, arcname=name, recursive=False)
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(manifest_bytes)
            info.mtime = int(time.time())
            tf.addfile(info, io.BytesIO(manifest_bytes))
    else:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, path in entries:
                zf.write(path, name)
            zf.writestr(MANIFEST, manifest_bytes)
    os.replace(partial, dest)  # never a half-written archive under the final name
    return dest


#: The handler names torch-model-archiver 0.12 writes into the manifest without a file.
ARCHIVER_DEFAULT_HANDLERS = frozenset(
    {
        "base_handler",
        "text_classifier",
        "image_classifier",
        "object_detector",
        "image_segmenter",
        "dali_image_classifier",
        "vllm_handler",
        "trt_llm_handler",
    }
)


def archive_model(
    *,
    model_name: str,
    handler: Path | str,
    export_path: Path,
    version: str | None = None,
    serialized_file: Path | None = None,
    model_file: Path | None = None,
    extra_files: Sequence[Path] = (),
    config_file: Path | None = None,
    requirements_file: Path | None = None,
    archive_format: str = "default",
    force: bool = False,
) -> Path:
    """Build a TorchServe model archive, as ``torch-model-archiver`` does; returns its path.

    Every file goes in at the archive's root under its own name (a directory in
    ``extra_files`` keeps its contents under its name). Raises ``ValueError`` naming the
    problem: a missing file, two files with one name, an existing archive without ``force``.
    """
    if not model_name or "/" in model_name:
        raise ValueError(f"--model-name must be a non-empty name without '/', got {model_name!r}")
    if archive_format not in ("default", "tgz", "no-archive"):
        raise ValueError(f"--archive-format must be default, tgz or no-archive: {archive_format}")
    # a default handler's name (torch-model-archiver's list) is written, not copied
    by_name = str(handler) in ARCHIVER_DEFAULT_HANDLERS and not Path(handler).exists()
    handler_file = None if by_name else Path(handler)
    # the manifest as torch-model-archiver writes it: each file named without its path
    model: dict[str, Any] = {"modelName": model_name, "handler": str(handler)}
    if version:
        model["modelVersion"] = version
    files: dict[str, Path] = {}
    for flag, key, path in (
        ("--handler", "handler", handler_file),
        ("--serialized-file", "serializedFile", serialized_file),
        ("--model-file", "modelFile", model_file),
        ("--config-file", "configFile", config_file),
        ("--requirements-file", "requirementsFile", requirements_file),
        *(("--extra-files", None, p) for p in extra_files),
    ):
        if path is None:
            continue
        if key is not None:
            model[key] = path.name
        if not path.exists() or (flag != "--extra-files" and not path.is_file()):
            raise ValueError(f"{flag} {path}: no such file")
        if path.name in files and files[path.name].resolve() != path.resolve():
            raise ValueError(
                f"{flag} {path}: another file is already named '{path.name}' in the archive"
            )
        files[path.name] = path
    suffix = {"default": ".mar", "tgz": ".tar.gz", "no-archive": ""}[archive_format]
    dest = export_path / f"{model_name}{suffix}"
    if dest.exists() and not force:
        raise ValueError(f"{dest} already exists; use --force to overwrite it")
    if dest.is_dir() and force:
        shutil.rmtree(dest)
    export_path.mkdir(parents=True, exist_ok=True)
    manifest = {
        "createdOn": time.strftime("%d/%m/%Y %H:%M:%S"),
        "runtime": "python",
        "model": model,
        "archiverVersion": "podium",
    }
    return write_archive(dest, files, manifest, archive_format)
