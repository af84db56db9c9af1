"""The management API is not reachable from web pages, nor open to the network by accident, and
asks for its key by default: end to end, on a real ``podium serve``.

The refused requests are the exact ones a malicious page makes a browser send (``fetch`` in
``no-cors`` mode with a text body, an HTML form, an ``<img>``, a page on another port of this
host, a DNS-rebinding page); the accepted ones are the exact bytes curl sends for TorchServe's
documented commands, HTTP/1.0 without ``Host``, port forwards, and an operator's own names and
origins. Each refused registration is checked to have registered nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import httpx
import pytest
from conftest import EXAMPLES, TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE, SERVE_MODELS
from management_helpers import torchserve_management_stubs

import podium

STORE_ECHO = TEST_MODELS / "management" / "store_echo.py"
ADMIN = "https://admin.example"  # the operator's own web console
EVIL = "https://evil.example"

# What Chrome adds to a request that a page on another site makes.
CROSS_SITE = {"Origin": EVIL, "Sec-Fetch-Site": "cross-site"}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("exposure-store")
    shutil.copy(STORE_ECHO, directory / "store_echo.py")
    return directory


@pytest.fixture(scope="module")
def server(store: Path) -> Iterator[Server]:
    """No key (--no-auth, as every e2e server): what stands between a page and the API is the
    guard alone."""
    with run_server(
        SERVE_MODELS / "tensors",
        args=(
            "--model-store",
            str(store),
            "--management-allowed-hosts",
            "mgmt.internal",
            "--management-allowed-origins",
            ADMIN,
        ),
    ) as running:
        yield running


@pytest.fixture
async def api(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.management_url, timeout=PATIENCE) as c:
        yield c


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


async def raw(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` byte for byte to the listener at ``url``; its status, headers, body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(url))
    try:
        writer.write(request)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), PATIENCE)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return int(status_line.split()[1]), headers, body
    finally:
        writer.close()


def curl(method: str, url: str) -> bytes:
    """The bytes ``curl -X METHOD URL`` (7.88) sends: no body, no Content-Type."""
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    return (
        f"{method} {target} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        "User-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n"
    ).encode()


def localhost(server: Server) -> str:
    """The management URL as TorchServe's docs write it: http://localhost:PORT."""
    return f"http://localhost:{port_of(server.management_url)}"


async def registered(api: httpx.AsyncClient, name: str) -> bool:
    answer = await api.get(f"/models/{name}")
    assert answer.status_code in (200, 404), answer.text
    return answer.status_code == 200


def refusal(answer: httpx.Response, status: int, *words: str) -> None:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["code"] == status
    for word in words:
        assert word in body["message"], body["message"]


def register_params(name: str) -> dict[str, str]:
    return {"url": "store_echo.py", "model_name": name}


# -- what a web page can make a browser send: refused, and nothing registered -------------------


@pytest.mark.anyio
async def test_fetch_no_cors_with_a_text_body_from_another_site(api: httpx.AsyncClient) -> None:
    # fetch("http://127.0.0.1:8081/models?url=...", {method: "POST", mode: "no-cors",
    #       body: JSON.stringify({...})}): no preflight, Content-Type text/plain.
    answer = await api.post(
        "/models",
        params=register_params("by-fetch"),
        content=json.dumps(register_params("by-fetch")),
        headers={
            **CROSS_SITE,
            "Content-Type": "text/plain;charset=UTF-8",
            "Sec-Fetch-Mode": "no-cors",
            "Sec-Fetch-Dest": "empty",
        },
    )
    refusal(answer, 403, "https://evil.example", "--management-allowed-origins")
    assert "access-control-allow-origin" not in answer.headers
    assert not await registered(api, "by-fetch")


@pytest.mark.anyio
async def test_an_html_form_post_from_another_site(api: httpx.AsyncClient) -> None:
    # <form method=post action="http://127.0.0.1:8081/models?url=...">, submitted by script.
    for enctype, origin in (
        ("application/x-www-form-urlencoded", EVIL),
        ("multipart/form-data; boundary=----x", "null"),  # a sandboxed frame's form
        ("text/plain", EVIL),
    ):
        answer = await api.post(
            "/models",
            params=register_params("by-form"),
            headers={
                "Origin": origin,
                "Sec-Fetch-Site": "cross-site",
                "Sec-Fetch-Mode": "navigate",
                "Sec-Fetch-Dest": "document",
                "Content-Type": enctype,
            },
        )
        refusal(answer, 403, origin)
    assert not await registered(api, "by-form")


