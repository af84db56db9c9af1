"""TorchServe's default handlers, side by side: the real TorchServe 0.12 and Podium (its own
handlers in ``podium.compat.ts``, the ``torchserve`` package hidden from it) serve the same
``.mar`` files, built by the real ``torch-model-archiver``, and get the same requests.

Not part of the default test run (``tests/conftest.py`` ignores this folder). It needs a Python
with ``torchserve==0.12.0``, ``torch-model-archiver==0.12.0``, ``torch``, ``torchvision``,
``captum`` (TorchServe's vision and text handlers import it), Java 17 for TorchServe's frontend,
and Podium's own dependencies; Podium runs from this checkout's ``src/``::

    python3.11 -m venv /tmp/venv-ts
    /tmp/venv-ts/bin/pip install torchserve==0.12.0 torch-model-archiver==0.12.0 \\
        torch==2.14.1 torchvision==0.29.1 captum -r <(python3 - <<< 'import tomllib; \\
        print("\\n".join(tomllib.load(open("pyproject.toml","rb"))["project"]["dependencies"]))')
    /tmp/venv-ts/bin/python tests/conformance/ts_default_handlers.py [--write-doc]

Models (fixed seeds, nothing downloaded): the tiny pure-torch models of
``tests/model/ts_default_models.py``, and torchvision's ``mobilenet_v3_small`` (classifier,
TorchScript), ``lraspp_mobilenet_v3_large`` (segmenter) and ``fasterrcnn_mobilenet_v3_large_320_fpn``
(detector, its class scores biased so that some boxes pass the threshold), the last two as a
``model.py`` class and its state dict, with ``weights=None``. Requests: images made with Pillow
(PNG, JPEG, greyscale, RGBA), bytes that are no image, and texts. Each answer is compared as
JSON, floats within a relative 1e-4 (the two servers' processes compute the same operations;
the tolerance covers thread counts), lists and dict keys in order. Then, in this process,
TorchServe's modules against Podium's (both import side by side: Podium's are
``podium.compat.ts.*``): the image transforms on every image mode and awkward sizes, the text
clean-up on tricky texts, and Captum's explanations. ``--write-doc`` puts the results into
``docs/torchserve.md`` between its markers.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import torch
import torchvision
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "model")]

from ts_default_models import TEXTS, build  # noqa: E402

DOC = ROOT / "docs" / "torchserve.md"
BEGIN, END = "<!-- ts-default-handlers:begin -->", "<!-- ts-default-handlers:end -->"
REL, ABS = 1e-4, 1e-6
LARGEST = [0.0]  # the largest difference between two floats compared

TORCHVISION_MODELS = """
import torch
from torchvision.models import mobilenet_v3_small
from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn
from torchvision.models.segmentation import lraspp_mobilenet_v3_large


