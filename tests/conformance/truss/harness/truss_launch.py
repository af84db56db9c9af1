"""Start Truss's own model server from a laid-out image file system, as the image's entry point
does (``python3 /app/main.py`` with ``/app`` as the working directory).

    python truss_launch.py ROOT

``ROOT`` is what Truss's ``DockerBuildEmulator`` made of the build directory (``ROOT/app`` is the
image's ``/app``, ``ROOT/packages`` its ``/packages``). Truss's server is run unmodified; three
things that would touch the machine's root are pointed into ``ROOT`` instead:

- ``/packages`` (bundled packages): appended to ``sys.path`` as ``model_wrapper`` appends
  ``/packages`` when it exists (in an image it always does);
- ``/secrets`` (the secrets mount): ``SecretsResolver.SECRETS_MOUNT_DIR`` is ``ROOT/secrets``;
- uvicorn's ``host="0.0.0.0"`` (hard-coded in ``truss_server.py``): ``127.0.0.1``.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path


def main() -> None:
    root = Path(sys.argv[1]).resolve()
    app = root / "app"
    os.chdir(app)
    # As `python3 /app/main.py`: the script's folder first on the path.
    sys.path[0] = str(app)
    packages = root / "packages"
    if packages.is_dir():
        sys.path.append(str(packages))

    import uvicorn
    from _truss_shared.secrets_resolver import SecretsResolver

    SecretsResolver.SECRETS_MOUNT_DIR = str(root / "secrets")
    config_init = uvicorn.Config.__init__

    def loopback(self, *args, **kwargs):
        kwargs["host"] = "127.0.0.1"
        config_init(self, *args, **kwargs)

    uvicorn.Config.__init__ = loopback  # type: ignore[method-assign]
    sys.argv = [str(app / "main.py")]
    runpy.run_path(str(app / "main.py"), run_name="__main__")


if __name__ == "__main__":
    main()
