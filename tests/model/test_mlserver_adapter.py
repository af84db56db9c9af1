"""An MLServer runtime behind Podium's ModelInstance: predict, streams, batching, errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from podium.errors import (
    BadModelOutput,
    DefinitionError,
    InvalidInput,
    ModelError,
    NotFound,
    Unavailable,
    ValidationFailed,
)
from podium.model import mlserver
from podium.model.mlserver import _batch
from podium.model.mlserver._runtime import MLServerModel
from podium.types import InferenceResponse, InputKind

ROOT = Path(__file__).resolve().parents[2]
REAL_MLSERVER = ROOT / "bench" / ".venvs" / "mlserver" / "lib" / "python3.11" / "site-packages"

HEADER = """
import asyncio
from mlserver import MLModel
from mlserver.codecs import StringCodec, NumpyCodec
from mlserver.errors import InferenceError, MLServerError, ModelNotFound
from mlserver.types import InferenceRequest, InferenceResponse, Parameters
"""

ECHO = (
    HEADER
    + """
class Runtime(MLModel):
    async def load(self):
        self.loads = getattr(self, "loads", 0) + 1
        return True

    async def predict(self, payload):
        what = payload.parameters.model_extra.get("raise") if payload.parameters else None
        if what == "value":
            raise ValueError("nope")
        if what == "inference":
            raise InferenceError("bad input")
        if what == "notfound":
            raise ModelNotFound("other")
        if what == "busy":
            raise MLServerError("busy", status_code=503)
        if what == "weird":
            return {"outputs": []}
        words = StringCodec.decode_input(payload.inputs[0])
        headers = payload.parameters.headers if payload.parameters else None
        return InferenceResponse(
            model_name=self.name,
            id="ignored",
            parameters=Parameters(headers={"x-out": "1"}, note="kept"),
            outputs=[
                StringCodec.encode_output("words", [w.upper() for w in words]),
                StringCodec.encode_output("meta", [payload.id, repr(headers)]),
            ],
        )

    async def unload(self):
        self.unloaded = True
        return True
"""
)

STREAM = (
    HEADER
    + """
class Runtime(MLModel):
    events = []

    async def predict(self, payload):
        raise AssertionError("predict_stream is used")

    async def predict_stream(self, payloads):
        try:
            async for payload in payloads:
                self.events.append(("read", payload.id))
                words = StringCodec.decode_input(payload.inputs[0])
                for word in words:
                    if word == "boom":
                        raise ValueError("exploded mid-stream")
                    self.events.append(("yield", word))
                    yield InferenceResponse(
                        model_name=self.name, outputs=[StringCodec.encode_output("w", [word])]
                    )
        finally:
            self.events.append(("closed", None))
