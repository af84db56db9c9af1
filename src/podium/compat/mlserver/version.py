"""The MLServer release whose runtime contract ``podium.compat.mlserver`` reproduces."""

__version__ = "1.7.1"
