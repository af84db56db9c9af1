"""The response cache end to end (issue 26): a real server, real clients (httpx,
``tritonclient.http`` and ``tritonclient.grpc``), models that count their own calls.

Each model answers ``CALLS``, how many times its ``predict`` has run, so a test sees whether an
answer came from the model (a new count) or from the cache (the count it had when it was kept),
and the statistics extension and ``/metrics`` say what the server counted. Each test sends its
own input values, so that what one keeps does not answer another.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from conftest import Server, run_server
from e2e_helpers import PATIENCE
from grpc_helpers import target
from prometheus_client.parser import text_string_to_metric_families

COUNTING = """
import numpy as np


class Model:
    def __init__(self):
        self.calls = 0

    def predict(self, inputs):
        self.calls += 1
        x = inputs["INPUT0"]
        if float(x.ravel()[0]) < 0:
            raise ValueError("asked to fail")
        return {"OUTPUT0": x * 2, "CALLS": np.array([self.calls], dtype=np.int64)}
"""

STREAMING = """
import numpy as np


class Model:
    def __init__(self):
        self.calls = 0

    def predict(self, inputs):
        self.calls += 1
        yield {"CALLS": np.array([self.calls], dtype=np.int64)}
"""

TAKES_REQUEST = """
import numpy as np
from starlette.requests import Request


class Model:
    def __init__(self):
        self.calls = 0

    def predict(self, inputs, request: Request):
        self.calls += 1
        return {"CALLS": np.array([self.calls], dtype=np.int64)}
"""

#: An MLServer runtime (served through Podium's own ``mlserver`` import path): it reads the
#: request's headers (``parameters.headers``), so its answers are kept by them too, as MLServer's
#: own cache keeps them.
MLSERVER_COUNTING = """
import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class Counter(MLModel):
    async def load(self):
        self.calls = 0
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        self.calls += 1
        calls = np.array([self.calls], dtype=np.int64)
        return InferenceResponse(
            model_name=self.name, outputs=[NumpyCodec.encode_output("CALLS", calls)]
        )
