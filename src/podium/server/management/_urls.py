"""Where a registration's ``url`` points: a local path, a file in the model store, or (only when
it matches ``--allowed-urls``) a remote archive that is downloaded into the model store.

Fetching whatever URL a client names is how TorchServe's management API became an SSRF vector
(the server reaches hosts the client cannot, cloud metadata endpoints included). So a URL with a
scheme other than ``file://`` is refused unless it matches one of the configured regular
expressions in full (TorchServe's ``allowed_urls``); by default none does. An allowed ``http`` /
``https`` URL is downloaded with a bounded size, redirects are followed only to URLs that are
allowed too, and the whole download has a deadline (``--download-timeout``), so a server that
trickles bytes cannot hold a registration forever. The file lands in the model store under its
own name (never overwriting one); it belongs to the model versions registered from it
(:meth:`UrlPolicy.owned`), and is deleted when the last of them is unregistered, as TorchServe does.

A local url is read only under the model store (``--model-store``) and the model paths the
server started with: registering a model runs its code, so a client that may register must not
be able to name any file on the machine (a script another local user left in ``/tmp``, say).
TorchServe, likewise, looks for a model file by its name in the model store only. A path that
climbs with ``..``, or a symbolic link that leads out of those places, is refused too;
``--allow-any-local-path`` lifts the rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from ...config import Registration
from ...errors import Conflict, InvalidInput, NotFound, bounded
from ...model import Owned, Shared

__all__ = ["UrlPolicy"]

logger = logging.getLogger("podium.management")

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
#: What a downloaded file may be: what discovery serves from a single file.
_DOWNLOADABLE = (".mar", ".tar.gz", ".tgz", ".py")
_MAX_REDIRECTS = 5
#: Seconds each step of a download (connect, a read) may take.
STEP_TIMEOUT = 60.0
_CHUNK = 1024 * 1024


def _shown(url: str) -> str:
    """``url`` as an error message quotes it: the first 200 characters of a longer one, so the
    message's own words survive (every message is bounded too)."""
    return bounded(url, 200)


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; a name no file can have (too long, a NUL) names nothing, rather
    than failing with ``OSError`` (found by fuzzing: a 500 for a long ``url``)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


