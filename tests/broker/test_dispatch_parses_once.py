"""Each message is parsed once on the broker's dispatch path, on every replica.

The dispatch (``DLedgerCommitLog.dispatch_committed``: the reput service's walk of checked
runs and what runs after each batch, the consumer state's records included) reads the fields
of each committed message once, in the dispatch scan (``dispatch_scan.scan_messages``, compiled
or its reference, which calls ``message_codec.dispatch_fields`` once per record; or, compiled,
the same scan gathered per consume queue, ``scan_queues``), calls no other
message parser and builds no entry object (``store.get``, ``entry.decode``): counted here while a
broker group dispatches user messages with tags and keys and consumer-offset records, which the
consumer state used to parse a second time. Run with each scan (``conftest.BOTH_SCANS``). A run the
gathered scan cannot take (a queue's first message, a gap in stamped offsets) is scanned again
message by message; only the scan whose result is used is counted."""

from __future__ import annotations

import collections
import functools
import sys

import pytest

from dledger import entry
from dledger.broker import message_codec, reput
from dledger.broker.commit_log import DLedgerCommitLog

from .helpers import OK, BrokerGroup

#: every parser of a whole message (``parse_properties`` is a step inside them, not counted)
MESSAGE_PARSERS = ("dispatch_fields", "decode", "decode_message", "locate")


@pytest.fixture
def parses(monkeypatch):
    """Counts, per node, the calls of the message parsers and of the entry decoder made inside
    ``dispatch_committed``, wherever they are called from (every module's reference to them
    is replaced)."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    inside: list[str] = []
    scanning: list[bool] = []

    def counting(name, fn):
        @functools.wraps(fn)
        def counted(*args, **kwargs):
            if inside and not scanning:
                counts[inside[-1]][name] += 1
            return fn(*args, **kwargs)
        return counted

    def counting_scanner(new_scanner):
        """Scans that count the messages they found (``scan``); what a scan calls inside is its
        own parse, not counted again."""
        def new():
            scan = new_scanner()

            def counted(records, first_index):
                scanning.append(True)
                try:
                    items = list(scan(records, first_index))
                finally:
                    scanning.pop()
                if inside:
                    counts[inside[-1]]["scan"] += sum(1 for item in items if item[3] is not None)
                return items
            return counted
        return new

    monkeypatch.setattr(reput, "new_scanner", counting_scanner(reput.new_scanner))
    gathered = reput.ReputService._dispatch_gathered

    def counting_gathered(self, found, dispatched):
        """A run the compiled scan gathered per queue: its messages count when the gathered
        dispatch is used (else the walk scans the run, counted above)."""
        used = gathered(self, found, dispatched)
        if used and inside:
            counts[inside[-1]]["scan"] += len(found[2])
        return used

    monkeypatch.setattr(reput.ReputService, "_dispatch_gathered", counting_gathered)

    originals = {(message_codec, n): getattr(message_codec, n) for n in MESSAGE_PARSERS}
    originals[(entry, "entry.decode")] = entry.decode
    for (home, name), fn in originals.items():
        attr = name.split(".")[-1]
        wrapped = counting(name, fn)
        for module in [m for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("dledger")]:
            if getattr(module, attr, None) is fn:
                monkeypatch.setattr(module, attr, wrapped)
    dispatch = DLedgerCommitLog.dispatch_committed

    def dispatching(self):
        inside.append(self.server.config.self_id)
        try:
            return dispatch(self)
        finally:
            inside.pop()

    monkeypatch.setattr(DLedgerCommitLog, "dispatch_committed", dispatching)
    return counts


def test_every_committed_message_is_parsed_once_per_replica_while_it_is_dispatched(tmp_path, parses):
    n_messages, n_offsets = 40, 5
    with BrokerGroup(tmp_path, seed=21) as g:
        lead = g.elected()
        results = g.put_many([("T", k % 2, b"m%d" % k) for k in range(n_messages // 2)])
        for k in range(n_messages // 2, n_messages):
            results.append(g.put("T", k % 2, b"m%d" % k, tags="TagA", keys=["order-%d" % k, "k"]))
        assert all(r.status is OK for r in results)
        for k in range(n_offsets):
            f = g.logs[lead].consumer_state.commit_offset_async("G", "T", 0, k + 1)
            assert g.c.run_until(f.done, 5_000) and f.result().status is OK
        g.settle()
        for node, log in g.logs.items():
            assert log.consumer_state.offset("G", "T", 0) == n_offsets, node   # the records were applied
            assert sum(cq.max_offset for (t, _q), cq in log.reput.queues.items() if t == "T") == n_messages
        assert set(parses) == set(g.logs)
        for node, counted in parses.items():
            assert counted == {"scan": n_messages + n_offsets}, node