"""

MODELS = {
    "cached": (COUNTING, "response_cache: {max_bytes: 1000000}\n"),
    "takes_request": (TAKES_REQUEST, "response_cache: true\n"),
    "plain": (COUNTING, ""),
    "sequence": (COUNTING, "sequence_batching: true\nresponse_cache: true\n"),
    "streaming": (STREAMING, "response_cache: true\n"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("cache-models")
    for name, (code, config) in MODELS.items():
        folder = root / name
        folder.mkdir()
        (folder / "model.py").write_text(textwrap.dedent(code))
        (folder / "config.yaml").write_text(config)
    runtime = root / "mls_counter"  # MLServer's files: cache_enabled in model-settings.json
    runtime.mkdir()
    (runtime / "model.py").write_text(textwrap.dedent(MLSERVER_COUNTING))
    settings = {"name": "mls_counter", "implementation": "model.Counter", "cache_enabled": True}
    (runtime / "model-settings.json").write_text(json.dumps(settings))
    paths: list[Path] = [root / name for name in MODELS] + [runtime]
    with run_server(*paths, args=("--model-control", "inference")) as server:
        yield server


def body(values: list[float], **extra: Any) -> dict[str, Any]:
    tensor = {"name": "INPUT0", "shape": [1, len(values)], "datatype": "FP32", "data": values}
    return {"inputs": [tensor], **extra}


def infer(
    server: Server, values: list[float], model: str = "cached", headers: Any = None, **extra: Any
) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v2/models/{model}/infer",
        json=body(values, **extra),
        headers=headers,
        timeout=PATIENCE,
    )


def calls(response: httpx.Response) -> int:
    assert response.status_code == 200, response.text
    [count] = [out["data"][0] for out in response.json()["outputs"] if out["name"] == "CALLS"]
    return int(count)


def stats(server: Server, model: str = "cached") -> dict[str, Any]:
    r = httpx.get(f"{server.url}/v2/models/{model}/stats", timeout=PATIENCE)
    assert r.status_code == 200, r.text
    [found] = r.json()["model_stats"]
    return found


def counts(server: Server, model: str = "cached") -> tuple[int, int, int, int]:
    """(cache hits, cache misses, successes, executions)."""
    s = stats(server, model)
    infer = s["inference_stats"]
    return (
        infer["cache_hit"]["count"],
        infer["cache_miss"]["count"],
        infer["success"]["count"],
        s["execution_count"],
    )


def test_a_repeated_request_is_answered_from_the_cache(server: Server) -> None:
    before = counts(server)
    first = infer(server, [1.0, 2.0], id="first")
    second = infer(server, [1.0, 2.0], id="second")
    assert calls(first) == calls(second)  # the model ran once
    one, two = first.json(), second.json()
    assert (one["id"], two["id"]) == ("first", "second")  # each answer has its request's id
    assert {**one, "id": None} == {**two, "id": None}
    after = counts(server)
    # Triton's counting: the hit is a success, one hit and one miss, one execution
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 2, 1]
    hit = stats(server)["inference_stats"]["cache_hit"]
    assert hit["ns"] > 0


def test_a_hit_counts_in_the_queue_as_tritons_do(server: Server) -> None:
    """Triton 2.51 (run with response_cache on): every request counts in queue, hits too, and
    only the miss in compute and inference_count."""

    def queue_and_compute() -> tuple[int, int, int]:
        s = stats(server)
        infer = s["inference_stats"]
        return infer["queue"]["count"], infer["compute_infer"]["count"], s["inference_count"]

    before = queue_and_compute()
    assert calls(infer(server, [9.0, 9.5])) == calls(infer(server, [9.0, 9.5]))
    after = queue_and_compute()
    assert [a - b for a, b in zip(after, before, strict=True)] == [2, 1, 1]


def test_a_different_input_parameter_or_output_misses(server: Server) -> None:
    kept = calls(infer(server, [3.0, 4.0]))
    assert calls(infer(server, [3.0, 4.0])) == kept
    assert calls(infer(server, [3.0, 5.0])) > kept  # another value
    assert calls(infer(server, [3.0, 4.0, 5.0])) > kept  # another shape
    with_parameter = calls(infer(server, [3.0, 4.0], parameters={"temperature": 1}))
    assert with_parameter > kept
    assert calls(infer(server, [3.0, 4.0], parameters={"temperature": 1})) == with_parameter
    # what only orders the queue or names the answer leaves the key alone
    assert calls(infer(server, [3.0, 4.0], id="x", parameters={"priority": 1})) == kept
    only = infer(server, [3.0, 4.0], outputs=[{"name": "CALLS"}])
    assert [o["name"] for o in only.json()["outputs"]] == ["CALLS"]
    assert calls(only) > kept  # another set of outputs: the model ran


def test_grpc_raw_and_rest_binary_tensors_hit(server: Server) -> None:
    data = np.array([[7.0, 8.0]], dtype=np.float32)
    g = tgrpc.InferenceServerClient(target(server))
    tensor = tgrpc.InferInput("INPUT0", [1, 2], "FP32")
    tensor.set_data_from_numpy(data)
    first = g.infer("cached", [tensor], request_id="g1")
    second = g.infer("cached", [tensor], request_id="g2")
    assert first.as_numpy("CALLS")[0] == second.as_numpy("CALLS")[0]
    assert second.get_response().id == "g2"
    np.testing.assert_array_equal(second.as_numpy("OUTPUT0"), data * 2)
    # the same tensor as REST binary data arrives as the same array: the same entry
    h = thttp.InferenceServerClient(server.url.split("://", 1)[1].rstrip("/"))
    binary = thttp.InferInput("INPUT0", [1, 2], "FP32")
    binary.set_data_from_numpy(data, binary_data=True)
    rest = h.infer("cached", [binary], request_id="h1")
    assert rest.as_numpy("CALLS")[0] == first.as_numpy("CALLS")[0]
    assert rest.get_response()["id"] == "h1"
    # gRPC metadata asks as the header does
    fresh = g.infer("cached", [tensor], headers={"cache-control": "no-cache"})
    assert fresh.as_numpy("CALLS")[0] > first.as_numpy("CALLS")[0]
    again = g.infer("cached", [tensor])  # no-cache stored its answer
    assert again.as_numpy("CALLS")[0] == fresh.as_numpy("CALLS")[0]
    # the statistics over gRPC say what REST's say
    grpc_stats = g.get_inference_statistics("cached", as_json=True)["model_stats"][0]
    rest_stats = stats(server)["inference_stats"]
    assert (
        int(grpc_stats["inference_stats"]["cache_hit"]["count"]) == rest_stats["cache_hit"]["count"]
    )


def test_cache_control_opts_out(server: Server) -> None:
    kept = calls(infer(server, [9.0, 9.0]))
    # no-cache: not answered from the cache; its fresh answer is kept
    fresh = calls(infer(server, [9.0, 9.0], headers={"Cache-Control": "no-cache"}))
    assert fresh > kept
    assert calls(infer(server, [9.0, 9.0])) == fresh
    # no-store: may be answered from the cache; a computed answer is not kept
    assert calls(infer(server, [9.0, 9.0], headers={"Cache-Control": "no-store"})) == fresh
    new = calls(infer(server, [9.0, 10.0], headers={"Cache-Control": "no-store"}))
    assert calls(infer(server, [9.0, 10.0])) > new
    # both: neither read nor kept
    both = {"Cache-Control": "no-cache, no-store"}
    assert calls(infer(server, [9.0, 11.0], headers=both)) < calls(
        infer(server, [9.0, 11.0], headers=both)
    )


def test_a_failing_models_error_is_not_cached(server: Server) -> None:
    before = stats(server)
    for _ in range(2):
        r = infer(server, [-1.0, 0.0])
        assert r.status_code == 500, r.text
    after = stats(server)
    moved = {
        what: after["inference_stats"][what]["count"] - before["inference_stats"][what]["count"]
        for what in ("fail", "cache_miss", "cache_hit")
    }
    assert moved == {"fail": 2, "cache_miss": 2, "cache_hit": 0}  # the model ran both times


def test_unload_and_load_forget_the_answers(server: Server) -> None:
    kept = calls(infer(server, [5.0, 5.0]))
    assert calls(infer(server, [5.0, 5.0])) == kept
    client = thttp.InferenceServerClient(server.url.split("://", 1)[1].rstrip("/"))
    client.unload_model("cached")
    client.load_model("cached")
    assert calls(infer(server, [5.0, 5.0])) > kept
    # a load of a model that is loaded is a reload too (Triton's): no answer survives it
    kept = calls(infer(server, [5.0, 5.0]))
    client.load_model("cached")
    assert calls(infer(server, [5.0, 5.0])) > kept


def scrape(server: Server) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    r = httpx.get(server.addresses["http-metrics"] + "/metrics", timeout=PATIENCE)
    assert r.status_code == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def test_metrics_count_hits_misses_entries_and_bytes(server: Server) -> None:
    labels = frozenset({"model": "cached", "version": "1"}.items())
    before = scrape(server)
    infer(server, [6.0, 6.0])
    infer(server, [6.0, 6.0])
    after = scrape(server)

    def moved(name: str) -> float:
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    assert moved("podium_response_cache_hits_total") == 1
    assert moved("podium_response_cache_misses_total") == 1
    assert after[("podium_response_cache_entries", labels)] >= 1
    assert after[("podium_response_cache_bytes", labels)] > 0
    assert after[("podium_response_cache_max_bytes", labels)] == 1_000_000
    assert ("podium_response_cache_evictions_total", labels | {("reason", "size")}) in after
    # a model without a cache has no series
    assert not any(
        dict(key[1]).get("model") == "plain"
        for key in after
        if key[0].startswith("podium_response_cache")
    )


@pytest.mark.parametrize("model", ["plain", "sequence", "streaming", "takes_request"])
def test_models_without_a_cache_run_every_time(server: Server, model: str) -> None:
    first = calls(infer(server, [4.0, 2.0], model=model))
    assert calls(infer(server, [4.0, 2.0], model=model)) == first + 1
    hits, misses, _, _ = counts(server, model)
    assert (hits, misses) == (0, 0)


def test_the_settings_refusal_is_logged(server: Server) -> None:
    assert "'sequence': response_cache is off: a model with sequence_batching" in server.log
    assert "'streaming': response_cache is off: a streaming model" in server.log
    assert "'takes_request': response_cache is off: a model that takes the raw request" in (
        server.log
    )
    assert "'mls_counter': response_cache is off" not in server.log


def test_an_mlserver_runtimes_answers_are_kept_by_its_inputs_and_headers(server: Server) -> None:
    """MLServer's cache_enabled turns the cache on for a runtime, which reads the request's
    headers (parameters.headers): the same request with the same headers is a hit, another
    header value is a miss, as MLServer's own cache (keyed by the payload, headers included)."""
    tenant_a = {"x-tenant": "a"}
    first = calls(infer(server, [6.0, 1.0], model="mls_counter", headers=tenant_a))
    assert calls(infer(server, [6.0, 1.0], model="mls_counter", headers=tenant_a)) == first
    other = calls(infer(server, [6.0, 1.0], model="mls_counter", headers={"x-tenant": "b"}))
    assert other == first + 1
    assert calls(infer(server, [6.0, 2.0], model="mls_counter", headers=tenant_a)) == first + 2
    hits, misses, _, _ = counts(server, "mls_counter")
    assert (hits, misses) == (1, 3)


