"""Generated protobuf and gRPC modules of RocketMQ's v2 API (``apache.rocketmq.v2``).

The ``.proto`` sources under ``proto/`` are apache/rocketmq-apis' (Apache License 2.0, their
license header kept); the ``*_pb2.py`` / ``*_pb2_grpc.py`` modules are generated from them by
``regenerate.py`` (grpcio-tools) and committed, their imports pointing at this package. Do not
edit them: change the sources and run ``regenerate.py`` (see README.md).
"""
