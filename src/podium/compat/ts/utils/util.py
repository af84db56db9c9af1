"""``ts.utils.util``: the helpers handlers import from it."""

from podium.model.torchserve import (
    PredictionException,
    list_classes_from_module,
    load_label_mapping,
)

__all__ = ["PredictionException", "list_classes_from_module", "load_label_mapping"]
