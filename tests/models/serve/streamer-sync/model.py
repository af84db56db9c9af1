"""The sync-generator twin of streamer: runs in the thread pool, one step at a time."""

import sys
from pathlib import Path

_KIT = str(Path(__file__).resolve().parent.parent / "_lib")
if _KIT not in sys.path:
    sys.path.insert(0, _KIT)

from e2e_model_kit import plain, record, wait_gate  # noqa: E402


def item(mode, i):
    if mode == "json" or mode == "fail":
        return {"i": i, "sq": i * i}
    if mode == "bytes":
        return f"b{i};".encode()
    return f"w{i} "


class Model:
    def predict(self, inputs):
        p = plain(inputs)
        tag, n, mode, gate = (
            p.get("tag", ""),
            int(p.get("n", 3)),
            p.get("mode", "text"),
            p.get("gate"),
        )
        record(tag, "start")
        i = -1
        try:
            if mode == "failfirst":
                raise ValueError("the stream failed before its first item")
            for i in range(n):
                if i > 0 and gate and not wait_gate(gate):
                    record(tag, "gate-timeout", i=i)
                record(tag, "item", i=i)
                yield item(mode, i)
                if mode == "fail":
                    raise ValueError(f"the stream failed after item {i}")
            record(tag, "end")
        except BaseException as exc:
            record(tag, "exit", exc=type(exc).__name__, i=i)
            raise
        finally:
            record(tag, "finally", i=i)