"""
)


@pytest.fixture(scope="module")
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as pool:
        yield pool


def make(
    root: Path,
    code: str,
    executor: ThreadPoolExecutor,
    name: str = "rt",
    **settings: Any,
) -> MLServerModel:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "models.py").write_text(textwrap.dedent(code))
    (folder / "model-settings.json").write_text(
        json.dumps({"name": name, "implementation": "models.Runtime", **settings})
    )
    (source,) = mlserver.sources(folder)
    prepared = mlserver.prepare(source)
    inst = mlserver.build(source, prepared, secrets={}, executor=executor)
    assert isinstance(inst, MLServerModel)
    return inst


def words(*items: str, **parameters: Any) -> dict[str, Any]:
    req: dict[str, Any] = {
        "inputs": [{"name": "w", "shape": [len(items)], "datatype": "BYTES", "data": list(items)}]
    }
    if parameters:
        req["parameters"] = parameters
    return req


async def run(inst: MLServerModel, raw: Any, request: Any = None) -> Any:
    return await inst.predict(await inst.preprocess(raw, request), request)


# -- prepare and build ----------------------------------------------------------------------------


def test_prepare_problems_name_the_model_and_the_implementation(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    with pytest.raises(DefinitionError, match="importing 'implementation' .*raised NameError"):
        make(tmp_path, "undefined_name\n", executor, name="a")
    with pytest.raises(DefinitionError, match="module 'models' defines no 'Runtime'"):
        make(tmp_path, "x = 1\n", executor, name="b")
    with pytest.raises(DefinitionError, match="'implementation' must name a class"):
        make(tmp_path, "Runtime = 3\n", executor, name="c")
    with pytest.raises(DefinitionError, match="Runtime has no predict\\(\\) method"):
        make(tmp_path, "class Runtime:\n    async def load(self): ...\n", executor, name="d")
    code = "from mlserver import MLModel\nclass Runtime(MLModel):\n    def __init__(self, s):\n        raise OSError('no GPU')\n"
    with pytest.raises(DefinitionError, match="Runtime\\(settings\\) raised OSError: no GPU"):
        make(tmp_path, code, executor, name="e")
    bad_inputs = [{"name": "x", "datatype": "NOPE", "shape": [1]}]
    # Podium's own check of the declared tensors, before MLServer's (pydantic's 'inputs.0').
    with pytest.raises(DefinitionError, match=r"model-settings.json: 'inputs\[0\]\.datatype'"):
        make(tmp_path, ECHO, executor, name="f", inputs=bad_inputs)


def test_the_instance_describes_the_runtime(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    inst = make(tmp_path, ECHO, executor)
    assert (
        inst.capabilities.input_kind is InputKind.RAW
        and inst.capabilities.needs_inputs
        and inst.capabilities.needs_request
    )
    assert inst.capabilities.has_preprocess and not inst.capabilities.has_postprocess
    assert (
        not inst.capabilities.streaming and not inst.capabilities.consumes_stream
    )  # predict_stream not overridden
    assert inst.capabilities.predict_on_infer  # infer calls predict, whatever streams
    settings = inst.runtime.settings
    assert (settings.name, settings.parameters.uri) == ("rt", str(tmp_path / "rt"))


def test_same_named_modules_of_two_models_stay_apart(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    code = "from mlserver import MLModel\nWHO = {who!r}\nclass Runtime(MLModel):\n    async def predict(self, p):\n        return WHO\n"
    first = make(tmp_path, code.format(who="first"), executor, name="one")
    second = make(tmp_path, code.format(who="second"), executor, name="two")
    assert type(first.runtime).__module__ == "models" == type(second.runtime).__module__
    assert type(first.runtime) is not type(second.runtime)
    assert sys.modules["models"].WHO == "second"
    assert type(first.runtime).predict.__globals__["WHO"] == "first"


# -- predict --------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_predict_converts_both_ways(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    inst = make(tmp_path, ECHO, executor)
    await inst.load()
    assert inst.runtime.ready is True and inst.runtime.loads == 1
    request = SimpleNamespace(headers={"x-probe": "hi"})
    result = await run(inst, {"id": "r1", **words("a", "b")}, request)
    assert isinstance(result, InferenceResponse)
    assert result.id == "r1"  # the request's id, whatever the runtime put there (MLServer's rule)
    by_name = {o.name: o for o in result.outputs}
    assert by_name["words"].data == ["A", "B"]  # UTF-8 bytes become text for JSON
    assert (by_name["words"].shape, by_name["words"].datatype) == ([2, 1], "BYTES")
    assert by_name["words"].parameters == {"content_type": "str"}
    assert by_name["meta"].data == ["r1", "{'x-probe': 'hi'}"]  # headers in parameters.headers
    # kept here: the data plane moves them out of the body, into the response headers
    assert result.parameters == {"headers": {"x-out": "1"}, "note": "kept"}


@pytest.mark.anyio
async def test_every_request_gets_an_id(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    inst = make(tmp_path, ECHO, executor)
    result = await run(inst, words("x"))
    generated = result.outputs[1].data[0]
    assert len(generated) == 36 and result.id == generated


@pytest.mark.anyio
async def test_bodies_that_are_not_inference_requests_are_400s(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = make(tmp_path, ECHO, executor)
    with pytest.raises(InvalidInput, match="model 'rt' is an MLServer runtime .* not a JSON list"):
        await inst.preprocess([1, 2], None)
    with pytest.raises(InvalidInput, match="the body is not JSON"):
        await inst.preprocess(b"\xff not json", None)
    with pytest.raises(
        ValidationFailed, match="model 'rt' takes an Open Inference .*inputs"
    ) as info:
        await inst.preprocess({"inputs": [{"name": "x"}]}, None)
    assert info.value.details and info.value.details[0]["loc"][0] == "inputs"
    assert (await run(inst, json.dumps(words("z")).encode())).outputs[0].data == ["Z"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("what", "error", "message"),
    [
        ("value", ModelError, "model 'rt' predict raised ValueError: nope"),
        ("inference", InvalidInput, "model 'rt' predict raised InferenceError: bad input"),
        ("notfound", NotFound, "Model other not found"),
        ("busy", Unavailable, "predict raised MLServerError: busy"),
        ("weird", BadModelOutput, "predict must return an InferenceResponse, got dict"),
    ],
)
async def test_runtime_errors_keep_their_meaning(
    tmp_path: Path, executor: ThreadPoolExecutor, what: str, error: type, message: str
) -> None:
    inst = make(tmp_path, ECHO, executor)
    with pytest.raises(error, match=message):
        await run(inst, words("a", **{"raise": what}))
    assert (await run(inst, words("ok"))).outputs[0].data == ["OK"]  # the next one is fine


@pytest.mark.anyio
async def test_load_and_unload(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    quiet = "from mlserver import MLModel\nclass Runtime(MLModel):\n    async def load(self):\n        pass\n    async def predict(self, p): ...\n"
    inst = make(tmp_path, quiet, executor, name="quiet")
    await inst.load()  # None: ready (MLServer would leave it not ready)
    assert inst.runtime.ready is True
    refuses = "from mlserver import MLModel\nclass Runtime(MLModel):\n    async def load(self):\n        return False\n"
    with pytest.raises(ModelError, match="load\\(\\) returned False"):
        await make(tmp_path, refuses, executor, name="refuses").load()
    raising = "from mlserver import MLModel\nclass Runtime(MLModel):\n    async def load(self):\n        raise OSError('weights missing')\n"
    with pytest.raises(ModelError, match="load raised OSError: weights missing"):
        await make(tmp_path, raising, executor, name="raising").load()
    echo = make(tmp_path, ECHO, executor, name="echo")
    await echo.load()
    await echo.close()
    assert echo.runtime.unloaded is True and echo.runtime.ready is False


@pytest.mark.anyio
async def test_sync_methods_run_off_the_loop(tmp_path: Path, executor: ThreadPoolExecutor) -> None:
    code = """
