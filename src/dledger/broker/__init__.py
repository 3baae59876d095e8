"""dledger.broker: a RocketMQ-style message store whose CommitLog is a ``DLedgerServer``.

``DLedgerCommitLog(server)`` is the CommitLog (puts through an append hook that stamps queue
offset, physical offset and store time), with dispatch to ConsumeQueue files and a key index on
every replica, a role-change handler (master on the leader, slave elsewhere) and consumer
reads. ``message_codec`` is the project's one codec of RocketMQ's message layout. See
docs/broker.md.
"""

from dledger.broker.commit_log import AwaitableFuture, DLedgerCommitLog
from dledger.broker.message_codec import Message, MessageFormatError, decode, decode_message, encode_message
from dledger.broker.put_result import PutMessageResult, PutMessageStatus

__all__ = ["AwaitableFuture", "DLedgerCommitLog", "Message", "MessageFormatError", "PutMessageResult",
           "PutMessageStatus", "decode", "decode_message", "encode_message"]
