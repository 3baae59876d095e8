"""The gRPC v2 endpoint: RocketMQ 5.x clients (``apache.rocketmq.v2.MessagingService``) on the broker.

Needs the ``grpc`` extra (grpcio, protobuf). See docs/broker.md, "gRPC v2 (RocketMQ 5.x clients)".
"""
