"""The raw ASGI echo of ``bench/hello_app.py`` on uvicorn with Podium's guarded protocol.

``bench/instructions.py --guarded`` serves this in place of ``podium serve``: the same uvicorn
configuration as its ``--floor`` (uvloop, httptools, no access log), but with the protocol class
of a :class:`podium.server._limits.ConnectionGuard` (the tree on ``PYTHONPATH``) as ``http=``,
so that the difference from ``--floor`` is what Podium's connection limits and its cork cost
per request, and ``--guarded --other`` compares two trees' protocols alone.

    PYTHONPATH=src python bench/guarded_echo.py --port 8000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hello_app import echo_app  # noqa: E402

from podium.config import ConnectionLimits  # noqa: E402
from podium.server._limits import ConnectionGuard  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    # under callgrind the server runs tens of times slower: its timers must not close the
    # client's connection (they are armed all the same), as instructions.py does for Podium
    limits = ConnectionLimits(header_timeout=600, keep_alive_timeout=600)
    guard = ConnectionGuard("inference", limits)
    uvicorn.run(
        echo_app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http=guard.protocol,
        access_log=False,
        timeout_keep_alive=600,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
