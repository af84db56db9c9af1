"""The ``.proto`` files of the gRPC services and their compiled descriptor set
(``_descriptors``, made by ``python -m podium.server.grpc.protos.build``); the gRPC front end's
``_pool`` loads it. Nothing here is for other packages."""

__all__: list[str] = []
