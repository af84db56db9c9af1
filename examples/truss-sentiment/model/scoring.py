"""A sibling module of model.py: imported as `model.scoring`, as Truss's server imports it."""


def label(score: float, band: float) -> str:
    if score > band:
        return "positive"
    if score < -band:
        return "negative"
    return "neutral"
