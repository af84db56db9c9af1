"""Finding and importing a TorchServe handler, as TorchServe's model loader does.

The manifest's ``handler`` names a file in the model directory (``handler.py``), optionally
with a function (``handler.py:my_handle``), an importable module, or one of TorchServe's
built-in handlers (``image_classifier``, ``ts.torch_handler.image_classifier``: the real
``torchserve`` package's when it is installed, else Podium's own in ``podium.compat.ts``).
A module with a ``handle`` function (or the named function) is a module-style handler,
initialised by calling ``handle(None, context)`` as TorchServe does. Otherwise the module must
define exactly one class: instantiated with no arguments, ``initialize(context)`` once, then
``handle(data, context)`` per batch (or, without ``handle``, ``preprocess`` → ``inference`` →
``postprocess`` as TorchServe's ``BaseHandler.handle`` calls them).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ...errors import DefinitionError
from .._modules import exec_file, folders_first

__all__ = [
    "BUILTIN_HANDLERS",
    "HandlerSpec",
    "PredictionException",
    "install_ts_shim",
    "list_classes_from_module",
    "load_handler",
    "load_label_mapping",
]

BUILTIN_HANDLERS = frozenset(
    {
        "base_handler",
        "image_classifier",
        "image_segmenter",
        "object_detector",
        "text_classifier",
        "text_handler",
        "vision_handler",
        "dali_image_classifier",
    }
)
#: The built-in handlers ``podium.compat.ts.torch_handler`` provides (without ``torchserve``).
PODIUM_HANDLERS = BUILTIN_HANDLERS - {"dali_image_classifier"}
_STREAMING_MARK = "send_intermediate_predict_response"
_path_lock = threading.RLock()


class PredictionException(Exception):
    """``ts.utils.util.PredictionException``: a handler's way to answer with its own status."""

    def __init__(self, message: str, error_code: int = 500) -> None:
        self.message = message
        self.error_code = error_code
        super().__init__(message)

    def __str__(self) -> str:
        return f"{self.message} : {self.error_code}"


def list_classes_from_module(module: ModuleType, parent_class: type | None = None) -> list[type]:
    """The classes defined in ``module`` itself (optionally only subclasses of ``parent_class``)."""
    classes = [
        member
        for _, member in inspect.getmembers(module, inspect.isclass)
        if member.__module__ == module.__name__
    ]
    if parent_class is not None:
        return [c for c in classes if issubclass(c, parent_class)]
    return classes


def load_label_mapping(mapping_file_path: str) -> dict[str, Any] | None:
    """The index → label mapping in an ``index_to_name.json`` style file; None without one.

    As TorchServe reads it: ``{"0": "cat"}``, ``{"0": ["n02123045", "cat"]}`` (the last item is
    the label) or ``{"object_type_names": ["cat", ...]}``; any other value is refused.
    """
    if not os.path.isfile(mapping_file_path):
        return None
    with open(mapping_file_path, encoding="utf-8") as f:
        mapping = json.load(f)
    if not isinstance(mapping, dict):
        raise ValueError(f"{mapping_file_path}: the label mapping must be a JSON object")
    names = mapping.get("object_type_names")
    if isinstance(names, list):
        return {str(index): name for index, name in enumerate(names)}
    labels: dict[str, Any] = {}
    for key, value in mapping.items():
        label = value[-1] if isinstance(value, list) and value else value
        if not isinstance(label, str):
            raise ValueError(
                f"{mapping_file_path}: label {str(key)[:64]!r} must be a string or a list "
                "ending in one"
            )
        labels[key] = label
    return labels


def install_ts_shim() -> bool:
    """Make ``import ts`` (and ``ts.context``, ...) resolve to ``podium.compat.ts``'s modules
    unless the real package is installed; True when Podium's import paths are in use."""
    import podium.compat.ts as shim

    return shim.IMPORT_PATHS.install()


@contextlib.contextmanager
def on_path(model_dir: Path) -> Iterator[None]:
    """``model_dir`` first on ``sys.path`` (TorchServe runs handlers from it), for imports of
    the handler's sibling files while it is imported and initialised."""
    entry = str(model_dir)
    with _path_lock:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        with _path_lock:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """A loaded handler: a module function, or the one class of the module."""

    label: str  # the manifest's handler, for messages
    function: Callable[..., Any] | None  # module style
    cls: type | None  # class style
    streams: bool  # its code calls send_intermediate_predict_response

    def instantiate(self) -> tuple[Callable[..., Any], Callable[[Any], Any] | None]:
        """(entry point called per batch, initialiser called once with the context)."""
        if self.function is not None:
            fn = self.function
            return fn, lambda ctx: fn(None, ctx)
        assert self.cls is not None
        obj = self.cls()
        handle = getattr(obj, "handle", None)
        if handle is None:
            handle = _default_handle(obj)
        return handle, getattr(obj, "initialize", None)


