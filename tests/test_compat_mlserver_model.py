"""podium.compat.mlserver: MLModel's helpers, settings, utils, errors and the `mlserver` import
paths Podium provides when MLServer is not installed."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import uninstall_import_paths

from podium.compat import mlserver as compat
from podium.compat.mlserver import MLModel, ModelSettings, errors, types, utils
from podium.compat.mlserver.codecs import NumpyCodec, StringCodec
from podium.compat.mlserver.codecs.errors import CodecNotFound


def settings(**extra: object) -> ModelSettings:
    return ModelSettings.model_validate(
        {
            "name": "m",
            "implementation": "x.Y",
            "parameters": {"version": "3", "content_type": "np"},
            "inputs": [
                {
                    "name": "t",
                    "datatype": "BYTES",
                    "shape": [1],
                    "parameters": {"content_type": "str"},
                }
            ],
            **extra,
        }
    )


def test_model_settings_properties() -> None:
    s = settings(max_batch_size=4, max_batch_time=0.5, whatever=1)  # unknown keys are ignored
    assert (s.name, s.version, s.max_batch_size, s.max_batch_time) == ("m", "3", 4, 0.5)
    assert s.implementation_ == "x.Y"
    assert s.model_dump(by_alias=True)["implementation"] == "x.Y"

    class Runtime(MLModel): ...

    s.implementation = Runtime
    assert s.implementation is Runtime and s.implementation_.endswith(".Runtime")
    assert ModelSettings(implementation=Runtime).implementation is Runtime


def test_model_settings_import_the_implementation_next_to_their_file(tmp_path: Path) -> None:
    (tmp_path / "settings_import_probe.py").write_text("class Found:\n    pass\n")
    path = tmp_path / "model-settings.json"
    path.write_text('{"name": "n", "implementation": "settings_import_probe.Found"}')
    s = ModelSettings.parse_file(str(path))
    try:
        assert s.implementation.__name__ == "Found"
        assert str(tmp_path) not in sys.path
    finally:
        sys.modules.pop("settings_import_probe", None)


def test_mlmodel_basics() -> None:
    model = MLModel(settings())
    assert (model.name, model.version, model.ready) == ("m", "3", False)
    assert model.inputs[0].name == "t"
    model.outputs = [
        types.MetadataTensor(
            name="o", datatype="BYTES", shape=[1], parameters={"content_type": "str"}
        )
    ]
    assert model.settings.outputs[0].name == "o"


def test_decode_uses_content_type_then_metadata_then_default_codec() -> None:
    model = MLModel(settings())
    typed = types.RequestInput(
        name="n", shape=[2], datatype="INT32", data=[1, 2], parameters={"content_type": "np"}
    )
    assert model.decode(typed).tolist() == [1, 2]
    by_metadata = types.RequestInput(name="t", shape=[1], datatype="BYTES", data=["hi"])
    assert model.decode(by_metadata) == ["hi"]
    plain = types.RequestInput(name="p", shape=[2], datatype="INT32", data=[1, 2])
    assert list(model.decode(plain)) == [1, 2]  # the raw data
    assert model.decode(plain, default_codec=NumpyCodec).dtype == np.int32


def test_decode_request_uses_the_request_content_type_or_the_models_default() -> None:
    model = MLModel(settings())  # parameters.content_type "np": NumpyRequestCodec by default
    req = types.InferenceRequest(
        inputs=[types.RequestInput(name="x", shape=[1, 2], datatype="FP32", data=[1, 2])]
    )
    assert model.decode_request(req).tolist() == [[1.0, 2.0]]
    as_str = types.InferenceRequest(
        parameters={"content_type": "str"},
        inputs=[types.RequestInput(name="s", shape=[1], datatype="BYTES", data=["a"])],
    )
    assert model.decode_request(as_str) == ["a"]
    assert model.decode_request(req) is not req  # remembered on the request: decoded once
    fresh = types.InferenceRequest(inputs=[])
    plain_model = MLModel(ModelSettings(name="p", implementation="x.Y"))
    assert plain_model.decode_request(fresh) is fresh  # no content type anywhere


def test_encode_and_encode_response_by_payload_type() -> None:
    model = MLModel(settings())
    out = model.encode(np.array([1, 2]), types.RequestOutput(name="o"))
    assert (out.name, out.datatype, out.parameters.content_type) == ("o", "INT64", "np")
    text = model.encode(["a"], types.RequestOutput(name="o", parameters={"content_type": "str"}))
    assert list(text.data) == [b"a"]
    with pytest.raises(CodecNotFound, match="output field with name 'o'"):
        model.encode({"a": 1}, types.RequestOutput(name="o"))
    res = model.encode_response(["x"])
    assert (res.model_name, res.model_version, res.parameters.content_type) == ("m", "3", "str")
    with pytest.raises(CodecNotFound, match="output response"):
        model.encode_response({"a": 1})


@pytest.mark.anyio
async def test_default_lifecycle_methods_and_metadata() -> None:
    model = MLModel(settings(platform="sklearn"))
    assert await model.load() is True and await model.unload() is True
    with pytest.raises(NotImplementedError):
        await model.predict(types.InferenceRequest(inputs=[]))
    meta = await model.metadata()
    assert (meta.name, meta.platform, meta.parameters.content_type) == ("m", "sklearn", "np")


@pytest.mark.anyio
async def test_default_predict_stream_answers_the_first_request_with_predict() -> None:
    class Echo(MLModel):
        async def predict(self, payload: types.InferenceRequest) -> types.InferenceResponse:
            return types.InferenceResponse(model_name=self.name, id=payload.id, outputs=[])

    async def payloads():  # type: ignore[no-untyped-def]
        yield types.InferenceRequest(id="first", inputs=[])
        yield types.InferenceRequest(id="second", inputs=[])

    got = [r.id async for r in Echo(settings()).predict_stream(payloads())]
    assert got == ["first"]


def test_errors_carry_status_codes() -> None:
    assert errors.MLServerError("x").status_code == 400
    assert errors.MLServerError("x", status_code=503).status_code == 503
    assert errors.ModelNotFound("m", "2").status_code == 404
    assert str(errors.ModelNotFound("m", "2")) == "Model m with version 2 not found"
    assert errors.InvalidModelURI("m", "/p").status_code == 422
    assert errors.InferenceError("bad").status_code == 400


@pytest.mark.anyio
async def test_get_model_uri(tmp_path: Path) -> None:
    (tmp_path / "model.joblib").write_text("")
    s = ModelSettings.model_validate(
        {
            "implementation": "x.Y",
            "parameters": {"uri": "."},
            "_source": str(tmp_path / "model-settings.json"),
        }
    )
    assert await utils.get_model_uri(s) == str(tmp_path)
    found = await utils.get_model_uri(s, wellknown_filenames=["model.joblib"])
    assert found == str(tmp_path / "model.joblib")
    s.parameters.uri = "s3://bucket/model"
    assert await utils.get_model_uri(s) == "s3://bucket/model"
    s.parameters.uri = "missing"
    with pytest.raises(errors.InvalidModelURI):
        await utils.get_model_uri(s)


def test_headers_helpers() -> None:
    req = utils.insert_headers(types.InferenceRequest(inputs=[]), {"a": "1"})
    assert req.parameters.headers == {"a": "1"}
    res = types.InferenceResponse(model_name="m", outputs=[], parameters={"headers": {"b": "2"}})
    assert utils.extract_headers(res) == {"b": "2"} and res.parameters.headers is None
    assert len(utils.generate_uuid()) == 36


# -- the import paths ---------------------------------------------------------------------------


@pytest.fixture
def aliases() -> Iterator[None]:
    uninstall_import_paths("mlserver")
    yield
    uninstall_import_paths("mlserver")


def test_mlserver_import_paths_point_here_when_mlserver_is_missing(aliases: None) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("mlserver")  # MLServer itself is not installed in this venv
    assert compat.install_import_paths() is True
    assert compat.install_import_paths() is True  # idempotent
    import mlserver  # type: ignore[import-not-found]
    from mlserver.codecs import StringCodec as Aliased  # type: ignore[import-not-found]
    from mlserver.codecs.string import StringCodec as Deep  # type: ignore[import-not-found]
    from mlserver.types import InferenceRequest  # type: ignore[import-not-found]

    assert mlserver.MLModel is MLModel and mlserver.__version__ == "1.7.1"
    assert Aliased is StringCodec and Deep is StringCodec
    assert InferenceRequest is types.InferenceRequest
    assert importlib.import_module("mlserver.utils") is utils
    assert importlib.import_module("mlserver.logging").logger.name == "mlserver"
    with pytest.raises(ModuleNotFoundError, match="mlserver.batching"):
        importlib.import_module("mlserver.batching")
    uninstall_import_paths("mlserver")
    assert "mlserver" not in sys.modules and "mlserver.types" not in sys.modules


def test_the_import_paths_are_left_alone_when_mlserver_is_installed(
    aliases: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "mlserver"
    fake.mkdir()
    (fake / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert compat.install_import_paths() is False
        assert importlib.import_module("mlserver").REAL is True
    finally:
        sys.modules.pop("mlserver", None)
