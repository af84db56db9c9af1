"""The image transforms of TorchServe's vision handlers, on PIL images, without torchvision.

``Resize``, ``CenterCrop``, ``ToTensor``, ``Normalize`` and ``Compose`` compute what
torchvision's transforms of the same names compute for a PIL image (bilinear resizing by Pillow,
the same rounding of sizes and crop offsets, the same tensor dtypes), so a default handler gives
the same numbers with or without torchvision installed. A handler that sets its own
``image_processing`` (torchvision's or anything callable) is used as it is.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._torch import torch

try:
    from PIL import Image, UnidentifiedImageError
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "TorchServe's image handlers need Pillow: pip install 'podium[torchserve-handlers]'"
    ) from exc

__all__ = [
    "IMAGENET",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "CenterCrop",
    "Compose",
    "Image",
    "Normalize",
    "Resize",
    "ToTensor",
    "UnidentifiedImageError",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class Compose:
    """Apply each transform in turn."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, value: Any) -> Any:
        for transform in self.transforms:
            value = transform(value)
        return value


class Resize:
    """The shorter side to ``size`` (the longer one scaled and truncated), bilinear; an image
    already that size is returned as it is."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, image: Image.Image) -> Image.Image:
        width, height = image.size
        short, long = (width, height) if width <= height else (height, width)
        new_long = int(self.size * long / short)
        new_w, new_h = (self.size, new_long) if width <= height else (new_long, self.size)
        if (new_w, new_h) == (width, height):
            return image
        return image.resize((new_w, new_h), Image.Resampling.BILINEAR)


class CenterCrop:
    """The centred ``size`` × ``size`` square (offsets rounded half to even); a smaller image
    is first padded with zeros around it."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, image: Image.Image) -> Image.Image:
        width, height = image.size
        side = self.size
        if side > width or side > height:
            left = (side - width) // 2 if side > width else 0
            top = (side - height) // 2 if side > height else 0
            padded = Image.new(image.mode, (max(width, side), max(height, side)))
            if image.mode == "P" and (palette := image.getpalette()) is not None:
                padded.putpalette(palette)
            padded.paste(image, (left, top))
            image = padded
            width, height = image.size
            if (width, height) == (side, side):
                return image
        top = int(round((height - side) / 2.0))
        left = int(round((width - side) / 2.0))
        return image.crop((left, top, left + side, top + side))


_DTYPES = {
    "I": np.int32,
    "I;16" if sys.byteorder == "little" else "I;16B": np.int16,
    "F": np.float32,
}


class ToTensor:
    """A PIL image as a C × H × W tensor: 8-bit modes as floats in [0, 1]; 32-bit integer,
    16-bit and float images keep their values and dtype."""

    def __call__(self, image: Image.Image) -> torch.Tensor:
        array = np.array(image, _DTYPES.get(image.mode, np.uint8), copy=True)
        tensor = torch.from_numpy(array)
        if image.mode == "1":
            tensor = 255 * tensor
        tensor = tensor.view(image.size[1], image.size[0], len(image.getbands()))
        tensor = tensor.permute((2, 0, 1)).contiguous()
        if tensor.dtype == torch.uint8:
            return tensor.to(dtype=torch.get_default_dtype()).div(255)
        return tensor


class Normalize:
    """``(tensor - mean) / std`` per channel, on a copy (of a float tensor: 32-bit integer and
    16-bit images are refused, as torchvision refuses them)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = list(mean)
        self.std = list(std)

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        if not tensor.is_floating_point():
            raise TypeError(f"Normalize: the tensor must be of floats, not {tensor.dtype}")
        mean = torch.as_tensor(self.mean, dtype=tensor.dtype, device=tensor.device)
        std = torch.as_tensor(self.std, dtype=tensor.dtype, device=tensor.device)
        if (std == 0).any():
            raise ValueError("Normalize: a standard deviation of zero")
        return tensor.clone().sub_(mean.view(-1, 1, 1)).div_(std.view(-1, 1, 1))


#: The image classifier's and the segmenter's preprocessing, as TorchServe's: the shorter side to
#: 256, the centre 224 × 224, normalised with ImageNet's mean and standard deviation.
IMAGENET = Compose(
    [Resize(256), CenterCrop(224), ToTensor(), Normalize(IMAGENET_MEAN, IMAGENET_STD)]
)