@pytest.mark.anyio
async def test_form_bodies_are_refused_even_without_origin(api: httpx.AsyncClient) -> None:
    """An older browser, or an extension that strips Origin and Sec-Fetch-*: the body type alone
    keeps a form or a no-cors fetch off every state-changing route, even with an empty body."""
    for content_type, body in (
        ("application/x-www-form-urlencoded", b""),
        ("application/x-www-form-urlencoded", b"url=store_echo.py&model_name=by-old-form"),
        ("multipart/form-data; boundary=x", b"--x--\r\n"),
        ("text/plain;charset=UTF-8", json.dumps(register_params("by-old-form")).encode()),
    ):
        answer = await api.post(
            "/models",
            params=register_params("by-old-form"),
            content=body,
            headers={"Content-Type": content_type},
        )
        refusal(answer, 415, "query string", "application/json")
    assert not await registered(api, "by-old-form")
    for method, path in (("PUT", "/models/tensors?min_worker=1"), ("DELETE", "/models/tensors")):
        answer = await api.request(method, path, headers={"Content-Type": "text/plain"})
        refusal(answer, 415)
    assert await registered(api, "tensors")


@pytest.mark.anyio
async def test_an_img_get_from_another_site(api: httpx.AsyncClient) -> None:
    # <img src="http://127.0.0.1:8081/models">: no Origin, but Sec-Fetch-Site says who asked.
    answer = await api.get(
        "/models",
        headers={
            "Sec-Fetch-Site": "cross-site",
            "Sec-Fetch-Mode": "no-cors",
            "Sec-Fetch-Dest": "image",
        },
    )
    refusal(answer, 403, "cross-site")


@pytest.mark.anyio
async def test_a_page_on_another_port_of_this_host_is_refused(
    api: httpx.AsyncClient, server: Server
) -> None:
    # A dev server or notebook at http://127.0.0.1:3000 is "same-site" with 127.0.0.1:8081.
    answer = await api.post(
        "/models",
        params=register_params("same-site"),
        headers={"Origin": "http://127.0.0.1:3000", "Sec-Fetch-Site": "same-site"},
    )
    refusal(answer, 403, "http://127.0.0.1:3000")
    answer = await api.get("/models", headers={"Sec-Fetch-Site": "same-site"})
    refusal(answer, 403, "same-site")
    assert not await registered(api, "same-site")


@pytest.mark.anyio
async def test_dns_rebinding_is_misdirected(api: httpx.AsyncClient, server: Server) -> None:
    """A page at http://rebind.evil.example:PORT whose name now resolves to 127.0.0.1: to the
    browser its requests are same-origin (no Sec-Fetch-Site on plain http, no Origin on GET)."""
    port = port_of(server.management_url)
    for host in (f"rebind.evil.example:{port}", "127.0.0.1.nip.io", "LOCALHOST.evil.example."):
        listed = await api.get("/models", headers={"Host": host})
        refusal(listed, 421, "Host", "--management-allowed-hosts", "DNS rebinding")
        assert listed.status_code == 421
    posted = await api.post(
        "/models",
        params=register_params("rebound"),
        headers={
            "Host": f"rebind.evil.example:{port}",
            "Origin": f"http://rebind.evil.example:{port}",
        },
    )
    refusal(posted, 421)
    assert not await registered(api, "rebound")


