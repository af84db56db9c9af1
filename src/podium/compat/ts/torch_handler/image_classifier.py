"""``ts.torch_handler.image_classifier``: TorchServe's default image classification handler.

An image (ImageNet preprocessing: shorter side to 256, centre 224 × 224, normalised) in; the
``topk`` (5) most probable classes out, ``{label: probability}`` per image, labels from the
archive's ``index_to_name.json`` (else the class index as a string).
"""

from __future__ import annotations

from typing import Any

from ..handler_utils.timer import timed
from ..utils.util import map_class_to_label
from ._image import IMAGENET
from ._torch import torch
from .vision_handler import VisionHandler

__all__ = ["ImageClassifier"]


class ImageClassifier(VisionHandler):
    """The ``topk`` classes of each image, by softmax probability."""

    topk = 5
    image_processing = IMAGENET

    def set_max_result_classes(self, topk: int) -> None:
        self.topk = topk

    def get_max_result_classes(self) -> int:
        return self.topk

    @timed
    def postprocess(self, data: Any) -> Any:
        probabilities = torch.softmax(data, dim=1)
        top, classes = torch.topk(probabilities, self.topk, dim=1)
        return map_class_to_label(top.tolist(), self.mapping, classes.tolist())
