"""RocketMQ broker messages inside DLedger entries, for the ``dledger-messages`` source.

The codec has one home, ``dledger.broker.message_codec`` (the broker writes with it); this
module re-exports what the Spark source and its users call: ``decode_message`` never raises
for bad bytes (the ``error`` column says what is wrong), ``encode_message`` builds a message.
"""

from __future__ import annotations

from dledger.broker.message_codec import (BLANK_MAGIC, BORNHOST_V6_FLAG, COMPRESSED_FLAG, MAGIC_V1,
                                          MAGIC_V2, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR,
                                          STOREHOST_V6_FLAG, Message, decode_message, encode_message,
                                          parse_properties)

__all__ = ["BLANK_MAGIC", "BORNHOST_V6_FLAG", "COMPRESSED_FLAG", "MAGIC_V1", "MAGIC_V2",
           "NAME_VALUE_SEPARATOR", "PROPERTY_SEPARATOR", "STOREHOST_V6_FLAG", "Message",
           "decode_message", "encode_message", "parse_properties"]
