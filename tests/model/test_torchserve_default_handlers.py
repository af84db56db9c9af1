"""TorchServe's default handlers on Podium without the ``torchserve`` package: small real models
(``ts_default_models``) archived by Podium under the handler's plain name, loaded by the
TorchServe adapter, and asked with images made by Pillow and texts. Skipped without torch or
Pillow. The numbers are checked against TorchServe itself by
``tests/conformance/ts_default_handlers.py`` (``docs/torchserve.md``)."""

from __future__ import annotations

import base64
import io
import json
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
Image = pytest.importorskip("PIL.Image")

from ts_default_models import LABELS, TEXTS, build, model_dir, vocabulary  # noqa: E402
from ts_kit import FakeRequest, load  # noqa: E402

from podium.errors import DefinitionError, ModelError  # noqa: E402
from podium.types import Reply  # noqa: E402

# TorchServe's handlers load TorchScript files, which torch now deprecates (not yet removes)
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated")


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(2)
    yield pool
    pool.shutdown(wait=True)


def picture(width: int = 300, height: int = 200, seed: int = 0, fmt: str = "PNG") -> bytes:
    """A noisy RGB image (fixed seed), encoded."""
    pixels = np.random.RandomState(seed).randint(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, fmt)
    return out.getvalue()


def decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, bytes | str) else value


def scripted(root: Path) -> Any:
    return torch.jit.load(str(root / "model.pt"))


async def ask(instance: Any, body: Any, content_type: str = "image/png") -> Any:
    return decoded(await instance.predict(body, FakeRequest({"content-type": content_type})))


# -- image_classifier ---------------------------------------------------------------------


def expected_top5(root: Path, image: bytes) -> dict[str, float]:
    from ts.torch_handler.image_classifier import ImageClassifier

    tensor = ImageClassifier.image_processing(Image.open(io.BytesIO(image)))
    with torch.inference_mode():
        probs = torch.softmax(scripted(root)(tensor.unsqueeze(0)), dim=1)
    top, classes = torch.topk(probs, 5, dim=1)
    return {LABELS[c]: p for c, p in zip(classes[0].tolist(), top[0].tolist(), strict=True)}


@pytest.mark.anyio
@pytest.mark.parametrize(
    "handler", ["image_classifier", "ts.torch_handler.image_classifier", "image_classifier:handle"]
)
async def test_image_classifier_answers_the_top5_labels_by_any_spelling_of_its_name(
    tmp_path: Path, executor: ThreadPoolExecutor, handler: str
) -> None:
    root = model_dir("image_classifier", tmp_path, handler)
    instance = await load(root, executor)
    image = picture()
    answer = await ask(instance, image)
    assert list(answer) == list(expected_top5(root, image))
    assert answer == pytest.approx(expected_top5(root, image), rel=1e-6)
    assert set(answer) <= set(LABELS)  # ImageNet-style [synset, label] mapping: the label


@pytest.mark.anyio
async def test_image_as_jpeg_as_base64_form_field_and_as_a_tensor_list(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    root = model_dir("image_classifier", tmp_path)
    instance = await load(root, executor)
    jpeg = picture(fmt="JPEG")
    assert await ask(instance, jpeg, "image/jpeg") == pytest.approx(expected_top5(root, jpeg))
    boundary = "xyz"
    form = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="data"\r\n'
        "Content-Type: text/plain\r\n\r\n"
        f"{base64.b64encode(jpeg).decode()}\r\n--{boundary}--\r\n"
    ).encode()
    via_form = await ask(instance, form, f"multipart/form-data; boundary={boundary}")
    assert via_form == pytest.approx(expected_top5(root, jpeg))
    # a JSON list is the image tensor itself (C × H × W)
    tensor = torch.linspace(-1, 1, 3 * 16 * 16).reshape(3, 16, 16)
    with torch.inference_mode():
        probs = torch.softmax(scripted(root)(tensor.unsqueeze(0)), dim=1)
    listed = await ask(instance, json.dumps(tensor.tolist()).encode(), "application/json")
    assert max(listed.values()) == pytest.approx(probs.max().item())