class {name}(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = {factory}

    def forward(self, x):
        return self.net(x)
"""
FACTORIES = {
    "Segmenter": "lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=4)",
    "Detector": "fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, "
    "num_classes=4)",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- models -------------------------------------------------------------------------------


def eager(kind: str, dest: Path, tweak: Any = None) -> dict[str, Any]:
    """A torchvision model as ``model.py`` + state dict (weights=None, seed 0)."""
    dest.mkdir(parents=True, exist_ok=True)
    source = TORCHVISION_MODELS.format(name=kind, factory=FACTORIES[kind])
    (dest / "model.py").write_text(source)
    scope: dict[str, Any] = {}
    exec(compile(source, str(dest / "model.py"), "exec"), scope)  # noqa: S102 - our own text
    torch.manual_seed(0)
    model = scope[kind]().eval()
    if tweak is not None:
        tweak(model)
    torch.save(model.state_dict(), dest / "model.pth")
    mapping = dest / "index_to_name.json"
    mapping.write_text(json.dumps({"0": "__background__", "1": "cat", "2": "dog", "3": "bird"}))
    return {"serialized_file": dest / "model.pth", "model_file": dest / "model.py",
            "extra_files": [mapping]}  # fmt: skip


def biased_detector(model: Any) -> None:
    """Untrained, every box scores about 1/4; a bias on class 1 and 2 lets some pass 0.5."""
    with torch.no_grad():
        predictor = model.net.roi_heads.box_predictor.cls_score
        predictor.bias[1] += 3.0
        predictor.bias[2] += 2.0


def scripted_mobilenet(dest: Path) -> dict[str, Any]:
    dest.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small(weights=None, num_classes=10).eval()
    torch.jit.script(model).save(str(dest / "model.pt"))
    mapping = dest / "index_to_name.json"
    mapping.write_text(json.dumps({str(i): [f"n{i:08d}", f"class-{i}"] for i in range(10)}))
    return {"serialized_file": dest / "model.pt", "extra_files": [mapping]}


def archive(name: str, handler: str, files: dict[str, Any], store: Path) -> Path:
    """The real torch-model-archiver."""
    cmd = [str(Path(sys.executable).parent / "torch-model-archiver"), "--model-name", name,
           "--version", "1.0", "--handler", handler, "--export-path", str(store), "--force"]  # fmt: skip
    for key, value in files.items():
        flag = "--" + key.replace("_", "-")
        cmd += [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    subprocess.run(cmd, check=True, capture_output=True, cwd=store)
    return store / f"{name}.mar"


def renamed(mar: Path, name: str, handler: str) -> Path:
    """A copy of ``mar`` whose manifest names ``handler`` (a spelling the archiver refuses)."""
    out = mar.with_name(f"{name}.mar")
    with zipfile.ZipFile(mar) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "MAR-INF/MANIFEST.json":
                manifest = json.loads(data)
                manifest["model"]["modelName"] = name
                manifest["model"]["handler"] = handler
                data = json.dumps(manifest, indent=2).encode()
            dst.writestr(item, data)
    return out


def models(work: Path, store: Path) -> dict[str, str]:
    """Every archive: model name → the handler its manifest names."""
    made = {
        "tiny_classifier": ("image_classifier", build("image_classifier", work / "tc")),
        "mobilenet_classifier": ("image_classifier", scripted_mobilenet(work / "mc")),
        "tiny_segmenter": ("image_segmenter", build("image_segmenter", work / "ts")),
        "lraspp_segmenter": ("image_segmenter", eager("Segmenter", work / "ls")),
        "tiny_detector": ("object_detector", build("object_detector", work / "td")),
        "frcnn_detector": ("object_detector", eager("Detector", work / "fd", biased_detector)),
        "tiny_text": ("text_classifier", build("text_classifier", work / "tt")),
    }
    batched = dict(made["tiny_classifier"][1])
    batched["config_file"] = work / "batch-config.yaml"
    batched["config_file"].write_text("batchSize: 4\nmaxBatchDelay: 500\n")
    made["batched_classifier"] = ("image_classifier", batched)
    handlers = {}
    for name, (handler, files) in made.items():
        archive(name, handler, files, store)
        handlers[name] = handler
    tiny = store / "tiny_classifier.mar"
    for name, spelling in (
        ("dotted_classifier", "ts.torch_handler.image_classifier"),
        ("colon_classifier", "image_classifier:handle"),
    ):
        renamed(tiny, name, spelling)
        handlers[name] = spelling
    return handlers


# -- requests -----------------------------------------------------------------------------


def encoded(image: Image.Image, fmt: str) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


def images() -> dict[str, bytes]:
    noise = np.random.RandomState(0).randint(0, 256, (200, 300, 3), dtype=np.uint8)
    photo = Image.fromarray(noise)
    yy, xx = np.mgrid[0:320, 0:256]
    gradient = np.stack([xx % 256, yy % 256, (xx + yy) % 256], axis=-1).astype(np.uint8)
    shapes = Image.new("RGB", (360, 280), (30, 30, 30))
    shapes.paste((220, 40, 40), (40, 30, 160, 150))
    shapes.paste((40, 200, 60), (200, 120, 330, 260))
    return {
        "noise 300x200 PNG": encoded(photo, "PNG"),
        "gradient 256x320 JPEG": encoded(Image.fromarray(gradient), "JPEG"),
        "shapes 360x280 PNG": encoded(shapes, "PNG"),
        "greyscale 300x200 PNG": encoded(photo.convert("L"), "PNG"),
        "RGBA 300x200 PNG": encoded(photo.convert("RGBA"), "PNG"),
        "not an image (bytes)": b"\x00\x01 no image here " * 20,
    }


def requests_for(handler: str) -> dict[str, tuple[bytes, str]]:
    if handler == "text_classifier":
        return {
            "text 0": (TEXTS[0].encode(), "text/plain"),
            "text 1": (TEXTS[1].encode(), "text/plain"),
            "text with a word not in the vocabulary": (b"An unseen word", "text/plain"),
        }
    return {name: (body, "application/octet-stream") for name, body in images().items()}


# -- servers ------------------------------------------------------------------------------


@contextlib.contextmanager
def process(name: str, cmd: list[str], work: Path, env: dict[str, str]) -> Iterator[Path]:
    """``cmd`` in its own session, its output in ``work/name.log``; stopped on the way out."""
    log = work / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=work, start_new_session=True)  # fmt: skip
    try:
        yield log
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def wait_models(management: str, names: list[str], timeout: float, settle: float = 60) -> list[str]:
    """The models of ``names`` that report a ready worker: all of them, or those ready when
    ``settle`` seconds passed with no other becoming ready (a model that fails to load), or at
    ``timeout``."""
    deadline = time.monotonic() + timeout
    ready: set[str] = set()
    progress = time.monotonic()
    while time.monotonic() < deadline and len(ready) < len(names):
        if ready and time.monotonic() - progress > settle:
            break
        for name in set(names) - ready:
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, IndexError):
                described = httpx.get(f"{management}/models/{name}", timeout=5).json()
                workers = described[0].get("workers") or []
                if any(w.get("status") == "READY" for w in workers):
                    ready.add(name)
                    progress = time.monotonic()
        time.sleep(1)
    return sorted(ready)


@contextlib.contextmanager
def torchserve(store: Path, names: list[str], work: Path) -> Iterator[tuple[str, list[str]]]:
    ports = {k: free_port() for k in ("inference", "management", "metrics", "grpc", "grpcm")}
    props = work / "config.properties"
    # its own temporary directory: TorchServe keeps its pid file (one server per directory) and
    # its workers' sockets (.ts.sock.9000, ...) there, which another TorchServe would share
    private = work / "tmp"
    private.mkdir()
    props.write_text("\n".join([
        f"vmargs=-Djava.io.tmpdir={private}",
        f"inference_address=http://127.0.0.1:{ports['inference']}",
        f"management_address=http://127.0.0.1:{ports['management']}",
        f"metrics_address=http://127.0.0.1:{ports['metrics']}",
        f"grpc_inference_port={ports['grpc']}", f"grpc_management_port={ports['grpcm']}",
        f"model_store={store}", "load_models=" + ",".join(f"{n}.mar" for n in names),
        "default_workers_per_model=1", "disable_token_authorization=true",
        "disable_system_metrics=true", "install_py_dep_per_model=false", "",
    ]))  # fmt: skip
    env = dict(os.environ, LOG_LOCATION=str(work / "ts-logs"), METRICS_LOCATION=str(work))
    env["TMPDIR"] = str(private)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    cmd = [str(Path(sys.executable).parent / "torchserve"), "--start", "--foreground", "--ncs",
           "--disable-token-auth", "--model-store", str(store), "--ts-config", str(props)]  # fmt: skip
    with process("torchserve", cmd, work, env):
        ready = wait_models(f"http://127.0.0.1:{ports['management']}", names, 400)
        yield f"http://127.0.0.1:{ports['inference']}", ready


#: Podium with the real ``ts`` hidden (it is installed beside, for TorchServe): its own
#: ``podium.compat.ts`` handlers then serve the default handler names.
PODIUM = "import sys; sys.modules['ts'] = None; from podium.cli import main; sys.exit(main())"


@contextlib.contextmanager
def podium(store: Path, names: list[str], work: Path) -> Iterator[tuple[str, list[str]]]:
    ports = {k: free_port() for k in ("http", "grpc", "management", "grpcm", "metrics")}
    cmd = [sys.executable, "-c", PODIUM, "serve", *(str(store / f"{n}.mar") for n in names),
           "--host", "127.0.0.1", "--http-port", str(ports["http"]),
           "--grpc-port", str(ports["grpc"]), "--management-port", str(ports["management"]),
           "--grpc-management-port", str(ports["grpcm"]), "--metrics-port", str(ports["metrics"]),
           "--no-auth"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    with process("podium", cmd, work, env):
        ready = wait_models(f"http://127.0.0.1:{ports['management']}", names, 400)
        yield f"http://127.0.0.1:{ports['http']}", ready


# -- comparison ---------------------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Equal JSON values, floats within REL/ABS, dict keys in the same order."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        LARGEST[0] = max(LARGEST[0], abs(a - b))
        return math.isclose(a, b, rel_tol=REL, abs_tol=ABS)
    return bool(a == b)


def summary(status: int, body: Any) -> str:
    if status != 200:
        text = body.get("message", "") if isinstance(body, dict) else str(body)
        raised = text.partition(" raised ")[2].partition(":")[0]
        return f"{status} {raised or text.partition(' (')[0][:60]}"
    if isinstance(body, dict):
        return f"{len(body)} labels"
    if isinstance(body, list) and body and isinstance(body[0], list):
        return f"{len(body)}×{len(body[0])} pixels"
    return f"{len(body)} detections" if isinstance(body, list) else type(body).__name__


def ask_together(base: str, name: str) -> dict[str, tuple[int, Any]]:
    """Four images at once (a batch where the model's ``batchSize`` is 4)."""
    bodies = {label: body for label, body in images().items() if "PNG" in label or "JPEG" in label}
    chosen = list(bodies.items())[:3] + [("noise again", bodies["noise 300x200 PNG"])]
    with ThreadPoolExecutor(len(chosen)) as pool:
        futures = {
            f"together: {label}": pool.submit(ask, base, name, body, "application/octet-stream")
            for label, body in chosen
        }
    return {label: future.result() for label, future in futures.items()}


def ask(base: str, name: str, body: bytes, ctype: str) -> tuple[int, Any]:
    r = httpx.post(f"{base}/predictions/{name}", content=body,
                   headers={"content-type": ctype}, timeout=120)  # fmt: skip
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, r.text


# -- in one process: the pieces, TorchServe's module against Podium's ----------------------


def modes_and_sizes() -> Iterator[tuple[str, Any]]:
    """Images of every mode the transforms treat apart, at sizes around the crop and resize."""
    rng = np.random.RandomState(1)
    sizes = [(300, 200), (200, 300), (256, 256), (257, 1000), (224, 224), (100, 50), (223, 225),
             (31, 400), (640, 480), (1, 1)]  # fmt: skip
    for width, height in sizes:
        rgb = Image.fromarray(rng.randint(0, 256, (height, width, 3), dtype=np.uint8))
        for mode in ("RGB", "L", "RGBA", "P", "1", "I", "F"):
            yield f"{mode} {width}x{height}", rgb.convert(mode)
    wide = rng.randint(0, 65536, (40, 30), dtype=np.uint16)
    yield "I;16 30x40", Image.fromarray(wide)  # uint16: Pillow's I;16


def compare_pieces() -> list[str]:
    """Podium's transforms, text clean-up and explanations against TorchServe's own modules
    (both import in one process: Podium's are ``podium.compat.ts.*``, TorchServe's ``ts.*``)."""
    from captum.attr import IntegratedGradients, LayerIntegratedGradients
    from ts.torch_handler import image_classifier as ts_ic
    from ts.torch_handler import object_detector as ts_od
    from ts.torch_handler import text_classifier as ts_tc
    from ts_default_models import TinyClassifier, TinyTextClassifier, vocabulary

    from podium.compat.ts.torch_handler import image_classifier as pd_ic
    from podium.compat.ts.torch_handler import object_detector as pd_od
    from podium.compat.ts.torch_handler import text_classifier as pd_tc

    lines = []
    counts = {"same": 0, "both raise": 0, "differ": 0}
    failures = []
    for label, image in modes_and_sizes():
        for name, ts_t, pd_t in (
            ("image_classifier", ts_ic.ImageClassifier.image_processing,
             pd_ic.ImageClassifier.image_processing),
            ("object_detector", ts_od.ObjectDetector.image_processing,
             pd_od.ObjectDetector.image_processing),
        ):  # fmt: skip
            outcome = []
            for transform in (ts_t, pd_t):
                try:
                    outcome.append(transform(image.copy()))
                except Exception as exc:  # noqa: BLE001 - compared, not handled
                    outcome.append(type(exc))
            a, b = outcome
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
                equal = a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
                verdict = "same" if equal else "differ"
            else:
                verdict = "both raise" if a is b else "differ"
            counts[verdict] += 1
            if verdict == "differ":
                failures.append(f"{name} {label}")
    lines.append(
        f"- image transforms (`image_classifier`'s and `object_detector`'s `image_processing`, "
        f"torchvision's against Podium's) on {sum(counts.values())} images of modes RGB, L, RGBA, "
        f"P, 1, I, F, I;16 and sizes from 1×1 to 640×480: {counts['same']} tensors equal "
        f"(dtype, shape, every value), {counts['both raise']} raise on both, "
        f"{counts['differ']} differ{': ' + ', '.join(failures[:5]) if failures else ''}."
    )
    texts = [*TEXTS, "I'D say Y'all'd've LIKED it; don't you?", "<p>Naïve café &eacute; résumé</p>",
             "They'll've can't've won't've o'clock ma'am", "Ünïcödé — quotes “like” ‘this’ & that",
             "shan't sha'n't SHAN'T so's also's", "", "   ", "It's 5 o'clock: time's up!!!"]  # fmt: skip
    ts_h, pd_h = ts_tc.TextClassifier(), pd_tc.TextClassifier()
    same_text = 0
    for text in texts:
        steps = []
        for h in (ts_h, pd_h):
            t = h._remove_html_tags(text).lower()
            t = h._expand_contractions(t)
            t = h._remove_accented_characters(t)
            steps.append(h._tokenize(h._remove_punctuation(t)))
        same_text += steps[0] == steps[1]
    lines.append(f"- text clean-up and tokens (`text_classifier`): {same_text} of {len(texts)} "
                 "texts give the same tokens.")  # fmt: skip
    torch.manual_seed(0)
    model = TinyClassifier().eval()
    tensor = pd_ic.ImageClassifier.image_processing(next(modes_and_sizes())[1]).unsqueeze(0)
    ts_v, pd_v = ts_ic.ImageClassifier(), pd_ic.ImageClassifier()
    for h in (ts_v, pd_v):
        h.model, h.device, h.ig = model, torch.device("cpu"), None
    ts_v.ig = IntegratedGradients(model)
    a = torch.tensor(ts_v.get_insights(tensor, None, 3))
    b = torch.tensor(pd_v.get_insights(tensor, None, 3))
    vocab = vocabulary(TEXTS)
    text_model = TinyTextClassifier(len(vocab)).eval()
    for h in (ts_h, pd_h):
        h.model, h.device, h.source_vocab, h.mapping = text_model, torch.device("cpu"), vocab, None
    ts_h.lig = LayerIntegratedGradients(text_model, text_model.embedding)
    row = [{"body": TEXTS[0].encode()}]
    c, d = (h.get_insights(h.preprocess(row), None, 1) for h in (ts_h, pd_h))
    lines.append(
        "- explanations (`get_insights`, Captum): the image classifier's attributions "
        f"{'equal' if torch.allclose(a, b, rtol=1e-5, atol=1e-7) else 'DIFFER'} "
        f"({a.numel()} values), the text classifier's "
        f"{'equal' if same(c, d) else 'DIFFER'} ({len(c[0]['words'])} words)."
    )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write-doc", action="store_true", help=f"update {DOC.name}")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ts-default-handlers-"))
    store = work / "store"
    store.mkdir()
    handlers = models(work / "models", store)
    names = sorted(handlers)
    rows: list[str] = []
    answers: dict[str, dict[str, tuple[int, Any]]] = {"torchserve": {}, "podium": {}}
    loaded: dict[str, list[str]] = {}
    for server, start in (("torchserve", torchserve), ("podium", podium)):
        with start(store, names, work) as (base, ready):
            if not ready:
                print(f"{server} loaded no model; its log: {work / server}.log", file=sys.stderr)
                return 1
            loaded[server] = ready
            for name in ready:
                kind = handlers[name].split(":")[0].split(".")[-1]
                if name == "batched_classifier":
                    for label, answer in ask_together(base, name).items():
                        answers[server][f"{name}|{label}"] = answer
                    continue
                for label, (body, ctype) in requests_for(kind).items():
                    answers[server][f"{name}|{label}"] = ask(base, name, body, ctype)
    counts = {"same": 0, "both refuse": 0, "only Podium loads the model": 0, "differs": 0}
    for name in names:
        if name not in loaded["torchserve"] or name not in loaded["podium"]:
            rows.append(f"| {name} | `{handlers[name]}` | (loading the model) | "
                        f"{'loaded' if name in loaded['torchserve'] else 'fails to load'} | "
                        f"{'loaded' if name in loaded['podium'] else 'fails to load'} | |")  # fmt: skip
        keys = list(dict.fromkeys(
            k for server in ("torchserve", "podium") for k in answers[server] if k.startswith(f"{name}|")
        ))  # fmt: skip
        for key in keys:
            ts, pd = answers["torchserve"].get(key), answers["podium"].get(key)
            if ts is None:
                verdict = "only Podium loads the model"
            elif pd is not None and ts[0] == pd[0] == 200 and same(ts[1], pd[1]):
                verdict = "same"
            elif pd is not None and ts[0] != 200 and pd[0] != 200:
                verdict = "both refuse"
            else:
                verdict = "differs"
            counts[verdict] += 1
            rows.append(
                f"| {name} | `{handlers[name]}` | {key.split('|', 1)[1]} | "
                f"{summary(*ts) if ts else '—'} | {summary(*pd) if pd else '—'} | {verdict} |"
            )
    said = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    table = "\n".join([
        f"torch {torch.__version__}, torchvision {torchvision.__version__}, TorchServe 0.12.0 "
        f"(`torch-model-archiver` 0.12.0). {sum(counts.values())} requests: {said}; the "
        f"largest difference between two numbers of the same answers: {LARGEST[0]:.3g}.",
        "",
        "| model | handler | request | TorchServe | Podium | answers |",
        "|---|---|---|---|---|---|",
        *rows,
    ])  # fmt: skip
    table += "\n\nIn one process, TorchServe's modules against Podium's:\n\n"
    table += "\n".join(compare_pieces())
    print(table)
    if args.write_doc:
        text = DOC.read_text()
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        DOC.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")
    if args.keep:
        print(f"work directory: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
