"""Where a registration's ``url`` points: a local path, a file in the model store, or (only when
it matches ``--allowed-urls``) a remote archive that is downloaded into the model store.

Fetching whatever URL a client names is how TorchServe's management API became an SSRF vector
(the server reaches hosts the client cannot, cloud metadata endpoints included). So a URL with a
scheme other than ``file://`` is refused unless it matches one of the configured regular
expressions in full (TorchServe's ``allowed_urls``); by default none does. An allowed ``http`` /
``https`` URL is downloaded with a bounded size, redirects are followed only to URLs that are
allowed too, and the file lands in the model store under its own name (never overwriting one).
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

from ...errors import Conflict, InvalidInput, NotFound

__all__ = ["UrlPolicy"]

logger = logging.getLogger("podium.management")

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
#: What a downloaded file may be: what discovery serves from a single file.
_DOWNLOADABLE = (".mar", ".tar.gz", ".tgz", ".py")
_MAX_REDIRECTS = 5
_CHUNK = 1024 * 1024


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
        self,
        *,
        model_store: Path | None,
        allowed_urls: Sequence[str] = (),
        max_download_size: int = 1024 * 1024 * 1024,
        timeout: float = 60.0,
    ) -> None:
        self.model_store = model_store
        self.allowed_urls = tuple(allowed_urls)
        self._allowed = [re.compile(p) for p in self.allowed_urls]
        self.max_download_size = max_download_size
        self.timeout = timeout

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
        store, or a path on disk (absolute, or relative to the working directory)."""
        if not url:
            raise InvalidInput("Parameter url is required.")
        if _SCHEME.match(url):  # file://
            path = Path(unquote(urlsplit(url).path))
            if not _exists(path):
                raise NotFound(f"model url '{url}' not found: no such file or directory")
            return path
        path = Path(url)
        if self.model_store is not None and not path.is_absolute():
            in_store = self.model_store / path
            if _exists(in_store):
                return in_store
        if _exists(path):
            return path
        where = f"in the model store ({self.model_store}) or " if self.model_store else ""
        raise NotFound(f"model url '{url}' not found {where}on disk")

    async def download(self, url: str) -> Path:
        """Fetch an allowed ``url`` into the model store; the file's path.

        At most ``max_download_size`` bytes; redirects only to allowed urls; the file is written
        under a temporary name and renamed when complete, and an existing file is never replaced.
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
        try:
            async with httpx.AsyncClient(follow_redirects=False, timeout=self.timeout) as client:
                await self._fetch(client, url, Path(part))
            if target.exists():
                raise Conflict(f"model file '{name}' already exists in the model store")
            os.replace(part, target)
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
                if length is not None and length.isdigit() and int(length) > self.max_download_size:
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
