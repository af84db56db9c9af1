"""The management REST API end to end: a real ``podium serve`` with a model store, called with
httpx as TorchServe's clients call it. Registration from a directory, a .py file and a model-store
file name; list with paging; describe; set-default; unregister while requests are in flight;
refused remote urls, unknown urls, conflicts and bad parameters, each answered in TorchServe's
error shape."""

from __future__ import annotations

import functools
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from conftest import TEST_MODELS, Server, run_server
from e2e_helpers import PATIENCE, SERVE_MODELS, EventLog, Gates
from helpers import wait_until

pytest_plugins = ["e2e_fixtures"]

MANAGEMENT_MODELS = TEST_MODELS / "management"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("model-store")
    shutil.copy(MANAGEMENT_MODELS / "store_echo.py", directory / "store_echo.py")
    return directory


@pytest.fixture(scope="module")
def server(store: Path, events_path: Path) -> Iterator[Server]:
    """Serves the versioned model and echo from the start; the rest comes through the API,
    from the test models' own directories (hence --allow-any-local-path: the rule it lifts has
    its own tests, in test_registration_limits.py)."""
    with run_server(
        SERVE_MODELS / "versioned",
        SERVE_MODELS / "tensors",
        args=("--model-store", str(store), "--allow-any-local-path"),
        env={"PODIUM_E2E_EVENTS": str(events_path)},
    ) as running:
        yield running


@pytest.fixture
async def api(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.management_url, timeout=PATIENCE) as c:
        yield c


