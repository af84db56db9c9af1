"""The layering of docs/architecture.md, read from the imports of every module under src/podium.

Every ``import`` / ``from ... import`` statement counts: at the top of a module, inside a function
(a lazy import is a dependency all the same) and under ``if TYPE_CHECKING:`` (an annotation that
names a type from a higher layer points up as much as a call does; types that several layers
share live in a low one, ``podium.types``). Each imported name is resolved to what it names: a
module (``from podium import codecs`` is ``podium.codecs``) or a name in one.

The rules:

1. **Layer order.** Each module belongs to one layer of :data:`LAYERS` (the table fails the test
   when a new module is not placed). A module imports modules of its own layer and of the layers
   below, never of one above.
2. **The data plane is the front ends' one way down.** Nothing under ``podium/server/`` imports
   ``podium.runtime`` (registry, loading, scheduling, execution). The CLI may, for its offline
   commands (``check``).
3. **No foreign private import.** A module's *package* is the top-level package it is in
   (``podium.runtime``, ``podium.model``, ``podium.server``, ...; for a module directly in
   ``podium``, such as ``podium.config``, the modules directly in ``podium``). A private name
   (one starting with ``_``, not a dunder, as a module or in one) belongs to the package that
   holds it; a module imports the private names of its own package (and of its subpackages:
   ``runtime/sequences/`` may import ``runtime/_line``), never another package's. Other
   packages import what a package's ``__init__`` re-exports, or its public modules.
4. No web or gRPC library in ``runtime/`` and ``model/``.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from import_graph import SRC, imports_of, is_module, module_name

#: From the top (docs/architecture.md). A module is in the layer of the longest entry that is
#: it or a package holding it; ``podium`` itself (its ``__init__``: the users' names, re-exported
#: from ``types`` and ``errors``) is a foundation. A package ``__init__`` that re-exports several
#: layers (``podium.runtime``) sits with the highest of them.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # podium.ray: the models as a Ray Serve application; its ingress is the HTTP front end
    # podium.openai: the OpenAI model contract's types, re-exported from the front end that owns them
    (
        "front ends",
        (
            "podium.server",
            "podium.cli",
            "podium._mlserver_start",
            "podium.__main__",
            "podium.ray",
            "podium.openai",
        ),
    ),
    ("data plane", ("podium.dataplane",)),
    (
        "registry",
        (
            "podium.runtime",
            "podium.runtime.registry",
            "podium.runtime.loading",
            # a version's response cache: the registry empties it on unload, reload, removal
            "podium.runtime._cache",
        ),
    ),
    (
        "scheduling",
        (
            "podium.runtime.direct",
            "podium.runtime.batcher",
            "podium.runtime.sequences",
            "podium.runtime.continuous",
            "podium.runtime._scheduler",
            "podium.runtime._collector",
            "podium.runtime._items",
        ),
    ),
    (
        "execution",
        (
            "podium.runtime.workers",
            "podium.runtime._worker",
            "podium.runtime._thread_worker",
            "podium.runtime.process",
            "podium.runtime._gate",
            "podium.runtime._device_share",
            "podium.runtime._line",
            # the clock every wait is timed by: schedulers' delays and the line's deadlines
            "podium.runtime._clock",
            "podium.runtime._stats",
            "podium.runtime.devices",
        ),
    ),
    # compat/ is the import paths the contracts give user code: ts.* re-exports the TorchServe
    # adapter's classes, and the adapters install both.
    ("model contracts", ("podium.model", "podium.compat")),
    (
        "foundations",
        (
            "podium",
            "podium.types",
            "podium._instances",
            "podium.codecs",
            "podium.errors",
            "podium.config",
            "podium._model_fields",
            "podium._server_fields",
            "podium.logs",
            "podium.heap",
            "podium.turn",
            "podium._properties",
            "podium._torchserve_start",
            "podium.metrics",
            "podium.tracing",
            "podium.devices",
            # the OS scheduling policy of the threads Podium hands work to
            "podium.sched",
        ),
    ),
]

WEB_OR_GRPC = {"starlette", "uvicorn", "granian", "fastapi", "grpc", "google", "httptools"}


def target_module(target: str) -> str:
    """The module an import's target is in: itself when it is a module, else its parent."""
    return target if is_module(target) else target.rpartition(".")[0]


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or (prefix != "podium" and module.startswith(prefix + "."))
            if matches and len(prefix) > best:
                best, rank = len(prefix), index
    return rank


def unit_of(module: str, is_package: bool) -> str:
    """The top-level package a module is in (``podium`` for a module directly in it)."""
    parts = module.split(".")
    if len(parts) >= 2 and (is_package or len(parts) >= 3):
        return ".".join(parts[:2])
    return "podium"


