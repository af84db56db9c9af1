"""The helpers TorchServe's handlers import (``ts.utils.util``, ``ts.handler_utils.*``) and the
image transforms of Podium's default handlers, checked value by value; and archiving a model
under a default handler's name. The transforms need torch and Pillow (skipped without)."""

from __future__ import annotations

import json
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest

from podium.compat.ts.handler_utils.text_utils import get_tokenizer, ngrams_iterator
from podium.compat.ts.handler_utils.utils import import_class
from podium.compat.ts.utils.util import (
    CLEANUP_REGEX,
    PT2Backend,
    check_valid_pt2_backend,
    deprecated,
    load_label_mapping,
    map_class_to_label,
)

# -- the ts import paths --------------------------------------------------------------------


def test_the_ts_import_paths_are_podiums_modules_themselves() -> None:
    """``ts.utils.util`` is the module ``podium.compat.ts.utils.util`` (not a copy of it), so a
    class defined there is one class under both paths; a module Podium lacks is not found."""
    import importlib

    import podium.compat.ts.utils.util as ours
    from podium.model.torchserve import install_ts_shim

    if not install_ts_shim():
        pytest.skip("the real torchserve package is installed")
    assert importlib.import_module("ts.utils.util") is ours
    assert importlib.import_module("ts").__name__ == "podium.compat.ts"
    assert ours.logger.name == "ts.utils.util"  # TorchServe's logger name, either way
    with pytest.raises(ModuleNotFoundError, match="ts.no_such_module"):
        importlib.import_module("ts.no_such_module")


# -- ts.utils.util -------------------------------------------------------------------------


def test_map_class_to_label_with_and_without_classes_and_mapping() -> None:
    probs = [[0.1, 0.9], [0.7, 0.3]]
    assert map_class_to_label(probs) == [{"0": 0.1, "1": 0.9}, {"0": 0.7, "1": 0.3}]
    mapping = {"0": "cat", "1": "dog", "5": "fox"}
    assert map_class_to_label(probs, mapping) == [
        {"cat": 0.1, "dog": 0.9},
        {"cat": 0.7, "dog": 0.3},
    ]
    top = map_class_to_label([[0.9, 0.1]], mapping, [[1, 5]])
    assert top == [{"dog": 0.9, "fox": 0.1}] and list(top[0]) == ["dog", "fox"]
    with pytest.raises(TypeError, match="to a list"):
        map_class_to_label((0.1,))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a dict"):
        map_class_to_label(probs, ["cat"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"0": "cat", "1": "dog"}, {"0": "cat", "1": "dog"}),
        ({"0": ["n02123045", "tabby"], "1": ["x", "y", "dog"]}, {"0": "tabby", "1": "dog"}),
        (
            {"object_type_names": ["__background__", "person"]},
            {"0": "__background__", "1": "person"},
        ),
    ],
)
def test_label_mappings_are_read_as_torchserve_reads_them(
    tmp_path: Path, content: dict[str, Any], expected: dict[str, str]
) -> None:
    path = tmp_path / "index_to_name.json"
    path.write_text(json.dumps(content))
    assert load_label_mapping(str(path)) == expected


def test_a_label_mapping_that_is_not_labels_is_refused_and_a_missing_one_is_none(
    tmp_path: Path,
) -> None:
    assert load_label_mapping(str(tmp_path / "absent.json")) is None
    path = tmp_path / "index_to_name.json"
    path.write_text(json.dumps({"0": 7}))
    with pytest.raises(ValueError, match="label '0' must be a string"):
        load_label_mapping(str(path))
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must be a JSON object"):
        load_label_mapping(str(path))


def test_cleanup_regex_backends_and_deprecated() -> None:
    assert CLEANUP_REGEX.sub("", "<b>fish</b> &amp; chips&#39;&#x27;") == "fish  chips"
    assert check_valid_pt2_backend("inductor") and PT2Backend("inductor") is PT2Backend.INDUCTOR
    assert not check_valid_pt2_backend("warp-drive")

    @deprecated("0.99", "new_thing")
    def old(x: int) -> int:
        return x + 1

    with pytest.warns(PendingDeprecationWarning, match="old is deprecated in 0.99"):
        assert old(1) == 2


# -- ts.handler_utils ----------------------------------------------------------------------


def test_basic_english_tokens_and_ngrams() -> None:
    tokenize = get_tokenizer("basic_english")
    assert tokenize('You can\'t "quote" me, (ok)? Fine! a;b:c<br />end.') == [
        "you", "can", "'", "t", "quote", "me", ",", "(", "ok", ")", "?", "fine", "!",
        "a", "b", "c", "end", ".",
    ]  # fmt: skip
    assert get_tokenizer(None)("a  b\tc") == ["a", "b", "c"]
    with pytest.raises(ValueError, match="only for English"):
        get_tokenizer("basic_english", language="de")
    with pytest.raises(ValueError, match="not available without torchtext"):
        get_tokenizer("spacy")
    assert list(ngrams_iterator(["here", "we", "are"], 2)) == [
        "here", "we", "are", "here we", "we are",
    ]  # fmt: skip
    assert list(ngrams_iterator(["a", "b", "c"], 3))[-1] == "a b c"


