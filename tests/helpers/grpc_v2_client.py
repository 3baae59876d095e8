"""Drives PyPI ``rocketmq-python-client`` (the official 5.x client, gRPC v2) against a broker:
run by the tests with the client's own virtualenv (``client_venvs.client_python("grpc")``).

    python grpc_v2_client.py produce ENDPOINT TOPIC N         -> {"sent": [[message_id, body], ...]}
    python grpc_v2_client.py simple ENDPOINT TOPIC GROUP N    -> {"acked": [body, ...]}
    python grpc_v2_client.py redeliver ENDPOINT TOPIC GROUP   -> {"first": [body, attempt], "again": [body, attempt]}
    python grpc_v2_client.py push ENDPOINT TOPIC GROUP N      -> {"consumed": [body, ...]}

It prints one JSON line and exits 0, or exits 1 with the reason on stderr; every wait is
bounded (DEADLINE_S). Two modes for the failover test print one JSON line per event instead (the
test reads them as they come), ending with {"done": ...}:

    python grpc_v2_client.py produce-retrying ENDPOINTS TOPIC N SECONDS
        -> {"sent": i, "status": 0, "message_id", "attempts", "at"} per message (a send that raised
           is sent again as a new message until it is answered or SECONDS pass: "status": -1)
    python grpc_v2_client.py consume-acking ENDPOINTS TOPIC GROUP N INVISIBLE_S GRACE_S
        -> {"received": body, "message_id", "attempt", "at"} and {"acked": message_id, "ok", "at"};
           ends once bodies 0..N-1 are acked and every message whose ack failed was received and
           acked again, or GRACE_S after the last body was acked
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


def event(obj):
    print(json.dumps({**obj, "at": time.time()}), flush=True)


def produce_retrying(endpoints, topic, n, seconds):
    producer = Producer(config(endpoints), (topic,))
    producer.startup()
    try:
        for i in range(int(n)):
            deadline, attempts = time.monotonic() + float(seconds), 0
            while True:
                attempts += 1
                m = Message()
                m.topic = topic
                m.body = f"failover-{i}".encode()
                try:
                    receipt = producer.send(m)      # the client's own 3 attempts, then it raises
                except Exception as exc:            # the master is gone until the route is refreshed
                    if time.monotonic() > deadline:
                        event({"sent": i, "status": -1, "error": str(exc)[:200], "attempts": attempts})
                        break
                    time.sleep(0.2)
                    continue
                event({"sent": i, "status": 0, "message_id": receipt.message_id, "attempts": attempts})
                break
            time.sleep(0.05)                        # at most 20 messages/s
    finally:
        producer.shutdown()
    return {"done": int(n)}


def consume_acking(endpoints, topic, group, n, invisible_s, grace_s):
    consumer = SimpleConsumer(config(endpoints), group, {topic: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    wanted = {f"failover-{i}" for i in range(int(n))}
    acked_bodies, unsettled, all_acked_at = set(), set(), None
    deadline = time.monotonic() + DEADLINE_S * 5
    try:
        while time.monotonic() < deadline:
            if all_acked_at is None and wanted <= acked_bodies:
                all_acked_at = time.monotonic()
            if all_acked_at is not None and (not unsettled or time.monotonic() - all_acked_at > float(grace_s)):
                break
            try:
                got = consumer.receive(16, int(invisible_s)) or []
            except Exception:                        # the master is gone until the route is refreshed
                time.sleep(0.2)
                continue
            for m in got:
                body = m.body.decode()
                event({"received": body, "message_id": m.message_id, "attempt": m.delivery_attempt})
                try:
                    consumer.ack(m)
                except Exception:
                    unsettled.add(m.message_id)
                    event({"acked": m.message_id, "ok": False})
                else:
                    unsettled.discard(m.message_id)
                    acked_bodies.add(body)
                    event({"acked": m.message_id, "ok": True})
    finally:
        consumer.shutdown()
    return {"done": len(acked_bodies & wanted), "unsettled": sorted(unsettled)}


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    result = {"produce": produce, "simple": simple, "redeliver": redeliver, "push": push,
              "produce-retrying": produce_retrying, "consume-acking": consume_acking}[mode](*rest)
    print(json.dumps(result), flush=True)
    sys.exit(0)
