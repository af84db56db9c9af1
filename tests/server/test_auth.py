"""Token authorization (``--auth``) end to end, on REST inference, REST management and gRPC
management, and the Authorizer's own rules. Off by default: every other end-to-end test calls
without a key."""

from __future__ import annotations

import json
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import httpx
import pytest
from conftest import Server, run_server
from e2e_helpers import PATIENCE, SERVE_MODELS, EventLog
from management_helpers import torchserve_management_stubs

from podium.errors import Unauthenticated, grpc_code, http_status
from podium.server._auth import AuthMiddleware, Authorizer, inference_rule, render_error

pytest_plugins = ["e2e_fixtures"]


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("auth") / "keys" / "key_file.json"


@pytest.fixture(scope="module")
def server(key_file: Path, events_path: Path) -> Iterator[Server]:
    with run_server(
        SERVE_MODELS / "gated",
        args=("--auth", "--key-file", str(key_file)),
        env={"PODIUM_E2E_EVENTS": str(events_path)},
    ) as running:
        yield running


def keys(key_file: Path) -> dict[str, str]:
    data = json.loads(key_file.read_text())
    return {kind: entry["key"] for kind, entry in data.items()}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=PATIENCE) as c:
        yield c


@pytest.fixture
async def api(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.management_url, timeout=PATIENCE) as c:
        yield c


def test_the_key_file_is_owner_only_in_torchserves_shape(server: Server, key_file: Path) -> None:
    assert mode(key_file) == 0o600
    data = json.loads(key_file.read_text())
    assert set(data) == {"management", "inference", "API"}
    assert set(data["management"]) == {"key", "expiration time"}
    assert set(data["API"]) == {"key"}
    values = [entry["key"] for entry in data.values()]
    assert len(set(values)) == 3 and all(len(v) >= 32 for v in values)


@pytest.mark.anyio
async def test_inference_needs_the_inference_key_and_nothing_runs_without_it(
    client: httpx.AsyncClient, key_file: Path, events: EventLog, tag: str
) -> None:
    own = keys(key_file)
    for headers in (
        {},
        bearer("not-a-key"),
        bearer(own["management"]),  # keys are not interchangeable
        bearer(own["API"]),
        {"Authorization": own["inference"]},  # no scheme
    ):
        answer = await client.post("/predictions/gated", json={"tag": tag}, headers=headers)
        assert answer.status_code == 401, answer.text
        assert answer.headers["www-authenticate"].startswith("Bearer")
        assert "inference" in answer.json()["error"]
    assert events.of(tag) == []  # the model recorded nothing: no request reached it

    answer = await client.post(
        "/predictions/gated", json={"tag": tag}, headers=bearer(own["inference"])
    )
    assert answer.status_code == 200 and answer.json() == {"tag": tag}
    assert events.names(tag) == ["preprocess", "predict-start", "predict-end"]


@pytest.mark.anyio
async def test_health_checks_stay_open(client: httpx.AsyncClient) -> None:
    assert (await client.get("/ping")).status_code == 200
    assert (await client.get("/v2/health/ready")).status_code == 200
    assert (await client.get("/v2/health/live")).status_code == 200
    assert (await client.get("/v2")).status_code == 401  # metadata is not health


@pytest.mark.anyio
async def test_management_needs_the_management_key(api: httpx.AsyncClient, key_file: Path) -> None:
    own = keys(key_file)
    for headers in ({}, bearer(own["inference"]), bearer(own["API"]), bearer("x" * 43)):
        answer = await api.get("/models", headers=headers)
        assert answer.status_code == 401
        body = answer.json()
        assert body["code"] == 401 and body["type"] == "InvalidKeyException"
        assert "management" in body["message"]
    # Nothing of a refused registration runs.
    refused = await api.post("/models", params={"url": str(SERVE_MODELS / "emit")})
    assert refused.status_code == 401
    listed = await api.get("/models", headers=bearer(own["management"]))
    assert listed.status_code == 200
    assert [m["modelName"] for m in listed.json()["models"]] == ["gated"]


@pytest.mark.anyio
async def test_the_token_api_replaces_a_key_with_the_api_key_only(
    api: httpx.AsyncClient, client: httpx.AsyncClient, key_file: Path
) -> None:
    before = keys(key_file)
    refused = await api.post(
        "/token", params={"type": "inference"}, headers=bearer(before["management"])
    )
    assert refused.status_code == 401 and "API key" in refused.json()["message"]

    answer = await api.post("/token", params={"type": "inference"}, headers=bearer(before["API"]))
    assert answer.status_code == 200, answer.text
    after = keys(key_file)
    assert after["inference"] != before["inference"]
    assert after["management"] == before["management"] and after["API"] == before["API"]
    assert mode(key_file) == 0o600
    old = await client.get("/v2", headers=bearer(before["inference"]))
    assert old.status_code == 401
    new = await client.get("/v2", headers=bearer(after["inference"]))
    assert new.status_code == 200

    bad = await api.post("/token", params={"type": "root"}, headers=bearer(before["API"]))
    assert bad.status_code == 400 and "type" in bad.json()["message"]


