"""Instructions per request of a whole ``podium serve`` process, this tree against another one:
a measure that load on the machine does not move (timings on a shared 2-core machine do).

    .venv/bin/python bench/instructions.py --other /path/to/other/checkout/src
    .venv/bin/python bench/instructions.py --other ... --path /v1/models/echo:predict --body '{}'
    .venv/bin/python bench/instructions.py --floor   # this tree against the raw ASGI echo
    # what Podium's connection limits cost: the raw echo on its guarded protocol, against plain
    .venv/bin/python bench/instructions.py --guarded --floor
    .venv/bin/python bench/instructions.py --guarded --other ...   # two trees' protocols
    # a response cache hit against the plain echo path, both this tree:
    .venv/bin/python bench/instructions.py --other src --model bench/models/echo_cached \
        --other-model examples/echo

Each tree's server runs under valgrind's callgrind (user-space instructions of every thread of
the server process), serving ``--model`` on loopback ports. One keep-alive client in this
process waits for the first 200, sends 200 requests to warm up, then ``callgrind_control``
zeroes the counters, the client sends ``--requests`` identical requests one after another and
the counters are dumped ("busy"); then the server idles as long as that took and they are
dumped again ("idle": timers, pollers). Per request: (busy − idle) / requests. The kernel's
share (socket reads and writes) is not counted. ``--repeat`` alternates the trees.

``--connections N`` keeps N keep-alive clients busy at once (one thread, a selector): what a
dynamically batched model needs to form batches, e.g.

    .venv/bin/python bench/instructions.py --other ... --model bench/models/batch_busy \
        --path /v2/models/batch_busy/infer --connections 64 --requests 4000

A model that reports the batches it ran (``parameters.batches`` in its answer, as
bench/models/batch_busy does) gets its mean batch size printed too.

``--grpc`` measures OIP gRPC ``ModelInfer`` in place of REST: one grpcio channel (one HTTP/2
connection, keep-alive) on the server's gRPC port sends the same serialized
``ModelInferRequest`` (``--raw``: the tensor in ``raw_input_contents``, as tritonclient sends
it; else typed) one call after another, e.g.

    .venv/bin/python bench/instructions.py --grpc --other /tmp/base/src --requests 1000

``--grpc --stream`` sends the same requests as the items of one ``ModelStreamInfer`` stream (a
bidirectional stream on the same kind of channel, opened for the warm-up and again for the
measured requests): each request is sent once the answer to the one before it has come, so the
figure is per streamed item, the stream's own start and end spread over ``--requests``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
BODY = '{"inputs":[{"name":"input-0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _request(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _parse_response(pending: bytearray) -> tuple[int, bytes] | None:
    """One whole response with a Content-Length taken from the front of ``pending``: its
    status and body; None while it is incomplete."""
    end = pending.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(pending[:end])
    match = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    length = int(match.group(1)) if match else 0
    if len(pending) < end + 4 + length:
        return None
    body = bytes(pending[end + 4 : end + 4 + length])
    del pending[: end + 4 + length]
    return int(head.split(b" ", 2)[1]), body


def _read_response(sock: socket.socket, pending: bytearray) -> tuple[int, bytes]:
    """Read one response with a Content-Length; its status and body."""
    while True:
        parsed = _parse_response(pending)
        if parsed is not None:
            return parsed
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        pending += chunk


def _batches(body: bytes) -> int | None:
    """The batches the model says it has run (``parameters.batches``), if it says."""
    try:
        params = json.loads(body).get("parameters") or {}
    except (ValueError, AttributeError):
        return None
    batches = params.get("batches")
    return batches if isinstance(batches, int) else None


def _send_concurrently(port: int, message: bytes, connections: int, count: int, path: str) -> None:
    """``count`` requests over ``connections`` keep-alive connections, each sending its next
    request as soon as its answer is read, until ``count`` have been answered."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=120) for _ in range(connections)]
    selector = selectors.DefaultSelector()
    try:
        sent = answered = 0
        for sock in socks:
            if sent < count:
                sock.sendall(message)
                sent += 1
            selector.register(sock, selectors.EVENT_READ, bytearray())
        while answered < count:
            for key, _ in selector.select(timeout=120):
                sock, pending = key.fileobj, key.data
                assert isinstance(sock, socket.socket)
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("the server closed the connection")
                pending += chunk
                while (parsed := _parse_response(pending)) is not None:
                    if parsed[0] != 200:
                        raise RuntimeError(f"{path} answered {parsed[0]}")
                    answered += 1
                    if sent < count:
                        sock.sendall(message)
                        sent += 1
    finally:
        selector.close()
        for sock in socks:
            sock.close()


#: The OIP gRPC method ``--grpc`` calls.
GRPC_METHOD = "/inference.GRPCInferenceService/ModelInfer"