def private_owner(target: str) -> str | None:
    """The package or module holding the first private part of ``target``; None if none is."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not (part.startswith("__") and part.endswith("__")):
            return ".".join(parts[:i])
    return None


def violations(path: Path, source: str | None = None) -> list[str]:
    """What the module at ``path`` breaks of rules 1 to 3 (``source``: its text, if given)."""
    name = module_name(path)
    unit = unit_of(name, path.name == "__init__.py")
    mine = layer_of(name)
    found: list[str] = []
    for imp in imports_of(path, source):
        theirs = layer_of(target_module(imp.target))
        if theirs < mine:
            found.append(
                f"{imp}: the {LAYERS[mine][0]} layer imports the {LAYERS[theirs][0]} layer above it"
            )
        if name.startswith("podium.server") and target_module(imp.target).startswith(
            "podium.runtime"
        ):
            found.append(f"{imp}: a front end reaches the runtime only through the data plane")
        owner = private_owner(imp.target)
        if owner is not None:
            own = owner == unit if unit == "podium" else (owner + ".").startswith(unit + ".")
            if not own:
                found.append(f"{imp}: a private name of {owner}, outside {unit}")
    return found


def modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    unplaced = [module_name(p) for p in modules() if layer_of(module_name(p)) < 0]
    assert not unplaced, f"place these in LAYERS (and docs/architecture.md): {unplaced}"


def test_imports_follow_the_layers_and_import_no_foreign_private_name() -> None:
    found = [v for path in modules() for v in violations(path)]
    assert not found, "\n".join(found)


def test_runtime_and_model_import_no_web_or_grpc_library() -> None:
    for layer in ("runtime", "model"):
        for path in (SRC / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = {node.module.split(".")[0]}
                else:
                    continue
                bad = names & WEB_OR_GRPC
                assert not bad, f"{path.relative_to(SRC)} imports {sorted(bad)}"


# -- the rules catch what they say: each case below is a line added to a real module ------------


@pytest.mark.parametrize(
    ("module", "line", "says"),
    [
        # an import of a layer above, at the top, in a function, and for type checking only
        ("runtime/workers.py", "from .registry import Registry", "execution layer imports"),
        (
            "model/native.py",
            "def f():\n    from ..runtime import Registry",
            "model contracts layer",
        ),
        (
            "types.py",
            "if TYPE_CHECKING:\n    from .dataplane import DataPlane",
            "foundations layer",
        ),
        ("codecs/_raw.py", "import podium.model", "foundations layer imports"),
        ("dataplane/_plane.py", "from ..server import Podium", "data plane layer imports"),
        # a front end past the data plane
        ("server/grpc/_oip.py", "from ...runtime import Registry", "only through the data plane"),
        # another package's private module or name
        ("dataplane/_plane.py", "from ..runtime._scheduler import Scheduler", "podium.runtime,"),
        ("cli.py", "from .server._runner import Podium", "private name of podium.server,"),
        ("compat/ts/context.py", "from podium.model.torchserve import _model", "podium.model"),
        ("server/_runner.py", "from ..dataplane._plane import DataPlane", "podium.dataplane,"),
        ("server/http/_app.py", "from ...runtime.workers import _READY", "podium.runtime.workers"),
    ],
)
def test_a_violation_fails(module: str, line: str, says: str) -> None:
    path = SRC / module
    assert not violations(path)
    found = violations(path, path.read_text() + "\n" + line + "\n")
    assert any(says in v for v in found), found


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("runtime/sequences/_lane.py", "from .._line import Line"),  # its own package's private
        ("server/management/_app.py", "from ..http._responses import send_body"),
        ("config.py", "from ._model_fields import FIELDS"),  # podium's own modules
        ("runtime/registry.py", "from ..model import ModelSource"),  # a layer below
        ("cli.py", "from .runtime import check_paths"),
    ],
)
def test_what_the_rules_allow(module: str, line: str) -> None:
    path = SRC / module
    assert not violations(path, path.read_text() + "\n" + line + "\n")


_IMPORT_EACH_FIRST = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "podium" or m.startswith("podium.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {exc!r}")
print("\\n".join(failed))
"""


@pytest.mark.slow
def test_every_module_imports_first() -> None:
    """Re-exports make cycles easy to write: each module imports in a fresh state, before any
    other of Podium's (the ones a ``python -m`` runs, ts's BaseHandler, which needs torch, and,
    where Ray is not installed, podium.ray's modules that run only inside Ray, aside)."""
    needs_ray = (
        set() if importlib.util.find_spec("ray") else {"_ingress.py", "_remote.py", "_router.py"}
    )
    names = [
        module_name(p)
        for p in modules()
        if p.name != "__main__.py"
        and p.parent.name != "torch_handler"
        and not (p.parent.name == "ray" and p.name in needs_ray)
    ]
    env = {**os.environ, "PYTHONPATH": str(SRC.parent)}
    # in two processes at once, each a half of the modules (the suite runs on one core: this
    # test alone takes the other's)
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _IMPORT_EACH_FIRST, *names[half::2]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for half in (0, 1)
    ]
    try:
        for run in runs:
            out, err = run.communicate(timeout=110)
            assert run.returncode == 0, err
            assert not out.strip(), out
    finally:
        for run in runs:
            run.kill()
            run.wait()
