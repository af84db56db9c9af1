"""``ts.torch_handler.image_segmenter``: TorchServe's default image segmentation handler.

The model answers ``{"out": N × K × H × W}`` (torchvision's segmentation models do); the answer
is, per image, H × W pairs ``[class, probability]`` of each pixel's most probable class (all K
probabilities would make answers of tens of megabytes).
"""

from __future__ import annotations

from typing import Any

from ._image import IMAGENET
from ._torch import torch
from .vision_handler import VisionHandler

__all__ = ["ImageSegmenter"]


class ImageSegmenter(VisionHandler):
    """Each pixel's top class and its probability."""

    image_processing = IMAGENET

    def postprocess(self, data: Any) -> Any:
        probabilities = torch.softmax(data["out"], dim=1)
        best = torch.max(probabilities, dim=1)
        pairs = torch.stack([best.indices.to(best.values.dtype), best.values], dim=3)
        return pairs.tolist()
