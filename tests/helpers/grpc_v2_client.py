"""Drives PyPI ``rocketmq-python-client`` (the official 5.x client, gRPC v2) against a broker:
run by the tests with the client's own virtualenv (``client_venvs.client_python("grpc")``).

    python grpc_v2_client.py produce ENDPOINT TOPIC N         -> {"sent": [[message_id, body], ...]}
    python grpc_v2_client.py simple ENDPOINT TOPIC GROUP N    -> {"acked": [body, ...]}
    python grpc_v2_client.py redeliver ENDPOINT TOPIC GROUP   -> {"first": [body, attempt], "again": [body, attempt]}
    python grpc_v2_client.py push ENDPOINT TOPIC GROUP N      -> {"consumed": [body, ...]}

It prints one JSON line and exits 0, or exits 1 with the reason on stderr; every wait is
bounded (DEADLINE_S).
"""

import json
import sys
import threading
import time

from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression, Message, MessageListener,
                      Producer, PushConsumer, SimpleConsumer)

DEADLINE_S = 60


def config(endpoint):
    return ClientConfiguration(endpoint, Credentials(), request_timeout=10)


def produce(endpoint, topic, n):
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    sent = []
    try:
        for i in range(int(n)):
            m = Message()
            m.topic = topic
            m.body = f"grpc-{i}".encode()
            m.tag = "TagA"
            m.keys = f"key-{i}"
            m.add_property("seq", str(i))
            receipt = producer.send(m)
            sent.append([receipt.message_id, m.body.decode()])
    finally:
        producer.shutdown()
    return {"sent": sent}


def simple(endpoint, topic, group, n):
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    acked = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(acked) < int(n):
            if time.monotonic() > deadline:
                raise SystemExit(f"received {len(acked)} of {n}")
            for m in consumer.receive(16, 30) or []:
                consumer.ack(m)
                acked.append(m.body.decode())
    finally:
        consumer.shutdown()
    return {"acked": acked}


def redeliver(endpoint, topic, group):
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    try:
        deadline = time.monotonic() + DEADLINE_S
        first = None
        while first is None:
            if time.monotonic() > deadline:
                raise SystemExit("nothing received")
            got = consumer.receive(1, 2) or []
            first = got[0] if got else None
        again = None
        while again is None:                       # not acked: back after its 2 s
            if time.monotonic() > deadline:
                raise SystemExit("not delivered again")
            for m in consumer.receive(1, 30) or []:
                if m.message_id == first.message_id:
                    again = m
                consumer.ack(m)
    finally:
        consumer.shutdown()
    return {"first": [first.body.decode(), first.delivery_attempt], "again": [again.body.decode(), again.delivery_attempt]}


def push(endpoint, topic, group, n):
    consumed, lock, done = [], threading.Lock(), threading.Event()

    class Listener(MessageListener):
        def consume(self, message):
            with lock:
                consumed.append(message.body.decode())
                if len(consumed) >= int(n):
                    done.set()
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(config(endpoint), group, Listener(), {topic: FilterExpression("*")})
    consumer.startup()
    try:
        if not done.wait(DEADLINE_S):
            raise SystemExit(f"consumed {len(consumed)} of {n}")
        time.sleep(1)                  # let the acks of the last messages go out before shutdown
    finally:
        consumer.shutdown()
    return {"consumed": consumed}


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    result = {"produce": produce, "simple": simple, "redeliver": redeliver, "push": push}[mode](*rest)
    print(json.dumps(result), flush=True)
    sys.exit(0)
