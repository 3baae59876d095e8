"""A seeded fault run of the broker store: puts through whoever is master while the nemesis
crashes, restarts, partitions, cuts power (torn write-back on a fixed minority) and crashes
nodes inside their writes; then everything heals and the broker's promises are checked on every
replica (``helpers.check_exactly_once`` plus: no message twice, every committed message
dispatched once, every unit's message stamped with the unit's own offsets)."""

from __future__ import annotations

import os
import random

from dledger.broker import decode
from dledger.broker import dispatch_checkpoint
from dledger.broker.consume_queue import CQ_UNIT_SIZE, list_queues
from dledger.broker.index_file import HEADER_SIZE, INDEX_SIZE, SLOT_SIZE
from dledger.broker.message_codec import dispatch_fields
from dledger.entry import MAGIC_NORMAL

from .helpers import OK, BrokerGroup, check_exactly_once, cq_bytes

TOPICS = [("A", 0), ("A", 1), ("B", 0)]


class BrokerSwarm:
    def __init__(self, tmp_path, seed: int, *, ms: int = 6_000, segment: int = 64 * 1024) -> None:
        self.seed, self.ms = seed, ms
        self.rng = random.Random(seed)
        self.g = BrokerGroup(tmp_path, seed=seed, mapped_file_size_for_entry_data=segment,
                             mapped_file_size_for_entry_index=32 * 1024)
        self.victim = self.rng.choice(self.g.c.ids)          # the only node that loses power
        self.pending: list = []                              # (items, future)
        self.sent: list = []                                 # ((topic, qid, body), result)
        self.n = 0
        self.log: list[str] = []
        #: sectors of the broker's own files a power cut wrecked (beyond the durable checkpoint)
        self.damaged = 0

    # -- load -----------------------------------------------------------------------------
    def _put(self) -> None:
        lead = self.g.leader()
        if lead is None:
            return
        log = self.g.logs[lead]
        k = self.rng.choice((1, 1, 1, 3, 8))
        items = []
        for _ in range(k):
            t, q = TOPICS[self.n % len(TOPICS)]
            items.append((t, q, b"s%d-%d" % (self.seed, self.n)))
            self.n += 1
        if k == 1:
            t, q, body = items[0]
            f = log.put_message_async(t, q, body, keys=[body.decode()])
        else:
            f = log.put_messages_async([{"topic": t, "queue_id": q, "body": b, "keys": [b.decode()]}
                                        for t, q, b in items])
        self.pending.append((items, f))

    def _collect(self, final: bool = False) -> None:
        keep = []
        for items, f in self.pending:
            if not f.done():
                if final:
                    self.sent.extend((item, None) for item in items)
                else:
                    keep.append((items, f))
                continue
            try:
                res = f.result()
            except Exception:  # noqa: BLE001 - a put that died with its node: unclear
                res = None
            results = res if isinstance(res, list) else [res] * len(items)
            if len(results) != len(items):
                results = [results[0]] * len(items)
            self.sent.extend(zip(items, results))
        self.pending = keep

    # -- the nemesis ------------------------------------------------------------------------
    def _fault(self) -> None:
        c, rng = self.g.c, self.rng
        live, down = c.live(), sorted(c.crashed)
        action = rng.choice(("crash", "restart", "restart", "power", "partition", "isolate_leader", "heal",
                             "heal", "crash_inside"))
        if action == "crash" and len(live) > 1:
            node = rng.choice(live)
            c.crash(node)
        elif action == "restart" and down:
            node = rng.choice(down)
            self._restart(node)
        elif action == "power" and self.victim in live:
            node = self.victim
            c.power_loss(node, torn=True)
            self.damaged += damage_unsynced(self.g.logs[node].root, rng)
        elif action == "partition":
            ids = list(c.ids)
            rng.shuffle(ids)
            cut = rng.randint(1, len(ids) - 1)
            c.partition(ids[:cut], ids[cut:])
            node = f"{ids[:cut]}|{ids[cut:]}"
        elif action == "isolate_leader" and c.leader() is not None:
            lead = c.leader()
            c.partition([lead], [i for i in c.ids if i != lead])
            node = lead
        elif action == "heal":
            c.heal()
            node = ""
        elif action == "crash_inside" and live:
            node = rng.choice(live)
            c.crash_inside(node, rng.randint(1, 40), power=node == self.victim, torn=True)
        else:
            return
        self.log.append(f"{c.now_ms} {action} {node}")

    def _restart(self, node: str) -> None:
        old = self.g.logs[node]
        server = self.g.c.restart(node)
        old.close()
        if server is not None:
            from dledger.broker import DLedgerCommitLog
            self.g.logs[node] = DLedgerCommitLog(server)

    # -- the run ----------------------------------------------------------------------------
    def run(self) -> list:
        c = self.g.c
        self.g.elected()
        end = c.now_ms + self.ms
        self._victim_was_down = False
        next_fault = c.now_ms + self.rng.randint(100, 600)
        while c.now_ms < end:
            self._put()
            c.run_for(self.rng.randint(5, 40))
            # a node killed by its armed crash is seen here
            self._collect()
            if self.victim in c.crashed and not self._victim_was_down:
                # a power cut armed inside a write fired: it wrecks the broker's files too
                self.damaged += damage_unsynced(self.g.logs[self.victim].root, self.rng)
            self._victim_was_down = self.victim in c.crashed
            if c.now_ms >= next_fault:
                self._fault()
                next_fault = c.now_ms + self.rng.randint(100, 600)
        c.disarm_all()
        c.heal()
        for node in sorted(c.crashed):
            self._restart(node)
        self.log.append(f"{c.now_ms} heal and restart all")
        assert c.run_until(lambda: self.g.leader() is not None, 20_000), self.why("no master after healing")
        # puts through the master until it has committed its whole log and the group has settled
        # on it, as the core swarm's liveness phase appends: a new master commits the entries of
        # earlier terms only with one of its own, so until then a replica that had committed them
        # before may have dispatched more than the master (a put may also meet a master that
        # loses its place), and the master may change while the group settles (one elected after
        # the puts stopped has committed nothing of its term: seed 656)
        deadline = c.now_ms + 20_000
        while c.now_ms < deadline:
            if not self._master_committed_all():
                self._put()
            if c.run_until(lambda: all(f.done() for _, f in self.pending) and self._master_committed_all()
                           and self.g.settled(), 1_000):
                break
        self._collect(final=True)
        self.g.settle(20_000)
        return self.check()

    def _master_committed_all(self) -> bool:
        lead = self.g.leader()
        return lead is not None and \
            self.g.c.servers[lead].node.committed_index >= self.g.c.servers[lead].store.ledger_end_index

    def why(self, text: str) -> str:
        return f"seed {self.seed}: {text}; faults: " + "; ".join(self.log[-25:])

    def check(self) -> list:
        g = self.g
        try:
            acked = check_exactly_once(g, self.sent)
        except AssertionError as exc:
            raise AssertionError(self.why(f"exactly-once broken: {exc}")) from None
        for node in g.c.live():
            log, store = g.logs[node], g.c.servers[node].store
            committed = g.c.servers[node].node.committed_index
            messages = sum(1 for i in range(store.ledger_before_begin_index + 1, committed + 1)
                           if (e := store.get(i)).magic == MAGIC_NORMAL and dispatch_fields(e.body) is not None)
            units = sum(len(v) // 20 for v in cq_bytes(log).values())
            assert units == messages, self.why(f"{node}: {units} units for {messages} committed messages")
            bodies = []
            for (t, q), _data in cq_bytes(log).items():
                msgs, _ = log.get_messages(t, q, 0, 100_000)
                for k, m in enumerate(msgs):
                    assert (m.topic, m.queue_id, m.queue_offset) == (t, q, k), self.why(f"{node}: unit {t}/{q}/{k}")
                    raw = log.get_message(m.physical_offset, m.total_size)
                    assert raw is not None and decode(raw).body == m.body, self.why(f"{node}: {t}/{q}/{k} unreadable")
                    bodies.append(m.body)
            assert len(bodies) == len(set(bodies)), self.why(f"{node}: a message dispatched twice")
            for (t, _q, body), r in acked:                  # the key index finds every one
                found = [m.physical_offset for m in log.query_by_key(t, body.decode(), 8)]
                assert found == [r.wrote_offset], self.why(f"{node}: key {body.decode()} finds {found}")
        return acked

    def close(self) -> None:
        self.g.close()


SECTOR = 512


def _wreck(path: str, start: int, rng: random.Random) -> int:
    """Zero or scramble a random choice of the 512-byte sectors of ``path`` from byte
    ``start`` on (a power cut: writes after the last sync lost, torn or half done); how many."""
    size = os.path.getsize(path)
    if start >= size:
        return 0
    first = start - start % SECTOR
    sectors = list(range(first, size, SECTOR))
    # the written part ends somewhere: only damage up to a little past the last non-zero byte
    with open(path, "r+b") as f:
        wrecked = 0
        for pos in sectors[: 64]:
            if rng.random() < 0.5:
                continue
            f.seek(pos)
            old = f.read(SECTOR)
            keep = max(0, start - pos)
            new = old[:keep] + (bytes(SECTOR - keep) if rng.random() < 0.6 else rng.randbytes(SECTOR - keep))
            f.seek(pos)
            f.write(new[:len(old)])
            wrecked += 1
    return wrecked


def damage_unsynced(root: str, rng: random.Random) -> int:
    """What a power cut may do to the broker's files: anything beyond what the durable
    checkpoint vouches for (its counts) lost, torn or garbage; the checkpoint itself, synced
    before it was renamed into place, stays."""
    cp = dispatch_checkpoint.read(root)
    queues = cp.queues if cp.problem is None and cp.queues is not None else {}
    index_files = cp.index_files if cp.problem is None and cp.index_files is not None else {}
    wrecked = 0
    for topic, qid in list_queues(root):
        qdir = os.path.join(root, "consumequeue", topic, str(qid))
        keep = queues.get((topic, qid), 0) * CQ_UNIT_SIZE
        for name in sorted(os.listdir(qdir)):
            start = int(name)
            wrecked += _wreck(os.path.join(qdir, name), max(0, keep - start), rng)
    kdir = os.path.join(root, "keyindex")
    for name in sorted(os.listdir(kdir)) if os.path.isdir(kdir) else ():
        path = os.path.join(kdir, name)
        count = index_files.get(name, 0)            # 0: made after the checkpoint, all at risk
        base = _entries_base(path)
        with open(path, "r+b") as f:
            if rng.random() < 0.5:                          # a torn header
                f.write(rng.randbytes(HEADER_SIZE))
                wrecked += 1
            for _ in range(rng.randint(0, 3)):              # slots updated after the checkpoint
                pos = rng.randrange(1, base // SECTOR) * SECTOR
                if pos + SECTOR <= base:
                    f.seek(pos)
                    f.write(rng.randbytes(SECTOR) if rng.random() < 0.5 else bytes(SECTOR))
                    wrecked += 1
        wrecked += _wreck(path, base + max(1, count) * INDEX_SIZE, rng)
    return wrecked


def _entries_base(path: str) -> int:
    from dledger.broker.index_file import DEFAULT_INDEX_NUM, DEFAULT_SLOTS
    size = os.path.getsize(path)
    assert size >= HEADER_SIZE + DEFAULT_SLOTS * SLOT_SIZE + DEFAULT_INDEX_NUM * INDEX_SIZE
    return HEADER_SIZE + DEFAULT_SLOTS * SLOT_SIZE
