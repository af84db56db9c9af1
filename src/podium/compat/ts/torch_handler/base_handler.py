"""``ts.torch_handler.base_handler``: TorchServe's ``BaseHandler`` contract, for PyTorch models.

Loads the manifest's ``serializedFile`` (a TorchScript file, or the state dict of the one
``nn.Module`` class in ``modelFile``), then ``handle`` runs ``preprocess`` → ``inference`` →
``postprocess``. Importing it without torch installed raises an ``ImportError`` that says so.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from typing import Any

try:
    import torch
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "ts.torch_handler.base_handler needs torch: TorchServe's BaseHandler runs PyTorch models. "
        "Install torch in Podium's environment, or write the handler without BaseHandler "
        "(a class with initialize(context) and handle(data, context) needs no torch)"
    ) from exc

from podium.model.torchserve import list_classes_from_module
from podium.model.torchserve import load_label_mapping as _load_label_mapping

__all__ = ["BaseHandler"]


class BaseHandler:
    """Base class of TorchServe handlers for PyTorch models."""

    def __init__(self) -> None:
        self.model: Any = None
        self.mapping: Any = None
        self.device: Any = None
        self.initialized = False
        self.context: Any = None
        self.model_pt_path: str | None = None
        self.manifest: Any = None
        self.map_location: str | None = None
        self.explain = False
        self.target = 0
        self.model_yaml_config: dict[str, Any] = {}

    def initialize(self, context: Any) -> None:
        properties = context.system_properties
        gpu = properties.get("gpu_id")
        if gpu is not None and torch.cuda.is_available():
            self.map_location = "cuda"
            self.device = torch.device(f"cuda:{gpu}")
        else:
            self.map_location = "cpu"
            self.device = torch.device("cpu")
        self.manifest = context.manifest
        self.model_yaml_config = context.model_yaml_config
        model_dir = properties.get("model_dir")
        model = (self.manifest or {}).get("model", {})
        serialized = model.get("serializedFile")
        self.model_pt_path = os.path.join(model_dir, serialized) if serialized else None
        if model.get("modelFile"):
            self.model = self._load_pickled_model(model_dir, model["modelFile"], self.model_pt_path)
        elif self.model_pt_path:
            self.model = self._load_torchscript_model(self.model_pt_path)
        if self.model is not None:
            self.model.to(self.device)
            self.model.eval()
        self.mapping = _load_label_mapping(os.path.join(model_dir, "index_to_name.json"))
        self.initialized = True

    def _load_torchscript_model(self, model_pt_path: str) -> Any:
        return torch.jit.load(model_pt_path, map_location=self.device)

    def _load_pickled_model(
        self, model_dir: str, model_file: str, model_pt_path: str | None
    ) -> Any:
        path = os.path.join(model_dir, model_file)
        name = os.path.splitext(os.path.basename(model_file))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise RuntimeError(f"{path}: cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(name, module)
        spec.loader.exec_module(module)
        classes = list_classes_from_module(module)
        if len(classes) != 1:
            raise ValueError(f"{path}: expected exactly one class definition, found {classes}")
        model = classes[0]()
        if model_pt_path:
            model.load_state_dict(torch.load(model_pt_path, map_location=self.device))
        return model

    def preprocess(self, data: Any) -> Any:
        return torch.as_tensor(data, device=self.device)

    def inference(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        with torch.inference_mode():
            return self.model(data.to(self.device), *args, **kwargs)

    def postprocess(self, data: Any) -> Any:
        return data.tolist()

    def handle(self, data: Any, context: Any) -> Any:
        """``preprocess`` → ``inference`` → ``postprocess``; on ``/explanations`` (the request
        header ``explain: True``) ``preprocess`` → ``explain_handle``, as TorchServe's."""
        start = time.time()
        self.context = context
        if self._is_describe():
            output = [self.describe_handle()]
        else:
            data_preprocess = self.preprocess(data)
            if self._is_explain():
                output = self.explain_handle(data_preprocess, data)
            else:
                output = self.postprocess(self.inference(data_preprocess))
        context.metrics.add_time("HandlerTime", round((time.time() - start) * 1000, 2), None, "ms")
        return output

    def explain_handle(self, data_preprocess: Any, raw_data: Any) -> Any:
        """TorchServe's: ``get_insights(data_preprocess, inputs, target)`` with the first
        row's ``data`` (or ``body``) and ``target`` (default 0)."""
        inputs = None
        target: Any = 0
        row = raw_data[0]
        if isinstance(row, dict):
            inputs = row.get("data") or row.get("body")
            target = row.get("target") or 0
        get_insights = getattr(self, "get_insights", None)
        if get_insights is None:
            raise NotImplementedError(
                f"{type(self).__name__} defines no get_insights (TorchServe's explanations "
                "call it): define get_insights(tensor_data, raw_data, target) or override "
                "explain_handle"
            )
        return get_insights(data_preprocess, inputs, target)

    def _is_explain(self) -> bool:
        if self._header("explain") == "True":
            self.explain = True
            return True
        return False

    def _is_describe(self) -> bool:
        return self._header("describe") == "True"

    def _header(self, key: str) -> Any:
        """The first request's header ``key``; None without one, or without a request (a
        handler called directly, outside a server's batch, as tests do)."""
        if self.context is None:
            return None
        try:
            return self.context.get_request_header(0, key)
        except (RuntimeError, LookupError, AttributeError, TypeError):
            return None

    def describe_handle(self) -> Any:
        return None