@pytest.mark.anyio
async def test_a_preflight_from_another_site_gets_no_cors_grant(api: httpx.AsyncClient) -> None:
    # fetch(..., {method: "POST", headers: {"Content-Type": "application/json"}}) first asks.
    answer = await api.options(
        "/models",
        headers={
            **CROSS_SITE,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert answer.status_code == 403
    assert "access-control-allow-origin" not in answer.headers


def test_grpc_management_cannot_be_spoken_by_a_browser(server: Server) -> None:
    """A browser speaks HTTP/1.1 (or HTTP/2 over TLS only) to a plain-text port; the gRPC
    listener answers only HTTP/2 frames, which the browser rejects, and runs nothing."""
    host, port = server.grpc_management.rsplit(":", 1)
    body = b'{"url": "store_echo.py", "model_name": "by-grpc"}'
    request = (
        b"POST /org.pytorch.serve.grpc.management.ManagementAPIsService/RegisterModel HTTP/1.1\r\n"
        b"Host: 127.0.0.1:" + port.encode() + b"\r\nOrigin: https://evil.example\r\n"
        b"Sec-Fetch-Site: cross-site\r\nContent-Type: application/grpc-web+proto\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )

    async def exchange() -> bytes:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(request)
        await writer.drain()
        try:
            return await asyncio.wait_for(reader.read(), PATIENCE)
        finally:
            writer.close()

    answer = asyncio.run(exchange())
    assert not answer.startswith(b"HTTP/"), answer[:100]
    listed = httpx.get(f"{server.management_url}/models/by-grpc", timeout=PATIENCE)
    assert listed.status_code == 404


# -- what tools send: accepted ----------------------------------------------------------------


@pytest.mark.anyio
async def test_torchserves_documented_curl_commands_work(server: Server, store: Path) -> None:
    """TorchServe's management_api.md, byte for byte as curl sends it to http://localhost:PORT."""
    base = localhost(server)
    url = f"{base}/models?url=store_echo.py&model_name=noop&initial_workers=1&synchronous=true"
    status, _, body = await raw(server.management_url, curl("POST", url))
    assert status == 200, body
    assert b"registered" in body
    status, _, body = await raw(
        server.management_url, curl("PUT", f"{base}/models/noop?min_worker=1&synchronous=true")
    )
    assert status == 200, body
    status, _, body = await raw(server.management_url, curl("GET", f"{base}/models/noop"))
    assert status == 200 and json.loads(body)[0]["modelName"] == "noop"
    status, _, body = await raw(server.management_url, curl("DELETE", f"{base}/models/noop"))
    assert status == 200, body
    status, _, body = await raw(server.management_url, curl("OPTIONS", base + "/"))
    assert status == 200 and json.loads(body)["openapi"].startswith("3.")


@pytest.mark.anyio
async def test_a_json_body_still_registers(api: httpx.AsyncClient) -> None:
    answer = await api.post("/models", json=register_params("by-json"))
    assert answer.status_code == 200, answer.text
    assert (await api.delete("/models/by-json")).status_code == 200


@pytest.mark.anyio
async def test_http_1_0_without_host_is_a_tool_not_a_browser(server: Server) -> None:
    status, _, body = await raw(server.management_url, b"GET /models HTTP/1.0\r\n\r\n")
    assert status == 200 and b"tensors" in body
    status, _, body = await raw(
        server.management_url,
        b"POST /models?url=store_echo.py&model_name=old-client HTTP/1.0\r\n\r\n",
    )
    assert status == 200, body
    status, _, body = await raw(
        server.management_url, b"DELETE /models/old-client HTTP/1.0\r\n\r\n"
    )
    assert status == 200, body


@pytest.mark.anyio
async def test_addresses_localhost_port_forwards_and_configured_names(
    api: httpx.AsyncClient,
) -> None:
    for host in (
        "127.0.0.1",
        "localhost",
        "localhost:18081",  # ssh -L 18081:127.0.0.1:8081, kubectl port-forward
        "[::1]:9000",
        "10.1.2.3:8081",  # an IP literal cannot be rebound
        "mgmt.internal",  # --management-allowed-hosts
        "MGMT.Internal.:443",
    ):
        answer = await api.get("/models", headers={"Host": host})
        assert answer.status_code == 200, (host, answer.text)
    for host in ("mgmt.internal.evil.example", "internal", "[::1", "localhost:http"):
        answer = await api.get("/models", headers={"Host": host})
        assert answer.status_code == 421, host


@pytest.mark.anyio
async def test_a_request_the_user_typed_or_from_the_api_itself_passes(
    api: httpx.AsyncClient,
) -> None:
    for site in ("none", "same-origin"):
        answer = await api.get("/models", headers={"Sec-Fetch-Site": site})
        assert answer.status_code == 200, answer.text


@pytest.mark.anyio
async def test_an_allowed_origin_gets_cors_and_can_register(api: httpx.AsyncClient) -> None:
    preflight = await api.options(
        "/models",
        headers={
            "Origin": ADMIN,
            "Sec-Fetch-Site": "cross-site",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, authorization",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == ADMIN
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "content-type" in preflight.headers["access-control-allow-headers"]
    answer = await api.post(
        "/models",
        json=register_params("by-console"),
        headers={"Origin": ADMIN + ":443", "Sec-Fetch-Site": "cross-site"},  # same origin
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == ADMIN + ":443"
    assert answer.headers["vary"] == "Origin"
    # Even an allowed page cannot post a form: that is never how this API is called.
    form = await api.post(
        "/models",
        params=register_params("by-console-form"),
        headers={"Origin": ADMIN, "Content-Type": "application/x-www-form-urlencoded"},
    )
    refusal(form, 415)
    assert (await api.delete("/models/by-console")).status_code == 200


# -- the management key by default ------------------------------------------------------------


def keys_of(path: Path) -> dict[str, str]:
    return {kind: entry["key"] for kind, entry in json.loads(path.read_text()).items()}


def owner_only(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, store: Path) -> Iterator[Server]:
    """The server's default: no auth flag at all."""
    key_file = tmp_path_factory.mktemp("default-keys") / "key_file.json"
    with run_server(
        SERVE_MODELS / "tensors",
        args=(
            "--model-store",
            str(store),
            "--key-file",
            str(key_file),
            "--management-allowed-origins",
            ADMIN,
        ),
        default_auth=True,
    ) as running:
        running.key_file = key_file  # type: ignore[attr-defined]
        yield running


@pytest.mark.anyio
async def test_by_default_management_needs_its_key_and_inference_does_not(keyed: Server) -> None:
    key_file: Path = keyed.key_file  # type: ignore[attr-defined]
    assert owner_only(key_file)
    own = keys_of(key_file)
    async with httpx.AsyncClient(base_url=keyed.management_url, timeout=PATIENCE) as api:
        refused = await api.post("/models", params=register_params("keyless"))
        assert refused.status_code == 401 and "management" in refused.json()["message"]
        bearer = {"Authorization": f"Bearer {own['management']}"}
        assert (await api.get("/models/keyless", headers=bearer)).status_code == 404
        answer = await api.post("/models", params=register_params("keyed"), headers=bearer)
        assert answer.status_code == 200, answer.text
    async with httpx.AsyncClient(base_url=keyed.url, timeout=PATIENCE) as infer:
        assert (await infer.get("/v2/models/tensors")).status_code == 200  # no key needed
        assert (await infer.get("/v2/models/keyed")).status_code == 200


@pytest.mark.anyio
async def test_by_default_the_key_guards_grpc_management_too(
    keyed: Server, tmp_path_factory: pytest.TempPathFactory
) -> None:
    ts = torchserve_management_stubs(tmp_path_factory.mktemp("exposure-stubs"))
    own = keys_of(keyed.key_file)  # type: ignore[attr-defined]
    async with grpc.aio.insecure_channel(keyed.grpc_management) as channel:
        stub: Any = ts.grpc.ManagementAPIsServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.RegisterModel(
                ts.pb2.RegisterModelRequest(url="store_echo.py", model_name="grpc-keyless")
            )
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        reply = await stub.ListModels(
            ts.pb2.ListModelsRequest(),
            metadata=(("authorization", f"Bearer {own['management']}"),),
        )
        assert "grpc-keyless" not in reply.msg


@pytest.mark.anyio
async def test_a_state_changing_get_from_an_img_changes_no_key(keyed: Server) -> None:
    """``GET /token`` (TorchServe 0.9's form) replaces a key: an <img> pointing at it is refused
    before the key check, and a request carrying a stolen-looking header gets nowhere either."""
    key_file: Path = keyed.key_file  # type: ignore[attr-defined]
    before = keys_of(key_file)
    async with httpx.AsyncClient(base_url=keyed.management_url, timeout=PATIENCE) as api:
        answer = await api.get(
            "/token",
            params={"type": "management"},
            headers={"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": "image"},
        )
        refusal(answer, 403)
    assert keys_of(key_file) == before


@pytest.mark.anyio
async def test_an_allowed_origins_preflight_needs_no_key_but_its_request_does(
    keyed: Server,
) -> None:
    own = keys_of(keyed.key_file)  # type: ignore[attr-defined]
    async with httpx.AsyncClient(base_url=keyed.management_url, timeout=PATIENCE) as api:
        preflight = await api.options(
            "/models",
            headers={"Origin": ADMIN, "Access-Control-Request-Method": "GET"},
        )
        assert preflight.status_code == 204
        assert "authorization" in preflight.headers["access-control-allow-headers"]
        keyless = await api.get("/models", headers={"Origin": ADMIN})
        assert keyless.status_code == 401
        assert keyless.headers["access-control-allow-origin"] == ADMIN  # the page can read why
        keyed_answer = await api.get(
            "/models", headers={"Origin": ADMIN, "Authorization": f"Bearer {own['management']}"}
        )
        assert keyed_answer.status_code == 200


def test_the_quick_start_writes_key_file_json_in_the_working_directory(tmp_path: Path) -> None:
    """``podium serve MODEL`` with no flag at all, as the README's quick start: the keys go to
    ./key_file.json (TorchServe's name and shape), owner-only, and leave with the server."""
    src = str(Path(podium.__file__).resolve().parents[1])  # this checkout's code, from any cwd
    env = {"PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    key_file = tmp_path / "key_file.json"
    with run_server(EXAMPLES / "echo", default_auth=True, cwd=tmp_path, env=env) as running:
        assert owner_only(key_file)
        assert set(json.loads(key_file.read_text())) == {"management", "inference", "API"}
        key = keys_of(key_file)["management"]
        assert httpx.get(f"{running.management_url}/models").status_code == 401
        listed = httpx.get(
            f"{running.management_url}/models", headers={"Authorization": f"Bearer {key}"}
        )
        assert listed.status_code == 200
        assert httpx.get(f"{running.url}/v2/models/echo").status_code == 200
    assert not key_file.exists()


def test_an_unwritable_default_key_file_leaves_management_keyless_with_a_warning(
    tmp_path: Path,
) -> None:
    src = str(Path(podium.__file__).resolve().parents[1])
    env = {"PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    (tmp_path / "key_file.json").mkdir()  # where the key file would go: cannot be written
    with run_server(EXAMPLES / "echo", default_auth=True, cwd=tmp_path, env=env) as running:
        assert "its key file cannot be written" in running.log
        assert "--key-file" in running.log
        assert httpx.get(f"{running.management_url}/models").status_code == 200


def test_a_named_key_file_that_cannot_be_written_stops_the_server(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "podium",
            "serve",
            str(EXAMPLES / "echo"),
            "--host",
            "127.0.0.1",
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--management-port",
            "0",
            "--grpc-management-port",
            "0",
            "--metrics-port",
            "0",
            "--key-file",
            str(blocker / "key_file.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "Podium is ready" not in result.stderr
    assert "its key file cannot be written" not in result.stderr  # no silent fallback


# -- open to the network ------------------------------------------------------------------------


def serve_refused(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "podium",
            "serve",
            str(TEST_MODELS / "serve" / "tensors"),
            "--host",
            "127.0.0.1",
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--management-port",
            "0",
            "--grpc-management-port",
            "0",
            "--metrics-port",
            "0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_an_open_management_host_without_keys_refuses_to_start(host: str) -> None:
    result = serve_refused("--management-host", host, "--no-auth")
    assert result.returncode == 1, result.stderr
    err = result.stderr
    assert "refusing to start" in err and "--allow-open-management" in err
    assert "run any code on this machine" in err
    assert "Podium is ready" not in err
    # TorchServe's name for --no-auth is refused the same way.
    result = serve_refused("--management-host", host, "--disable-token-auth")
    assert result.returncode == 1 and "--allow-open-management" in result.stderr


def test_refused_flags_name_the_rule() -> None:
    result = serve_refused("--management-allowed-origins", "*")
    assert result.returncode == 2 and "would admit every page" in result.stderr
    result = serve_refused("--management-allowed-hosts", "*.example")
    assert result.returncode == 2 and "not a host name" in result.stderr


def test_the_flags_can_come_from_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "podium.yaml"
    config.write_text("management_host: 0.0.0.0\nauth: false\n")
    result = serve_refused("--config", str(config))
    assert result.returncode == 1 and "--allow-open-management" in result.stderr
