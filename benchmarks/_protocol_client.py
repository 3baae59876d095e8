"""One load process of ``bench_broker_protocols.py``: a real client of one protocol, run by that
client's interpreter (the RocketMQ clients' own virtualenvs; the project's for ``own``). It
imports the project only for ``own``; it prints JSON lines on stdout.

    _protocol_client.py produce PROTOCOL ADDRESS TOPIC SIZE COUNT THREADS [RATE]
        warms up (one send retried until it is taken: the route is known), prints
        {"ready": warm-up sends}, waits for a line on stdin, then each of THREADS threads sends
        COUNT messages of SIZE bytes with the client's blocking send (at RATE messages/s per
        thread when given) and prints {"ok", "failed", "start", "end", "cpu_s" (this process's
        CPU time over the sending), "errors" (the first reasons a send failed), "lat_ms": [...]}
    _protocol_client.py consume PROTOCOL ADDRESS TOPIC GROUP EXPECT
        reads the topic until EXPECT messages came (acked for grpc) or 60 s pass without a new
        one: {"got", "start" (the first message), "end"}

PROTOCOL is ``own`` (ADDRESS: the ``--brokers`` list), ``remoting`` (ADDRESS: the name server)
or ``grpc`` (ADDRESS: one broker's gRPC endpoint).
"""

import json
import resource
import sys
import threading
import time

QUEUES = 4
IDLE_S = 60.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def out(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Own:
    def __init__(self, address, topic):
        from dledger.broker.client import BrokerClient
        self.make = lambda: BrokerClient(address, timeout=10.0)
        self.topic = topic
        self.local = threading.local()

    def send(self, body, i):
        client = getattr(self.local, "client", None) or self.make()
        self.local.client = client
        return client.send(self.topic, i % QUEUES, body, tags="bench", keys=[f"k{i}"]).ok

    def shutdown(self):
        pass


class Remoting:
    def __init__(self, address, topic):
        from rocketmq.client import Producer
        self.producer = Producer("PID-dledger-bench", timeout=10000)
        self.producer.set_namesrv_addr(address)
        self.producer.start()
        self.topic = topic

    def send(self, body, i):
        from rocketmq.client import Message
        msg = Message(self.topic)
        msg.set_tags("bench")
        msg.set_keys(f"k{i}")
        msg.set_body(body)
        return int(self.producer.send_sync(msg).status) == 0

    def shutdown(self):
        self.producer.shutdown()


class Grpc:
    def __init__(self, address, topic):
        from rocketmq import ClientConfiguration, Credentials, Producer
        self.producer = Producer(ClientConfiguration(address, Credentials(), request_timeout=10), (topic,))
        self.producer.startup()
        self.topic = topic

    def send(self, body, i):
        from rocketmq import Message
        m = Message()
        m.topic = self.topic
        m.body = body
        m.tag = "bench"
        m.keys = f"k{i}"
        return bool(self.producer.send(m).message_id)

    def shutdown(self):
        self.producer.shutdown()


def produce(protocol, address, topic, size, count, threads, rate=None):
    client = {"own": Own, "remoting": Remoting, "grpc": Grpc}[protocol](address, topic)
    body = b"x" * int(size)
    warm, deadline = 0, time.monotonic() + 60
    while True:                                   # until one send is taken: route and master known
        warm += 1
        try:
            if client.send(body, -warm):
                break
        except Exception as exc:                  # noqa: BLE001 - not ready yet: retried until the deadline
            if time.monotonic() > deadline:
                raise SystemExit(f"warm-up send failed for 60 s: {exc}")
        time.sleep(0.2)
    out({"ready": warm, "warm_ok": 1})
    sys.stdin.readline()
    cpu0 = cpu_seconds()
    lat, counts, lock, errors = [], [0, 0], threading.Lock(), []
    interval = 1.0 / float(rate) if rate else 0.0

    def worker(t):
        mine, ok, failed = [], 0, 0
        t0 = time.perf_counter()
        for k in range(int(count)):
            if interval:
                wait = t0 + k * interval - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            s = time.perf_counter()
            try:
                good = client.send(body, t * int(count) + k)
                error = None if good else "answered, not OK"
            except Exception as exc:              # noqa: BLE001 - counted as not sent, the first reasons kept
                good, error = False, str(exc).strip().splitlines()[0][:200] if str(exc).strip() else repr(exc)
            if error and len(errors) < 3:
                errors.append(error)
            mine.append((time.perf_counter() - s) * 1000)
            ok, failed = ok + good, failed + (not good)
        with lock:
            lat.extend(mine)
            counts[0] += ok
            counts[1] += failed

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(int(threads))]
    start = time.time()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    end = time.time()
    cpu = cpu_seconds() - cpu0
    client.shutdown()
    out({"ok": counts[0], "failed": counts[1], "start": start, "end": end, "cpu_s": cpu, "errors": errors,
         "lat_ms": [round(x, 3) for x in lat]})


def consume(protocol, address, topic, group, expect):
    expect = int(expect)
    got, start = 0, None                          # the clock starts at the first message
    last = time.monotonic()
    if protocol == "own":
        from dledger.broker.client import BrokerClient
        offsets = [0] * QUEUES
        with BrokerClient(address, timeout=10.0) as client:
            while got < expect and time.monotonic() - last < IDLE_S:
                for q in range(QUEUES):
                    msgs, offsets[q] = client.pull(topic, q, offsets[q], 32)
                    got += len(msgs)
                    start = start or (msgs and time.time()) or None
                    last = time.monotonic() if msgs else last
    elif protocol == "remoting":
        from rocketmq.client import PullConsumer
        consumer = PullConsumer(group)
        consumer.set_namesrv_addr(address)
        consumer.start()
        try:
            while got < expect and time.monotonic() - last < IDLE_S:
                for _msg in consumer.pull(topic):
                    start = start or time.time()
                    got += 1
                    last = time.monotonic()
        finally:
            consumer.shutdown()
    else:
        from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
        consumer = SimpleConsumer(ClientConfiguration(address, Credentials(), request_timeout=10), group,
                                  {topic: FilterExpression("*")}, await_duration=5)
        consumer.startup()
        try:
            while got < expect and time.monotonic() - last < IDLE_S:
                for m in consumer.receive(32, 30) or []:
                    start = start or time.time()
                    consumer.ack(m)
                    got += 1
                    last = time.monotonic()
        finally:
            consumer.shutdown()
    out({"got": got, "start": start, "end": time.time()})


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    {"produce": produce, "consume": consume}[mode](*rest)
