"""Auto-registration of ``format("dledger-messages")`` (see ``pyspark_dledger``)."""

from dledger.spark.messages_source import DLedgerMessagesDataSource as DefaultSource

__all__ = ["DefaultSource"]
