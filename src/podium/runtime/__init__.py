"""Registry, scheduling and execution. Imports no web or gRPC library."""
