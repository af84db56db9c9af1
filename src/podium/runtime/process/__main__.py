"""``python -m podium.runtime.process FD PARENT_PID``: a worker process (see ``_child``)."""

import sys

from ._child import main

if __name__ == "__main__":
    main(sys.argv[1:])
