"""``ts.torch_handler.object_detector``: TorchServe's default object detection handler.

The image goes to the model as a tensor in [0, 1] (no resizing: detection models do their own);
the model answers, per image, ``boxes``, ``labels`` and ``scores`` (torchvision's detection
models do). The answer is, per image, the detections scoring at least ``threshold`` (0.5):
``{label: [x1, y1, x2, y2], "score": score}``, labels from ``index_to_name.json``.
"""

from __future__ import annotations

from typing import Any

from ..utils.util import map_class_to_label
from ._image import Compose, ToTensor
from .vision_handler import VisionHandler

__all__ = ["ObjectDetector"]


class ObjectDetector(VisionHandler):
    """Boxes, labels and scores above ``threshold``."""

    image_processing = Compose([ToTensor()])
    threshold = 0.5

    def postprocess(self, data: Any) -> Any:
        answers = []
        for row in data:
            keep = row["scores"] >= self.threshold
            boxes, labels, scores = (
                row[key][keep].tolist() for key in ("boxes", "labels", "scores")
            )
            detections = []
            for label, box, score in zip(labels, boxes, scores, strict=True):
                (detection,) = map_class_to_label([[box]], self.mapping, [[label]])
                detection["score"] = score
                detections.append(detection)
            answers.append(detections)
        return answers
