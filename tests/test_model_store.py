"""Where a registration's url points: local paths, the model store, and remote urls, which are
refused unless they match --allowed-urls and then downloaded (bounded, redirects checked) into
the model store. Unit tests of the policy, and registration from a real HTTP server end to end."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server

from podium.errors import InvalidInput, NotFound
from podium.server.management import UrlPolicy

MODEL = (TEST_MODELS / "management" / "store_echo.py").read_bytes()


# -- the policy -------------------------------------------------------------------------------


def test_local_urls_resolve_in_the_store_first_then_on_disk(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "m.py").write_bytes(MODEL)
    (tmp_path / "elsewhere.py").write_bytes(MODEL)
    policy = UrlPolicy(model_store=store)
    assert policy.local("m.py") == store / "m.py"
    assert policy.local(str(store / "m.py")) == store / "m.py"
    assert policy.local(f"file://{store}/m.py") == store / "m.py"
    anywhere = UrlPolicy(model_store=store, allow_any_local_path=True)
    assert anywhere.local("m.py") == store / "m.py"
    assert anywhere.local(str(tmp_path / "elsewhere.py")) == tmp_path / "elsewhere.py"
    assert anywhere.local(f"file://{tmp_path}/elsewhere.py") == tmp_path / "elsewhere.py"
    with pytest.raises(NotFound, match="nothing.mar"):
        policy.local("nothing.mar")
    with pytest.raises(InvalidInput, match="url is required"):
        policy.local("")


def test_remote_urls_are_refused_unless_allowed_in_full() -> None:
    policy = UrlPolicy(model_store=None, allowed_urls=[r"https://models\.example\.com/.*"])
    assert not policy.is_remote("/models/a.mar") and not policy.is_remote("file:///a.mar")
    assert policy.is_remote("https://models.example.com/a.mar")
    policy.check_remote("https://models.example.com/a.mar")
    for url in (
        "https://models.example.com.evil.net/a.mar",  # a prefix match is not enough
        "http://169.254.169.254/latest/meta-data",
        "https://evil.net/?https://models.example.com/a.mar",
    ):
        with pytest.raises(InvalidInput, match="--allowed-urls"):
            policy.check_remote(url)
    refused = UrlPolicy(model_store=None)
    with pytest.raises(InvalidInput, match="none is configured"):
        refused.check_remote("https://models.example.com/a.mar")
    s3 = UrlPolicy(model_store=None, allowed_urls=[r"s3://.*"])
    with pytest.raises(InvalidInput, match="only http and https"):
        s3.check_remote("s3://bucket/a.mar")


# -- downloads from a real HTTP server --------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if self.path == "/models/remote_echo.py":
            self.send_response(200)
            self.send_header("content-length", str(len(MODEL)))
            self.end_headers()
            self.wfile.write(MODEL)
        elif self.path == "/models/big.py":
            body = b"#" * 4096
            self.send_response(200)
            self.end_headers()  # no content-length: the limit must hold while streaming
            self.wfile.write(body)
        elif self.path == "/models/moved.py":
            self.send_response(302)
            self.send_header("location", "/private/remote_echo.py")
            self.send_header("content-length", "0")
            self.end_headers()
        else:
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def origin() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("download-store")


@pytest.fixture(scope="module")
def server(origin: str, store: Path) -> Iterator[Server]:
    allowed = origin.replace(".", r"\.") + "/models/.*"
    with run_server(
        TEST_MODELS / "serve" / "tensors",
        args=(
            "--model-store",
            str(store),
            "--allowed-urls",
            allowed,
            "--max-download-size",
            "2048",
        ),
    ) as running:
        yield running


def register(server: Server, url: str) -> httpx.Response:
    return httpx.post(f"{server.management_url}/models", params={"url": url}, timeout=30)


def files(store: Path) -> list[str]:
    return sorted(p.name for p in store.iterdir())


def test_an_allowed_url_is_downloaded_into_the_store_and_served(
    server: Server, origin: str, store: Path
) -> None:
    answer = register(server, f"{origin}/models/remote_echo.py")
    assert answer.status_code == 200, answer.text
    assert (store / "remote_echo.py").read_bytes() == MODEL
    result = httpx.post(f"{server.url}/v1/models/remote_echo:predict", json={"a": 1})
    assert result.json() == {"echo": {"a": 1}}
    again = register(server, f"{origin}/models/remote_echo.py")  # the file is there already
    assert again.status_code == 409 and again.json()["type"] == "ConflictStatusException"
    with contextlib.suppress(httpx.HTTPError):
        httpx.delete(f"{server.management_url}/models/remote_echo")


@pytest.mark.parametrize(
    ("path", "status", "named"),
    [
        ("/models/big.py", 400, "--max-download-size"),
        ("/models/moved.py", 400, "redirects to"),
        ("/models/absent.py", 400, "HTTP 404"),
        ("/other/remote_echo.py", 400, "--allowed-urls"),
    ],
)
def test_downloads_that_are_refused_leave_nothing_behind(
    server: Server, origin: str, store: Path, path: str, status: int, named: str
) -> None:
    before = files(store)
    answer = register(server, origin + path)
    assert answer.status_code == status, answer.text
    assert named in answer.json()["message"]
    assert files(store) == before  # no partial file, no file from the redirect