@pytest.fixture(scope="module")
def ts(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return torchserve_management_stubs(tmp_path_factory.mktemp("auth-stubs"))


@pytest.mark.anyio
async def test_grpc_management_needs_the_management_key(
    server: Server, ts: SimpleNamespace, key_file: Path
) -> None:
    own = keys(key_file)
    async with grpc.aio.insecure_channel(server.grpc_management) as channel:
        stub: Any = ts.grpc.ManagementAPIsServiceStub(channel)
        for metadata in ((), (("authorization", f"Bearer {own['inference']}"),)):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.ListModels(ts.pb2.ListModelsRequest(), metadata=metadata)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "management" in (caught.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # nothing of it runs
            await stub.RegisterModel(ts.pb2.RegisterModelRequest(url=str(SERVE_MODELS / "emit")))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        reply = await stub.ListModels(
            ts.pb2.ListModelsRequest(),
            metadata=(("authorization", f"Bearer {own['management']}"),),
        )
        assert [m["modelName"] for m in json.loads(reply.msg)["models"]] == ["gated"]


@pytest.mark.anyio
async def test_a_401_names_the_key_file_but_not_where_it_is(
    server: Server, client: httpx.AsyncClient, api: httpx.AsyncClient, key_file: Path
) -> None:
    directory = str(key_file.parent)
    said = [
        (await client.post("/predictions/gated", json={})).json()["error"],
        (await api.get("/models")).json()["message"],
    ]
    async with grpc.aio.insecure_channel(server.grpc_management) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await channel.unary_unary(
                "/org.pytorch.serve.grpc.management.ManagementAPIsService/ListModels"
            )(b"")
        said.append(caught.value.details() or "")
    for message in said:
        assert "key_file.json" in message and directory not in message, message
    # The operator learns where it is from the server's own log.
    assert f"the keys are in {key_file}" in server.log


def test_the_key_file_is_removed_when_the_server_stops(tmp_path: Path) -> None:
    key_file = tmp_path / "key_file.json"
    with run_server(SERVE_MODELS / "gated", args=("--auth", "--key-file", str(key_file))):
        assert key_file.exists()
    assert not key_file.exists()


# -- the Authorizer's rules ---------------------------------------------------------------------


def test_unauthenticated_is_401_and_unauthenticated_in_the_one_table() -> None:
    error = Unauthenticated("no key")
    assert http_status(error) == 401 and grpc_code(error) == "UNAUTHENTICATED"


def test_check_metadata_for_the_grpc_inference_listener(tmp_path: Path) -> None:
    auth = Authorizer.create(tmp_path / "k.json")
    key = auth.key("inference")
    auth.check_metadata([("authorization", f"Bearer {key}")], "inference")
    auth.check_metadata([("x-other", "1"), ("Authorization", f"bearer {key}")], "inference")
    for metadata in (None, [], [("authorization", f"Bearer {auth.key('management')}")]):
        with pytest.raises(Unauthenticated):
            auth.check_metadata(metadata, "inference")


def test_keys_expire_when_asked_and_are_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = Authorizer.create(tmp_path / "k.json", expiration=1)  # one minute
    key = auth.key("management")
    auth.check_header(f"Bearer {key}", "management")
    data = json.loads((tmp_path / "k.json").read_text())
    assert data["management"]["expiration time"].endswith("Z")
    import podium.server._auth as module

    real = module.time.time
    monkeypatch.setattr(module.time, "time", lambda: real() + 61)
    with pytest.raises(Unauthenticated, match="expired"):
        auth.check_header(f"Bearer {key}", "management")
    auth.check_header(f"Bearer {auth.key('API')}", "API")  # the API key never expires
    auth.regenerate("management")
    auth.check_header(f"Bearer {auth.key('management')}", "management")
    with pytest.raises(ValueError):
        auth.regenerate("API")


@pytest.mark.anyio
async def test_a_websocket_without_the_key_is_closed_before_the_handshake(tmp_path: Path) -> None:
    authorizer = Authorizer.create(tmp_path / "key_file.json")
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])

    middleware = AuthMiddleware(app, authorizer, inference_rule, render_error)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    def scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
        return {"type": "websocket", "path": "/v1/websocket", "headers": list(headers)}

    await middleware(scope(), receive, send)
    assert sent == [{"type": "websocket.close", "code": 1008}] and reached == []
    key = authorizer.key("inference").encode()
    await middleware(scope((b"authorization", b"Bearer " + key)), receive, send)
    assert reached == ["/v1/websocket"] and len(sent) == 1
