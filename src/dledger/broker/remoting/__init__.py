"""RocketMQ's remoting protocol for the dledger broker: what the 4.x clients speak.

``command`` is the frame and header codec (JSON and ROCKETMQ binary), ``codes`` the request and
response numbers, ``server`` the asyncio server and its dispatch; each request family has its
module: ``send``, ``pull`` (long polling, tag filtering), ``offsets``, ``groups`` (heartbeats),
``routes`` (GET_ROUTEINFO_BY_TOPIC) and ``registration`` (REGISTER_BROKER to the name servers).
See docs/broker.md, "RocketMQ clients".
"""