class UrlPolicy:
    """Resolves registration urls under the server's settings (see the module docstring)."""

    def __init__(
        self, settings: Registration | None = None, *, start_paths: Sequence[Path] = ()
    ) -> None:
        """``settings``: the server's registration settings (``--model-store`` and the others;
        their defaults when None). ``start_paths``: the model paths the server started with,
        where local urls may point besides the model store."""
        settings = Registration() if settings is None else settings
        self.model_store = settings.model_store
        self.allowed_urls = settings.allowed_urls
        self._allowed = [re.compile(p) for p in self.allowed_urls]
        self.max_download_size = settings.max_download_size
        self.download_timeout = settings.download_timeout  # the whole download
        self.start_paths = tuple(start_paths)
        self.allow_any_local_path = settings.allow_any_local_path
        places = [self.model_store] if self.model_store is not None else []
        places.extend(self.start_paths)
        #: where local urls may point: each place as written (made absolute), and resolved
        self._places = [(Path(os.path.abspath(p)), p.resolve()) for p in places]

    def is_remote(self, url: str) -> bool:
        """Whether ``url`` names a remote resource (a scheme other than ``file://``)."""
        found = _SCHEME.match(url)
        return found is not None and found.group(1).lower() != "file"

    def allowed(self, url: str) -> bool:
        return any(p.fullmatch(url) for p in self._allowed)

    def check_remote(self, url: str) -> None:
        """Refuse ``url`` unless it may be fetched: allowed, and over http(s)."""
        if not self.allowed(url):
            configured = (
                "none is configured"
                if not self.allowed_urls
                else "configured: " + ", ".join(self.allowed_urls)
            )
            raise InvalidInput(
                f"url '{url}' is refused: a remote url must match --allowed-urls ({configured})"
            )
        scheme = url.split(":", 1)[0].lower()
        if scheme not in ("http", "https"):
            raise InvalidInput(
                f"url '{url}' is allowed, but only http and https urls can be downloaded"
            )

    def local(self, url: str) -> Path:
        """The local path ``url`` names: a ``file://`` url, a file or directory in the model
        store (by its path there), or a path on disk (absolute, or relative to the working
        directory). Unless ``allow_any_local_path``, it must lie under the model store or a
        path the server started with: ``InvalidInput`` naming the rule otherwise, whether it
        exists or not (a relative url is then looked for there only). ``NotFound`` if it does
        not exist."""
        if not url:
            raise InvalidInput("Parameter url is required.")
        try:
            return self._local(url)
        except (OSError, ValueError) as exc:  # a name no file can have (too long, a NUL)
            raise NotFound(
                f"model url '{_shown(url)}' not found: {getattr(exc, 'strerror', None) or exc}"
            ) from None

    def _local(self, url: str) -> Path:
        if _SCHEME.match(url):  # file://
            path = Path(unquote(urlsplit(url).path))
        else:
            path = Path(url)
            if self.model_store is not None and not path.is_absolute():
                in_store = self.model_store / path
                if os.path.lexists(in_store):  # raises OSError for a name no file can have
                    path = in_store
        if not self.allow_any_local_path:
            relative = not path.is_absolute() and ".." not in path.parts
            if relative and self.model_store is not None and not self._placed(path):
                raise self._not_found(url, anywhere=False)  # not in the store: look no further
            self._check_place(url, path)
        if not _exists(path):
            raise self._not_found(url, anywhere=True)
        return path

    def _not_found(self, url: str, *, anywhere: bool) -> NotFound:
        if _SCHEME.match(url):
            return NotFound(f"model url '{_shown(url)}' not found: no such file or directory")
        places = []
        if self.model_store is not None:
            places.append(f"in the model store ({self.model_store})")
        if anywhere or not places:
            places.append("on disk")
        return NotFound(f"model url '{_shown(url)}' not found {' or '.join(places)}")

    def _placed(self, path: Path) -> bool:
        """Whether ``path`` lies under a place registration may read from (resolved)."""
        resolved = path.resolve()
        return any(_under(resolved, real) for _, real in self._places)

    def _check_place(self, url: str, path: Path) -> None:
        """Refuse ``path`` unless it lies under a place registration may read from."""
        rule = self._rule()
        if ".." in path.parts:
            raise InvalidInput(f"model url '{_shown(url)}' is refused: it climbs with '..'; {rule}")
        if self._placed(path):
            return
        written = Path(os.path.abspath(path))
        if any(_under(written, place) for place, _ in self._places):
            raise InvalidInput(
                f"model url '{_shown(url)}' is refused: it is a symbolic link to {path.resolve()}, "
                f"outside those places; {rule}"
            )
        raise InvalidInput(f"model url '{_shown(url)}' is refused: {rule}")

    def _rule(self) -> str:
        places = []
        if self.model_store is not None:
            places.append(f"the model store ({self.model_store})")
        if self.start_paths:
            places.append(
                "the model paths the server started with ("
                + ", ".join(str(p) for p in self.start_paths)
                + ")"
            )
        where = " and ".join(places) if places else "nothing: no --model-store is configured"
        return (
            f"registration reads models only under {where}; "
            "start the server with --allow-any-local-path to lift this rule"
        )

    def owned(self, downloaded: Path, holders: int) -> list[Owned]:
        """One hold on ``downloaded`` (a file :meth:`download` fetched) for each of ``holders``
        model versions: the file is deleted when the last of them is released."""
        shared = Shared(lambda: downloaded.unlink(missing_ok=True), f"downloaded {downloaded}")
        return list(shared.holds(holders))

    async def download(self, url: str) -> Path:
        """Fetch an allowed ``url`` into the model store; the file's path.

        At most ``max_download_size`` bytes, within ``download_timeout`` seconds in all;
        redirects only to allowed urls; the file is written under a temporary name and renamed
        when complete (a download that fails leaves nothing), and an existing file is never
        replaced.
        """
        self.check_remote(url)
        if self.model_store is None:
            raise InvalidInput(
                f"url '{url}' cannot be downloaded: no --model-store to save it in is configured"
            )
        name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        if not name or name.startswith(".") or not name.endswith(_DOWNLOADABLE):
            raise InvalidInput(
                f"url '{url}' must name a model file ({', '.join(_DOWNLOADABLE)}), got '{name}'"
            )
        target = self.model_store / name
        if target.exists():
            raise Conflict(f"model file '{name}' already exists in the model store")
        import httpx  # only needed for downloads

        self.model_store.mkdir(parents=True, exist_ok=True)
        fd, part = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=self.model_store)
        os.close(fd)
        timeout = min(STEP_TIMEOUT, self.download_timeout)
        try:
            async with asyncio.timeout(self.download_timeout):
                async with httpx.AsyncClient(follow_redirects=False, timeout=timeout) as client:
                    await self._fetch(client, url, Path(part))
            if target.exists():
                raise Conflict(f"model file '{name}' already exists in the model store")
            os.replace(part, target)
        except TimeoutError as exc:
            raise InvalidInput(
                f"url '{url}' could not be downloaded: it took longer than --download-timeout "
                f"({self.download_timeout:g} s); the partial file was removed"
            ) from exc
        except httpx.HTTPError as exc:
            raise InvalidInput(f"url '{url}' could not be downloaded: {exc}") from exc
        finally:
            with contextlib.suppress(OSError):
                os.unlink(part)
        logger.info("downloaded %s into %s", url, target)
        return target

    async def _fetch(self, client: object, url: str, part: Path) -> None:
        current = url
        for _ in range(_MAX_REDIRECTS + 1):
            async with client.stream("GET", current) as response:  # type: ignore[attr-defined]
                if response.is_redirect:
                    location = urljoin(current, response.headers.get("location", ""))
                    if not self.allowed(location):
                        raise InvalidInput(
                            f"url '{url}' redirects to '{location}', which does not match "
                            "--allowed-urls"
                        )
                    current = location
                    continue
                if response.status_code != 200:
                    raise InvalidInput(
                        f"url '{url}' could not be downloaded: HTTP {response.status_code}"
                    )
                length = response.headers.get("content-length")
                if (
                    length is not None
                    and length.isascii()
                    and length.isdigit()
                    and (len(length) > 18 or int(length) > self.max_download_size)
                ):
                    raise InvalidInput(self._too_big(url))
                size = 0
                with part.open("wb") as out:
                    async for chunk in response.aiter_bytes(_CHUNK):
                        size += len(chunk)
                        if size > self.max_download_size:
                            raise InvalidInput(self._too_big(url))
                        await asyncio.to_thread(out.write, chunk)
                return
        raise InvalidInput(f"url '{url}' redirects more than {_MAX_REDIRECTS} times")

    def _too_big(self, url: str) -> str:
        return f"url '{url}' is larger than --max-download-size ({self.max_download_size} bytes)"


def _under(path: Path, place: Path) -> bool:
    return path == place or place in path.parents
