"""The dispatch scan: what the reput service needs of each record of a checked run, in one pass.

``scan_messages(records, first_index)`` gives, for each record of ``records`` (a run of whole
DLedger records as ``store.get_raw_range(..., checked=True)`` returns them, the first of index
``first_index``), one tuple::

    (index, pos, size, topic, queue_id, queue_offset, store_timestamp, tags_code,
     key_hashes, body_at, body_length)

``size`` is the whole record's (header included). ``topic`` is None, and the fields after it are
``0, 0, 0, 0, (), 0, 0``, where the record is not a dispatchable message (a NOOP or membership
entry, an empty body, a body that ``message_codec.dispatch_fields`` refuses). For a message:
``tags_code`` is the consume queue's tags code (``tags_hash_code`` of TAGS), ``key_hashes`` the
key index's hashes of ``topic#UNIQ_KEY`` and ``topic#key`` for each key of KEYS split on spaces,
empty keys dropped (``IndexService.index_messages``' keys, in that order), and the stored body
is ``records[body_at:body_at + body_length]``.

Two implementations give the same answers: ``MessageScanner`` is the reference, in Python, built
from the parsers the rest of the broker uses; the compiled twin is in ``dledger.broker._speedups``
(``speedups``: when it is used, and how to turn it off).
"""

from __future__ import annotations

from collections.abc import Iterator

from dledger.broker.index_file import KeyHasher
from dledger.broker.message_codec import dispatch_fields, tags_hash_code
from dledger.broker.speedups import compiled
from dledger.entry import BODY_OFFSET, MAGIC_NORMAL, iter_record_bodies

#: the most tags codes a ``MessageScanner`` keeps (then it starts again empty)
_TAG_CODES_MAX = 4096
_NOT_A_MESSAGE = (None, 0, 0, 0, 0, (), 0, 0)

ScanItem = tuple[int, int, int, str | None, int, int, int, int, tuple[int, ...], int, int]


class MessageScanner:
    """The reference ``scan_messages``: ``entry.iter_record_bodies`` and
    ``message_codec.dispatch_fields`` per record, the tags code and the key hashes through
    caches (``KeyHasher``; a table of tags codes)."""

    def __init__(self) -> None:
        self._hasher = KeyHasher()
        self._codes: dict[str | None, int] = {}

    def __call__(self, records, first_index: int) -> Iterator[ScanItem]:
        codes, hasher, fields = self._codes, self._hasher.message, dispatch_fields
        for index, magic, pos, body, end in iter_record_bodies(records, first_index):
            size = end - body + BODY_OFFSET
            found = fields(records, body, end) if magic == MAGIC_NORMAL and end > body else None
            if found is None:
                yield (index, pos, size, *_NOT_A_MESSAGE)
                continue
            topic, queue_id, queue_offset, store_timestamp, tags, keys, uniq, at, length = found
            code = codes.get(tags)
            if code is None:
                if len(codes) >= _TAG_CODES_MAX:
                    codes.clear()
                code = codes[tags] = tags_hash_code(tags)
            hashes = tuple(hasher(topic, uniq, keys)) if uniq or keys else ()
            yield index, pos, size, topic, queue_id, queue_offset, store_timestamp, code, hashes, body + at, length


def new_scanner():
    """A ``scan_messages`` for one reput service (the reference keeps caches per scanner)."""
    return compiled.scan_messages if compiled is not None else MessageScanner()
