"""Fuzzing each HTTP listener from its own OpenAPI document, with schemathesis.

For every operation of the document a real server serves (the inference listener's at
``/v2/docs/openapi.json``, the management listener's at ``/api-description``), schemathesis
generates requests from the document (valid ones, then invalid ones where the document leaves
room for them), sends them, and checks each answer:

- no 5xx, except a model's own: a 500 that says the model named in the path raised, and the
  503 of a model's own ``max_num_sequences`` (the sequence examples refuse a fifth open sequence);
- the status is one the operation documents, with a documented content type, a body that
  matches the documented schema (each event of a stream too) and the documented headers;
- the server never logs an unexpected error;

and after the run, good requests still succeed. Path parameters are steered to the names the
server serves half of the time, so that the models' routes are reached, not only their 404s.

The default run makes a few examples per operation (derandomized, so CI sees the same ones
every time); ``-m slow`` runs many more, from a fresh random seed each time (derandomized too
under CI, where ``CI`` is set: a red run fails the same way again).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from conftest import EXAMPLES, Server, run_server

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis import checks as schema_checks  # noqa: E402

#: The examples the inference listener serves here: every model contract and scheduler (batch,
#: sequences, continuous batching, process workers, streams, MLServer, TorchServe). Left out:
#: ``cancellable`` and ``stateful-stream``, whose run time is whatever the input asks for
#: (``steps``, a count of 0.2 s items): a model's choice, not something the server bounds.
FUZZED = (
    "batch-sum",
    "continuous-words",
    "cpu-heavy",
    "echo",
    "io-bound",
    "mlserver-text",
    "running-total",
    "stateful-sum",
    "text-stream",
    "torchserve-handler",
)
VERSIONS = ("1", "1.0")  # the examples' versions (mlserver-text; the TorchServe archives)

CHECKS = [
    getattr(schema_checks, name)
    for name in (
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "response_headers_conformance",
    )
]

_MODEL_RAISED = re.compile(r"model '(?P<model>[^']*)' (?:.* )?raised ")
_SEQUENCE_LIMIT = re.compile(
    r"model '(?P<model>[^']*)'(?: version '[^']*')? has \d+ open sequences \(max_num_sequences"
)


def models_own_error(status: int, body: bytes, model: str | None) -> bool:
    """Whether a 5xx is the model's own doing: it raised, or refused a sequence past its own
    ``max_num_sequences``; the message must name the model the request named."""
    try:
        answer = httpx.Response(status, content=body).json()
        # Podium's error body, or TorchServe's under /predictions
        message = answer["error"] if "error" in answer else answer["message"]
    except (ValueError, KeyError, TypeError):
        return False
    if message == "Internal Server Error (in model/chainlet).":
        return True  # Truss's routes name no model's error (Truss's answer; the log has it)
    if not isinstance(message, str) or model is None:
        return False
    pattern = {500: _MODEL_RAISED, 503: _SEQUENCE_LIMIT}.get(status)
    found = pattern.match(message) if pattern is not None else None
    return found is not None and found["model"] == model


Steer = Callable[[Any, Any], None]


def fuzz(
    server: Server,
    base: str,
    document_path: str,
    *,
    examples: int,
    derandomize: bool,
    names: tuple[str, ...],
    name_param: str,
    steer: Steer | None = None,
) -> list[str]:
    """Run every operation of the served document; the problems found, one line each."""
    schema = schemathesis.openapi.from_url(base + document_path)
    problems: list[str] = []
    ran = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            run = _operation_test(
                operation, mode, base, examples, derandomize, names, name_param, steer, problems
            )
            try:
                run()
                ran += 1
            except Unsatisfiable:
                # Nothing in this operation can be made invalid (no body, no parameter with
                # room for a wrong value): there is no negative case to send.
                assert mode is GenerationMode.NEGATIVE, operation.label
    assert ran > len(problems), "nothing was fuzzed"
    bad = [line for line in server.lines if "unexpected error serving" in line]
    problems.extend(f"server logged: {line}" for line in bad)
    return problems


def _operation_test(
    operation: Any,
    mode: GenerationMode,
    base: str,
    examples: int,
    derandomize: bool,
    names: tuple[str, ...],
    name_param: str,
    steer: Steer | None,
    problems: list[str],
) -> Callable[[], None]:
    """A hypothesis test of one operation in one generation mode; it adds to ``problems``."""
    label = f"{operation.label} [{mode.value}]"

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=derandomize,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        case=operation.as_strategy(generation_mode=mode),
        name=st.sampled_from((*names, None)),
        version=st.sampled_from((*VERSIONS, None)),
    )
    def run(case: Any, name: str | None, version: str | None) -> None:
        params = case.path_parameters or {}
        if name is not None and name_param in params:
            params[name_param] = name
        if version is not None and "version" in params:
            params["version"] = version
        if steer is not None:
            steer(case, assume)
        response = case.call(base_url=base, timeout=30)
        status = response.status_code
        if status >= 500 and not models_own_error(status, response.content, params.get(name_param)):
            problems.append(f"{label}: {status} {response.text[:300]!r}")
            return
        try:
            case.validate_response(response, checks=CHECKS)
        except Exception as exc:  # schemathesis's FailureGroup: what does not match
            first = str(exc).strip().splitlines()[:12]
            problems.append(f"{label}: {' | '.join(first)}\n{case.as_curl_command()}")

    return run


# -- the inference listener ------------------------------------------------------------------


@pytest.fixture(scope="module")
def inference_server() -> Iterator[Server]:
    with run_server(*(EXAMPLES / name for name in FUZZED)) as server:
        yield server


def served(server: Server) -> tuple[str, ...]:
    """The names of the models ``server`` serves (an archive's name is its manifest's)."""
    listed = httpx.get(server.management_url + "/models", timeout=30).json()["models"]
    return tuple(sorted(m["modelName"] for m in listed))


def good_inference_requests_succeed(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.get("/v2/health/ready").json() == {"ready": True}
        body = {"inputs": [{"name": "x", "shape": [2], "datatype": "INT32", "data": [1, 2]}]}
        answer = client.post("/v2/models/echo/infer", json=body)
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"][0]["data"] == [1, 2]
        assert client.post("/predictions/ts-sentiment", json={"text": "good"}).is_success


#: The deep runs draw new examples on every run, but under CI (``CI`` set), where they are
#: derandomized as the property tests are (tests/conftest.py): a red CI fails the same way again.
_DERANDOMIZE_DEEP = bool(os.environ.get("CI"))


@pytest.mark.parametrize(
    ("examples", "derandomize"),
    [
        pytest.param(6, True, id="default", marks=[pytest.mark.timeout(600)]),
        pytest.param(
            30, _DERANDOMIZE_DEEP, id="deep", marks=[pytest.mark.slow, pytest.mark.timeout(1800)]
        ),
    ],
)
def test_inference_api_answers_as_its_document_says(
    inference_server: Server, examples: int, derandomize: bool
) -> None:
    problems = fuzz(
        inference_server,
        inference_server.url,
        "/v2/docs/openapi.json",
        examples=examples,
        derandomize=derandomize,
        names=served(inference_server),
        name_param="model",
    )
    assert not problems, "\n".join(problems)
    good_inference_requests_succeed(inference_server)


# -- the management listener -----------------------------------------------------------------


@pytest.fixture
def management_server(tmp_path: Path) -> Iterator[Server]:
    shutil.copytree(EXAMPLES / "echo", tmp_path / "echo")
    store = tmp_path / "store"
    store.mkdir()
    with run_server(tmp_path / "echo", args=("--model-store", str(store))) as server:
        yield server


def no_real_model_url(case: Any, assume: Callable[[bool], object]) -> None:
    """Registering runs the model's code: never let a generated ``url`` name something that
    exists (``/``, ``src``), in the query or the JSON body."""
    candidates = [(case.query or {}).get("url")]
    if isinstance(case.body, dict):
        candidates.append(case.body.get("url"))
    for url in candidates:
        if not isinstance(url, str):
            continue
        assume("://" not in url and not url.lower().startswith("file:"))
        try:
            assume(not Path(urlsplit(url).path or ".").exists())
        except (OSError, ValueError):  # not a path this system can have
            pass


@pytest.mark.parametrize(
    ("examples", "derandomize"),
    [
        pytest.param(10, True, id="default", marks=[pytest.mark.timeout(600)]),
        pytest.param(
            100, _DERANDOMIZE_DEEP, id="deep", marks=[pytest.mark.slow, pytest.mark.timeout(1800)]
        ),
    ],
)
def test_management_api_answers_as_its_document_says(
    management_server: Server, tmp_path: Path, examples: int, derandomize: bool
) -> None:
    problems = fuzz(
        management_server,
        management_server.management_url,
        "/api-description",
        examples=examples,
        derandomize=derandomize,
        names=("echo",),
        name_param="model_name",
        steer=no_real_model_url,
    )
    assert not problems, "\n".join(problems)
    # Good requests still succeed: list, (re-)register the model if the fuzzing unregistered
    # it, infer.
    with httpx.Client(base_url=management_server.management_url, timeout=60) as client:
        listed = client.get("/models")
        assert listed.status_code == 200
        if "echo" not in {m["modelName"] for m in listed.json()["models"]}:
            url = str(tmp_path / "echo")
            answer = client.post("/models", params={"url": url, "synchronous": "true"})
            assert answer.status_code == 200, answer.text
        scaled = client.put("/models/echo", params={"min_worker": "1", "synchronous": "true"})
        assert scaled.status_code == 200, scaled.text
    body = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [0.5]}]}
    answer = httpx.post(f"{management_server.url}/v2/models/echo/infer", json=body, timeout=30)
    assert answer.status_code == 200 and answer.json()["outputs"][0]["data"] == [0.5]
