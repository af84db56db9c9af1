"""Where a registration's url points: local paths, the model store, and remote urls, which are
refused unless they match --allowed-urls and then downloaded (bounded, redirects checked) into
the model store. Unit tests of the policy, and registration from a real HTTP server end to end."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server

from podium.config import Registration
from podium.errors import InvalidInput, NotFound
from podium.server.management import UrlPolicy

MODEL = (TEST_MODELS / "management" / "store_echo.py").read_bytes()


# -- the policy -------------------------------------------------------------------------------


def test_local_urls_resolve_in_the_store_first_then_on_disk(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "m.py").write_bytes(MODEL)
    (tmp_path / "elsewhere.py").write_bytes(MODEL)
    policy = UrlPolicy(Registration(model_store=store))
    assert policy.local("m.py") == store / "m.py"
    assert policy.local(str(store / "m.py")) == store / "m.py"
    assert policy.local(f"file://{store}/m.py") == store / "m.py"
    anywhere = UrlPolicy(Registration(model_store=store, allow_any_local_path=True))
    assert anywhere.local("m.py") == store / "m.py"
    assert anywhere.local(str(tmp_path / "elsewhere.py")) == tmp_path / "elsewhere.py"
    assert anywhere.local(f"file://{tmp_path}/elsewhere.py") == tmp_path / "elsewhere.py"
    with pytest.raises(NotFound, match="nothing.mar"):
        policy.local("nothing.mar")
    with pytest.raises(InvalidInput, match="url is required"):
        policy.local("")


def test_local_urls_outside_the_store_and_start_paths_are_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "sub").mkdir(parents=True)
    (store / "sub" / "m.py").write_bytes(MODEL)
    started = tmp_path / "started"
    started.mkdir()
    (started / "s.py").write_bytes(MODEL)
    (tmp_path / "single.py").write_bytes(MODEL)
    (tmp_path / "outside.py").write_bytes(MODEL)
    (store / "inside-link.py").symlink_to(store / "sub" / "m.py")
    (store / "escape.py").symlink_to(tmp_path / "outside.py")
    (store / "escape-dir").symlink_to(tmp_path)
    (store / "dangling.py").symlink_to(tmp_path / "nothing-there.py")
    policy = UrlPolicy(
        Registration(model_store=store), start_paths=[started, tmp_path / "single.py"]
    )
    # Under the store and the start paths: found, by path in the store or on disk.
    assert policy.local("sub/m.py") == store / "sub" / "m.py"
    assert policy.local("inside-link.py") == store / "inside-link.py"  # a link that stays in
    assert policy.local(str(started / "s.py")) == started / "s.py"
    assert policy.local(str(started)) == started
    assert policy.local(f"file://{tmp_path}/single.py") == tmp_path / "single.py"
    rule = "registration reads models only under the model store .*--allow-any-local-path"
    # Elsewhere: refused, naming the rule, whether the path exists or not.
    for url in (str(tmp_path / "outside.py"), f"file://{tmp_path}/outside.py", "/etc/passwd"):
        with pytest.raises(InvalidInput, match=f"'{url}' is refused: {rule}"):
            policy.local(url)
    with pytest.raises(InvalidInput, match=f"is refused: {rule}"):
        policy.local(str(tmp_path / "no-such.py"))
    for url in ("../outside.py", "sub/../../outside.py", f"{store}/../outside.py", "sub/../m.py"):
        with pytest.raises(InvalidInput, match=f"climbs with '..'; {rule}"):
            policy.local(url)
    for url in ("escape.py", str(store / "escape.py"), "escape-dir/outside.py", "dangling.py"):
        with pytest.raises(InvalidInput, match="is a symbolic link to .*outside those places"):
            policy.local(url)
    # A relative url is looked for in the store only: never in the working directory.
    with pytest.raises(NotFound, match=r"'outside.py' not found in the model store \("):
        policy.local("outside.py")
    # Without a store, only the start paths.
    bare = UrlPolicy(Registration(model_store=None), start_paths=[started])
    assert bare.local(str(started / "s.py")) == started / "s.py"
    with pytest.raises(InvalidInput, match="only under the model paths the server started with"):
        bare.local(str(tmp_path / "outside.py"))
    nothing = UrlPolicy(Registration(model_store=None))
    with pytest.raises(InvalidInput, match="under nothing: no --model-store is configured"):
        nothing.local("outside.py")
    # The operator's way out: anything, as TorchServe-era Podium did.
    anywhere = UrlPolicy(Registration(model_store=store, allow_any_local_path=True))
    assert anywhere.local(str(tmp_path / "outside.py")) == tmp_path / "outside.py"
    assert anywhere.local("escape.py") == store / "escape.py"


def test_remote_urls_are_refused_unless_allowed_in_full() -> None:
    policy = UrlPolicy(
        Registration(model_store=None, allowed_urls=[r"https://models\.example\.com/.*"])
    )
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
    refused = UrlPolicy(Registration(model_store=None))
    with pytest.raises(InvalidInput, match="none is configured"):
        refused.check_remote("https://models.example.com/a.mar")
    s3 = UrlPolicy(Registration(model_store=None, allowed_urls=[r"s3://.*"]))
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
        elif self.path == "/models/trickle.py":
            self.send_response(200)
            self.send_header("content-length", "100000")
            self.end_headers()
            _trickle(self.wfile)
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


def _trickle(out: Any, seconds: float = 20.0) -> None:
    """A byte every 50 ms (each read is quick, the whole never ends), until the client leaves
    or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    with contextlib.suppress(OSError):
        while time.monotonic() < deadline:
            out.write(b"#")
            out.flush()
            time.sleep(0.05)


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


def test_a_download_that_trickles_is_cut_at_its_deadline(origin: str, tmp_path: Path) -> None:
    allowed = origin.replace(".", r"\.") + "/models/.*"
    policy = UrlPolicy(
        Registration(model_store=tmp_path, allowed_urls=[allowed], download_timeout=0.5)
    )
    assert UrlPolicy().download_timeout == 300.0  # the default
    started = time.monotonic()
    with pytest.raises(InvalidInput, match=r"took longer than --download-timeout \(0\.5 s\)"):
        asyncio.run(policy.download(f"{origin}/models/trickle.py"))
    assert time.monotonic() - started < 5  # each read came within httpx's timeout: cut anyway
    assert list(tmp_path.iterdir()) == []  # the partial file is gone


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
