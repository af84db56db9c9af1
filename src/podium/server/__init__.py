"""Front ends: wire formats in, neutral types to the data plane, wire formats out."""

from ._guard import UnsafeExposure

__all__ = ["UnsafeExposure"]
