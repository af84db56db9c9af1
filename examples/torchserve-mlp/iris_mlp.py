"""The eager model definition that torch-model-archiver packs as ``--model-file``.

TorchServe's ``BaseHandler`` imports this file from the model directory and instantiates its one
class, then loads the state dict (``--serialized-file``) into it. Named ``iris_mlp.py`` rather
than TorchServe's usual ``model.py``: a ``model.py`` at the top of an example folder would make
``podium serve examples`` take the folder for a native Podium model.
"""

import torch
from torch import nn


class IrisMLP(nn.Module):
    """Four iris measurements (cm) in, the three class probabilities out; the scaling of the
    inputs is part of the model (buffers saved in the state dict)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("scale", torch.ones(4))
        self.layers = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.layers((x - self.mean) / self.scale), dim=-1)