@pytest.fixture
async def infer(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=PATIENCE) as c:
        yield c


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def error_of(response: httpx.Response, status: int, kind: str) -> str:
    """Check TorchServe's error shape; the message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == status and body["type"] == kind, body
    return body["message"]


# -- register ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_register_a_model_directory_then_it_serves(
    api: httpx.AsyncClient, infer: httpx.AsyncClient
) -> None:
    url = str(SERVE_MODELS / "emit")
    answer = await api.post("/models", params={"url": url, "model_name": "emit-dir"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": 'Model "emit-dir" registered with 1 initial workers'}
    result = await infer.post("/predictions/emit-dir", json={"kind": "number"})
    assert result.status_code == 200 and result.json() == 42

    (described,) = (await api.get("/models/emit-dir")).json()
    assert described["modelName"] == "emit-dir"
    assert described["modelUrl"] == url
    assert described["loadedAtStartup"] is False
    assert described["state"] == "ready"
    await api.delete("/models/emit-dir")


@pytest.mark.anyio
async def test_register_a_py_file_and_a_model_store_file_by_name(
    api: httpx.AsyncClient, infer: httpx.AsyncClient, store: Path
) -> None:
    by_path = await api.post(
        "/models", params={"url": str(store / "store_echo.py"), "model_name": "by-path"}
    )
    assert by_path.status_code == 200, by_path.text
    by_name = await api.post("/models", params={"url": "store_echo.py"})  # found in the store
    assert by_name.status_code == 200, by_name.text
    assert "store_echo" in by_name.json()["status"]  # named after the file, as any .py model
    for name in ("by-path", "store_echo"):
        result = await infer.post(f"/v1/models/{name}:predict", json={"a": 1})
        assert result.json() == {"echo": {"a": 1}}
    for name in ("by-path", "store_echo"):
        assert (await api.delete(f"/models/{name}")).status_code == 200


@pytest.mark.anyio
async def test_registration_parameters_override_the_config_and_a_json_body_works(
    api: httpx.AsyncClient,
) -> None:
    body = {
        "url": str(SERVE_MODELS / "batcher"),
        "model_name": "json-batcher",
        "batch_size": 4,
        "max_batch_delay": 7,
        "response_timeout": 30,
        "initial_workers": 1,
        "synchronous": True,
    }
    answer = await api.post("/models", json=body)
    assert answer.status_code == 200, answer.text
    (described,) = (await api.get("/models/json-batcher")).json()
    assert described["batchSize"] == 4
    assert described["maxBatchDelay"] == 7
    assert type(described["maxBatchDelay"]) is int  # TorchServe's integer, not 7.0
    assert described["responseTimeout"] == 30
    assert type(described["responseTimeout"]) is int
    assert described["minWorkers"] == 1
    await api.delete("/models/json-batcher")


@pytest.mark.anyio
async def test_asynchronous_registration_answers_202_and_loads_in_the_background(
    api: httpx.AsyncClient, infer: httpx.AsyncClient
) -> None:
    answer = await api.post(
        "/models",
        params={"url": str(SERVE_MODELS / "emit"), "model_name": "later", "synchronous": "false"},
    )
    assert answer.status_code == 202
    assert answer.json() == {"status": "Processing worker updates..."}

    async def ready() -> bool:
        return (await api.get("/models/later")).json()[0]["state"] == "ready"

    await wait_until(ready, PATIENCE, every=0.01)
    assert (await infer.post("/predictions/later", json={"kind": "str"})).text == "héllo wörld"
    await api.delete("/models/later")


@pytest.mark.anyio
async def test_a_model_that_fails_to_load_is_not_left_registered(api: httpx.AsyncClient) -> None:
    answer = await api.post(
        "/models", params={"url": str(MANAGEMENT_MODELS / "fails-load"), "model_name": "fails"}
    )
    message = error_of(answer, 500, "InternalServerException")
    assert "the weights file is missing" in message
    assert (await api.get("/models/fails")).status_code == 404


@pytest.mark.anyio
async def test_a_model_that_breaks_the_contract_is_a_bad_request(api: httpx.AsyncClient) -> None:
    answer = await api.post("/models", params={"url": str(MANAGEMENT_MODELS / "broken")})
    message = error_of(answer, 400, "BadRequestException")
    assert "predict" in message
    assert (await api.get("/models/broken")).status_code == 404


@pytest.mark.anyio
async def test_a_url_holding_several_models_is_refused(api: httpx.AsyncClient) -> None:
    answer = await api.post("/models", params={"url": str(MANAGEMENT_MODELS / "two-models")})
    assert "alpha, beta" in error_of(answer, 400, "BadRequestException")
    assert (await api.get("/models/alpha")).status_code == 404


@pytest.mark.anyio
async def test_registering_a_registered_version_is_a_conflict(api: httpx.AsyncClient) -> None:
    answer = await api.post("/models", params={"url": str(SERVE_MODELS / "versioned")})
    message = error_of(answer, 409, "ConflictStatusException")
    assert "model 'versioned'" in message and "already registered" in message
    # The versions served before are untouched.
    assert len((await api.get("/models/versioned/all")).json()) == 3


@pytest.mark.anyio
async def test_a_remote_url_is_refused_and_nothing_is_fetched(
    api: httpx.AsyncClient, store: Path
) -> None:
    before = listing(store)
    for url in ("http://169.254.169.254/latest/meta-data/x.mar", "s3://bucket/model.mar"):
        answer = await api.post("/models", params={"url": url})
        message = error_of(answer, 400, "BadRequestException")
        assert "--allowed-urls" in message and url in message
    assert listing(store) == before


@pytest.mark.anyio
async def test_a_url_that_names_nothing_is_not_found(api: httpx.AsyncClient, store: Path) -> None:
    answer = await api.post("/models", params={"url": "no-such-model.mar"})
    message = error_of(answer, 404, "ModelNotFoundException")
    assert "no-such-model.mar" in message and str(store) in message


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({}, "url is required"),
        ({"url": "store_echo.py", "batch_size": "0"}, "batch_size"),
        ({"url": "store_echo.py", "batch_size": "many"}, "batch_size"),
        ({"url": "store_echo.py", "max_batch_delay": "-1"}, "max_batch_delay"),
        ({"url": "store_echo.py", "initial_workers": "-2"}, "initial_workers"),
        ({"url": "store_echo.py", "synchronous": "maybe"}, "synchronous"),
        ({"url": "store_echo.py", "handler": "my_handler:handle"}, "handler"),
        ({"url": "store_echo.py", "runtime": "java"}, "runtime"),
        ({"url": "store_echo.py", "batchsize": "2"}, "batchsize"),
        ({"url": "store_echo.py", "model_name": "a/b"}, "model_name"),
    ],
)
@pytest.mark.anyio
async def test_bad_registration_parameters_are_named(
    api: httpx.AsyncClient, params: dict[str, str], named: str
) -> None:
    answer = await api.post("/models", params=params)
    assert named in error_of(answer, 400, "BadRequestException")
    assert (await api.get("/models/store_echo")).status_code == 404


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b'{"url": "store_\xffecho.py"}', "invalid UTF-8: byte 0xff at offset 15"),
        (rb'{"url": "store_echo.py", "model_name": "\udfff"}', r"surrogate escape '\udfff'"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
async def test_a_registration_body_that_is_not_json_is_a_bad_request(
    api: httpx.AsyncClient, server: Server, body: bytes, named: str
) -> None:
    logged = len(server.lines)
    answer = await api.post("/models", content=body, headers={"content-type": "application/json"})
    message = error_of(answer, 400, "BadRequestException")
    assert message.startswith("the body is not valid JSON: ") and named in message
    assert "Traceback" not in "\n".join(server.lines[logged:])  # a 4xx logs no traceback
    assert (await api.get("/models/store_echo")).status_code == 404


# -- list, describe, set-default --------------------------------------------------------------


@pytest.mark.anyio
async def test_list_in_pages(api: httpx.AsyncClient) -> None:
    for name in ("page-a", "page-b", "page-c"):
        answer = await api.post("/models", params={"url": "store_echo.py", "model_name": name})
        assert answer.status_code == 200, answer.text
    try:
        everything = (await api.get("/models")).json()
        assert "nextPageToken" not in everything
        names = [m["modelName"] for m in everything["models"]]
        assert names == sorted(names)
        assert {"page-a", "page-b", "page-c", "versioned", "tensors"} <= set(names)

        seen, token = [], None
        while True:
            params = {"limit": "2"} if token is None else {"limit": "2", "next_page_token": token}
            page = (await api.get("/models", params=params)).json()
            assert len(page["models"]) <= 2
            seen += [m["modelName"] for m in page["models"]]
            token = page.get("nextPageToken")
            if token is None:
                break
        assert seen == names
        by_name = {m["modelName"]: m["modelUrl"] for m in everything["models"]}
        assert by_name["page-a"] == "store_echo.py"
        bad = await api.get("/models", params={"limit": "ten"})
        assert "limit" in error_of(bad, 400, "BadRequestException")
    finally:
        for name in ("page-a", "page-b", "page-c"):
            await api.delete(f"/models/{name}")


@pytest.mark.anyio
async def test_describe_in_torchserves_shape_with_podiums_additions(api: httpx.AsyncClient) -> None:
    (one,) = (await api.get("/models/versioned")).json()
    for key in (
        "modelName",
        "modelVersion",
        "modelUrl",
        "runtime",
        "minWorkers",
        "maxWorkers",
        "batchSize",
        "maxBatchDelay",
        "loadedAtStartup",
        "workers",
    ):
        assert key in one, key
    assert one["modelVersion"] == "10"  # the default: the highest version
    assert one["loadedAtStartup"] is True and one["default"] is True
    assert one["state"] == "ready" and isinstance(one["queue"], dict)
    (worker,) = one["workers"][:1]
    assert {"id", "startTime", "status", "pid", "gpu"} <= set(worker)
    assert worker["status"] == "READY" and worker["startTime"].endswith("Z")

    versions = (await api.get("/models/versioned/all")).json()
    assert [v["modelVersion"] for v in versions] == ["1", "2", "10"]
    (two,) = (await api.get("/models/versioned/2")).json()
    assert two["modelVersion"] == "2" and two["default"] is False

    missing = await api.get("/models/versioned/7")
    # TorchServe tells an unknown version from an unknown model (issue 12, item 19)
    assert "version 7 is not found" in error_of(missing, 404, "ModelVersionNotFoundException")
    unknown = await api.get("/models/nobody")
    assert "nobody" in error_of(unknown, 404, "ModelNotFoundException")


@pytest.mark.anyio
async def test_set_default_changes_what_unversioned_routes_reach(
    api: httpx.AsyncClient, infer: httpx.AsyncClient
) -> None:
    async def reached() -> str:
        answer = await infer.post("/predictions/versioned", json={"x": [1.0]})
        return answer.json()["version"]

    assert await reached() == "10"
    answer = await api.put("/models/versioned/2/set-default")
    assert answer.status_code == 200
    assert answer.json() == {
        "status": 'Default version successfully updated for model "versioned" to "2"'
    }
    try:
        assert await reached() == "2"
        (described,) = (await api.get("/models/versioned")).json()
        assert described["modelVersion"] == "2"
        missing = await api.put("/models/versioned/9/set-default")
        error_of(missing, 404, "ModelVersionNotFoundException")
        assert await reached() == "2"
    finally:
        await api.put("/models/versioned/10/set-default")


@pytest.mark.anyio
async def test_an_unversioned_model_is_managed_as_version_1(api: httpx.AsyncClient) -> None:
    (described,) = (await api.get("/models/tensors/1")).json()
    assert described["modelName"] == "tensors" and described["default"] is True
    answer = await api.put("/models/tensors/1/set-default")
    assert answer.status_code == 200, answer.text
    assert (await api.get("/models/tensors")).json()[0]["default"] is True
    missing = await api.get("/models/tensors/2")
    assert "version 2 is not found" in error_of(missing, 404, "ModelVersionNotFoundException")


# -- unregister -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_unregister_lets_requests_in_flight_finish_and_refuses_new_ones(
    api: httpx.AsyncClient, infer: httpx.AsyncClient, events: EventLog, gates: Gates, tag: str
) -> None:
    answer = await api.post(
        "/models", params={"url": str(SERVE_MODELS / "gated"), "model_name": "leaving"}
    )
    assert answer.status_code == 200, answer.text
    gate = gates.new()
    results: dict[str, httpx.Response] = {}

    async def held() -> None:
        results["held"] = await infer.post("/predictions/leaving", json={"tag": tag, "gate": gate})

    async def unregister() -> None:
        results["delete"] = await api.delete("/models/leaving")

    async with anyio.create_task_group() as tg:
        tg.start_soon(held)
        await events.wait_for(tag, "predict-start")
        tg.start_soon(unregister)

        async def gone() -> bool:  # for new requests the model is gone at once
            return (await api.get("/models/leaving")).status_code == 404

        await wait_until(gone, PATIENCE, every=0.01)
        late = await infer.post("/predictions/leaving", json={"tag": tag + "-late"})
        assert late.status_code == 404
        assert "delete" not in results  # the unregister waits for the request it holds
        Gates.open(gate)
    assert results["held"].status_code == 200 and results["held"].json() == {"tag": tag}
    assert results["delete"].json() == {"status": 'Model "leaving" unregistered'}
    assert events.names(tag + "-late") == []  # the late request never reached the model


@pytest.mark.anyio
async def test_unregister_one_version_then_the_model(api: httpx.AsyncClient) -> None:
    url = str(SERVE_MODELS / "versioned")
    answer = await api.post("/models", params={"url": url, "model_name": "v-copy"})
    assert answer.status_code == 200, answer.text
    assert (await api.delete("/models/v-copy/10")).status_code == 200
    versions = [v["modelVersion"] for v in (await api.get("/models/v-copy/all")).json()]
    assert versions == ["1", "2"]
    assert (await api.get("/models/v-copy")).json()[0]["modelVersion"] == "2"
    assert (await api.delete("/models/v-copy")).status_code == 200
    gone = await api.delete("/models/v-copy")
    error_of(gone, 404, "ModelNotFoundException")


# -- scale ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_scale_up_and_down_synchronously(api: httpx.AsyncClient) -> None:
    answer = await api.post("/models", params={"url": "store_echo.py", "model_name": "scaled"})
    assert answer.status_code == 200, answer.text
    try:
        up = await api.put("/models/scaled", params={"min_worker": "3", "synchronous": "true"})
        assert up.status_code == 200, up.text
        assert up.json() == {"status": "Workers scaled to 3 for model: scaled"}
        (described,) = (await api.get("/models/scaled")).json()
        assert described["minWorkers"] == 3 and len(described["workers"]) == 3
        down = await api.put(
            "/models/scaled", params={"min_worker": "1", "max_worker": "2", "synchronous": "true"}
        )
        assert down.status_code == 200, down.text
        (described,) = (await api.get("/models/scaled")).json()
        assert (described["minWorkers"], described["maxWorkers"]) == (1, 2)
        assert len(described["workers"]) == 1
    finally:
        await api.delete("/models/scaled")


@pytest.mark.anyio
async def test_scale_asynchronously_answers_202(api: httpx.AsyncClient) -> None:
    answer = await api.put("/models/tensors", params={"min_worker": "2"})
    assert answer.status_code == 202
    assert answer.json() == {"status": "Processing worker updates..."}

    async def two() -> bool:
        return len((await api.get("/models/tensors")).json()[0]["workers"]) == 2

    await wait_until(two, PATIENCE, every=0.01)
    await api.put("/models/tensors", params={"min_worker": "1", "synchronous": "true"})


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"min_worker": "3", "max_worker": "2"}, "max_worker cannot be less than min_worker"),
        ({"min_worker": "-1"}, "min_worker"),
        ({"min_worker": "x"}, "min_worker"),
        ({"workers": "2"}, "workers"),
    ],
)
@pytest.mark.anyio
async def test_bad_scale_parameters_are_named(
    api: httpx.AsyncClient, params: dict[str, str], named: str
) -> None:
    answer = await api.put("/models/tensors", params=params)
    assert named in error_of(answer, 400, "BadRequestException")


@pytest.mark.anyio
async def test_scale_of_an_unknown_model_is_not_found(api: httpx.AsyncClient) -> None:
    answer = await api.put("/models/nobody", params={"min_worker": "2"})
    error_of(answer, 404, "ModelNotFoundException")


# -- routes -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_unknown_routes_and_methods(api: httpx.AsyncClient) -> None:
    error_of(await api.get("/nothing"), 404, "ResourceNotFoundException")
    error_of(await api.get("/models/versioned/2/set-default"), 405, "MethodNotAllowedException")
    error_of(await api.patch("/models"), 405, "MethodNotAllowedException")
    # With --auth off there is no token API.
    error_of(
        await api.post("/token", params={"type": "management"}), 404, "ResourceNotFoundException"
    )


@pytest.mark.anyio
async def test_the_api_description(api: httpx.AsyncClient) -> None:
    answer = await api.request("OPTIONS", "/")
    assert answer.status_code == 200
    document = answer.json()
    assert document["openapi"].startswith("3.")
    assert {"/models", "/models/{model_name}", "/models/{model_name}/{model_version}"} <= set(
        document["paths"]
    )


@pytest.mark.anyio
async def test_register_a_mar_built_by_podium_archive(
    api: httpx.AsyncClient, infer: httpx.AsyncClient, tmp_path: Path
) -> None:
    """A TorchServe archive (built as `podium archive` builds it), as a TorchServe user
    registers it, then served on /predictions."""
    from podium.model.torchserve import archive_model

    handler = TEST_MODELS / "torchserve" / "module-style" / "handler.py"
    mar = archive_model(
        model_name="ts-registered", version="2.0", handler=handler, export_path=tmp_path
    )
    answer = await api.post("/models", params={"url": str(mar), "initial_workers": "2"})
    assert answer.status_code == 200, answer.text
    try:
        result = await infer.post("/predictions/ts-registered", content=b"raw bytes")
        assert result.status_code == 200, result.text
        (described,) = (await api.get("/models/ts-registered")).json()
        assert described["modelVersion"] == "2.0" and len(described["workers"]) == 2
    finally:
        assert (await api.delete("/models/ts-registered")).status_code == 200


@pytest.mark.anyio
async def test_scaling_up_and_down_under_load_fails_no_request(
    api: httpx.AsyncClient, infer: httpx.AsyncClient
) -> None:
    answer = await api.post("/models", params={"url": "store_echo.py", "model_name": "loaded"})
    assert answer.status_code == 200, answer.text
    statuses: list[int] = []
    stop = anyio.Event()

    async def client() -> None:
        while not stop.is_set():
            r = await infer.post("/v1/models/loaded:predict", json={"a": 1})
            statuses.append(r.status_code)

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(client)
            for workers in ("4", "1", "3", "1"):
                scaled = await api.put(
                    "/models/loaded", params={"min_worker": workers, "synchronous": "true"}
                )
                assert scaled.status_code == 200, scaled.text
                before = len(statuses)
                await wait_until(functools.partial(_more, statuses, before), PATIENCE, every=0.01)
            stop.set()
        assert statuses and set(statuses) == {200}, sorted(set(statuses))
        (described,) = (await api.get("/models/loaded")).json()
        assert len(described["workers"]) == 1
    finally:
        await api.delete("/models/loaded")


async def _more(statuses: list[int], before: int) -> bool:
    """Requests keep being answered after a scale (at least ten more)."""
    return len(statuses) >= before + 10


@pytest.mark.anyio
async def test_all_names_no_version_to_scale_or_unregister(api: httpx.AsyncClient) -> None:
    """Only describe reads ``all`` (every version); scale and unregister need one named."""
    for method, path in (("DELETE", "/models/versioned/all"), ("PUT", "/models/versioned/all")):
        r = await api.request(method, path)
        assert "'all' names no version" in error_of(r, 400, "BadRequestException")
    assert [v["modelVersion"] for v in (await api.get("/models/versioned/all")).json()] == [
        "1",
        "2",
        "10",
    ]
