"""examples/sklearn-iris and examples/sklearn-iris-mlserver: a scikit-learn pipeline saved with
joblib, served natively with dynamic batching and by MLServer's own ``mlserver_sklearn``
runtime, unmodified, with and without MLServer installed. Every route answers what the
pipeline's own ``predict`` / ``predict_proba`` give on the same rows."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import httpx
import numpy as np
import pytest
from conftest import Server
from example_kit import Built, need
from tabular import assert_same_probabilities, iris_rows, oip_body, outputs, records

pytest_plugins = ["example_fixtures"]
pytestmark = pytest.mark.timeout(900)  # the first test builds the examples (and the peers' venv)

NATIVE = "sklearn-iris"
RUNTIME = "sklearn-iris-mlserver"
BOTH = [{"name": "predict"}, {"name": "predict_proba"}]


@pytest.fixture(scope="module")
def pipeline(built: Built) -> Any:
    """The saved pipeline, loaded here, to compare with."""
    return need("joblib").load(built.joblib_file)


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return iris_rows()


# -- the native model -------------------------------------------------------------------------


def test_native_oip_rest_gives_predict_and_predict_proba(
    podium_server: Server, pipeline: Any, rows: np.ndarray
) -> None:
    answer = httpx.post(f"{podium_server.url}/v2/models/{NATIVE}/infer", json=oip_body(rows))
    assert answer.status_code == 200, answer.text
    got = outputs(answer.json())
    assert got["predict"].tolist() == pipeline.predict(rows).tolist()
    assert got["predict"].dtype == np.int64 and got["predict"].shape == (150,)
    assert_same_probabilities(got["predict_proba"], pipeline.predict_proba(rows))


def test_native_grpc_with_tritonclient(
    podium_server: Server, pipeline: Any, rows: np.ndarray
) -> None:
    grpcclient = need("tritonclient.grpc", "tritonclient[grpc]")
    client = grpcclient.InferenceServerClient(podium_server.addresses["grpc-inference"])
    tensor = grpcclient.InferInput("features", list(rows.shape), "FP64")
    tensor.set_data_from_numpy(rows)
    result = client.infer(NATIVE, [tensor])
    assert result.as_numpy("predict").tolist() == pipeline.predict(rows).tolist()
    assert_same_probabilities(result.as_numpy("predict_proba"), pipeline.predict_proba(rows))
    client.close()


@pytest.mark.parametrize("route", ["truss", "torchserve"])
def test_native_json_records(
    podium_server: Server, pipeline: Any, rows: np.ndarray, route: str
) -> None:
    path = f"/v1/models/{NATIVE}:predict" if route == "truss" else f"/predictions/{NATIVE}"
    answer = httpx.post(podium_server.url + path, json=records(rows[::7]))
    assert answer.status_code == 200, answer.text
    assert answer.json()["predict"] == pipeline.predict(rows[::7]).tolist()
    assert_same_probabilities(answer.json()["predict_proba"], pipeline.predict_proba(rows[::7]))
    one = httpx.post(podium_server.url + path, json=records(rows[:1])[0])  # a record alone
    assert one.json()["predict"] == pipeline.predict(rows[:1]).tolist()


@pytest.mark.anyio
async def test_native_concurrent_requests_each_get_their_own_rows(
    podium_server: Server, pipeline: Any, rows: np.ndarray
) -> None:
    # 50 clients at once, each with 1 to 5 rows, by OIP and by Truss records: the batches mix
    # them, and every client gets exactly its rows' answers back.
    chunks = [rows[i : i + 1 + i % 5] for i in range(0, 150, 3)]

    async def call(client: httpx.AsyncClient, index: int, chunk: np.ndarray) -> None:
        if index % 2:
            answer = await client.post(f"/v2/models/{NATIVE}/infer", json=oip_body(chunk))
            got = outputs(answer.json())
        else:
            answer = await client.post(f"/v1/models/{NATIVE}:predict", json=records(chunk))
            got = {k: np.asarray(v) for k, v in answer.json().items()}
        assert answer.status_code == 200, answer.text
        assert got["predict"].tolist() == pipeline.predict(chunk).tolist()
        assert_same_probabilities(got["predict_proba"], pipeline.predict_proba(chunk))

    async with httpx.AsyncClient(base_url=podium_server.url, timeout=60) as client:
        await asyncio.gather(*(call(client, i, c) for i, c in enumerate(chunks)))


def test_native_refuses_what_is_not_iris_rows(podium_server: Server) -> None:
    missing = httpx.post(
        f"{podium_server.url}/v1/models/{NATIVE}:predict", json=[{"sepal_length": 5.1}]
    )
    assert missing.status_code == 400 and "sepal_width" in missing.json()["error"]
    narrow = oip_body(np.ones((2, 3)))
    answer = httpx.post(f"{podium_server.url}/v2/models/{NATIVE}/infer", json=narrow)
    assert answer.status_code == 400 and "features" in answer.json()["error"]
    fp32 = oip_body(np.ones((1, 4)))
    fp32["inputs"][0]["datatype"] = "FP32"
    answer = httpx.post(f"{podium_server.url}/v2/models/{NATIVE}/infer", json=fp32)
    assert answer.status_code == 400 and "FP64" in answer.json()["error"]


def test_native_predict_scores_a_batch_in_one_call_of_each_method(
    built: Built, pipeline: Any, rows: np.ndarray
) -> None:
    spec = importlib.util.spec_from_file_location("sklearn_iris_model", built.sklearn / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.Model(data_dir=built.sklearn / "data")
    model.load()
    calls: list[int] = []
    real = model._pipeline

    class Spy:
        def predict(self, x: np.ndarray) -> np.ndarray:
            calls.append(len(x))
            return real.predict(x)

        def predict_proba(self, x: np.ndarray) -> np.ndarray:
            calls.append(len(x))
            return real.predict_proba(x)

    model._pipeline = Spy()
    batch = [
        model.preprocess({"features": rows[:3]}),
        model.preprocess(records(rows[50:52])),
        model.preprocess(records(rows[100:101])[0]),
    ]
    answers = model.predict(batch)
    assert calls == [6, 6]
    for answer, chunk in zip(answers, [rows[:3], rows[50:52], rows[100:101]], strict=True):
        assert answer["predict"].tolist() == pipeline.predict(chunk).tolist()
        assert_same_probabilities(answer["predict_proba"], pipeline.predict_proba(chunk))


# -- MLServer's own runtime, mlserver_sklearn.SKLearnModel ------------------------------------


def test_runtime_oip_rest(server: Server, pipeline: Any, rows: np.ndarray) -> None:
    answer = httpx.post(f"{server.url}/v2/models/{RUNTIME}/infer", json=oip_body(rows, "x"))
    assert answer.status_code == 200, answer.text
    got = outputs(answer.json())
    assert list(got) == ["predict"]  # the runtime's default output
    assert got["predict"].ravel().tolist() == pipeline.predict(rows).tolist()
    both = httpx.post(
        f"{server.url}/v2/models/{RUNTIME}/infer", json=oip_body(rows, "x", outputs=BOTH)
    )
    got = outputs(both.json())
    assert got["predict"].ravel().tolist() == pipeline.predict(rows).tolist()
    assert_same_probabilities(got["predict_proba"], pipeline.predict_proba(rows))


def test_runtime_grpc_with_tritonclient(server: Server, pipeline: Any, rows: np.ndarray) -> None:
    grpcclient = need("tritonclient.grpc", "tritonclient[grpc]")
    client = grpcclient.InferenceServerClient(server.addresses["grpc-inference"])
    tensor = grpcclient.InferInput("x", list(rows.shape), "FP64")
    tensor.set_data_from_numpy(rows)
    wanted = [grpcclient.InferRequestedOutput(o["name"]) for o in BOTH]
    result = client.infer(RUNTIME, [tensor], outputs=wanted)
    assert result.as_numpy("predict").ravel().tolist() == pipeline.predict(rows).tolist()
    assert_same_probabilities(result.as_numpy("predict_proba"), pipeline.predict_proba(rows))
    client.close()


def test_runtime_over_the_truss_route(server: Server, pipeline: Any, rows: np.ndarray) -> None:
    answer = httpx.post(
        f"{server.url}/v1/models/{RUNTIME}:predict", json=oip_body(rows[:10], "x", outputs=BOTH)
    )
    assert answer.status_code == 200, answer.text
    got = outputs(answer.json())
    assert got["predict"].ravel().tolist() == pipeline.predict(rows[:10]).tolist()
    assert_same_probabilities(got["predict_proba"], pipeline.predict_proba(rows[:10]))


def test_runtime_decodes_a_pandas_request(server: Server, pipeline: Any, rows: np.ndarray) -> None:
    # content_type "pd": MLServer's PandasCodec makes a DataFrame of the four columns
    columns = [
        {"name": f"c{i}", "shape": [20], "datatype": "FP64", "data": rows[:20, i].tolist()}
        for i in range(4)
    ]
    body = {"parameters": {"content_type": "pd"}, "inputs": columns, "outputs": BOTH}
    answer = httpx.post(f"{server.url}/v2/models/{RUNTIME}/infer", json=body)
    assert answer.status_code == 200, answer.text
    got = outputs(answer.json())
    assert got["predict"].ravel().tolist() == pipeline.predict(rows[:20]).tolist()
    assert_same_probabilities(got["predict_proba"], pipeline.predict_proba(rows[:20]))


def test_runtime_errors_are_mlservers_inference_errors(server: Server) -> None:
    body = oip_body(np.ones((1, 4)), "x", outputs=[{"name": "decision_function"}])
    answer = httpx.post(f"{server.url}/v2/models/{RUNTIME}/infer", json=body)
    assert answer.status_code == 400, answer.text
    assert "InferenceError" in answer.json()["error"]
    assert "SKLearnModel only supports 'predict'" in answer.json()["error"]