import threading
from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceResponse
class Runtime(MLModel):
    def load(self):
        self.loaded_in = threading.current_thread().name
        return True
    def predict(self, payload):
        return InferenceResponse(model_name="x", outputs=[StringCodec.encode_output("t", [threading.current_thread().name])])
"""
    inst = make(tmp_path, code, executor, name="sync")
    await inst.load()
    assert inst.runtime.loaded_in != "MainThread"
    # a sync predict runs on the instance's own threads, as every contract's does (a thread
    # worker times its calls there); an async one on the loop, with no threads to time
    (thread,) = (await run(inst, words("a"))).outputs[0].data
    assert thread.startswith("podium-sync-") and inst.calls is not None
    assert inst.capabilities.predict_in_thread
    assert make(tmp_path, ECHO, executor, name="echo").calls is None


# -- streams --------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_predict_stream_feeds_one_request(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = make(tmp_path, STREAM, executor)
    assert inst.capabilities.streaming and inst.capabilities.consumes_stream
    inputs = await inst.preprocess({"id": "s1", **words("a", "b")}, None)
    items = [item async for item in inst.predict_stream(inputs, None)]
    assert [i.outputs[0].data for i in items] == [["a"], ["b"]]
    assert {i.id for i in items} == {"s1"}
    assert inst.runtime.events[-1] == ("closed", None)


@pytest.mark.anyio
async def test_a_stream_closed_early_closes_the_runtime(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = make(tmp_path, STREAM, executor)
    inst.runtime.events.clear()
    stream = inst.predict_stream(await inst.preprocess(words("a", "b", "c"), None), None)
    first = await anext(stream)
    await stream.aclose()
    assert first.outputs[0].data == ["a"]
    assert inst.runtime.events[-1] == ("closed", None)
    assert ("yield", "c") not in inst.runtime.events


@pytest.mark.anyio
async def test_a_stream_error_is_a_model_error(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = make(tmp_path, STREAM, executor)
    got = []
    with pytest.raises(ModelError, match="predict_stream raised ValueError: exploded mid-stream"):
        async for item in inst.predict_stream(words("a", "boom"), None):
            got.append(item.outputs[0].data)
    assert got == [["a"]]


@pytest.mark.anyio
async def test_predict_input_stream_reads_requests_as_the_runtime_asks(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = make(tmp_path, STREAM, executor)
    inst.runtime.events.clear()
    sent: list[str] = []

    async def requests() -> AsyncIterator[dict[str, Any]]:
        for i, word in enumerate(["one", "two", "three"]):
            sent.append(word)
            yield {"id": f"id-{i}", **words(word)}

    out = []
    async for item in inst.predict_input_stream(requests(), SimpleNamespace(headers={})):
        out.append((item.outputs[0].data[0], list(sent)))
    # each response came back before the next request was read: the runtime pulls them
    assert out == [("one", ["one"]), ("two", ["one", "two"]), ("three", ["one", "two", "three"])]
    reads = [e for e in inst.runtime.events if e[0] == "read"]
    assert reads == [("read", "id-0")] * 3  # later requests take the first one's id


@pytest.mark.anyio
async def test_predict_input_stream_edge_cases(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    inst = make(tmp_path, STREAM, executor)

    async def nothing() -> AsyncIterator[dict[str, Any]]:
        return
        yield {}

    assert [i async for i in inst.predict_input_stream(nothing(), None)] == []

    async def bad_second() -> AsyncIterator[Any]:
        yield words("fine")
        yield [1, 2]

    got = []
    with pytest.raises(InvalidInput, match="not a JSON list"):
        async for item in inst.predict_input_stream(bad_second(), None):
            got.append(item)
    assert len(got) == 1


# -- adaptive batching ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_batch_is_one_merged_request_and_split_back(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    code = (
        HEADER
        + """