def _grpc_message(model: str, raw: bool) -> bytes:
    """A serialized ``ModelInferRequest`` for bench/grpc_messages.py's echo tensor."""
    sys.path.insert(0, str(ROOT / "bench"))
    from grpc_messages import infer_request

    return bytes(infer_request(model, raw=raw).SerializeToString())


class _GrpcClient:
    """One grpcio channel (one keep-alive HTTP/2 connection) calling ``ModelInfer`` with
    prebuilt bytes, one call after another."""

    def __init__(self, port: int, message: bytes) -> None:
        import grpc

        self._rpc_error = grpc.RpcError
        self._channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self._infer = self._channel.unary_unary(GRPC_METHOD)  # bytes in, bytes out
        self._message = message

    def ready(self) -> bool:
        """Whether a call succeeds now (the server may still be starting or loading)."""
        try:
            self._infer(self._message, timeout=120)
        except self._rpc_error:
            return False
        return True

    def wait(self, server: Any, errors: IO[bytes]) -> None:
        """Until a call succeeds: the server (its log ``errors``) may still be starting or
        loading its model."""
        deadline = time.monotonic() + 600
        while not self.ready():
            _check_running(server, errors)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{GRPC_METHOD} never succeeded")
            time.sleep(0.5)

    def send(self, count: int) -> None:
        for _ in range(count):
            if not self._infer(self._message, timeout=120):
                raise RuntimeError(f"{GRPC_METHOD} answered nothing")

    def close(self) -> None:
        self._channel.close()


#: The OIP gRPC method ``--grpc --stream`` streams on.
GRPC_STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"


class _GrpcStreamClient(_GrpcClient):
    """As :class:`_GrpcClient`, each :meth:`send` one ``ModelStreamInfer`` stream of ``count``
    requests, one answered before the next is sent; an in-band error is raised."""

    def send(self, count: int) -> None:
        import queue

        from tritonclient.grpc import service_pb2

        requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

        def requested() -> Iterator[bytes]:
            while (message := requests.get()) is not None:
                yield message

        stream = self._channel.stream_stream(GRPC_STREAM_METHOD)
        answers = stream(requested(), timeout=600)
        try:
            for _ in range(count):
                requests.put(self._message)
                answer = service_pb2.ModelStreamInferResponse.FromString(next(answers))
                if answer.error_message:
                    raise RuntimeError(f"{GRPC_STREAM_METHOD}: {answer.error_message}")
        finally:
            requests.put(None)
        if next(answers, None) is not None:
            raise RuntimeError(f"{GRPC_STREAM_METHOD} answered more than it was asked")


def _count_grpc(
    src: Path, model: Path, message: bytes, requests: int, stream: bool = False
) -> tuple[float, float]:
    """As :func:`_count`, for ``ModelInfer`` calls (or, ``stream``, the items of a
    ``ModelStreamInfer`` stream) on the gRPC listener."""
    ports = [_free_port() for _ in range(5)]
    with _under_callgrind(src, _podium_argv(model, ports)) as (server, out, errors):
        pid = str(server.pid)
        client = (_GrpcStreamClient if stream else _GrpcClient)(ports[1], message)
        try:
            client.wait(server, errors)
            must_relay(src, errors)
            client.send(200)  # warm-up
            _callgrind("--zero", pid)
            start = time.monotonic()
            client.send(requests)
            busy_s = time.monotonic() - start
            _callgrind("--dump=busy", pid)  # a dump zeroes the counters
            time.sleep(busy_s)
            _callgrind("--dump=idle", pid)
            busy, idle = _totals(out, "busy"), _totals(out, "idle")
        finally:
            client.close()
    return (busy - idle) / requests, idle / busy_s


def must_relay(src: Path, errors: IO[bytes]) -> None:
    """Stop the run unless the server relays its gRPC calls (its log says ``calls relayed``):
    under load its relay's self-test may time out under callgrind, and it then serves with
    ``grpc.aio``, a figure of another path."""
    errors.seek(0)
    if b"calls relayed" not in errors.read():
        raise RuntimeError(f"{src}: the server does not relay its gRPC calls (see its log)")


def _podium_argv(model: Path, ports: list[int]) -> list[str]:
    """``podium serve model`` on loopback, its five listeners on ``ports``."""
    flags = ("--http-port", "--grpc-port", "--management-port", "--grpc-management-port")
    argv = [sys.executable, "-m", "podium", "serve", str(model), "--host", "127.0.0.1"]
    for flag, port in zip((*flags, "--metrics-port"), ports, strict=True):
        argv += [flag, str(port)]
    return argv


