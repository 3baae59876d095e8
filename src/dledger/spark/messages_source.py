"""The ``dledger-messages`` data source: a broker's log as one row per RocketMQ message.

Reads the same store directories, partitions and index-range pushdown as ``dledger`` (it
reuses ``DLedgerReader``) and decodes each NORMAL entry's body with
``dledger.broker.message_codec.decode_message``. NOOP and config entries are left out. A body that
is not a valid message gives a row with ``error`` set, never a failed job. ``tags`` and
``keys`` are the ``TAGS`` / ``KEYS`` properties; timestamps are epoch milliseconds.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.datasource import DataSource

from dledger.entry import MAGIC_NORMAL
from dledger.spark import scan
from dledger.spark.datasource import (DLedgerPushdownReader, DLedgerReader, SegmentPartition,
                                      _flag)
from dledger.broker.message_codec import decode_message

MESSAGE_FIELDS = [
    ("replica", pa.string(), "STRING"),
    ("index", pa.int64(), "BIGINT"),
    ("entry_pos", pa.int64(), "BIGINT"),
    ("topic", pa.string(), "STRING"),
    ("queue_id", pa.int32(), "INT"),
    ("queue_offset", pa.int64(), "BIGINT"),
    ("physical_offset", pa.int64(), "BIGINT"),
    ("tags", pa.string(), "STRING"),
    ("keys", pa.string(), "STRING"),
    ("properties", pa.map_(pa.string(), pa.string()), "MAP<STRING, STRING>"),
    ("born_timestamp", pa.int64(), "BIGINT"),
    ("born_host", pa.string(), "STRING"),
    ("store_timestamp", pa.int64(), "BIGINT"),
    ("store_host", pa.string(), "STRING"),
    ("total_size", pa.int32(), "INT"),
    ("magic_code", pa.int32(), "INT"),
    ("body_crc", pa.int32(), "INT"),
    ("flag", pa.int32(), "INT"),
    ("sys_flag", pa.int32(), "INT"),
    ("reconsume_times", pa.int32(), "INT"),
    ("prepared_transaction_offset", pa.int64(), "BIGINT"),
    ("error", pa.string(), "STRING"),
    ("body", pa.binary(), "BINARY"),
]
MESSAGE_ARROW_SCHEMA = pa.schema([(n, t) for n, t, _ in MESSAGE_FIELDS])
MESSAGE_DDL = ", ".join(f"`{n}` {d}" for n, _, d in MESSAGE_FIELDS)
_MESSAGE_ATTRS = [n for n, _, _ in MESSAGE_FIELDS[3:-2]]


def message_batches(entry_batches):
    """Message batches (``MESSAGE_ARROW_SCHEMA``) from entry batches that carry bodies."""
    for batch in entry_batches:
        cols = {n: [] for n, _, _ in MESSAGE_FIELDS}
        replica = batch.column("replica").to_pylist()
        index = batch.column("index").to_pylist()
        pos = batch.column("pos").to_pylist()
        magic = batch.column("magic").to_pylist()
        error = batch.column("error").to_pylist()
        bodies = batch.column("body").to_pylist()
        for i, body in enumerate(bodies):
            if magic[i] != MAGIC_NORMAL and error[i] is None:
                continue  # NOOP / config entries carry no message
            if error[i] is not None:
                m = None
            else:
                m = decode_message(body)
            cols["replica"].append(replica[i])
            cols["index"].append(index[i])
            cols["entry_pos"].append(pos[i])
            if m is None:
                for n in _MESSAGE_ATTRS:
                    cols[n].append(None)
                cols["error"].append(f"entry: {error[i]}")
                cols["body"].append(None)
                continue
            for n in _MESSAGE_ATTRS:
                if n == "properties":
                    cols[n].append(list(m.properties.items()))
                else:
                    cols[n].append(getattr(m, n))
            cols["error"].append(m.error)
            cols["body"].append(m.body)
        if cols["index"]:
            arrays = [pa.array(cols[f.name], type=f.type) for f in MESSAGE_ARROW_SCHEMA]
            yield pa.RecordBatch.from_arrays(arrays, schema=MESSAGE_ARROW_SCHEMA)


class _MessagesMixin:
    def read(self, partition):
        if not isinstance(partition, SegmentPartition):
            return iter(())
        return message_batches(scan.read_segment(partition.task, self.lo, self.hi, body=True,
                                                 verify=self.verify))


class MessagesReader(_MessagesMixin, DLedgerReader):
    pass


class MessagesPushdownReader(_MessagesMixin, DLedgerPushdownReader):
    pass


class DLedgerMessagesDataSource(DataSource):
    """``format("dledger-messages")``: one row per broker message."""

    @classmethod
    def name(cls) -> str:
        return "dledger-messages"

    def schema(self) -> str:
        return MESSAGE_DDL

    def reader(self, schema):
        cls = MessagesPushdownReader if _flag(self.options, "pushdown", True) else MessagesReader
        return cls(self.options)
