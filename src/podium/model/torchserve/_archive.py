"""TorchServe model archives: reading ``.mar`` / ``.tar.gz`` files and writing them.

A ``.mar`` is a zip holding the handler, the model's files and ``MAR-INF/MANIFEST.json``; a
``.tar.gz`` holds the same (at its root, or in one top-level directory). An archive is extracted
once per process and content, into a private directory (mode 0700) removed when the process
exits. Extraction never writes outside that directory: a member whose name is absolute, climbs
with ``..``, or is a link or a device is refused, naming the member. Nor does it fill the disk:
an archive whose files would leave less than :data:`KEEP_FREE` bytes free where it is extracted
(a zip bomb, or just too big) is refused before anything is written (a zip declares every size
up front and Python's ``zipfile`` never writes more than declared) or, for a tar stream, at the
member that would cross the line, and so is one of more than :data:`MAX_MEMBERS` members.
"""

from __future__ import annotations

import atexit
import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import IO, Any

from ...errors import DefinitionError

__all__ = [
    "MANIFEST",
    "archive_model",
    "extract",
    "is_archive",
    "make_manifest",
    "read_manifest",
    "write_archive",
]

MANIFEST = "MAR-INF/MANIFEST.json"
#: Free bytes an extraction must leave on its filesystem.
KEEP_FREE = 256 << 20
#: Most members an archive may hold (a model has a handful of files, or a few thousand).
MAX_MEMBERS = 100_000
_ARCHIVE_SUFFIXES = (".mar", ".tar.gz", ".tgz")
_extracted: dict[str, Path] = {}
_lock = threading.Lock()
_root: Path | None = None


def is_archive(path: Path) -> bool:
    """Whether ``path`` is named like a TorchServe archive."""
    return path.name.endswith(_ARCHIVE_SUFFIXES)


def read_manifest(model_dir: Path) -> dict[str, Any]:
    """The parsed ``MAR-INF/MANIFEST.json`` of an extracted model; ``DefinitionError`` if bad."""
    path = model_dir / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DefinitionError(f"{path}: cannot be read: {exc.strerror}") from exc
    except ValueError as exc:
        raise DefinitionError(f"{path}: invalid JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise DefinitionError(f"{path}: must be an object with a 'model' object")
    return data


def _private_root() -> Path:
    global _root
    if _root is None:
        _root = Path(tempfile.mkdtemp(prefix="podium-torchserve-"))  # mode 0700: ours alone
        atexit.register(shutil.rmtree, _root, True)
    return _root


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def extract(archive: Path) -> Path:
    """The directory holding ``archive``'s files, extracted once per process and content.

    Returns the directory that holds ``MAR-INF/MANIFEST.json``. Raises ``DefinitionError`` for
    an unreadable archive, a member that would land outside the directory, or a missing manifest.
    """
    try:
        key = _digest(archive)
    except OSError as exc:
        raise DefinitionError(f"{archive}: cannot be read: {exc.strerror}") from exc
    with _lock:
        found = _extracted.get(key)
        if found is not None:
            return found
        target = Path(tempfile.mkdtemp(prefix=key[:16] + "-", dir=_private_root()))
        try:
            if archive.name.endswith(".mar"):
                _extract_zip(archive, target)
            else:
                _extract_tar(archive, target)
        except DefinitionError:
            shutil.rmtree(target, ignore_errors=True)
            raise
        except (OSError, zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise DefinitionError(f"{archive}: not a readable archive: {exc}") from exc
        root = _manifest_dir(target)
        if root is None:
            shutil.rmtree(target, ignore_errors=True)
            raise DefinitionError(f"{archive}: holds no {MANIFEST}")
        _extracted[key] = root
        return root


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
    if pure.is_absolute() or ".." in pure.parts or (pure.parts and ":" in pure.parts[0]):
        raise DefinitionError(
            f"{archive}: member '{name}' would be extracted outside the model directory; refused"
        )
    dest = (target / Path(*pure.parts)).resolve() if pure.parts else target
    if dest != target.resolve() and target.resolve() not in dest.parents:
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

    def __init__(self, archive: Path, target: Path) -> None:
        self.archive = archive
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
        if self.written > self.free:
            raise DefinitionError(
                f"{self.archive}: its files need {_size(self.written)} (at member '{name}'), "
                f"more than the {_size(max(self.free, 0))} that extracting it may use on this "
                f"disk ({_size(KEEP_FREE)} are kept free); refused"
            )


def _size(n: int) -> str:
    if n < 1024:
        return f"{n:,} bytes"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:,.1f} {unit}"


def _extract_zip(archive: Path, target: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        room = _Room(archive, target)
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
            with zf.open(info) as src:
                _copy(src, dest)


def _extract_tar(archive: Path, target: Path) -> None:
    with tarfile.open(archive, "r:*") as tf:
        room = _Room(archive, target)
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


def make_manifest(
    *,
    model_name: str,
    handler: str,
    version: str | None = None,
    serialized_file: str | None = None,
    model_file: str | None = None,
    config_file: str | None = None,
    requirements_file: str | None = None,
) -> dict[str, Any]:
    """A ``MANIFEST.json`` as torch-model-archiver writes it (file names without their paths)."""
    model: dict[str, Any] = {"modelName": model_name, "handler": handler}
    if serialized_file:
        model["serializedFile"] = serialized_file
    if model_file:
        model["modelFile"] = model_file
    if version:
        model["modelVersion"] = version
    if requirements_file:
        model["requirementsFile"] = requirements_file
    if config_file:
        model["configFile"] = config_file
    return {
        "createdOn": time.strftime("%d/%m/%Y %H:%M:%S"),
        "runtime": "python",
        "model": model,
        "archiverVersion": "podium",
    }


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


def archive_model(
    *,
    model_name: str,
    handler: Path,
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
    files: dict[str, Path] = {}
    for flag, path in (
        ("--handler", handler),
        ("--serialized-file", serialized_file),
        ("--model-file", model_file),
        ("--config-file", config_file),
        ("--requirements-file", requirements_file),
        *(("--extra-files", p) for p in extra_files),
    ):
        if path is None:
            continue
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
    manifest = make_manifest(
        model_name=model_name,
        handler=handler.name,
        version=version,
        serialized_file=serialized_file.name if serialized_file else None,
        model_file=model_file.name if model_file else None,
        config_file=config_file.name if config_file else None,
        requirements_file=requirements_file.name if requirements_file else None,
    )
    return write_archive(dest, files, manifest, archive_format)
