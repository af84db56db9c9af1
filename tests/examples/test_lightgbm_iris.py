"""examples/lightgbm-iris: a LightGBM booster served by MLServer's own ``mlserver_lightgbm``
runtime, unmodified, with and without MLServer installed; every route answers what the
booster's own ``predict`` gives on the same rows."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest
from conftest import Server
from example_kit import Built, need
from tabular import assert_same_probabilities, iris_rows, oip_body, outputs

pytest_plugins = ["example_fixtures"]
pytestmark = pytest.mark.timeout(900)  # the first test builds the examples (and the peers' venv)

MODEL = "lightgbm-iris"


@pytest.fixture(scope="module")
def booster(built: Built) -> Any:
    """The saved booster, loaded here, to compare with."""
    return need("lightgbm").Booster(model_file=str(built.booster_file))


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return iris_rows()


def test_oip_rest(server: Server, booster: Any, rows: np.ndarray) -> None:
    answer = httpx.post(f"{server.url}/v2/models/{MODEL}/infer", json=oip_body(rows, "x"))
    assert answer.status_code == 200, answer.text
    got = outputs(answer.json())
    assert list(got) == ["predict"] and got["predict"].shape == (150, 3)
    assert_same_probabilities(got["predict"], booster.predict(rows))
    assert got["predict"].argmax(axis=1).tolist() == booster.predict(rows).argmax(axis=1).tolist()


def test_grpc_with_tritonclient(server: Server, booster: Any, rows: np.ndarray) -> None:
    grpcclient = need("tritonclient.grpc", "tritonclient[grpc]")
    client = grpcclient.InferenceServerClient(server.addresses["grpc-inference"])
    tensor = grpcclient.InferInput("x", list(rows[:40].shape), "FP64")
    tensor.set_data_from_numpy(rows[:40])
    result = client.infer(MODEL, [tensor])
    assert_same_probabilities(result.as_numpy("predict"), booster.predict(rows[:40]))
    client.close()


@pytest.mark.parametrize("path", [f"/v1/models/{MODEL}:predict", f"/predictions/{MODEL}"])
def test_truss_and_torchserve_routes(
    server: Server, booster: Any, rows: np.ndarray, path: str
) -> None:
    # an MLServer runtime takes an OIP request on every route (docs/mlserver.md)
    answer = httpx.post(server.url + path, json=oip_body(rows[::10], "x"))
    assert answer.status_code == 200, answer.text
    assert_same_probabilities(outputs(answer.json())["predict"], booster.predict(rows[::10]))


def test_metadata_names_the_version_of_model_settings(server: Server) -> None:
    answer = httpx.get(f"{server.url}/v2/models/{MODEL}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["name"] == MODEL and answer.json()["versions"] == ["1"]
