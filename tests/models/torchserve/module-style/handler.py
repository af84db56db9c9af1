"""Module style: handle(data, context); TorchServe initialises it with handle(None, context)."""

import json

_state = {"initialized": 0}


def handle(data, context):
    if data is None:  # TorchServe's initialisation call
        _state["initialized"] += 1
        _state["model_dir"] = context.system_properties["model_dir"]
        return None
    out = []
    for row in data:
        body = row.get("data") or row.get("body")
        out.append(
            {
                "type": type(body).__name__,
                "body": body.decode() if isinstance(body, (bytes, bytearray)) else body,
                "keys": sorted(row),
                "initialized": _state["initialized"],
            }
        )
    return [json.dumps(o) for o in out]
