"""Scraping a metrics endpoint over HTTP and reading samples out of the Prometheus text, and a
three-node cluster of one or more groups on the in-process transport to scrape."""

from __future__ import annotations

import threading
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from dledger import DLedgerConfig, DLedgerServer
from dledger.core import Role
from dledger.runtime.asyncio_runtime import AsyncioRuntime
from dledger.transport.inproc import Hub
from helpers.polling import wait_for_followed_leader

WAIT = 10.0


def scrape(url: str, timeout: float = WAIT) -> dict[tuple[str, frozenset], float]:
    """``{(sample name, frozenset of label pairs): value}`` of one scrape."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples, name: str, **labels) -> float:
    return samples[(name, frozenset(labels.items()))]


def scrape_until(url: str, predicate, timeout: float = WAIT):
    """Scrape until ``predicate(samples)`` holds; the last samples (the test asserts on them)."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(url)
        if predicate(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.02)


PEERS = "n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3"
IDS = ("n0", "n1", "n2")
# a 1.5 s election timeout: the suite shares two cores, and a leader starved of CPU for the
# default 300 ms would lose its leadership between an append and the scrape that checks it
HEARTBEAT_MS = 500


class InprocCluster:
    """Three nodes of each of ``groups`` on one in-process hub and one runtime."""

    def __init__(self, groups=("g",), state_machine=None) -> None:
        self.runtime, self.hub = AsyncioRuntime(), Hub()
        self.elected = {g: threading.Event() for g in groups}
        self.servers = {}
        for g in groups:
            for node_id in IDS:
                s = DLedgerServer(DLedgerConfig(group=g, self_id=node_id, peers=PEERS, store_type="memory",
                                                heart_beat_time_interval_ms=HEARTBEAT_MS),
                                  runtime=self.runtime, hub=self.hub,
                                  state_machine=state_machine() if state_machine else None)
                s.add_role_change_handler(lambda ch, g=g: ch.role is Role.LEADER and self.elected[g].set())
                self.servers[(g, node_id)] = s

    def start(self) -> "InprocCluster":
        for s in self.servers.values():
            s.startup()
        return self

    def leader(self, group: str = "g") -> DLedgerServer:
        """The leader of ``group``, once every member follows it (a leader the others have not
        all heard of yet may still lose its term to a competing candidate)."""
        assert self.elected[group].wait(WAIT), "no leader"
        members = [s for (g, _n), s in self.servers.items() if g == group]
        return wait_for_followed_leader(members, WAIT)

    def close(self) -> None:
        for s in self.servers.values():
            s.shutdown()
        self.runtime.close()
