"""``ts.torch_handler.vision_handler``: ``VisionHandler``, the base of TorchServe's image handlers.

Each request row's ``data`` (or ``body``) is an image's bytes (or those bytes in base64, as a
string), decoded by Pillow and put through the class's ``image_processing``; a row that is a
list of numbers is taken as the image tensor itself. The batch is stacked into one tensor on the
model's device. Bytes Pillow cannot read are the client's mistake: 400, naming the row.

Explanations (``get_insights``) use Captum's integrated gradients when ``captum`` is installed.
"""

from __future__ import annotations

import base64
import binascii
import io
from abc import ABC
from typing import Any

from podium.model.torchserve import PredictionException

from ..handler_utils.timer import timed
from ._image import Image, UnidentifiedImageError
from ._torch import captum_attr, torch
from .base_handler import BaseHandler

__all__ = ["VisionHandler"]


class VisionHandler(BaseHandler, ABC):
    """Images in, a stacked batch tensor to the model; subclasses set ``image_processing``."""

    image_processing: Any  # set by each subclass: PIL image → tensor

    def initialize(self, context: Any) -> None:
        super().initialize(context)
        self.ig: Any = None
        self.initialized = True
        if not context.system_properties.get("limit_max_image_pixels"):
            # TorchServe's limit_max_image_pixels=false: Pillow's decompression-bomb check off
            Image.MAX_IMAGE_PIXELS = None

    def _image(self, index: int, value: Any) -> Any:
        """Row ``index``'s value as what the model takes (a tensor)."""
        if isinstance(value, str):
            try:
                value = base64.b64decode(value)
            except (binascii.Error, ValueError) as exc:
                raise PredictionException(
                    f"request {index}: the image string is not valid base64 ({exc})", 400
                ) from exc
        if not isinstance(value, bytes | bytearray):
            return torch.FloatTensor(value)
        try:
            image = Image.open(io.BytesIO(value))
            image.load()
        except (UnidentifiedImageError, Image.DecompressionBombError, OSError) as exc:
            reason = type(exc).__name__
            raise PredictionException(
                f"request {index}: the body is not an image Pillow can read ({reason})", 400
            ) from exc
        return self.image_processing(image)

    @timed
    def preprocess(self, data: Any) -> Any:
        images = [
            self._image(index, row.get("data") or row.get("body")) for index, row in enumerate(data)
        ]
        return torch.stack(images).to(self.device)

    def get_insights(self, tensor_data: Any, _: Any, target: int = 0) -> Any:
        """Integrated gradients of ``target`` over the input (Captum, 15 steps)."""
        if self.ig is None:
            self.ig = captum_attr().IntegratedGradients(self.model)
        return self.ig.attribute(tensor_data, target=target, n_steps=15).tolist()
