"""TorchServe's ``BaseHandler`` (``ts.torch_handler.base_handler``) without torch installed here:
a stand-in ``torch`` module records what the shim asks of it, so that loading a TorchScript file
or a ``modelFile`` class with its state dict, the device, and ``preprocess`` → ``inference`` →
``postprocess`` are checked through Podium's TorchServe adapter."""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import textwrap
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from ts_kit import FakeRequest, load

from podium.model.torchserve import archive_model

SHIM = "podium.compat.ts.torch_handler.base_handler"
#: The shim under both its names (handlers import it as TorchServe's ``ts.*``).
NAMES = (SHIM, "ts.torch_handler.base_handler")


class FakeDevice:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"device({self.name!r})"


class FakeTensor:
    def __init__(self, values: list[float], device: Any = None) -> None:
        self.values = values
        self.device = device

    def to(self, device: Any) -> FakeTensor:
        return FakeTensor(self.values, device)

    def tolist(self) -> list[float]:
        return list(self.values)


class FakeScripted:
    """What torch.jit.load gives: a module that multiplies by its weight."""

    def __init__(self, weight: float) -> None:
        self.weight = weight
        self.device: Any = None
        self.evaluating = False

    def to(self, device: Any) -> FakeScripted:
        self.device = device
        return self

    def eval(self) -> FakeScripted:
        self.evaluating = True
        return self

    def __call__(self, tensor: FakeTensor) -> FakeTensor:
        assert tensor.device is self.device, "inference moves the input to the model's device"
        return FakeTensor([v * self.weight for v in tensor.values], tensor.device)


@pytest.fixture
def torch(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.SimpleNamespace]:
    """A stand-in ``torch`` in sys.modules (and a fresh import of the shim); what it was asked."""
    seen = types.SimpleNamespace(calls=[], cuda=False)
    module = types.ModuleType("torch")
    module.device = FakeDevice  # type: ignore[attr-defined]
    module.cuda = types.SimpleNamespace(is_available=lambda: seen.cuda)  # type: ignore[attr-defined]

    def jit_load(path: str, map_location: Any = None) -> FakeScripted:
        seen.calls.append(("jit.load", Path(path).name, map_location.name))
        return FakeScripted(3.0)

    def load_state(path: str, map_location: Any = None) -> dict[str, float]:
        seen.calls.append(("load", Path(path).name, map_location.name))
        return {"weight": 5.0}

    module.jit = types.SimpleNamespace(load=jit_load)  # type: ignore[attr-defined]
    module.load = load_state  # type: ignore[attr-defined]
    module.as_tensor = lambda data, device=None: FakeTensor(list(data), device)  # type: ignore[attr-defined]
    module.inference_mode = contextlib.nullcontext  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", module)
    for name in NAMES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield seen
    for name in NAMES:
        sys.modules.pop(name, None)  # the next import sees the real environment again


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(2)
    yield pool
    pool.shutdown(wait=True)


HANDLER = """
from ts.torch_handler.base_handler import BaseHandler


class Handler(BaseHandler):
    def preprocess(self, data):
        return super().preprocess([float(row.get("body") or row.get("data")) for row in data])
"""


def model_dir(tmp_path: Path, *, model_file: str | None = None) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "handler.py").write_text(textwrap.dedent(HANDLER), encoding="utf-8")
    (src / "model.pt").write_bytes(b"weights")
    (src / "index_to_name.json").write_text(json.dumps({"0": "zero"}), encoding="utf-8")
    extra: dict[str, Any] = {}
    if model_file is not None:
        (src / "net.py").write_text(textwrap.dedent(model_file), encoding="utf-8")
        extra["model_file"] = src / "net.py"
    return archive_model(
        model_name="based",
        handler=src / "handler.py",
        export_path=tmp_path / "store",
        serialized_file=src / "model.pt",
        extra_files=[src / "index_to_name.json"],
        archive_format="no-archive",
        **extra,
    )


