"""Membership changes with real ``dledger node`` processes over TCP on loopback, under load.

Three nodes start a group; a client thread appends all along and records every acknowledged
body with its index. A fourth node starts with ``dledger node ... --join`` and ``dledger member
add`` adds it (a learner, promoted once it caught up). Then ``dledger member remove`` removes an
original follower (``DLedgerClient.remove_member``) while the two other voters are paused
(SIGSTOP), so that the leader appends the change but cannot commit it; the leader is SIGKILLed
then and the others resumed: the client finds the new leader and finishes the change, or finds
it made (the new leader may hold the entry).
The killed node restarts on its directory. Then:
- every acknowledged body is read back at its index from the final leader;
- ``dledger status`` and ``dledger member list`` show the final configuration (the three
  remaining voters, no learner) on every member;
- every member converges: the same log end and commit index, and, after the nodes stop, the
  same entries (index, term, magic, body) in their stores.
The removed node keeps running until the end: the group goes on without it.

Every wait polls a condition with a deadline; nothing sleeps a fixed time to synchronise (the
load thread paces itself between appends, which is not a wait for anything).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

from dledger import AppendOutcomeUnknown, ClusterUnavailableError, DLedgerClient
from dledger.entry import MAGIC_CONFIG_CHANGE
from dledger.errors import DLedgerError
from dledger.store import open_store

from transport.node_processes import TIMEOUT, NodeProcesses, wait_for
from transport.tcp_helpers import free_ports

#: appends per second of the load thread, at most
LOAD_RATE = 150


def dledger(procs: NodeProcesses, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dledger.cli", *args], env=procs.env, capture_output=True,
                          timeout=timeout)


class Load:
    """A thread appending ``w-<k>`` one at a time; ``acked`` maps each acknowledged body to its index."""

    def __init__(self, procs: NodeProcesses) -> None:
        self.client = procs.client(timeout=15.0)
        self.acked: dict[bytes, int] = {}
        self.unknown = 0
        self.unavailable = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, name="load", daemon=True)

    def run(self) -> None:
        k = 0
        while not self.stopped.is_set():
            body = b"w-%d" % k
            k += 1
            try:
                self.acked[body] = self.client.append(body).index
            except AppendOutcomeUnknown:
                self.unknown += 1
            except ClusterUnavailableError:
                self.unavailable += 1
            self.stopped.wait(1 / LOAD_RATE)

    def __enter__(self) -> "Load":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join(TIMEOUT)
        self.client.close()


def test_a_group_under_load_adds_a_node_removes_one_and_survives_its_leader_killed_mid_change(tmp_path):
    procs = NodeProcesses(tmp_path)
    n3_addr = f"127.0.0.1:{free_ports(1)[0]}"
    all_peers = f"{procs.peers};n3-{n3_addr}"
    store_dir = procs.store_dir("g")
    client_flags = ["--group", "g", "--secret-file", str(procs.secret_file)]
    n3 = None
    try:
        procs.start_all()
        first = procs.leader()
        with Load(procs) as load:
            wait_for(lambda: len(load.acked) >= 50, "50 acknowledged appends")

            # a fourth node joins: it serves, takes no vote and waits to be added
            log3 = open(tmp_path / "n3.log", "wb")
            n3 = subprocess.Popen([sys.executable, "-m", "dledger.cli", "node", "--group", "g", "--id", "n3",
                                   "--peers", all_peers, "--store-dir", str(store_dir), "--join",
                                   "--secret-file", str(procs.secret_file), "--store-segment-size", "4MiB",
                                   "--log-level", "WARNING"], env=procs.env, stdout=subprocess.DEVNULL, stderr=log3)
            log3.close()
            m3 = wait_for(lambda: procs_metadata(procs, "n3", n3_addr), "n3 to serve")
            assert m3["role"] != "LEADER" and "n3" not in (m3.get("voters") or {})

            added = dledger(procs, "member", "add", "--peers", procs.peers, *client_flags, "--id", "n3",
                            "--address", n3_addr, "--wait", "60", "--timeout", "20")
            assert added.returncode == 0, added.stderr.decode()
            assert added.stdout.decode().startswith("n3 added as a voter"), added.stdout
            n_before_remove = len(load.acked)
            # (a learner within learner_max_lag_entries is promoted even before it answered a push:
            # wait until n3 holds and commits its promotion, or it cannot vote yet, being new)
            promoted_at = dledger_client_config_index(procs, procs.peers)
            wait_for(lambda: (m := procs_metadata(procs, "n3", n3_addr)) and m["committed_index"] >= promoted_at,
                     "n3 to commit its promotion", timeout=45)

            # remove an original follower while the two other voters are paused (SIGSTOP): the
            # leader appends the change but cannot commit it; SIGKILL it then, resume the others
            leader = procs.leader()
            removed = next(i for i in procs.ids if i != leader)
            paused = [procs.procs[i] for i in procs.ids if i not in (leader, removed)] + [n3]
            for p in paused:
                p.send_signal(signal.SIGSTOP)
            answer: list = []
            remover = threading.Thread(target=lambda: answer.append(_remove(procs, all_peers, removed)), daemon=True)
            remover.start()

            def appended_or_deposed():
                m = procs.metadata(leader)
                return m is None or m["role"] != "LEADER" or removed not in m["voters"]

            wait_for(appended_or_deposed, f"the leader {leader} to append the removal of {removed}", timeout=45)
            interrupted = not answer
            procs.kill(leader)
            for p in paused:
                p.send_signal(signal.SIGCONT)
            remover.join(90)
            assert answer and answer[0].code == 200, answer
            out = answer[0]
            procs.start(leader)                    # the killed node comes back on its directory
            members = sorted({"n0", "n1", "n2", "n3"} - {removed})
            wait_for(lambda: len(load.acked) >= n_before_remove + 50, "50 more acknowledged appends")
        assert load.acked, "nothing was acknowledged"

        addr = {**procs.addr, "n3": n3_addr}
        member_peers = ";".join(f"{i}-{addr[i]}" for i in members)
        with _client(procs, member_peers) as c:
            final = c.metadata()
            assert sorted(final["voters"]) == members and final["learners"] == {}
            # every acknowledged body, at its index, from the final leader
            for body, index in sorted(load.acked.items(), key=lambda kv: kv[1]):
                assert c.get(index).body == body, f"acknowledged {body!r} at {index} is lost"

            # every member converges: the same log end and commit index
            def converged():
                end = c.metadata()["ledger_end_index"]
                metas = [procs_metadata(procs, i, addr[i]) for i in members]
                return all(m is not None and m["ledger_end_index"] == end and m["committed_index"] == end
                           for m in metas)
            wait_for(converged, "every member to hold and commit the leader's log", timeout=45)

        # dledger status and member list show the final configuration on every member
        status = dledger(procs, "status", "--json", "--peers", member_peers, *client_flags, "--timeout", "10")
        assert status.returncode == 0, status.stderr.decode()
        seen = json.loads(status.stdout)
        for i in members:
            assert sorted(seen[i]["voters"]) == members and seen[i]["learners"] == {}, seen[i]
            assert seen[i]["member"] == "voter" and seen[i]["lag"] is not None
        for i in members:
            listed = dledger(procs, "member", "list", "--peers", f"{i}-{addr[i]}", *client_flags, "--timeout", "10")
            assert listed.returncode == 0, listed.stderr.decode()
            rows = [line.split() for line in listed.stdout.decode().splitlines()]
            assert [(r[0], r[1], r[2]) for r in rows] == [(m, addr[m], "voter") for m in members], rows

        # the same entries in every member's store, configuration entries included
        for i in members:
            if i == "n3":
                n3.terminate()
                assert n3.wait(TIMEOUT) == 0
            else:
                assert procs.stop(i) == 0
        logs = {i: entries(store_dir / f"dledger-{i}") for i in members}
        reference = logs[members[0]]
        assert all(log == reference for log in logs.values())
        kinds = [magic for _i, _t, magic, _b in reference]
        assert kinds.count(MAGIC_CONFIG_CHANGE) >= 3          # n3 as learner, its promotion, the removal
        print(f"first leader {first}, removed {removed}, killed {leader} "
              f"({'before' if interrupted else 'after'} the remove's answer: index {out.index} {out.message}); "
              f"{len(load.acked)} acknowledged, "
              f"{load.unknown} unknown, {load.unavailable} unavailable; {len(reference)} entries")
    finally:
        if n3 is not None and n3.poll() is None:
            n3.kill()
            n3.wait(TIMEOUT)
        procs.close()


def dledger_client_config_index(procs: NodeProcesses, peers: str) -> int:
    with _client(procs, peers) as c:
        return c.metadata()["config_index"]


def _remove(procs: NodeProcesses, peers: str, node_id: str):
    with _client(procs, peers, timeout=45.0) as c:
        return c.remove_member(node_id)


def _client(procs: NodeProcesses, peers: str, timeout: float = 15.0) -> DLedgerClient:
    return DLedgerClient(peers, "g", timeout_s=timeout, secret_file=str(procs.secret_file))


def procs_metadata(procs: NodeProcesses, node_id: str, address: str) -> dict | None:
    """What ``node_id`` at ``address`` says about itself, or None while it does not answer."""
    try:
        with _client(procs, f"{node_id}-{address}", timeout=1.0) as c:
            return c.node_metadata(node_id)
    except (DLedgerError, OSError):
        return None


def entries(path) -> list[tuple[int, int, int, bytes]]:
    with open_store(str(path)) as store:
        return [(e.index, e.term, e.magic, bytes(e.body))
                for e in store.iter_entries(store.ledger_before_begin_index + 1, store.ledger_end_index)]
