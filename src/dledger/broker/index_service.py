"""IndexService: the key index over several ``IndexFile``s (RocketMQ's ``IndexService``).

Files live in ``<root>/keyindex/``. For each dispatched message it indexes ``topic#UNIQ_KEY`` and ``topic#key`` for every key of
``KEYS`` (split on spaces) in the newest file, opening a new file (named after the message's
store time) when that one is full. A message whose physical offset is below the newest file's
``endPhyOffset`` was indexed already and is skipped (RocketMQ's rule; it makes a replay after a
crash harmless). ``lookup(topic, key)`` returns candidate physical offsets, newest first.

``build_index`` writes the files' headers before it returns; ``index_messages`` (given the KEYS
property as it is) and ``index_hashed`` (the reput service's path: the keys hashed by the
dispatch scan) leave them to ``commit``, once per batch
(``index_file`` says how a header that never got written is undone on open).
"""

from __future__ import annotations

import os

from dledger.broker.index_file import DEFAULT_INDEX_NUM, DEFAULT_SLOTS, IndexFile, KeyHasher, file_name_for

#: RocketMQ's directory is ``index``; in a node's store directory that name is DLedger's own
#: (its index segments), so the key index lives beside it
INDEX_DIR = "keyindex"


class IndexService:
    def __init__(self, root: str, *, slots: int = DEFAULT_SLOTS, index_num: int = DEFAULT_INDEX_NUM,
                 undo: bool = True) -> None:
        self.dir = os.path.join(root, INDEX_DIR)
        self.slots, self.index_num = slots, index_num
        os.makedirs(self.dir, exist_ok=True)
        names = sorted(n for n in os.listdir(self.dir) if n.isdigit() and len(n) == 17)
        self.files = [IndexFile(os.path.join(self.dir, n), slots, index_num, undo) for n in names]
        self._hash = KeyHasher()

    def _writable(self, store_timestamp: int) -> IndexFile:
        if self.files and not self.files[-1].full:
            return self.files[-1]
        if self.files:
            self.files[-1].write_header()
        ts = store_timestamp
        while os.path.exists(os.path.join(self.dir, file_name_for(ts))):
            ts += 1
        f = IndexFile(os.path.join(self.dir, file_name_for(ts)), self.slots, self.index_num)
        self.files.append(f)
        return f

    def build_index(self, topic: str, keys: list[str], phy_offset: int, store_timestamp: int) -> None:
        """Index ``topic#key`` for each of ``keys`` (in order) and write the header."""
        if not keys:
            return
        files = self.files
        if files and files[-1].index_count > 1 and phy_offset < files[-1].end_phy_offset:
            return
        self._put_all([(self._hash(topic, key), phy_offset, store_timestamp) for key in keys])
        self.commit()

    def index_messages(self, messages: list[tuple[str, str | None, str | None, int, int]]) -> None:
        """``build_index(topic, [uniq_key] + the KEYS split on spaces, ...)`` (empty keys
        dropped) for each ``(topic, uniq_key, keys, phy_offset, store_timestamp)`` in order,
        with the header left to ``commit``."""
        hasher = self._hash.message
        self.index_hashed([(hashes, phy_offset, store_timestamp) for topic, uniq_key, keys, phy_offset, store_timestamp
                           in messages if (hashes := hasher(topic, uniq_key, keys))])

    def index_hashed(self, messages: list[tuple[tuple[int, ...] | list[int], int, int]]) -> None:
        """``index_messages`` with each message's keys already hashed (the dispatch scan's key
        hashes): ``(key_hashes, phy_offset, store_timestamp)`` in order, none empty, with the
        header left to ``commit``. A message the newest file already ends beyond is skipped
        (indexed already)."""
        files = self.files
        last = files[-1] if files else None
        end = last.end_phy_offset if last is not None and last.index_count > 1 else None
        work: list[tuple[int, int, int]] = []
        add = work.append
        for hashes, phy_offset, store_timestamp in messages:
            if end is not None and phy_offset < end:
                continue                     # indexed already (the newest file ends beyond it)
            end = phy_offset
            for h in hashes:
                add((h, phy_offset, store_timestamp))
        self._put_all(work)

    def index_hash_work(self, work: list[tuple[int, int, int]]) -> None:
        """``index_hashed`` given its work already: ``(key_hash, phy_offset, store_timestamp)``
        for every key of every message, in log order (physical offsets grow). The messages
        the newest file already ends beyond are skipped, as there."""
        if not work:
            return
        files = self.files
        last = files[-1] if files else None
        if last is not None and last.index_count > 1:
            end = last.end_phy_offset
            if work[0][1] < end:
                work = [w for w in work if w[1] >= end]
        self._put_all(work)

    def _put_all(self, work: list[tuple[int, int, int]]) -> None:
        files = self.files
        i = 0
        while i < len(work):
            f = files[-1] if files and not files[-1].full else self._writable(work[i][2])
            i += f.put_hashes(work, i)

    def commit(self) -> None:
        """Write the newest file's header (older files got theirs when they filled up)."""
        if self.files:
            self.files[-1].write_header()

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

    def undo_unwritten(self) -> None:
        """Undo, in every file, the entries beyond its header's count (``IndexFile``)."""
        for f in self.files:
            f._undo_unwritten()

    def counts(self) -> dict[str, int]:
        """Entries (the header's ``indexCount``) per file name, for a checkpoint."""
        return {os.path.basename(f.path): f.index_count for f in self.files}

    def truncate_to(self, counts: dict[str, int]) -> bool:
        """Keep what a checkpoint's ``counts`` vouch for: each file it names cut back to its
        count (slots rebuilt), every other file (made after it) removed. False, changing
        nothing, when a file it names is missing."""
        names = {os.path.basename(f.path) for f in self.files}
        if any(name not in names for name in counts):
            return False
        for f in list(self.files):
            name = os.path.basename(f.path)
            if name in counts:
                f.truncate_to(counts[name])
            else:
                f.close()
                os.unlink(f.path)
                self.files.remove(f)
        return True

    def clear(self) -> None:
        """Remove every file (everything is dispatched again)."""
        for f in self.files:
            f.close()
            os.unlink(f.path)
        self.files = []

    def sync_fds(self) -> tuple[list[int], list[IndexFile]]:
        """For a checkpoint: everything written, and a descriptor to sync of each file whose
        header changed since its last sync, with those files (``IndexFile.sync_fd``)."""
        self.commit()
        fds, files = [], []
        try:
            for f in self.files:
                fd = f.sync_fd()
                if fd is not None:
                    fds.append(fd)
                    files.append(f)
        except BaseException:           # out of descriptors: nothing handed over
            for fd in fds:
                os.close(fd)
            for f in files:
                f.mark_unsynced()
            raise
        return fds, files

    def close(self, commit: bool = True) -> None:
        """Close the files (``commit=False``: as a crash does, the header left as it is)."""
        if commit:
            self.commit()
        for f in self.files:
            f.close()
