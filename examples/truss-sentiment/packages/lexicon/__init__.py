"""A bundled package (the truss's packages/): importable by the model's code, as in Truss."""

from pathlib import Path


def load_lexicon(path: Path) -> dict[str, float]:
    """Word -> score, one 'word score' pair a line."""
    scores = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        word, _, score = line.partition(" ")
        if word:
            scores[word] = float(score)
    return scores


def tokens(text: str) -> list[str]:
    return [t.strip(".,!?;:\"'()").lower() for t in text.split() if t.strip(".,!?;:\"'()")]
