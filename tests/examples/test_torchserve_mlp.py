"""examples/torchserve-mlp: two archives built by the real torch-model-archiver 0.12.0 (an eager
``iris_mlp.py`` + state dict, and TorchScript), served through TorchServe's ``BaseHandler``
default flow, once with Podium's ``ts`` and once with the real ``torchserve`` package installed
(its ``ts`` modules then run with Podium's ``Context``). The answers equal the model run
directly; the handler's ``context.metrics`` and ``self.context.system_properties`` calls run."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from conftest import Server
from example_kit import Built, need
from tabular import iris_rows

pytest_plugins = ["example_fixtures"]
pytestmark = pytest.mark.timeout(900)  # the first test builds the examples (and the peers' venv)

ARCHIVES = ["iris-mlp", "iris-mlp-ts"]
LABELS = ["setosa", "versicolor", "virginica"]


@pytest.fixture(scope="module")
def unpacked(built: Built, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each archive extracted, to read its manifest and run its files directly."""
    out = {}
    for name in ARCHIVES:
        target = tmp_path_factory.mktemp(name)
        with zipfile.ZipFile(built.model_store / f"{name}.mar") as archive:
            archive.extractall(target)
        out[name] = target
    return out


@pytest.fixture(scope="module")
def expected(unpacked: dict[str, Path]) -> np.ndarray:
    """The class probabilities of every iris row, from the eager model built from the archive's
    own ``iris_mlp.py`` and state dict (not through any handler)."""
    torch = need("torch")
    folder = unpacked["iris-mlp"]
    spec = importlib.util.spec_from_file_location("iris_mlp_direct", folder / "iris_mlp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.IrisMLP()
    model.load_state_dict(torch.load(folder / "iris_mlp.pt", map_location="cpu"))
    with torch.inference_mode():
        direct: np.ndarray = model.eval()(torch.as_tensor(iris_rows(), dtype=torch.float32)).numpy()
    with warnings.catch_warnings():  # deprecated in torch 2.x, yet what TorchServe loads
        warnings.filterwarnings("ignore", "`torch.jit.load` is deprecated")
        scripted = torch.jit.load(str(unpacked["iris-mlp-ts"] / "iris_mlp_ts.pt"))
    with torch.inference_mode():
        same = scripted(torch.as_tensor(iris_rows(), dtype=torch.float32)).numpy()
    np.testing.assert_allclose(same, direct, rtol=1e-6, atol=1e-7)  # the two archives agree
    return direct


def assert_answer(answer: Any, expected: np.ndarray) -> None:
    # float32 on both sides; another batch composition may change the last bits of a matmul
    np.testing.assert_allclose(np.asarray(answer["probabilities"]), expected, rtol=1e-5, atol=1e-7)
    assert answer["labels"] == [LABELS[i] for i in expected.argmax(axis=1)]


def test_the_archives_are_torch_model_archivers(unpacked: dict[str, Path]) -> None:
    eager = json.loads((unpacked["iris-mlp"] / "MAR-INF" / "MANIFEST.json").read_text())
    scripted = json.loads((unpacked["iris-mlp-ts"] / "MAR-INF" / "MANIFEST.json").read_text())
    assert eager["archiverVersion"] == scripted["archiverVersion"] == "0.12.0"
    assert eager["model"]["modelFile"] == "iris_mlp.py"
    assert eager["model"]["serializedFile"] == "iris_mlp.pt"
    assert "modelFile" not in scripted["model"]
    assert scripted["model"]["serializedFile"] == "iris_mlp_ts.pt"


@pytest.mark.parametrize("name", ARCHIVES)
def test_predictions_equal_the_model_run_directly(
    server: Server, expected: np.ndarray, name: str
) -> None:
    rows = iris_rows()
    answer = httpx.post(f"{server.url}/predictions/{name}", json={"instances": rows.tolist()})
    assert answer.status_code == 200, answer.text
    assert_answer(answer.json(), expected)
    bare = httpx.post(f"{server.url}/predictions/{name}", json=rows[:3].tolist())  # rows alone
    assert bare.status_code == 200, bare.text
    assert_answer(bare.json(), expected[:3])


@pytest.mark.parametrize("name", ARCHIVES)
@pytest.mark.anyio
async def test_batched_requests_each_get_their_own_rows(
    server: Server, expected: np.ndarray, name: str
) -> None:
    # 30 clients at once (the archive's batchSize is 8): BaseHandler runs one tensor per batch,
    # the handler's postprocess splits it back per request.
    rows = iris_rows()
    starts = list(range(0, 150, 5))

    async def call(client: httpx.AsyncClient, start: int) -> None:
        count = 1 + start % 4
        chunk = rows[start : start + count]
        answer = await client.post(f"/predictions/{name}", json={"instances": chunk.tolist()})
        assert answer.status_code == 200, answer.text
        assert_answer(answer.json(), expected[start : start + count])

    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        await asyncio.gather(*(call(client, start) for start in starts))


def test_the_model_config_reaches_the_handler(server: Server) -> None:
    # model-config.yaml's batchSize / maxBatchDelay, which the handler reads back through
    # self.context.system_properties["batch_size"]
    answer = httpx.get(f"{server.management_url}/models/iris-mlp")
    assert answer.status_code == 200, answer.text
    described = answer.json()[0]
    assert described["batchSize"] == 8 and described["maxBatchDelay"] == 5


def test_the_handlers_metrics_reach_prometheus(server: Server) -> None:
    # context.metrics is Podium's also where the real ts is installed: the handler's own
    # metrics and BaseHandler's HandlerTime are on /metrics, labelled as TorchServe labels them
    answer = httpx.post(f"{server.url}/predictions/iris-mlp", json=iris_rows()[:4].tolist())
    assert answer.status_code == 200, answer.text
    text = httpx.get(server.addresses["http-metrics"] + "/metrics").text
    series = [line for line in text.splitlines() if 'model="iris-mlp"' in line]
    # (counters get Prometheus' _total suffix; the others are gauges)
    for name in ("IrisRequests_total", "IrisPayloadRows", "IrisBatchFill", "IrisRows_total"):
        assert any(line.startswith(name + "{") for line in series), (name, series)
    assert any(line.startswith("HandlerTime{") for line in series), series
    rows = next(line for line in series if line.startswith("IrisRows_total{"))
    assert 'ModelName="iris-mlp"' in rows and 'Level="Model"' in rows


class Recorder:
    """TorchServe's metrics cache API, recording each call (``add_counter``, ``add_time``, ...)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def __getattr__(self, method: str) -> Any:
        def record(name: str, value: Any, *args: Any, **kwargs: Any) -> None:
            self.calls.append((method, name, value))

        return record


def test_the_handler_records_metrics_and_reads_system_properties(
    unpacked: dict[str, Path], expected: np.ndarray
) -> None:
    # The handler run in this process as Podium runs it (Podium's ts, Podium's Context), with a
    # metrics object that records: BaseHandler's HandlerTime and the handler's own metrics.
    need("torch")
    from podium.model.torchserve import Context, install_ts_shim

    assert install_ts_shim()  # the real ts is not installed in the development venv
    folder = unpacked["iris-mlp"]
    manifest = json.loads((folder / "MAR-INF" / "MANIFEST.json").read_text())
    metrics = Recorder()
    context = Context("iris-mlp", str(folder), manifest, 4, None, "test", metrics=metrics)
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location("iris_handler_direct", folder / "handler.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        handler = module.IrisHandler()
        handler.initialize(context)
    finally:
        sys.path.remove(str(folder))
    rows = iris_rows()
    data = [
        {"body": {"instances": rows[:2].tolist()}},
        {"data": json.dumps(rows[2:3].tolist()).encode()},
    ]
    first, second = handler.handle(data, context)
    assert_answer(first, expected[:2])
    assert_answer(second, expected[2:3])
    recorded = {(method, name): value for method, name, value in metrics.calls}
    assert recorded[("add_counter", "IrisRequests")] == 2
    assert recorded[("add_size", "IrisPayloadRows")] == 3
    assert recorded[("add_percent", "IrisBatchFill")] == 50.0  # 2 requests of batch_size 4
    assert recorded[("add_metric", "IrisRows")] == 3
    assert ("add_time", "HandlerTime") in recorded
