"""A batched predict annotated list[InferenceRequest]: each element is one request as sent."""

import json

from podium import InferenceRequest


class Model:
    def predict(self, batch: list[InferenceRequest]) -> list[dict]:
        return [
            {
                "info": json.dumps(
                    {
                        "type": type(r).__name__,
                        "id": r.id,
                        "input": r.inputs[0].name,
                        "batch": len(batch),
                    }
                )
            }
            for r in batch
        ]