@contextlib.contextmanager
def _under_callgrind(
    src: Path, argv: list[str], options: Sequence[str] = ()
) -> Iterator[tuple[Any, Path, IO[bytes]]]:
    """``argv`` started under callgrind (with its ``options``) with ``src`` on its path: the
    process, the file its dumps are named after, and its log; stopped (SIGINT) when the block
    ends."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *options, *argv]
        env = {**os.environ, "PYTHONPATH": str(src), "HOME": tmp}
        # the server's log (its access lines too) goes to a file: a pipe nobody reads would
        # fill up and stop the server in its next write
        with open(Path(tmp) / "server.log", "w+b") as errors:
            server = subprocess.Popen(
                cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=errors
            )
            try:
                yield server, out, errors
            finally:
                stop(server, 300)


def stop(server: subprocess.Popen[bytes], timeout: float) -> None:
    """Stop ``server`` as a user does (SIGINT); killed if it has not exited after ``timeout``."""
    server.send_signal(signal.SIGINT)
    try:
        server.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _check_running(server: Any, errors: IO[bytes]) -> None:
    """Raise with the end of its log if the server has exited."""
    if server.poll() is not None:
        errors.seek(0)
        error = errors.read().decode(errors="replace")[-2000:]
        raise RuntimeError(f"the server exited: {error}")


def _callgrind(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=300)


def _totals(out: Path, label: str) -> int:
    """The instructions of the dump ``label`` (callgrind writes each dump to its own file)."""
    for dump in sorted(out.parent.glob(out.name + ".*")):
        text = dump.read_text(errors="replace")
        if re.search(rf"(?m)^desc: Trigger: Client Request: {label}$|^desc: .*{label}", text):
            totals = re.findall(r"(?m)^(?:summary|totals):\s*(\d+)", text)
            if totals:
                return int(totals[0])
    raise RuntimeError(f"callgrind wrote no dump {label!r}")


#: ``--floor``'s server: the raw ASGI echo (bench/hello_app.py) on uvicorn, as bench/run.py runs
#: the hello: the least any server that answers with what it was sent can do.
FLOOR = "floor"
#: ``--guarded``'s server: the same raw echo on uvicorn with the tree's guarded protocol
#: (bench/guarded_echo.py), in place of ``podium serve``.
GUARDED = "guarded"


def _count(
    src: Path,
    model: Path,
    path: str,
    body: bytes,
    requests: int,
    extra: list[str],
    connections: int = 1,
) -> tuple[float, float, float | None]:
    """One server under callgrind: the instructions of ``requests`` requests (after a warm-up),
    less those of the same time idle; per request. Also the idle instructions per second, and
    the mean requests per batch where the model reports its batches."""
    ports = [_free_port() for _ in range(5)]
    if extra == [FLOOR]:
        argv = [sys.executable, "-m", "uvicorn", "hello_app:echo_app", "--app-dir"]
        argv += [str(ROOT / "bench"), "--host", "127.0.0.1", "--port", str(ports[0])]
        argv += ["--loop", "uvloop", "--http", "httptools", "--no-access-log"]
    elif extra == [GUARDED]:
        argv = [sys.executable, str(ROOT / "bench" / "guarded_echo.py"), "--port", str(ports[0])]
    else:
        argv = _podium_argv(model, ports)
        # under callgrind the server runs tens of times slower: its connection timers must not
        # close the clients' connections (they are armed all the same: the count is unchanged)
        argv += ["--header-timeout", "600", "--keep-alive-timeout", "600", *extra]
    with _under_callgrind(src, argv) as (server, out, errors):
        pid = str(server.pid)
        deadline = time.monotonic() + 600

        def connect() -> socket.socket:
            while True:
                _check_running(server, errors)
                try:
                    return socket.create_connection(("127.0.0.1", ports[0]), timeout=120)
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)

        sock = connect()
        with contextlib.ExitStack() as closing:
            closing.callback(lambda: sock.close())
            message = _request(path, body)
            pending = bytearray()

            def send(count: int) -> None:
                if connections > 1:
                    _send_concurrently(ports[0], message, connections, count, path)
                    return
                for _ in range(count):
                    sock.sendall(message)
                    status = _read_response(sock, pending)[0]
                    if status != 200:
                        raise RuntimeError(f"{path} answered {status}")

            def probe() -> int | None:
                # a connection of its own: the first one may have idled past keep-alive
                with socket.create_connection(("127.0.0.1", ports[0]), timeout=120) as own:
                    own.sendall(message)
                    return _batches(_read_response(own, bytearray())[1])

            while True:  # the model may still be loading: wait for the first 200
                try:
                    sock.sendall(message)
                    if _read_response(sock, pending)[0] == 200:
                        break
                except OSError:  # closed while it starts (an answer before it is ready)
                    sock.close()
                    sock, pending = connect(), bytearray()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{path} never answered 200")
                time.sleep(0.5)
            send(200 if connections == 1 else max(200, 4 * connections))  # warm-up
            before = probe()
            _callgrind("--zero", pid)
            start = time.monotonic()
            send(requests)
            busy_s = time.monotonic() - start
            _callgrind("--dump=busy", pid)  # a dump zeroes the counters
            time.sleep(busy_s)
            _callgrind("--dump=idle", pid)
            after = probe()
        busy, idle = _totals(out, "busy"), _totals(out, "idle")
        fill = None
        if before is not None and after is not None and after - before > 1:
            fill = requests / (after - before - 1)  # (less the second probe's own)
    return (busy - idle) / requests, idle / busy_s, fill


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", type=Path, help="the other tree's src/")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="in place of another tree: the raw ASGI echo of bench/hello_app.py on uvicorn "
        "(uvloop, httptools, no access log), the floor the plain path is measured against",
    )
    parser.add_argument(
        "--guarded",
        action="store_true",
        help="each tree serves the raw ASGI echo on uvicorn through its own guarded protocol "
        "(bench/guarded_echo.py) in place of `podium serve`: with --floor, what the connection "
        "limits cost; with --other, two trees' protocols",
    )
    parser.add_argument("--model", type=Path, default=ROOT / "examples" / "echo")
    parser.add_argument(
        "--other-model",
        type=Path,
        help="the model the other tree serves (default: --model), at the same --path (e.g. "
        "bench/models/echo_cached against examples/echo: a response cache hit against the "
        "plain path)",
    )
    parser.add_argument("--path", default="/v2/models/echo/infer")
    parser.add_argument("--body", default=BODY)
    parser.add_argument("--requests", type=int, default=1000, help="requests measured")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--connections",
        type=int,
        default=1,
        help="keep-alive clients sending at once (a batched model needs several to batch)",
    )
    parser.add_argument(
        "--grpc",
        action="store_true",
        help="OIP gRPC ModelInfer on the gRPC listener in place of REST (--model's name from "
        "its folder; --path, --body, --connections, --guarded and --floor do not apply)",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="with --grpc: the tensor in raw_input_contents (as tritonclient sends it)",
    )
    parser.add_argument(
        "--stream",
        action="store_true",
        help="with --grpc: the requests as the items of one ModelStreamInfer stream, each sent "
        "once the one before it is answered (per streamed item)",
    )
    parser.add_argument(
        "--other-args",
        default="",
        help="more `podium serve` options for the other tree only (e.g. --no-access-log, with "
        "--other the same tree: what that option saves)",
    )
    args = parser.parse_args()
    if (args.other is None) == (not args.floor):
        parser.error("one of --other and --floor")
    if args.stream and not args.grpc:
        parser.error("--stream streams on the gRPC listener: with --grpc")
    if args.grpc and (args.floor or args.guarded or args.connections != 1):
        parser.error("--grpc compares two trees: not with --floor, --guarded or --connections")
    mine = [GUARDED] if args.guarded else []
    extra = {"this": mine, "other": [FLOOR] if args.floor else mine or args.other_args.split()}
    trees = {"this": ROOT / "src", "other": ROOT / "src" if args.floor else args.other.resolve()}
    models = {"this": args.model.resolve(), "other": (args.other_model or args.model).resolve()}
    per: dict[str, list[float]] = {name: [] for name in trees}
    idle: dict[str, list[float]] = {name: [] for name in trees}
    for round_ in range(args.repeat):
        order = list(trees.items())
        for name, src in order if round_ % 2 == 0 else reversed(order):
            if args.grpc:
                message = _grpc_message(models[name].name, args.raw)
                request, per_second = _count_grpc(
                    src, models[name], message, args.requests, args.stream
                )
                fill = None
            else:
                request, per_second, fill = _count(
                    src,
                    models[name],
                    args.path,
                    args.body.encode(),
                    args.requests,
                    extra[name],
                    args.connections,
                )
            per[name].append(request)
            idle[name].append(per_second)
            batched = "" if fill is None else f", {fill:.1f} requests per batch"
            print(
                f"round {round_ + 1}, {name}: {request:,.0f} instructions/request "
                f"(idle: {per_second:,.0f}/s{batched})",
                flush=True,
            )
    print()
    print("| tree | src | instructions per request, each run | mean | idle instructions/s |")
    print("|---|---|---|---:|---:|")
    for name, src in trees.items():
        runs = ", ".join(f"{v:,.0f}" for v in per[name])
        mean = sum(per[name]) / len(per[name])
        quiet = sum(idle[name]) / len(idle[name])
        shown = "raw ASGI echo, uvicorn" if name == "other" and args.floor else f"`{src}`"
        if args.guarded and not (name == "other" and args.floor):
            shown += " (raw echo, guarded protocol)"
        print(f"| {name} | {shown} | {runs} | {mean:,.0f} | {quiet:,.0f} |")
    ratio = (sum(per["this"]) / len(per["this"])) / (sum(per["other"]) / len(per["other"]))
    print(f"\nthis / other: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
