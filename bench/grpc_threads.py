"""Instructions per OIP gRPC ``ModelInfer`` of a whole ``podium serve`` process, thread by thread.

``bench/instructions.py --grpc`` counts the whole process (idle subtracted); its runs spread over
a few percent, more than a change to one thread's work. This runs the server under callgrind with
``--separate-threads=yes``, sends the same calls (one grpcio channel, one call after another, 200
to warm up), and prints each busy thread's instructions per call and the share of them in
CPython, in grpcio's ``cygrpc`` (its C core and Cython) and elsewhere, for each tree given. The
event loop is thread 1; grpc's polling thread and the relay's sender thread are the other two
large ones with CPython in them, grpc's event-engine threads the ones nearly all ``cygrpc``.

Idle is not subtracted: keep ``--requests`` at a few hundred so that timers weigh little, and
compare threads of the same role across trees. Each tree's server must relay (its log says
``calls relayed``); the run stops if it serves with ``grpc.aio`` (under load the relay's
self-test may time out under callgrind).

    python bench/grpc_threads.py --src src --src /tmp/BASE/src --requests 300

``--stream``: the calls are the items of one ``ModelStreamInfer`` stream, as
``bench/instructions.py --grpc --stream`` sends them (per streamed item).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from instructions import (  # noqa: E402 - the sibling script
    ROOT,
    _callgrind,
    _free_port,
    _grpc_message,
    _GrpcClient,
    _GrpcStreamClient,
    _podium_argv,
    _under_callgrind,
    must_relay,
)

#: Threads under this many instructions per call are left out of the table.
SMALL = 1000


def _objects(dump: Path) -> tuple[int, collections.Counter[str]]:
    """A thread's dump: its thread number and its own instructions by object (library)."""
    text = dump.read_text(errors="replace")
    found = re.search(r"(?m)^thread: (\d+)", text)
    names: dict[str, str] = {}
    costs: collections.Counter[str] = collections.Counter()
    obj, after_call = "", False
    for line in text.splitlines():
        if line.startswith(("ob=", "cob=")):
            number, _, name = line.split("=", 1)[1].partition(" ")
            if name:
                names[number] = name
            if line.startswith("ob="):
                obj = names.get(number, number)
        elif line.startswith("calls="):
            after_call = True  # the next cost line is the call's inclusive cost
        elif line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            if len(parts) > 1 and not after_call:
                costs[obj] += int(parts[1])
            after_call = False
    return int(found.group(1)) if found else 0, costs


def _kind(obj: str) -> str:
    name = obj.rsplit("/", 1)[-1]
    if name.startswith("libpython"):
        return "CPython"
    if name.startswith("cygrpc"):
        return "cygrpc"
    return "other"


def count(
    src: Path, model: Path, message: bytes, requests: int, stream: bool = False
) -> dict[int, dict[str, float]]:
    """Each busy thread's instructions per call (or streamed item), by kind, for the server of
    ``src``."""
    ports = [_free_port() for _ in range(5)]
    argv = _podium_argv(model, ports)
    with _under_callgrind(src, argv, ["--separate-threads=yes"]) as (server, out, errors):
        client = (_GrpcStreamClient if stream else _GrpcClient)(ports[1], message)
        try:
            client.wait(server, errors)
            must_relay(src, errors)
            client.send(200)  # warm-up
            _callgrind("--zero", str(server.pid))
            client.send(requests)
            _callgrind("--dump=busy", str(server.pid))
        finally:
            client.close()
        threads: dict[int, dict[str, float]] = {}
        for dump in sorted(out.parent.glob(out.name + ".1-*")):  # the first dump: busy
            number, costs = _objects(dump)
            kinds: collections.Counter[str] = collections.Counter()
            for obj, cost in costs.items():
                kinds[_kind(obj)] += cost
            if sum(kinds.values()) / requests >= SMALL:
                threads[number] = {kind: cost / requests for kind, cost in kinds.items()}
    return threads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, action="append", required=True, help="a tree's src/")
    parser.add_argument("--model", type=Path, default=ROOT / "examples" / "echo")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--raw", action="store_true", help="the tensor in raw_input_contents")
    parser.add_argument(
        "--stream", action="store_true", help="the calls as the items of one ModelStreamInfer"
    )
    args = parser.parse_args()
    message = _grpc_message(args.model.name, args.raw)
    print("| tree | thread | per call | CPython | cygrpc | other |")
    print("|---|---:|---:|---:|---:|---:|")
    for src in args.src:
        threads = count(src.resolve(), args.model.resolve(), message, args.requests, args.stream)
        for number, kinds in sorted(threads.items()):
            total = sum(kinds.values())
            shares = " | ".join(f"{kinds.get(k, 0):,.0f}" for k in ("CPython", "cygrpc", "other"))
            print(f"| `{src}` | {number} | {total:,.0f} | {shares} |")
        whole = sum(sum(kinds.values()) for kinds in threads.values())
        print(f"| `{src}` | all | {whole:,.0f} | | | |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
