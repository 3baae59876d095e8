"""Drives the real RocketMQ 4.x client (PyPI ``rocketmq`` 0.4.4, the C++ client 1.0.1) for the
remoting tests. It runs in the client's own virtualenv (``tests/helpers/client_venvs.py``), so
it imports nothing of the project; it prints one JSON object per line on stdout.

    rmq_client.py produce NAMESRV COUNT TOPIC[,TOPIC...]      -> {"sent": i, "status", "offset", "topic", "body", ...}
    rmq_client.py pull NAMESRV GROUP TOPIC[,TOPIC...]         -> one line per message, then {"done": n}
    rmq_client.py push NAMESRV GROUP TOPIC EXPECT SECONDS     -> one line per message, then {"done": n}
    rmq_client.py produce-retrying NAMESRV COUNT TOPIC SECONDS -> a send failed is sent again (a new
        message id each time) until SEND_OK or SECONDS pass: {"sent": i, "status", "msg_id", "attempts"}
"""

import json
import sys
import time

from rocketmq.client import Message, PullConsumer, PushConsumer, Producer


def out(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def seen(msg) -> dict:
    return {"topic": msg.topic, "tags": msg.tags.decode() if isinstance(msg.tags, bytes) else msg.tags,
            "keys": msg.keys.decode() if isinstance(msg.keys, bytes) else msg.keys,
            "body": msg.body.decode("latin-1") if isinstance(msg.body, bytes) else msg.body,
            "queue_id": msg.queue_id, "queue_offset": msg.queue_offset, "id": msg.id,
            "color": (msg.get_property("color") or b"").decode() if isinstance(msg.get_property("color"), bytes)
            else msg.get_property("color"), "at": time.time()}


def produce(namesrv: str, count: int, topics: list[str]) -> None:
    producer = Producer("PID-dledger-test", timeout=10000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for i in range(count):
            topic = topics[i % len(topics)]
            msg = Message(topic)
            msg.set_tags(f"Tag{i % 3}")
            msg.set_keys(f"key-{i}")
            msg.set_property("color", ("red", "green", "blue")[i % 3])
            body = f"message {i} \u00e9\u00e8 " + "x" * (i % 50)
            msg.set_body(body.encode())
            r = producer.send_sync(msg)
            out({"sent": i, "status": int(r.status), "offset": r.offset, "msg_id": r.msg_id, "topic": topic,
                 "body": body.encode().decode("latin-1"), "tags": f"Tag{i % 3}", "keys": f"key-{i}",
                 "color": ("red", "green", "blue")[i % 3]})
    finally:
        producer.shutdown()


def produce_retrying(namesrv: str, count: int, topic: str, seconds: float) -> None:
    producer = Producer("PID-dledger-failover", timeout=3000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for i in range(count):
            deadline, attempts = time.monotonic() + seconds, 0
            while True:
                attempts += 1
                msg = Message(topic)
                msg.set_keys(f"key-{i}")
                msg.set_body(f"failover {i}".encode())
                try:
                    r = producer.send_sync(msg)
                    if int(r.status) == 0:
                        out({"sent": i, "status": 0, "msg_id": r.msg_id, "offset": r.offset, "attempts": attempts,
                             "body": f"failover {i}"})
                        break
                except Exception as exc:            # the master is gone: the route is refreshed in time
                    error = str(exc).splitlines()[0][:200]
                else:
                    error = f"status {int(r.status)}"
                if time.monotonic() > deadline:
                    out({"sent": i, "status": -1, "error": error, "attempts": attempts})
                    break
                time.sleep(0.2)
            time.sleep(0.02)
    finally:
        producer.shutdown()


def pull(namesrv: str, group: str, topics: list[str]) -> None:
    consumer = PullConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.start()
    n = 0
    try:
        for topic in topics:
            for msg in consumer.pull(topic):
                out(seen(msg))
                n += 1
    finally:
        consumer.shutdown()
    out({"done": n})


def push(namesrv: str, group: str, topic: str, expect: int, seconds: float) -> None:
    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    got = []

    def on_message(msg):
        got.append(1)
        out(seen(msg))

    consumer.subscribe(topic, on_message)
    consumer.start()
    deadline = time.monotonic() + seconds
    while len(got) < expect and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(6)                      # the client persists its offsets every 5 s
    consumer.shutdown()                # and once more at shutdown
    out({"done": len(got)})


if __name__ == "__main__":
    mode, namesrv = sys.argv[1], sys.argv[2]
    if mode == "produce":
        produce(namesrv, int(sys.argv[3]), sys.argv[4].split(","))
    elif mode == "pull":
        pull(namesrv, sys.argv[3], sys.argv[4].split(","))
    elif mode == "produce-retrying":
        produce_retrying(namesrv, int(sys.argv[3]), sys.argv[4], float(sys.argv[5]))
    elif mode == "push":
        push(namesrv, sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