@pytest.mark.anyio
async def test_a_torchscript_model_runs_preprocess_inference_postprocess(
    tmp_path: Path, executor: ThreadPoolExecutor, torch: Any
) -> None:
    inst = await load(model_dir(tmp_path), executor)
    assert await inst.predict(b"2", FakeRequest()) == 6.0
    assert torch.calls == [("jit.load", "model.pt", "cpu")]


NET = """
class Net:
    def __init__(self):
        self.weight = None
        self.device = None

    def load_state_dict(self, state):
        self.weight = state["weight"]

    def to(self, device):
        self.device = device
        return self

    def eval(self):
        return self

    def __call__(self, tensor):
        return type(tensor)([v * self.weight for v in tensor.values], tensor.device)
"""


@pytest.mark.anyio
async def test_a_model_file_class_gets_its_state_dict(
    tmp_path: Path, executor: ThreadPoolExecutor, torch: Any
) -> None:
    inst = await load(model_dir(tmp_path, model_file=NET), executor)
    assert await inst.predict(b"2", FakeRequest()) == 10.0
    assert torch.calls == [("load", "model.pt", "cpu")]


def test_a_gpu_id_with_cuda_picks_that_device(tmp_path: Path, torch: Any) -> None:
    torch.cuda = True
    shim = importlib.import_module(SHIM)
    handler = shim.BaseHandler()
    (tmp_path / "model.pt").write_bytes(b"")
    context = types.SimpleNamespace(
        system_properties={"gpu_id": 1, "model_dir": str(tmp_path)},
        manifest={"model": {"serializedFile": "model.pt"}},
        model_yaml_config={},
    )
    handler.initialize(context)
    assert (handler.map_location, handler.device.name) == ("cuda", "cuda:1")
    assert handler.model.device is handler.device and handler.model.evaluating
    assert torch.calls == [("jit.load", "model.pt", "cuda:1")]
    assert handler.mapping is None  # no index_to_name.json here
    assert handler.initialized


def test_without_torch_the_import_error_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    for name in NAMES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ImportError, match="needs torch.*without BaseHandler"):
        importlib.import_module(SHIM)
    for name in NAMES:
        sys.modules.pop(name, None)


class _ExplainContext:
    """What BaseHandler.handle reads of a context: the explain header and the metrics."""

    def __init__(self, explain: str) -> None:
        self.explain = explain
        self.times: list[str] = []
        self.metrics = types.SimpleNamespace(add_time=lambda name, *a: self.times.append(name))

    def get_request_header(self, idx: int, key: str) -> str | None:
        return self.explain if key == "explain" else None


def test_handle_calls_explain_handle_on_an_explanation(torch: Any) -> None:
    base = importlib.import_module("podium.compat.ts.torch_handler.base_handler")

    class Explained(base.BaseHandler):  # type: ignore[name-defined,misc]
        def preprocess(self, data: Any) -> Any:
            return [row["body"]["x"] for row in data]

        def inference(self, data: Any, *args: Any, **kwargs: Any) -> Any:
            return [x * 2 for x in data]

        def postprocess(self, data: Any) -> Any:
            return data

        def get_insights(self, tensor_data: Any, raw_data: Any, target: Any = 0) -> Any:
            return [{"inputs": tensor_data, "raw": raw_data, "target": target}]

    handler = Explained()
    rows = [{"body": {"x": 3}, "target": 2}]
    predicted = _ExplainContext("False")
    assert handler.handle(rows, predicted) == [6]
    explained = _ExplainContext("True")
    # TorchServe's explain_handle: the first row's data/body and its target
    assert handler.handle(rows, explained) == [{"inputs": [3], "raw": {"x": 3}, "target": 2}]
    assert handler.explain is True and explained.times == ["HandlerTime"]

    class Plain(Explained):
        get_insights = None  # type: ignore[assignment]

    with pytest.raises(NotImplementedError, match="Plain defines no get_insights"):
        Plain().handle(rows, _ExplainContext("True"))
