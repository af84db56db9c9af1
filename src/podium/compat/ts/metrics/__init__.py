"""``ts.metrics``: what handlers import to record metrics through ``context.metrics``."""
