"""``python -m podium`` is the ``podium`` command."""

from .cli import main

main()
