"""TorchServe's default handlers end to end: small real models archived by ``podium archive
--handler image_classifier`` (and ``text_classifier``), served by a real ``podium serve``
without the ``torchserve`` package, called over HTTP with httpx as TorchServe's users call them
(``curl -T image.jpg``, a text body). Skipped without torch or Pillow."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("torch")
np = pytest.importorskip("numpy")
Image = pytest.importorskip("PIL.Image")

from conftest import Server, run_server  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "model"))
from ts_default_models import LABELS, TEXTS, build  # noqa: E402

# the server loads TorchScript files, which torch now deprecates (not yet removes)
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated")


def _archive(kind: str, work: Path, store: Path) -> Path:
    files = build(kind, work / kind)
    cmd = [sys.executable, "-m", "podium", "archive", "--model-name", kind, "--handler", kind,
           "--version", "1.0", "--export-path", str(store),
           "--serialized-file", str(files["serialized_file"])]  # fmt: skip
    if files.get("extra_files"):  # comma-separated, as torch-model-archiver takes them
        cmd += ["--extra-files", ",".join(map(str, files["extra_files"]))]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return store / f"{kind}.mar"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("ts-default")
    store = work / "store"
    mars = [_archive(kind, work, store) for kind in ("image_classifier", "text_classifier")]
    with run_server(*mars) as running:
        yield running


def test_an_image_put_as_the_body_gets_its_top5_labels(server: Server) -> None:
    pixels = np.random.RandomState(7).randint(0, 256, (240, 320, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG")
    with httpx.Client(base_url=server.url, timeout=60) as client:
        r = client.put("/predictions/image_classifier", content=out.getvalue())
        assert r.status_code == 200, r.text
        answer = r.json()
        assert len(answer) == 5 and set(answer) <= set(LABELS)
        probs = list(answer.values())
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0 + 1e-6
        again = client.post("/predictions/image_classifier/1.0", content=out.getvalue()).json()
        assert again == answer
        bad = client.post("/predictions/image_classifier", content=b"GIF89a but not really")
        assert bad.status_code == 400
        assert "request 0: the body is not an image Pillow can read" in bad.json()["message"]


def test_a_text_body_gets_every_class_probability(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        r = client.post(
            "/predictions/text_classifier",
            content=TEXTS[0].encode(),
            headers={"content-type": "text/plain"},
        )
    assert r.status_code == 200, r.text
    answer = r.json()
    assert list(answer) == ["World", "Sports", "Business", "Sci/Tec"]
    assert sum(answer.values()) == pytest.approx(1.0)
