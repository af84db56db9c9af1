"""What one access line costs, piece by piece, in instructions (valgrind's callgrind).

    .venv/bin/python bench/access_line.py [--base-src OTHER/src] [--requests N]

The access line of the OIP REST echo request (`POST /v2/models/echo/infer`), as `podium serve`
makes it: logging configured by `podium.logs.configure` (writing to /dev/null), in the text
format and in the JSON one. Each piece runs `--requests` times between two callgrind dumps;
the figure is instructions per call, less the loop's own:

- `Access()`, `RequestIds.make`, `client_id`: what the access middleware pays per request for
  the request's record and id (with the log off too);
- `describe`: the route, path and peer filled in when the line is made (server/http/_access.py);
- `str`: the text message (`Access.__str__`); `fields`: what the JSON line asks of the request
  for its keys (`Access.json_values`, or `Access.fields` in sources that have no such method);
- `line of 64`: a whole line as `AccessLog` makes it on its thread (described, message,
  formatted, written), in batches of 64 (the lines of one turn of the event loop), per line.

`--base-src` runs the same from other sources, for a before and after. bench/layers.py
measures the same line in the whole in-process stack ("+ access middleware, log on").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import callgrind_dump, callgrind_dumps

BENCH = Path(__file__).resolve().parent
PIECES = ("Access", "RequestIds.make", "client_id", "describe", "str", "fields", "line of 64")


def _child(requests: int, fmt: str) -> None:
    from podium import logs

    logs.configure("INFO", fmt, stream=open(os.devnull, "w"))  # noqa: SIM115 (the process's life)
    from podium.server._access import Access, AccessLog, RequestIds, client_id
    from podium.server.http import INFERENCE_ROUTES, AccessMiddleware

    log = AccessLog(True)
    ids = RequestIds()
    middleware = AccessMiddleware(None, log=log, ids=ids, routes=INFERENCE_ROUTES)  # type: ignore[arg-type]
    scope = {"method": "POST", "path": "/v2/models/echo/infer", "client": ("127.0.0.1", 50000)}

    def ended() -> Any:
        access = Access(ids.make(), False, 1_000)
        access.status, access.bytes_in, access.bytes_out = 200, 80, 120
        access.model, access.version, access.end = "echo", "1", 1_000 + 123_456
        access.context, access.describe = scope, middleware._describe
        return access

    described = ended()
    described.describe(described)
    fresh = iter([ended() for _ in range(requests + 50)])
    batch = [ended() for _ in range(64)]

    def batch_of_64() -> None:
        for access in batch:
            access.describe = middleware._describe
        log._lines(batch)

    def describe() -> None:
        access = next(fresh)
        access.describe(access)

    runs = {
        "(loop)": (lambda: None, 1),
        "Access": (lambda: Access("x", False, 1_000), 1),
        "RequestIds.make": (ids.make, 1),
        "client_id": (lambda: client_id(None), 1),
        "describe": (describe, 1),
        "str": (lambda: str(described), 1),
        "fields": (getattr(described, "json_values", described.fields), 1),
        "line of 64": (batch_of_64, 64),
    }
    for index, (piece, _) in enumerate(runs.values()):
        for _ in range(50):  # warm-up
            piece()
        callgrind_dump("skip")
        for _ in range(requests):
            piece()
        callgrind_dump(f"piece-{index}")
    print(json.dumps({"labels": list(runs), "per": [per for _, per in runs.values()]}))


def _run(src: Path, requests: int, fmt: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
        cmd += [__file__, "--child", str(requests), fmt]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the measuring process from {src} failed:\n{done.stderr[-3000:]}")
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        totals = callgrind_dumps(out)
    counts = {label: totals[f"piece-{i}"] / requests for i, label in enumerate(figures["labels"])}
    loop = counts.pop("(loop)")
    return {
        label: (counts[label] - loop) / per
        for label, per in zip(figures["labels"][1:], figures["per"][1:], strict=True)
    }


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["--child"]:
        _child(int(args_in[1]), args_in[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-src", type=Path, default=None, help="another tree's src/")
    parser.add_argument("--requests", type=int, default=300, help="calls of each piece")
    args = parser.parse_args(args_in)
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    trees = {"this": BENCH.parent / "src"}
    if args.base_src is not None:
        trees["base"] = args.base_src.resolve()
    figures = {
        (tree, fmt): _run(src, args.requests, fmt)
        for tree, src in trees.items()
        for fmt in ("text", "json")
    }
    print(f"- command: `python bench/access_line.py {' '.join(args_in)}`\n")
    columns = [f"{fmt}, {tree}" for tree in trees for fmt in ("text", "json")]
    print("| piece | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for piece in PIECES:
        row = [f"{figures[tree, fmt][piece]:,.0f}" for tree in trees for fmt in ("text", "json")]
        print(f"| {piece} | " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
