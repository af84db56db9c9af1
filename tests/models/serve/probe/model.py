"""No annotation: reports exactly what the protocol's natural input form looked like."""

import json
import sys
from pathlib import Path

_KIT = str(Path(__file__).resolve().parent.parent / "_lib")
if _KIT not in sys.path:
    sys.path.insert(0, _KIT)

from e2e_model_kit import describe  # noqa: E402


class Model:
    def predict(self, inputs):
        return {"info": json.dumps(describe(inputs))}