def test_import_class_by_dotted_name_and_prefix() -> None:
    assert import_class("collections.OrderedDict").__name__ == "OrderedDict"
    assert import_class("OrderedDict", module_prefix="collections").__name__ == "OrderedDict"
    assert import_class("abc.Mapping", module_prefix="collections").__module__ == "collections.abc"
    with pytest.raises(ImportError, match="not found in module 'collections'"):
        import_class("collections.NoSuchThing")
    with pytest.raises(ImportError, match="module name is not defined"):
        import_class("OrderedDict")


class _Metrics:
    def __init__(self) -> None:
        self.times: list[tuple[str, float]] = []

    def add_time(self, name: str, value: float) -> None:
        self.times.append((name, value))


def test_timed_records_a_metric_only_when_the_model_config_asks() -> None:
    from podium.compat.ts.handler_utils.timer import timed

    class Handler:
        context: Any = None

        @timed
        def preprocess(self, data: int) -> int:
            return data * 2

    handler = Handler()
    assert handler.preprocess(2) == 4  # no context yet
    metrics = _Metrics()
    handler.context = types.SimpleNamespace(model_yaml_config={}, metrics=metrics)
    assert handler.preprocess(3) == 6 and metrics.times == []
    handler.context.model_yaml_config = {"handler": {"profile": False}}
    assert handler.preprocess(3) == 6 and metrics.times == []
    handler.context.model_yaml_config = {"handler": {"profile": True}}
    assert handler.preprocess(4) == 8
    assert [name for name, _ in metrics.times] == ["ts_handler_preprocess"]
    assert metrics.times[0][1] >= 0


# -- archiving under a default handler's name ----------------------------------------------


def test_podium_archive_takes_a_default_handlers_name(tmp_path: Path) -> None:
    weights = tmp_path / "model.pt"
    weights.write_bytes(b"weights")
    cmd = [sys.executable, "-m", "podium", "archive", "--model-name", "m", "--handler",
           "image_classifier", "--serialized-file", str(weights), "--export-path", str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(tmp_path / "m.mar") as mar:
        manifest = json.loads(mar.read("MAR-INF/MANIFEST.json"))
        assert sorted(mar.namelist()) == ["MAR-INF/MANIFEST.json", "model.pt"]
    assert manifest["model"]["handler"] == "image_classifier"
    # a name that is neither a file nor a default handler is still a missing file
    cmd[cmd.index("image_classifier")] = "image_clasifier"
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--handler image_clasifier: no such file" in done.stderr


# -- the image transforms ------------------------------------------------------------------

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
Image = pytest.importorskip("PIL.Image")

from podium.compat.ts.torch_handler._image import (  # noqa: E402
    CenterCrop,
    Normalize,
    Resize,
    ToTensor,
)


def noise(width: int, height: int, mode: str = "RGB") -> Any:
    pixels = np.random.RandomState(0).randint(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels).convert(mode)


@pytest.mark.parametrize(
    ("size", "expected"),
    [((300, 200), (384, 256)), ((200, 300), (256, 384)), ((257, 1000), (256, 996))],
)
def test_resize_scales_the_shorter_side_and_truncates_the_longer(
    size: tuple[int, int], expected: tuple[int, int]
) -> None:
    image = noise(*size)
    resized = Resize(256)(image)
    assert resized.size == expected
    assert resized.tobytes() == image.resize(expected, Image.Resampling.BILINEAR).tobytes()
    same = noise(256, 300)
    assert Resize(256)(same) is same


def test_center_crop_rounds_its_offsets_and_pads_a_small_image() -> None:
    image = noise(384, 257)
    cropped = CenterCrop(224)(image)
    # top = round(33 / 2) = round(16.5) = 16 (half to even), left = 80
    assert cropped.tobytes() == image.crop((80, 16, 304, 240)).tobytes()
    small = noise(100, 50)
    padded = CenterCrop(224)(small)
    assert padded.size == (224, 224)
    assert padded.crop((62, 87, 162, 137)).tobytes() == small.tobytes()
    assert padded.getpixel((0, 0)) == (0, 0, 0)


def test_to_tensor_by_mode() -> None:
    rgb = noise(4, 3)
    tensor = ToTensor()(rgb)
    assert tensor.shape == (3, 3, 4) and tensor.dtype == torch.float32
    assert tensor[:, 1, 2].tolist() == pytest.approx([v / 255 for v in rgb.getpixel((2, 1))])
    assert ToTensor()(rgb.convert("L")).shape == (1, 3, 4)
    assert ToTensor()(rgb.convert("RGBA")).shape == (4, 3, 4)
    floats = Image.fromarray(np.full((2, 2), 300.5, dtype=np.float32), mode="F")
    assert ToTensor()(floats).tolist() == [[[300.5, 300.5], [300.5, 300.5]]]
    bits = ToTensor()(Image.new("1", (2, 1), 1))
    assert bits.tolist() == [[[1.0, 1.0]]]


def test_normalize_per_channel_on_a_copy() -> None:
    tensor = torch.ones(3, 2, 2)
    out = Normalize([0.5, 0.0, 1.0], [0.5, 2.0, 1.0])(tensor)
    assert out[:, 0, 0].tolist() == [1.0, 0.5, 0.0]
    assert tensor.eq(1).all()
    with pytest.raises(ValueError, match="standard deviation of zero"):
        Normalize([0.0], [0.0])(tensor)
    with pytest.raises(TypeError, match="must be of floats, not torch.int32"):
        Normalize([0.0], [1.0])(torch.ones(1, 2, 2, dtype=torch.int32))
