"""Small real PyTorch models for TorchServe's default handlers, made here with fixed seeds (no
download, no torchvision): their files, and a model directory laid out as an archive is.

``tests/model/test_torchserve_default_handlers.py`` serves them on Podium; the side-by-side
script ``tests/conformance/ts_default_handlers.py`` archives the same files with the real
``torch-model-archiver`` for TorchServe and Podium alike.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

#: The words of TEXTS (after the text handler's clean-up) and their bigrams get vocabulary ids.
TEXTS = [
    "The <b>movie</b> wasn't bad; I'd watch it again!",
    "Café food, terrible service &amp; a long wait.",
]
LABELS = ["cat", "dog", "bird", "fish", "horse", "sheep", "cow", "bear", "zebra", "lion"]


class TinyClassifier(nn.Module):
    """Images of any size → 10 class scores."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 5, stride=4)
        self.fc = nn.Linear(6, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


class TinySegmenter(nn.Module):
    """Images → ``{"out": N × 4 × H × W}``, as torchvision's segmentation models answer."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"out": self.conv(x)}


class TinyDetector(nn.Module):
    """Images → per image ``boxes``, ``labels``, ``scores`` (three candidates whose scores
    follow the image's mean brightness, so a threshold keeps some and drops others)."""

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        found: list[dict[str, torch.Tensor]] = []
        for image in images:
            level = image.mean()
            width = float(image.shape[-1])
            boxes = torch.tensor(
                [[0.0, 0.0, 8.0, 8.0], [2.0, 3.0, 20.0, 12.0], [1.0, 1.0, 4.0, 6.0]]
            )
            boxes = boxes * (width / 32.0)
            scores = torch.stack([0.3 + 0.6 * level, 0.9 - 0.6 * level, 0.55 + 0.0 * level])
            found.append({"boxes": boxes, "labels": torch.tensor([1, 2, 3]), "scores": scores})
        return found


class TinyTextClassifier(nn.Module):
    """Token ids and offsets → 4 class scores (an ``EmbeddingBag`` text classifier)."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, 8, mode="mean")
        self.fc = nn.Linear(8, 4)

    def forward(self, text: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.fc(self.embedding(text, offsets))


def _script(model: nn.Module, path: Path) -> None:
    """``model`` as a TorchScript file (what TorchServe's default handlers load by
    ``serializedFile`` alone; torch deprecates making them, not loading them)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated")
        torch.jit.script(model.eval()).save(str(path))


def vocabulary(texts: list[str]) -> dict[str, int]:
    """Ids for every token and bigram of ``texts`` as TorchServe's text classifier makes them."""
    from podium.compat.ts.handler_utils.text_utils import ngrams_iterator
    from podium.compat.ts.torch_handler.text_handler import TextHandler

    cleaner = TextHandler()
    vocab: dict[str, int] = {"<unk>": 0}
    for text in texts:
        text = cleaner._remove_html_tags(text).lower()
        text = cleaner._expand_contractions(text)
        text = cleaner._remove_accented_characters(text)
        tokens = cleaner._tokenize(cleaner._remove_punctuation(text))
        for token in ngrams_iterator(tokens, 2):
            vocab.setdefault(token, len(vocab))
    return vocab


def build(kind: str, dest: Path) -> dict[str, Any]:
    """Write ``kind``'s model files into ``dest``; the archiver's arguments, by flag."""
    dest.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    mapping = dest / "index_to_name.json"
    if kind == "image_classifier":
        _script(TinyClassifier(), dest / "model.pt")
        # ImageNet's style: [synset, label]
        mapping.write_text(json.dumps({str(i): [f"n{i:08d}", n] for i, n in enumerate(LABELS)}))
    elif kind == "image_segmenter":
        _script(TinySegmenter(), dest / "model.pt")
        return {"serialized_file": dest / "model.pt"}
    elif kind == "object_detector":
        _script(TinyDetector(), dest / "model.pt")
        mapping.write_text(json.dumps({"object_type_names": ["__background__", *LABELS[:3]]}))
    elif kind == "text_classifier":
        vocab = vocabulary(TEXTS)
        torch.save(vocab, dest / "source_vocab.pt")
        _script(TinyTextClassifier(len(vocab)), dest / "model.pt")
        mapping.write_text(
            json.dumps({"0": "World", "1": "Sports", "2": "Business", "3": "Sci/Tec"})
        )
        return {
            "serialized_file": dest / "model.pt",
            "extra_files": [mapping, dest / "source_vocab.pt"],
        }
    else:
        raise ValueError(f"no tiny model for {kind!r}")
    return {"serialized_file": dest / "model.pt", "extra_files": [mapping]}


def model_dir(kind: str, dest: Path, handler: str | None = None, batch_size: int = 1) -> Path:
    """``kind``'s tiny model archived by Podium (``archive_model``, as an unpacked archive:
    ``MAR-INF/MANIFEST.json`` beside the files), its manifest naming ``handler`` (``kind``, the
    default handler's plain name, unless another spelling is given)."""
    from podium.model.torchserve import archive_model

    files = build(kind, dest / "files")
    if batch_size > 1:
        config = dest / "files" / "model-config.yaml"
        config.write_text(f"batchSize: {batch_size}\nmaxBatchDelay: 100\n")
        files["config_file"] = config

    root = archive_model(
        model_name=kind,
        handler=kind,
        export_path=dest,
        version="1.0",
        archive_format="no-archive",
        **files,
    )
    if handler is not None:
        manifest_path = root / "MAR-INF" / "MANIFEST.json"
        manifest = json.loads(manifest_path.read_text())
        manifest["model"]["handler"] = handler
        manifest_path.write_text(json.dumps(manifest))
    return root