class Runtime(MLModel):
    seen = []
    async def predict(self, payload):
        self.seen.append(payload)
        x = NumpyCodec.decode_input(payload.inputs[0])
        return InferenceResponse(model_name=self.name, outputs=[NumpyCodec.encode_output("y", x * 10)])
"""
    )
    inst = make(tmp_path, code, executor, max_batch_size=4, max_batch_time=0.1)
    raws = [
        {
            "id": "a",
            "inputs": [{"name": "x", "shape": [1, 2], "datatype": "INT64", "data": [1, 2]}],
        },
        {
            "id": "b",
            "inputs": [{"name": "x", "shape": [2, 2], "datatype": "INT64", "data": [3, 4, 5, 6]}],
        },
    ]
    payloads = [await inst.preprocess(r, None) for r in raws]
    results = await inst.predict(payloads, [None, None])
    (merged,) = inst.runtime.seen
    assert merged.id is None and merged.inputs[0].shape == [3, 2]
    assert list(merged.inputs[0].data) == [1, 2, 3, 4, 5, 6]
    assert [(r.id, r.outputs[0].shape, r.outputs[0].data) for r in results] == [
        ("a", [1, 2], [10, 20]),
        ("b", [2, 2], [30, 40, 50, 60]),
    ]


def test_merge_follows_mlserver() -> None:
    merged = _batch.merge(
        [
            {
                "parameters": {"p": 1, "content_type": "np"},
                "inputs": [
                    {
                        "name": "x",
                        "shape": [1, 2],
                        "datatype": "FP32",
                        "data": [1, 2],
                        "parameters": {"k": "a", "content_type": "np"},
                    },
                    {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["u"]},
                ],
                "outputs": [{"name": "y"}],
            },
            {
                "parameters": {"p": 2},
                "inputs": [
                    {
                        "name": "x",
                        "shape": [2, 2],
                        "datatype": "FP32",
                        "data": [3, 4, 5, 6],
                        "parameters": {"k": "b", "content_type": "np"},
                    },
                    {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["v"]},
                ],
            },
        ]
    )
    assert merged == {
        "parameters": {"p": 2, "content_type": "np"},
        "inputs": [
            {
                "name": "x",
                "datatype": "FP32",
                "shape": [3, 2],
                "data": [1, 2, 3, 4, 5, 6],
                "parameters": {"k": ["a", "b"], "content_type": "np"},
            },
            {"name": "s", "datatype": "BYTES", "shape": [2], "data": ["u", "v"]},
        ],
        "outputs": [{"name": "y"}],
    }


def test_split_checks_the_rows() -> None:
    from podium.types import ResponseOutput

    response = InferenceResponse(
        model_name="m",
        outputs=[
            ResponseOutput(
                name="y",
                shape=[3],
                datatype="INT64",
                data=[1, 2, 3],
                parameters={"tag": ["a", "b", "c"], "content_type": "np"},
            )
        ],
    )
    first, second = _batch.split("m", response, [1, 2], ["i", "j"])
    assert (first.id, first.outputs[0].data, first.outputs[0].parameters) == (
        "i",
        [1],
        {"tag": "a", "content_type": "np"},
    )
    assert (second.outputs[0].shape, second.outputs[0].data) == ([2], [2, 3])
    assert second.outputs[0].parameters == {
        "tag": "b",
        "content_type": "np",
    }  # the request's first row's
    with pytest.raises(
        BadModelOutput, match="output 'y' of shape \\[3\\]; .*must be the batch's rows \\(4\\)"
    ):
        _batch.split("m", response, [2, 2], ["i", "j"])


# -- with MLServer itself installed -------------------------------------------------------------

REAL_SCRIPT = r"""
import asyncio, json, sys, warnings
warnings.simplefilter("ignore")
sys.path.append(sys.argv[1])
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from podium.compat import mlserver as compat
from podium.errors import InvalidInput
from podium.model import mlserver

