"""``ts.handler_utils``."""
