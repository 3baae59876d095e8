"""The real RocketMQ 4.x client through a master failover: three ``dledger broker`` processes and
a ``dledger namesrv``; a producer sends (sending again what fails) while a push consumer
consumes; the master is SIGKILLed mid-stream. The producer resumes through the new master (the
new master registers with broker id 0 at once; the client finds it at its next route refresh),
every message answered SEND_OK is consumed at least once, and the duplicates are counted and
bounded. Then the killed node is restarted on its own store and catches up: it answers every
queue's end as the master does, and a pull from it returns every SEND_OK message.

The duplicate bound: the push consumer commits its offsets every 5 s (and the commits go
through the Raft log, so the new master holds every commit the old one answered). A consumer
that starts again from its last commit delivers again at most what it consumed since that
commit; a send the producer repeated (its answer lost with the master) may be stored twice. So
duplicates <= messages first consumed in the COMMIT_WINDOW_S before the kill + repeated sends."""

import collections
import json
import pathlib
import signal
import subprocess
import time

from broker.remoting.rmq_cluster import Cluster, run_client
from helpers.client_venvs import client_env, client_python

MESSAGES = 150
KILL_AT = 50
COMMIT_WINDOW_S = 6.0          # the client's 5 s offset-persist period, plus a second for its round trip
CATCH_UP_S = 90.0


def test_a_master_kill_under_the_real_producer_and_push_consumer(tmp_path):
    python = client_python("remoting")
    env = client_env(tmp_path / "home")
    (tmp_path / "home").mkdir()
    cluster = Cluster(tmp_path).start()
    script = str(pathlib.Path(__file__).with_name("rmq_client.py"))
    consumer = None
    try:
        old = cluster.master()
        consumer = subprocess.Popen([python, script, "push", cluster.namesrv, "failover-group", "Failover",
                                     str(MESSAGES), "150"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        producer = subprocess.Popen([python, script, "produce-retrying", cluster.namesrv, str(MESSAGES), "Failover", "90"],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        sent, killed_at, resumed_at = [], None, None
        for line in producer.stdout:
            sent.append(json.loads(line))
            if killed_at is not None and resumed_at is None and sent[-1]["status"] == 0:
                resumed_at = time.monotonic()
            if len(sent) == KILL_AT:
                cluster.procs[old].send_signal(signal.SIGKILL)
                killed_at, killed_wall = time.monotonic(), time.time()
        assert producer.wait(60) == 0, producer.stderr.read().decode()[-2000:]
        new = cluster.master()
        assert new != old and killed_at is not None
        ok = [s for s in sent if s["status"] == 0]
        assert len(sent) == MESSAGES and len(ok) == MESSAGES, [s for s in sent if s["status"] != 0][:3]

        out, err = consumer.communicate(timeout=200)
        got = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
        assert got and got[-1].get("done") is not None, err.decode()[-2000:]
        bodies = collections.Counter(m["body"] for m in got[:-1])
        missing = [s["body"] for s in ok if s["body"] not in bodies]
        assert not missing, (len(missing), missing[:5])
        duplicates = sum(n - 1 for n in bodies.values())
        resent = sum(s["attempts"] - 1 for s in ok)
        first_seen = {}
        for m in got[:-1]:
            first_seen.setdefault(m["body"], m["at"])
        in_window = sum(1 for at in first_seen.values() if killed_wall - COMMIT_WINDOW_S <= at <= killed_wall)
        assert duplicates <= in_window + resent, (duplicates, in_window, resent)
        pulled = run_client(python, env, "pull", cluster.namesrv, "after-failover", "Failover")
        assert {m["body"] for m in pulled[:-1]} >= {s["body"] for s in ok}

        # the killed node restarts on its own store and catches up with the new master
        ends = cluster.queue_ends(new, "Failover")
        assert sum(ends) >= MESSAGES
        restarted_at = time.monotonic()
        cluster.start_broker(old)
        cluster.wait_caught_up(old, "Failover", ends, CATCH_UP_S)
        caught_up_s = time.monotonic() - restarted_at
        held = collections.Counter(b.decode() for b in cluster.pull_bodies(old, "Failover", ends))
        assert sum(held.values()) == sum(ends) and not [s["body"] for s in ok if s["body"] not in held]
        assert held == collections.Counter(b.decode() for b in cluster.pull_bodies(new, "Failover", ends))
        print(f"\nmaster {old} killed at message {KILL_AT}, new master {new}; the producer's next SEND_OK "
              f"{resumed_at - killed_at:.1f} s later; {len(ok)} SEND_OK, {resent} sends repeated, "
              f"{sum(bodies.values())} consumed, {duplicates} duplicates (bound {in_window + resent}); "
              f"{old} restarted and caught up ({sum(ends)} messages) in {caught_up_s:.1f} s")
    finally:
        if consumer is not None and consumer.poll() is None:
            consumer.kill()
        cluster.stop()
