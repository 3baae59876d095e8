"""ReputService: dispatches committed messages to the consume queues and the key index, on
every replica (RocketMQ's ``DefaultMessageStore.ReputMessageService``).

It walks the log's committed entries in index order, from its checkpoint on. Each NORMAL
entry whose body is a message (``message_codec.dispatch_info``) becomes one consume-queue unit
(physical offset = entry position + the 48-byte entry header, size, tags hash code) at the
queue offset stamped in the message, and index keys for its UNIQ_KEY and KEYS. Other entries
(NOOP, membership, bodies that are not messages) are passed over. Blank padding at segment ends
is never seen: the walk goes by index, not by byte.

Checkpoint: ``<root>/dispatch.checkpoint`` holds ``next_index next_physical_offset``, written
(to a temporary file, then renamed) after every batch. On open, units and index entries at or
beyond ``next_physical_offset`` are dropped (a crash between writing them and the checkpoint)
and the walk resumes at ``next_index``: nothing is dispatched twice and nothing is skipped.

A stamped queue offset that is not the queue's next one is a broken promise of the leader; it
is recorded in ``problems`` (and the unit is written as the queue's next, so the message stays
readable). Everything here runs on the server's runtime thread.
"""

from __future__ import annotations

import os

from dledger.broker.consume_queue import ConsumeQueue, list_queues
from dledger.broker.index_service import IndexService
from dledger.broker.message_codec import (KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY,
                                          dispatch_info, tags_hash_code)
from dledger.entry import BODY_OFFSET, MAGIC_NORMAL

CHECKPOINT = "dispatch.checkpoint"


class ReputService:
    def __init__(self, root: str, *, units_per_file: int | None = None, index_options: dict | None = None) -> None:
        self.root = root
        os.makedirs(root, exist_ok=True)
        self._cq_kwargs = {} if units_per_file is None else {"units_per_file": units_per_file}
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.index = IndexService(root, **(index_options or {}))
        self.problems: list[str] = []
        #: ``listener(physical_offset, store_timestamp)`` after each message is dispatched (off: None)
        self.on_dispatch = None
        self.next_index, self.next_physical_offset = self._read_checkpoint()
        for topic, qid in list_queues(root):
            self.queue(topic, qid).truncate_from_physical(self.next_physical_offset)
        self.index.truncate_from_physical(self.next_physical_offset)

    # -- checkpoint -----------------------------------------------------------------------
    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.root, CHECKPOINT)

    def _read_checkpoint(self) -> tuple[int, int]:
        try:
            with open(self.checkpoint_path) as f:
                index, pos = f.read().split()
            return int(index), int(pos)
        except (OSError, ValueError):
            return 0, 0

    def _write_checkpoint(self) -> None:
        tmp = self.checkpoint_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{self.next_index} {self.next_physical_offset}\n")
        os.replace(tmp, self.checkpoint_path)

    # -- queues ---------------------------------------------------------------------------
    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = self.queues[(topic, queue_id)] = ConsumeQueue(self.root, topic, queue_id, **self._cq_kwargs)
        return cq

    def find_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        if (topic, queue_id) in self.queues:
            return self.queues[(topic, queue_id)]
        if os.path.isdir(os.path.join(self.root, "consumequeue", topic, str(queue_id))):
            return self.queue(topic, queue_id)
        return None

    def max_queue_offsets(self) -> dict[tuple[str, int], int]:
        return {key: cq.max_offset for key, cq in self.queues.items() if cq.max_offset}

    # -- dispatch -------------------------------------------------------------------------
    def dispatch_up_to(self, store, last_index: int, max_entries: int = 4096) -> int:
        """Dispatch entries ``next_index .. last_index`` (at most ``max_entries``); how many."""
        begin = max(self.next_index, getattr(store, "ledger_before_begin_index", -1) + 1)
        end = min(last_index, begin + max_entries - 1, store.ledger_end_index)
        if end < begin:
            return 0
        for i in range(begin, end + 1):
            entry = store.get(i)
            if entry.magic == MAGIC_NORMAL and entry.body:
                self.dispatch_message(entry.body, entry.pos + BODY_OFFSET)
            self.next_index = i + 1
            self.next_physical_offset = entry.pos + entry.size
        for cq in self.queues.values():
            cq.commit()
        self._write_checkpoint()
        return end - begin + 1

    def dispatch_message(self, body: bytes, physical_offset: int) -> None:
        info = dispatch_info(body)
        if info is None:
            return
        topic, queue_id, queue_offset, size, store_timestamp, props = info
        cq = self.queue(topic, queue_id)
        if queue_offset != cq.max_offset:
            self.problems.append(f"{topic}/{queue_id}: message at {physical_offset} carries queue "
                                 f"offset {queue_offset}, the queue's next is {cq.max_offset}")
        tags = props.get(PROPERTY_TAGS)
        cq.put(cq.max_offset, physical_offset, size, tags_hash_code(tags))
        uniq = props.get(PROPERTY_UNIQ_KEY)
        keys = ([uniq] if uniq else []) + [k for k in props.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if k]
        self.index.build_index(topic, keys, physical_offset, store_timestamp)
        if self.on_dispatch is not None:
            self.on_dispatch(physical_offset, store_timestamp)

    def flush(self) -> None:
        for cq in self.queues.values():
            cq.flush()
        self.index.flush()

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        self.index.close()
