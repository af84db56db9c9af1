"""What the per-input protocol checks cost, per datatype and size, in instructions (callgrind):

    .venv/bin/python bench/input_checks.py [--sizes 4,64,4096] [--datatypes FP32,...]

For each datatype and element count, an OIP input as the REST front end hands it over (the
JSON body decoded by the server's own decoder: ``data`` a flat list of Python values) is run
through:

- ``check``: ``codecs.check_input``, what a model that takes the request itself costs (the echo);
- ``decode``: ``codecs.decode_input``, the decoded path (checks while it decodes);
- ``floor``: ``np.asarray(data)`` alone for numeric datatypes (numpy's reading of the list, which
  any check of the elements needs), a bare ``len(data)`` for ``BYTES``.

The script runs itself under valgrind's callgrind; each case is counted between two dumps
(``callgrind_control``), less the same dumps around an empty case, and divided by the number of
calls. Instructions do not move with load on the machine (timings on a shared machine do).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from common import callgrind_dump, callgrind_dumps

ROOT = Path(__file__).resolve().parent.parent
DATATYPES = ("BOOL", "UINT8", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES")
SIZES = (4, 64, 4096)
#: The least instructions a case is counted over (more calls for small tensors).
_BUDGET = 4_000_000


def _values(datatype: str, size: int) -> list[Any]:
    if datatype == "BOOL":
        return [i % 2 == 0 for i in range(size)]
    if datatype == "BYTES":
        return [f"w{i}" for i in range(size)]
    if datatype.startswith("FP"):
        return [i + 0.5 for i in range(size)]
    return [i % 200 for i in range(size)]


def _inner(datatypes: list[str], sizes: list[int]) -> list[tuple[str, int, str, int]]:
    """Under callgrind: the cases, each dumped as ``case-N``; (datatype, size, op, calls)."""
    import msgspec
    import numpy as np

    from podium.codecs import check_input, decode_input
    from podium.server.http._oip import parse_request

    cases: list[tuple[str, int, str, int]] = []

    def run(datatype: str, size: int, op: str, fn: Any, calls: int) -> None:
        callgrind_dump("skip")
        for _ in range(calls):
            fn()
        callgrind_dump(f"case-{len(cases)}")
        cases.append((datatype, size, op, calls))

    def nothing() -> None:
        return None

    for calls in (1, 100):  # the cost of the dumps and of the loop, with no work in it
        run("-", 0, "empty", nothing, calls)
    for datatype in datatypes:
        for size in sizes:
            body = msgspec.json.encode(
                {
                    "inputs": [
                        {
                            "name": "x",
                            "shape": [size],
                            "datatype": datatype,
                            "data": _values(datatype, size),
                        }
                    ]
                }
            )
            inp = parse_request(body).inputs[0]
            calls = max(3, min(2000, _BUDGET // (200 + 60 * size)))
            floor = partial(len if datatype == "BYTES" else np.asarray, inp.data)
            run(datatype, size, "floor", floor, calls)
            run(datatype, size, "check", partial(check_input, inp), calls)
            run(datatype, size, "decode", partial(decode_input, inp), calls)
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--datatypes", default=",".join(DATATYPES))
    parser.add_argument("--inner", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    datatypes = args.datatypes.split(",")
    if args.inner is not None:
        cases = _inner(datatypes, sizes)
        args.inner.write_text("\n".join(" ".join(map(str, case)) for case in cases))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        listing = Path(tmp) / "cases.txt"
        cmd = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            f"--sizes={args.sizes}",
            f"--datatypes={args.datatypes}",
            f"--inner={listing}",
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        subprocess.run(cmd, check=True, env=env, stdout=sys.stderr, stderr=subprocess.DEVNULL)
        totals = callgrind_dumps(out)
        rows = [line.split() for line in listing.read_text().splitlines()]
    cost: dict[tuple[str, int, str], float] = {}
    empties = [(int(r[3]), totals[f"case-{i}"]) for i, r in enumerate(rows) if r[2] == "empty"]
    (n1, t1), (n2, t2) = empties
    per_loop = (t2 - t1) / (n2 - n1)  # one turn of the loop and one call of a no-op
    fixed = t1 - per_loop * n1  # the dumps' own share of a case
    for i, (kind, elements, op, calls) in enumerate(rows):
        if op != "empty":
            n = int(calls)
            cost[(kind, int(elements), op)] = (totals[f"case-{i}"] - fixed) / n - per_loop
    print(f"instructions per call of each (the dumps and the loop subtracted: {per_loop:,.0f})\n")
    print("| datatype | elements | floor | check | decode | check − floor | check per element |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for datatype in datatypes:
        for size in sizes:
            floor, check, decode = (
                cost[(datatype, size, op)] for op in ("floor", "check", "decode")
            )
            print(
                f"| {datatype} | {size:,} | {floor:,.0f} | {check:,.0f} | {decode:,.0f} | "
                f"{check - floor:,.0f} | {check / size:,.1f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
