"""RocketMQ's remoting numbers: request codes, response codes, flag bits, language codes
(``RequestCode.java``, ``ResponseCode.java``, ``RemotingCommand.java``, ``LanguageCode.java``).
Only the numbers this package uses or names in an answer are here."""

from __future__ import annotations

# -- request codes ------------------------------------------------------------------------
SEND_MESSAGE = 10
PULL_MESSAGE = 11
QUERY_CONSUMER_OFFSET = 14
UPDATE_CONSUMER_OFFSET = 15
SEARCH_OFFSET_BY_TIMESTAMP = 29
GET_MAX_OFFSET = 30
GET_MIN_OFFSET = 31
HEART_BEAT = 34
UNREGISTER_CLIENT = 35
GET_CONSUMER_LIST_BY_GROUP = 38
REGISTER_BROKER = 103
GET_ROUTEINFO_BY_TOPIC = 105
SEND_MESSAGE_V2 = 310
SEND_BATCH_MESSAGE = 320

# -- response codes -----------------------------------------------------------------------
SUCCESS = 0
SYSTEM_ERROR = 1
REQUEST_CODE_NOT_SUPPORTED = 3
FLUSH_SLAVE_TIMEOUT = 12
MESSAGE_ILLEGAL = 13
SERVICE_NOT_AVAILABLE = 14
NO_PERMISSION = 16
TOPIC_NOT_EXIST = 17
PULL_NOT_FOUND = 19
PULL_RETRY_IMMEDIATELY = 20
PULL_OFFSET_MOVED = 21

# -- flag bits ----------------------------------------------------------------------------
FLAG_RESPONSE = 1 << 0
FLAG_ONEWAY = 1 << 1

#: LanguageCode.java's constants in ordinal order (the binary header carries the ordinal)
LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
             "OMS", "RUST", "NODE_JS")

#: the serialize types of the frame's second word (its high byte)
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1

#: the version a reply carries (RocketMQ 4.9.4's MQVersion ordinal; clients do not check it)
VERSION = 435

__all__ = [n for n in dir() if n.isupper()]