def test_a_hit_to_a_request_without_an_id_is_named_as_the_model_names_it(server: Server) -> None:
    """An MLServer runtime names every request that has no id (MLServer's data plane does): a
    hit gets a name of its own, never the kept request's; a model that names none gives none."""
    first = infer(server, [6.0, 3.0], model="mls_counter")
    second = infer(server, [6.0, 3.0], model="mls_counter")
    assert calls(first) == calls(second)
    assert first.json()["id"] and second.json()["id"]
    assert first.json()["id"] != second.json()["id"]
    native = [infer(server, [6.0, 3.0]) for _ in range(2)]
    assert calls(native[0]) == calls(native[1])
    assert [r.json().get("id") for r in native] == [None, None]


def test_a_streaming_call_to_a_cached_model_is_never_cached(server: Server) -> None:
    def streamed() -> int:
        r = httpx.post(
            f"{server.url}/v2/models/cached/infer_stream", json=body([8.0, 1.0]), timeout=PATIENCE
        )
        assert r.status_code == 200, r.text
        [event] = [line for line in r.text.splitlines() if line.startswith("data: ")]
        answer = json.loads(event.removeprefix("data: "))
        return int(next(o["data"][0] for o in answer["outputs"] if o["name"] == "CALLS"))

    before = counts(server)[:2]
    first = streamed()
    assert streamed() == first + 1
    assert counts(server)[:2] == before  # neither a hit nor a miss