def _default_handle(obj: Any) -> Callable[[Any, Any], Any]:
    """``handle`` as TorchServe's BaseHandler has it, for a class that defines only the steps."""
    pre = getattr(obj, "preprocess", None)
    infer = getattr(obj, "inference", None)
    post = getattr(obj, "postprocess", None)

    def handle(data: Any, context: Any) -> Any:
        obj.context = context
        processed = data if pre is None else pre(data)
        if context.get_request_header(0, "explain") == "True":  # /explanations
            explain = getattr(obj, "explain_handle", None)
            if explain is None:
                raise NotImplementedError(
                    f"{type(obj).__name__} defines no explain_handle(data_preprocess, raw_data), "
                    "which an explanation calls (as TorchServe's BaseHandler.handle)"
                )
            return explain(processed, data)
        if infer is not None:
            processed = infer(processed)
        if post is not None:
            processed = post(processed)
        return processed

    return handle


def _check_callable(fn: Any, where: str, problems: list[str], owner: type | None = None) -> None:
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        problems.append(f"{where} is async; TorchServe handlers are plain (sync) functions")
        return
    try:
        signature = inspect.signature(fn)
        if owner is not None and inspect.isfunction(inspect.getattr_static(owner, "handle")):
            # looked up on the class: drop the instance parameter, whatever its name
            signature = signature.replace(parameters=list(signature.parameters.values())[1:])
        signature.bind(None, None)
    except TypeError:
        problems.append(f"{where} must take two arguments (data, context)")
    except ValueError:
        pass  # a builtin without a signature: let it be


def _streams(model_dir: Path) -> bool:
    """Whether the model's code calls ``send_intermediate_predict_response`` (read, not run)."""
    for count, path in enumerate(model_dir.rglob("*.py")):
        if count > 500:
            return True  # too much to read: stream, which is always correct
        try:
            if _STREAMING_MARK in path.read_text(encoding="utf-8", errors="replace"):
                return True
        except OSError:
            continue
    return False


def _missing_builtin(module_name: str, where: str, label: str) -> DefinitionError:
    provided = ", ".join(sorted(PODIUM_HANDLERS))
    return DefinitionError(
        f"{where}: handler '{label}' is TorchServe's built-in handler '{module_name}', which "
        f"needs the torchserve package (pip install torchserve); Podium provides {provided}"
    )


def load_handler(manifest: dict[str, Any], model_dir: Path, where: str) -> HandlerSpec:
    """Import the manifest's handler and check its shape; ``DefinitionError`` naming it."""
    label = manifest.get("model", {}).get("handler")
    if not isinstance(label, str) or not label.strip():
        raise DefinitionError(f"{where}: MANIFEST.json names no handler ('model.handler')")
    module_part, _, function_name = label.partition(":")
    module_name = module_part[:-3] if module_part.endswith(".py") else module_part
    module_name = module_name.replace("\\", "/").split("/")[-1]
    file = model_dir / f"{module_name}.py"
    shimmed = install_ts_shim()
    try:
        with folders_first(model_dir, [model_dir]):  # its siblings its own, not another's
            if file.is_file():
                module = exec_file(
                    file, "podium_ts_handler", f"{where}: handler '{label}' ({file})"
                )
            elif module_name in BUILTIN_HANDLERS:
                if shimmed and module_name not in PODIUM_HANDLERS:
                    raise _missing_builtin(module_name, where, label)
                module = importlib.import_module(f"ts.torch_handler.{module_name}")
            elif importlib.util.find_spec(module_name) is not None:
                module = importlib.import_module(module_name)
            else:
                raise DefinitionError(
                    f"{where}: handler '{label}' not found: no {module_name}.py in {model_dir}"
                )
    except DefinitionError:
        raise
    except Exception as exc:
        raise DefinitionError(
            f"{where}: importing handler '{label}' raised {type(exc).__name__}: {exc}"
        ) from exc
    streams = _streams(model_dir)
    problems: list[str] = []
    name = function_name or "handle"
    fn = getattr(module, name, None)
    if fn is not None and not inspect.isclass(fn):
        _check_callable(fn, f"handler '{label}': function '{name}'", problems)
        DefinitionError.check([f"{where}: {p}" for p in problems])
        return HandlerSpec(label, fn, None, streams)
    if function_name and function_name != "handle":  # ':handle' names a class's handle too
        raise DefinitionError(f"{where}: handler '{label}' has no function '{function_name}'")
    classes = list_classes_from_module(module)
    if len(classes) != 1:
        found = ", ".join(c.__name__ for c in classes) or "none"
        raise DefinitionError(
            f"{where}: handler '{label}' must define a handle(data, context) function or "
            f"exactly one class (found: {found})"
        )
    cls = classes[0]
    handle = getattr(cls, "handle", None)
    if handle is not None:
        _check_callable(handle, f"handler '{label}': {cls.__name__}.handle", problems, cls)
    elif not any(getattr(cls, m, None) for m in ("preprocess", "inference", "postprocess")):
        problems.append(
            f"handler '{label}': class {cls.__name__} has no handle(data, context) method "
            "(nor preprocess/inference/postprocess for the default handle)"
        )
    init = getattr(cls, "initialize", None)
    if init is not None and (inspect.iscoroutinefunction(init) or not callable(init)):
        problems.append(f"handler '{label}': {cls.__name__}.initialize must be a plain method")
    DefinitionError.check([f"{where}: {p}" for p in problems])
    return HandlerSpec(label, None, cls, streams)
