"""Which JSON library for the hot path: decode and encode an OIP request/response, per call.

    .venv/bin/python bench/json_codecs.py

Installs ``orjson`` and ``pydantic`` into their own virtual env (``bench/.venvs/json``, beside
msgspec) and times, on one pinned core, the work Podium does per ``infer``: parse and validate the
request body into typed objects, then encode the response. Prints µs per call and the ratio.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

BENCH = Path(__file__).resolve().parent
VENV = BENCH / ".venvs" / "json"
PACKAGES = ("msgspec>=0.19,<1", "orjson>=3.10,<4", "pydantic>=2.7,<3")

BODY = (
    b'{"id":"r1","inputs":[{"name":"input-0","shape":[1,4],"datatype":"FP32",'
    b'"data":[1,2,3,4],"parameters":null}],"outputs":null}'
)

WORKLOAD = r"""
import json, sys, timeit
from typing import Any
import msgspec, orjson, pydantic

BODY = %r

class RequestInput(msgspec.Struct, kw_only=True, omit_defaults=True):
    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: Any = None

class InferenceRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    inputs: list[RequestInput]
    id: str | None = None
    parameters: dict[str, Any] | None = None
    outputs: list[Any] | None = None

class PInput(pydantic.BaseModel):
    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: Any = None

class PRequest(pydantic.BaseModel):
    inputs: list[PInput]
    id: str | None = None
    parameters: dict[str, Any] | None = None
    outputs: list[Any] | None = None

decoder = msgspec.json.Decoder(InferenceRequest)
encoder = msgspec.json.Encoder()

def msgspec_typed():
    req = decoder.decode(BODY)
    return encoder.encode(req)

def orjson_then_convert():
    req = msgspec.convert(orjson.loads(BODY), InferenceRequest)
    return orjson.dumps(msgspec.to_builtins(req))

def orjson_then_pydantic():
    req = PRequest.model_validate(orjson.loads(BODY))
    return orjson.dumps(req.model_dump(exclude_none=True))

def pydantic_json():
    req = PRequest.model_validate_json(BODY)
    return req.model_dump_json(exclude_none=True).encode()

def stdlib_json():
    req = msgspec.convert(json.loads(BODY), InferenceRequest)
    return json.dumps(msgspec.to_builtins(req)).encode()

rows = []
for fn in (msgspec_typed, orjson_then_convert, orjson_then_pydantic, pydantic_json, stdlib_json):
    fn()
    best = min(timeit.repeat(fn, number=20000, repeat=5)) / 20000 * 1e6
    rows.append((fn.__name__, best))
base = rows[0][1]
print("| decode + validate + encode | us per call | vs msgspec |")
print("|---|---:|---:|")
for name, us in rows:
    print(f"| {name} | {us:.2f} | {us / base:.1f}x |")
print(f"\nversions: msgspec {msgspec.__version__}, orjson {orjson.__version__}, pydantic {pydantic.VERSION}")
"""


def main() -> int:
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"[bench] creating {VENV}", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(VENV)
    check = subprocess.run(
        [str(python), "-c", "import msgspec, orjson, pydantic"], check=False, capture_output=True
    )
    if check.returncode != 0:
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PACKAGES],
            check=True,
        )
    argv = [str(python), "-c", WORKLOAD % BODY]
    if sys.platform == "linux" and os.cpu_count() and os.cpu_count() > 1:  # type: ignore[operator]
        argv = ["taskset", "-c", "0", *argv]
    return subprocess.call(argv)


if __name__ == "__main__":
    sys.exit(main())
