"""A streaming model, the one model of its server (tests/server/test_http_truss.py)."""

from collections.abc import Iterator
from typing import Any


class Model:
    def predict(self, inputs: Any) -> Iterator[str]:
        yield "one "
        yield "two "
        if inputs.get("fail"):
            raise ValueError("the stream broke")
        yield "three"
