"""IndexService: the key index over several ``IndexFile``s (RocketMQ's ``IndexService``).

Files live in ``<root>/keyindex/``. For each dispatched message it indexes ``topic#UNIQ_KEY`` and ``topic#key`` for every key of
``KEYS`` (split on spaces) in the newest file, opening a new file (named after the message's
store time) when that one is full. A message whose physical offset is below the newest file's
``endPhyOffset`` was indexed already and is skipped (RocketMQ's rule; it makes a replay after a
crash harmless). ``lookup(topic, key)`` returns candidate physical offsets, newest first.
"""

from __future__ import annotations

import os

from dledger.broker.index_file import DEFAULT_INDEX_NUM, DEFAULT_SLOTS, IndexFile, file_name_for

#: RocketMQ's directory is ``index``; in a node's store directory that name is DLedger's own
#: (its index segments), so the key index lives beside it
INDEX_DIR = "keyindex"


class IndexService:
    def __init__(self, root: str, *, slots: int = DEFAULT_SLOTS, index_num: int = DEFAULT_INDEX_NUM) -> None:
        self.dir = os.path.join(root, INDEX_DIR)
        self.slots, self.index_num = slots, index_num
        os.makedirs(self.dir, exist_ok=True)
        names = sorted(n for n in os.listdir(self.dir) if n.isdigit() and len(n) == 17)
        self.files = [IndexFile(os.path.join(self.dir, n), slots, index_num) for n in names]

    def _writable(self, store_timestamp: int) -> IndexFile:
        if self.files and not self.files[-1].full:
            return self.files[-1]
        ts = store_timestamp
        while os.path.exists(os.path.join(self.dir, file_name_for(ts))):
            ts += 1
        f = IndexFile(os.path.join(self.dir, file_name_for(ts)), self.slots, self.index_num)
        self.files.append(f)
        return f

    def build_index(self, topic: str, keys: list[str], phy_offset: int, store_timestamp: int) -> None:
        if not keys:
            return
        if self.files and self.files[-1].index_count > 1 and phy_offset < self.files[-1].end_phy_offset:
            return
        for key in keys:
            f = self._writable(store_timestamp)
            if not f.put_key(f"{topic}#{key}", phy_offset, store_timestamp):
                f = self._writable(store_timestamp)
                f.put_key(f"{topic}#{key}", phy_offset, store_timestamp)

    def lookup(self, topic: str, key: str, max_num: int = 64) -> list[int]:
        out: list[int] = []
        for f in reversed(self.files):
            for off in f.lookup(f"{topic}#{key}", max_num - len(out)):
                if off not in out:
                    out.append(off)
            if len(out) >= max_num:
                break
        return out

    def truncate_from_physical(self, phy_offset: int) -> int:
        dropped = 0
        for f in reversed(list(self.files)):
            dropped += f.truncate_from_physical(phy_offset)
            if f.index_count <= 1 and f is self.files[-1] and len(self.files) > 1:
                f.close()
                os.unlink(f.path)
                self.files.pop()
        return dropped

    def flush(self) -> None:
        for f in self.files:
            f.flush()

    def close(self) -> None:
        for f in self.files:
            f.close()