@pytest.mark.anyio
async def test_bytes_that_are_not_an_image_are_a_400_naming_the_request(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    instance = await load(model_dir("image_classifier", tmp_path), executor)
    reply = await instance.predict(b"\x00not an image" * 1000, FakeRequest())
    assert isinstance(reply, Reply) and reply.status == 400
    message = reply.body["message"]
    assert message.startswith("request 0: the body is not an image Pillow can read")
    assert len(message) < 200  # the body is not echoed
    truncated = picture()[:300]
    reply = await instance.predict(truncated, FakeRequest())
    assert isinstance(reply, Reply) and reply.status == 400


@pytest.mark.anyio
async def test_a_batch_is_one_stacked_tensor_with_one_answer_per_image_in_order(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    root = model_dir("image_classifier", tmp_path, batch_size=3)
    instance = await load(root, executor)
    images = [picture(seed=1), picture(320, 240, seed=2), picture(200, 300, seed=3)]
    answers = await instance.predict(images, [FakeRequest() for _ in images])
    for image, answer in zip(images, answers, strict=True):
        assert decoded(answer) == pytest.approx(expected_top5(root, image), rel=1e-5)


# -- image_segmenter ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_image_segmenter_answers_each_pixels_class_and_probability(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    from ts.torch_handler.image_segmenter import ImageSegmenter

    root = model_dir("image_segmenter", tmp_path)
    instance = await load(root, executor)
    image = picture(280, 260, seed=4)
    answer = await ask(instance, image)
    assert len(answer) == 224 and all(len(row) == 224 for row in answer)
    tensor = ImageSegmenter.image_processing(Image.open(io.BytesIO(image))).unsqueeze(0)
    with torch.inference_mode():
        probs = torch.softmax(scripted(root)(tensor)["out"], dim=1)[0]
    best, classes = probs.max(dim=0)
    got = torch.tensor(answer)
    assert torch.equal(got[..., 0], classes.float())
    assert torch.allclose(got[..., 1], best, rtol=1e-6)
    assert len(set(classes.flatten().tolist())) > 1  # the answer is not one class everywhere


# -- object_detector ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_object_detector_keeps_scores_from_the_threshold_with_mapped_labels(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    root = model_dir("object_detector", tmp_path)
    instance = await load(root, executor)
    dark, bright = (Image.new("RGB", (64, 48), (v, v, v)) for v in (20, 235))
    answers = []
    for image in (dark, bright):
        out = io.BytesIO()
        image.save(out, "PNG")
        answers.append(await ask(instance, out.getvalue()))
    # index_to_name.json in the {"object_type_names": [...]} form: label 1 → LABELS[0], ...
    scale = 64 / 32
    first = [0.0, 0.0, 8.0 * scale, 8.0 * scale]
    second = [2.0 * scale, 3.0 * scale, 20.0 * scale, 12.0 * scale]
    third = [1.0 * scale, 1.0 * scale, 4.0 * scale, 6.0 * scale]
    level = 20 / 255
    assert answers[0] == [
        {LABELS[1]: second, "score": pytest.approx(0.9 - 0.6 * level)},
        {LABELS[2]: third, "score": pytest.approx(0.55)},
    ]
    level = 235 / 255
    assert answers[1] == [
        {LABELS[0]: first, "score": pytest.approx(0.3 + 0.6 * level)},
        {LABELS[2]: third, "score": pytest.approx(0.55)},
    ]


# -- text_classifier ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_text_classifier_cleans_tokenizes_and_answers_every_class(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    root = model_dir("text_classifier", tmp_path)
    instance = await load(root, executor)
    answer = await ask(instance, TEXTS[0].encode(), "text/plain")
    vocab = vocabulary(TEXTS)
    words = ["the", "movie", "was", "not", "bad", "i", "would", "watch", "it", "again"]
    bigrams = [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
    ids = torch.tensor([vocab[t] for t in words + bigrams])
    with torch.inference_mode():
        probs = torch.softmax(scripted(root)(ids, torch.tensor([0])), dim=1)[0]
    expected = dict(zip(["World", "Sports", "Business", "Sci/Tec"], probs.tolist(), strict=True))
    assert answer == pytest.approx(expected, rel=1e-6)
    # accents, an HTML entity and punctuation are cleaned as TorchServe cleans them
    assert "cafe" in vocab and "service a" in vocab
    assert set(await ask(instance, TEXTS[1].encode(), "text/plain")) == set(expected)


@pytest.mark.anyio
async def test_text_classifier_without_its_vocabulary_fails_to_load_naming_the_file(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    root = model_dir("text_classifier", tmp_path)
    (root / "source_vocab.pt").unlink()
    with pytest.raises((DefinitionError, ModelError), match=r"source_vocab\.pt"):
        await load(root, executor)


# -- what else is and is not there --------------------------------------------------------


@pytest.mark.anyio
async def test_dali_is_refused_at_load_naming_what_podium_provides(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    if "ts" in sys.modules and not sys.modules["ts"].__name__.startswith("podium"):
        pytest.skip("the real torchserve package is installed")
    root = model_dir("image_classifier", tmp_path, "dali_image_classifier")
    with pytest.raises(DefinitionError, match="needs the torchserve package.*image_classifier"):
        await load(root, executor)


@pytest.mark.anyio
async def test_a_handler_file_subclassing_image_classifier_keeps_its_own_settings(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    """As TorchServe's examples do (mnist_handler.py): a subclass with its own
    ``image_processing`` and ``topk``, imported from ``ts.torch_handler.image_classifier``."""
    from ts.torch_handler._image import Compose, Resize, ToTensor

    from podium.model.torchserve import archive_model

    files = tmp_path / "files"
    handler = files / "my_handler.py"
    files.mkdir()
    handler.write_text(
        "from ts.torch_handler.image_classifier import ImageClassifier\n"
        "from ts.torch_handler._image import Compose, Resize, ToTensor\n\n\n"
        "class Small(ImageClassifier):\n"
        "    topk = 2\n"
        "    image_processing = Compose([Resize(32), ToTensor()])\n"
    )
    built = build("image_classifier", files)
    root = archive_model(
        model_name="small", handler=handler, export_path=tmp_path / "store",
        archive_format="no-archive", **built,
    )  # fmt: skip
    instance = await load(root, executor)
    image = picture(64, 48)
    answer = await ask(instance, image)
    tensor = Compose([Resize(32), ToTensor()])(Image.open(io.BytesIO(image)))
    with torch.inference_mode():
        probs = torch.softmax(scripted(root)(tensor.unsqueeze(0)), dim=1)
    top, classes = torch.topk(probs, 2, dim=1)
    expected = {LABELS[c]: p for c, p in zip(classes[0].tolist(), top[0].tolist(), strict=True)}
    assert answer == pytest.approx(expected, rel=1e-6) and len(answer) == 2