assert compat.install_import_paths() is False  # MLServer itself is there: no aliases
folder = Path(sys.argv[2])
(source,) = mlserver.sources(folder)
prepared = mlserver.prepare(source)
inst = mlserver.build(source, prepared, secrets={}, executor=ThreadPoolExecutor(1))

async def main():
    import mlserver as real, mlserver.types as real_types
    await inst.load()
    assert isinstance(inst.runtime, real.MLModel)
    assert type(inst.runtime.settings).__module__ == "mlserver.settings"
    req = {"inputs": [{"name": "w", "shape": [1], "datatype": "BYTES", "data": ["hello world"]}]}
    payload = await inst.preprocess(req, None)
    assert type(payload) is real_types.InferenceRequest
    res = await inst.predict(payload, None)
    stream = [i.outputs[0].data async for i in inst.predict_stream(await inst.preprocess(req, None), None)]
    try:
        await inst.predict(await inst.preprocess({**req, "parameters": {"bad": True}}, None), None)
    except InvalidInput as exc:
        error = str(exc)
    # the compat codecs encode exactly as MLServer's
    import numpy as np
    from mlserver import codecs as rc
    from podium.compat.mlserver import codecs as cc
    for codec, payload in [("StringCodec", ["a", "é"]), ("NumpyCodec", np.array([[1.5, np.nan]])),
                           ("Base64Codec", [b"\x00x"]), ("NumpyCodec", np.array(["ab", "c"]))]:
        a = getattr(rc, codec).encode_output("o", payload).model_dump()
        b = getattr(cc, codec).encode_output("o", payload).model_dump()
        assert a == b, (codec, a, b)
    print(json.dumps({"data": res.outputs[0].data, "stream": stream, "error": error}))

asyncio.run(main())
"""

REAL_RUNTIME = """
from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.errors import InferenceError
from mlserver.types import InferenceResponse

class Runtime(MLModel):
    async def predict(self, payload):
        if payload.parameters and payload.parameters.model_extra.get("bad"):
            raise InferenceError("refused by a real MLServerError")
        text = StringCodec.decode_input(payload.inputs[0])[0]
        return InferenceResponse(model_name=self.name, outputs=[StringCodec.encode_output("o", [text])])

    async def predict_stream(self, payloads):
        async for payload in payloads:
            for word in StringCodec.decode_input(payload.inputs[0])[0].split():
                yield InferenceResponse(model_name=self.name, outputs=[StringCodec.encode_output("o", [word])])
"""


@pytest.mark.skipif(
    not REAL_MLSERVER.is_dir(), reason="MLServer's venv (bench/.venvs/mlserver) is absent"
)
def test_with_mlserver_installed_its_own_classes_are_used(tmp_path: Path) -> None:
    folder = tmp_path / "real"
    folder.mkdir()
    (folder / "models.py").write_text(REAL_RUNTIME)
    (folder / "model-settings.json").write_text(
        '{"name": "real", "implementation": "models.Runtime"}'
    )
    done = subprocess.run(
        [sys.executable, "-c", REAL_SCRIPT, str(REAL_MLSERVER), str(folder)],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["data"] == ["hello world"]
    assert result["stream"] == [["hello"], ["world"]]
    assert "predict raised InferenceError: refused by a real MLServerError" in result["error"]
