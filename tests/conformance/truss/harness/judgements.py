"""Who is right where the servers differ, and why: written by a person after reading a run's
answers (``docs/truss.json``), keyed by (truss, case). The report prints each next to its
difference; a difference without one is shown as not judged yet."""

from __future__ import annotations

JUDGEMENTS: dict[tuple[str, str], str] = {}
