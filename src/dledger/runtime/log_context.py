"""Log context: which group, node, term and index a log line of the core or the server is about.

The core's modules log through module-level loggers shared by every node of the process, so a
record does not say which node emitted it. The driver says it instead: at each of its entry
points (an envelope, a timer, a proposal, a read, a transfer, start and stop) it stores its
server's ``LogContext`` in ``CURRENT`` (one attribute store, nothing else on the hot path), and
the server does the same in its own timers and while it opens its store. ``ContextFilter``, put
on a log handler, reads ``CURRENT`` when a record is emitted (records are rare) and adds:

- ``record.group``, ``record.node``: the group and this node's id;
- ``record.term``: the node's current term (None before the node exists);
- ``record.index``: the index the message is about, when it is about one: an ``index`` passed
  in ``extra``, else the argument of the first ``entry %d``-style placeholder in the message
  (``entry``, ``entries from``, ``index unit``, ``push``, ``applying``, ``compare at``,
  ``truncate at``, ``reset to``, ``endIndex``); None otherwise;
- ``record.context``: ``"[g/n0 term 3 index 17] "`` (only the parts known), or ``""``.

A context counts only for records of the ``dledger.core``, ``dledger.server``,
``dledger.store`` and ``dledger.runtime`` loggers emitted on the thread that entered it (the
runtime's thread): a record from another thread (a store's flush thread, the host's) or from
the transport, which serves every group of its port, gets empty fields. ``FORMAT`` shows the
context; ``configure(level)`` is the logging setup of ``dledger node``.
"""

from __future__ import annotations

import logging
import re
import sys
import threading

#: the format of ``dledger node``: ``... INFO dledger.core.vote [g/n0 term 3] n0: ...``
FORMAT = "%(asctime)s %(levelname)s %(name)s %(context)s%(message)s"

SCOPES = ("dledger.core", "dledger.server", "dledger.store", "dledger.runtime")

_INDEX_AT = re.compile(r"(?:\bentry|\bentries from|\bindex unit|\bpush|\bapplying|\bcompare at|\btruncate at"
                       r"|\breset to|\bendIndex) %d")
_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[a-zA-Z%]")


class LogContext:
    """Who a record is about: a group, a node id and (once the node exists) its member state."""

    __slots__ = ("group", "node_id", "member_state", "store", "thread")

    def __init__(self, group: str, node_id: str) -> None:
        self.group = group
        self.node_id = node_id
        #: the node's member state once it exists, else its store once open (for the term)
        self.member_state = None
        self.store = None
        #: the thread that runs this node (set when the node starts on it)
        self.thread: int | None = None

    def bind_here(self) -> None:
        """The calling thread runs this node from now on; enter the context on it."""
        self.thread = threading.get_ident()
        CURRENT.ctx = self

    def term(self) -> int | None:
        member = self.member_state
        if member is not None:
            return member.curr_term
        store = self.store
        return getattr(store, "current_term", None) if store is not None else None


class _Current:
    __slots__ = ("ctx",)

    def __init__(self) -> None:
        self.ctx: LogContext | None = None


#: the context of the node whose code runs now (set by its driver and server)
CURRENT = _Current()


def index_of(record: logging.LogRecord) -> int | None:
    """The index a record's message is about (see the module docstring), or None."""
    explicit = record.__dict__.get("index")
    if isinstance(explicit, int):
        return explicit
    msg, args = record.msg, record.args
    if not isinstance(msg, str) or not isinstance(args, tuple):
        return None
    at = _INDEX_AT.search(msg)
    if at is None:
        return None
    k = sum(1 for p in _PLACEHOLDER.findall(msg, 0, at.end() - 2) if p != "%%")
    value = args[k] if k < len(args) else None
    return value if isinstance(value, int) else None


class ContextFilter(logging.Filter):
    """Adds ``group``, ``node``, ``term``, ``index`` and ``context`` to every record it sees
    (empty for records outside a node's context); never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = CURRENT.ctx
        if ctx is not None and ctx.thread == record.thread and record.name.startswith(SCOPES):
            term = ctx.term()
            index = index_of(record)
            record.group, record.node, record.term, record.index = ctx.group, ctx.node_id, term, index
            parts = [f"{ctx.group}/{ctx.node_id}"]
            if term is not None:
                parts.append(f"term {term}")
            if index is not None:
                parts.append(f"index {index}")
            record.context = f"[{' '.join(parts)}] "
        else:
            for name in ("group", "node", "term", "index"):
                if name not in record.__dict__:
                    setattr(record, name, None)
            record.context = ""
        return True


def configure(level: str | int = "INFO", stream=None) -> logging.Handler | None:
    """The logging of ``dledger node``, as ``logging.basicConfig`` does it: when the root logger
    has no handler yet, one writing ``FORMAT`` to ``stream`` (stderr) through a
    ``ContextFilter`` (returned); the root level is set either way."""
    root = logging.getLogger()
    handler = None
    if not root.handlers:
        handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        handler.addFilter(ContextFilter())
        root.addHandler(handler)
    root.setLevel(level)
    return handler


__all__ = ["CURRENT", "FORMAT", "ContextFilter", "LogContext", "configure", "index_of"]
