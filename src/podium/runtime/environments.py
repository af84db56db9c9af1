"""Per-model Python environments: a model's own requirements, apart from the server's.

A model may declare the packages it needs (a truss's ``requirements`` / ``requirements_file``,
a TorchServe archive's requirements file). When asked (``podium install PATH``, or ``podium
serve --install-model-requirements``), Podium installs them into an environment of their own,
cached under ``PODIUM_ENVS`` (default ``~/.cache/podium/envs``) and keyed by a hash of the
requirements and the Python that runs them, so two models with the same list share one and two
with conflicting versions get two. Such a model runs in worker processes started from that
environment's Python: its packages come first, and the server's own (Podium and what it needs)
after them, through a ``.pth`` file; nothing is installed into the server's environment.

An environment is built beside its final place and moved there only once ``pip`` succeeded, so a
failed or interrupted install leaves nothing that looks ready. An install is bounded in time
(``INSTALL_TIMEOUT``) and in size (``MAX_ENVIRONMENT_BYTES``); when it fails, the error carries
the last lines of pip's output.

A model may also bring its environment ready-made: an MLServer ``environment_tarball`` (a
conda-pack or venv tarball: ``lib/pythonX.Y/site-packages``, ``bin``). :func:`unpack` extracts
it once, keyed by the tarball's hash, into the same cache, safely (no path outside the folder,
no link pointing out of it, no device files; bounded in bytes, members and time), and wraps it
in an environment of the server's Python whose ``.pth`` puts the tarball's packages first and the
server's after them. A tarball built for another Python than the server's is refused, naming
both: its compiled packages would not load.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import site
import subprocess
import sys
import tarfile
import threading
import time
import venv
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import DefinitionError

__all__ = [
    "INSTALL_TIMEOUT",
    "MAX_ENVIRONMENT_BYTES",
    "MAX_TARBALL_MEMBERS",
    "Environment",
    "EnvironmentFailed",
    "environments_root",
    "install",
    "unpack",
    "use_existing",
]

#: Seconds one environment's ``pip install`` may run.
INSTALL_TIMEOUT = 900.0
#: Bytes one environment may take on disk (what pip installed into it).
MAX_ENVIRONMENT_BYTES = 8 * 1024**3
#: Files, folders and links one environment tarball may hold.
MAX_TARBALL_MEMBERS = 500_000
#: Lines of pip's output an install error carries.
OUTPUT_LINES = 20
_READY = ".podium-ready"
_PODIUM_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding the podium package

_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


class EnvironmentFailed(DefinitionError):
    """A model's requirements could not be installed; the message ends with pip's last lines."""


@dataclass(frozen=True, slots=True)
class Environment:
    """A ready environment: ``python`` starts a worker process in it; ``bin``: a folder of
    programs its code may run (an unpacked tarball's), for the front of ``PATH``."""

    path: Path
    requirements: tuple[str, ...]
    bin: Path | None = None

    @property
    def python(self) -> Path:
        return self.path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def environments_root() -> Path:
    """Where environments are cached: ``PODIUM_ENVS``, else ``~/.cache/podium/envs``."""
    given = os.environ.get("PODIUM_ENVS")
    return Path(given) if given else Path.home() / ".cache" / "podium" / "envs"


def _key(*parts: str) -> str:
    """An environment's cache key: what it is made of (``parts``), and the Python it is for."""
    text = "\n".join([sys.executable, f"{sys.version_info.major}.{sys.version_info.minor}", *parts])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _lock(key: str) -> threading.Lock:
    with _locks_lock:
        return _locks.setdefault(key, threading.Lock())


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _site_packages(env: Path) -> Path:
    found = sorted(env.glob("lib/python*/site-packages")) or sorted(env.glob("Lib/site-packages"))
    if not found:
        raise EnvironmentFailed(f"the environment {env} has no site-packages folder")
    return found[0]


def _server_paths() -> list[str]:
    """Where the server's own packages are: they come after the environment's own."""
    paths = [*site.getsitepackages(), site.getusersitepackages(), _PODIUM_ROOT]
    seen: list[str] = []
    for path in paths:
        if path and Path(path).is_dir() and path not in seen:
            seen.append(path)
    return seen


def install(
    requirements: Sequence[str],
    *,
    label: str,
    root: Path | None = None,
    timeout: float = INSTALL_TIMEOUT,
    max_bytes: int = MAX_ENVIRONMENT_BYTES,
) -> Environment:
    """The environment with ``requirements`` installed: the cached one, or a new one (``pip``
    runs here, up to ``timeout`` seconds). ``EnvironmentFailed`` names ``label`` (the model)
    and carries pip's last lines when the install fails, runs too long or grows too big."""
    wanted = tuple(r.strip() for r in requirements if r.strip())
    root = environments_root() if root is None else root

    def make(building: Path) -> None:
        _build(building, wanted, label=label, timeout=timeout, max_bytes=max_bytes)

    final = _cached(root, _key(*wanted), make, "\n".join(wanted) + "\n")
    return Environment(final, wanted)


def _cached(root: Path, key: str, make: Callable[[Path], None], marker: str) -> Path:
    """``root/key``: there already (its marker written), or made now by ``make(building)``
    beside it and moved into place only once that succeeded, so that a failed or interrupted
    build leaves nothing that looks ready. Paths inside a venv name the folder it was built
    in: the launcher scripts do, the interpreter and site-packages do not, and only the
    interpreter is used."""
    final = root / key
    with _lock(key):
        if (final / _READY).is_file():
            return final
        root.mkdir(parents=True, exist_ok=True)
        building = root / f".{key}.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        try:
            make(building)
            shutil.rmtree(final, ignore_errors=True)  # a leftover without its marker
            building.rename(final)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        (final / _READY).write_text(marker, encoding="utf-8")
        return final


def _build(
    path: Path,
    requirements: tuple[str, ...],
    *,
    label: str,
    timeout: float,
    max_bytes: int,
    first: Sequence[Path] = (),
) -> None:
    """A venv of the server's Python at ``path`` whose ``.pth`` puts ``first``, then the
    server's packages, after its own; ``requirements`` installed into it."""
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(path)
    site_packages = _site_packages(path)
    (site_packages / "podium-server.pth").write_text(
        "".join(f"{p}\n" for p in [*map(str, first), *_server_paths()]), encoding="utf-8"
    )
    if not requirements:
        return
    listed = path / "requirements.txt"
    listed.write_text("\n".join(requirements) + "\n", encoding="utf-8")
    python = Environment(path, requirements).python
    command = [
        sys.executable, "-m", "pip", "--python", str(python), "install",
        "--disable-pip-version-check", "--no-input", "--requirement", str(listed),
    ]  # fmt: skip
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.output if isinstance(exc.output, str) else ""
        raise EnvironmentFailed(
            f"{label}: installing its requirements ({', '.join(requirements)}) took more than "
            f"{timeout:g} s{_tail(output)}"
        ) from None
    if done.returncode != 0:
        raise EnvironmentFailed(
            f"{label}: installing its requirements ({', '.join(requirements)}) failed "
            f"(pip exited {done.returncode}){_tail(done.stdout)}"
        )
    size = _size(path)
    if size > max_bytes:
        raise EnvironmentFailed(
            f"{label}: its requirements take {size} bytes installed, more than the "
            f"{max_bytes} allowed"
        )


def _tail(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()][-OUTPUT_LINES:]
    return (":\n" + "\n".join(lines)) if lines else ""


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def unpack(
    tarball: Path,
    *,
    label: str,
    root: Path | None = None,
    timeout: float = INSTALL_TIMEOUT,
    max_bytes: int = MAX_ENVIRONMENT_BYTES,
    max_members: int = MAX_TARBALL_MEMBERS,
) -> Environment:
    """The environment of an MLServer ``environment_tarball``: the cached one, or ``tarball``
    extracted now (see the module docstring). ``EnvironmentFailed`` names ``label`` (the
    model) and the rule when the tarball cannot be read, breaks a rule of safe extraction, is
    larger than ``max_bytes`` or ``max_members``, takes longer than ``timeout`` seconds, or has
    no ``site-packages`` of the server's Python version."""
    if not tarball.is_file():
        raise EnvironmentFailed(f"{label}: its environment tarball {tarball} is not a file")
    root = environments_root() if root is None else root
    try:
        key = "tarball-" + _key(_file_digest(tarball))
    except OSError as exc:
        raise EnvironmentFailed(f"{label}: its environment tarball {tarball}: {exc}") from None

    def make(building: Path) -> None:
        unpacked = building / "tarball"
        _extract(tarball, unpacked, label, timeout, max_bytes, max_members)
        packages = _tarball_site_packages(unpacked, tarball, label)
        first = [root / key / p.relative_to(building) for p in packages]  # where they will be
        _build(building, (), label=label, timeout=timeout, max_bytes=max_bytes, first=first)

    final = _cached(root, key, make, f"{tarball}\n")
    return Environment(final, (), _bin_of(final / "tarball"))


def _bin_of(folder: Path) -> Path | None:
    """An environment's folder of programs, if it has one."""
    found = folder / "bin"
    return found if found.is_dir() else None


def _extract(
    tarball: Path, into: Path, label: str, timeout: float, max_bytes: int, max_members: int
) -> None:
    """``tarball`` extracted into ``into`` by tarfile's ``data`` filter (no absolute or ``..``
    path, no link out of ``into``, no device, no set-uid bit), bounded in bytes, members and
    seconds; ``EnvironmentFailed`` says which rule it broke."""
    where = f"{label}: its environment tarball {tarball}"
    deadline = time.monotonic() + timeout
    into.mkdir(parents=True)
    total = count = 0
    try:
        with tarfile.open(tarball, "r:*") as archive:
            for member in archive:
                count += 1
                total += max(member.size, 0)
                if count > max_members:
                    raise EnvironmentFailed(f"{where} holds more than {max_members} members")
                if total > max_bytes:
                    raise EnvironmentFailed(
                        f"{where} expands to more than the {max_bytes} bytes allowed"
                    )
                if time.monotonic() >= deadline:
                    raise EnvironmentFailed(f"{where} took more than {timeout:g} s to extract")
                try:
                    archive.extract(member, into, filter="data")
                except tarfile.FilterError as exc:
                    raise EnvironmentFailed(
                        f"{where} is refused: {exc} (member {member.name[:200]!r})"
                    ) from None
    except (OSError, tarfile.TarError) as exc:
        raise EnvironmentFailed(f"{where} cannot be extracted: {exc}") from None


def _tarball_site_packages(unpacked: Path, tarball: Path, label: str) -> list[Path]:
    """The ``site-packages`` of the server's Python in an unpacked tarball (conda-pack's and a
    venv's ``lib/pythonX.Y/site-packages``); ``EnvironmentFailed`` when there is none."""
    mine = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = [p for p in sorted(unpacked.glob("lib/python*/site-packages")) if p.is_dir()]
    ours = [p for p in found if p.parent.name == mine]
    if ours:
        return ours
    if found:
        theirs = ", ".join(p.parent.name for p in found)
        raise EnvironmentFailed(
            f"{label}: its environment {tarball} was built for {theirs}, and the server runs "
            f"{mine}: its compiled packages would not load; build it with {mine}"
        )
    raise EnvironmentFailed(
        f"{label}: its environment {tarball} has no lib/pythonX.Y/site-packages "
        "(a conda-pack environment or a venv has one)"
    )


def use_existing(folder: Path, *, label: str, root: Path | None = None) -> Environment:
    """The environment of an MLServer ``environment_path`` (an environment already on disk,
    used where it is): a venv of the server's Python whose ``.pth`` puts ``folder``'s
    ``site-packages`` first, cached by the folder's path; ``EnvironmentFailed`` as for
    :func:`unpack` when it has none of the server's Python version."""
    folder = folder.expanduser().resolve()
    if not folder.is_dir():
        raise EnvironmentFailed(f"{label}: its environment_path {folder} is not a folder")
    packages = _tarball_site_packages(folder, folder, label)
    root = environments_root() if root is None else root
    key = "path-" + _key(str(folder))

    def make(building: Path) -> None:
        _build(building, (), label=label, timeout=0, max_bytes=0, first=packages)

    final = _cached(root, key, make, f"{folder}\n")
    return Environment(final, (), _bin_of(folder))
