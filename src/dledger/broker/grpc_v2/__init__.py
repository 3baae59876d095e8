"""The gRPC v2 endpoint: RocketMQ 5.x clients (``apache.rocketmq.v2.MessagingService``) on the broker.

Needs the ``grpc`` extra (grpcio, protobuf). See docs/broker.md, "gRPC v2 (RocketMQ 5.x clients)".
"""

import os

# grpcio 1.81 and later, with its fork support on, restart their poller in a forked child; a
# host that starts a subprocess (``subprocess.Popen`` closes the child's descriptors before
# ``exec``) then sees the child die on "epoll_wait error: Bad file descriptor" (grpc/grpc issue
# 43055). The endpoint never forks: fork support off unless the host asked for it. Read by
# grpc's core when it is first imported, so it is set here, before any module of this package
# imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
