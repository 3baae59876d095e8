"""Driver: the one crank that turns a sans-IO ``Node``, used by every runtime.

What it does with each ``Ready`` (in this order, see docs/architecture.md):
1. hand every envelope in ``messages`` to the transport, then have it write them (``flush``,
   when the transport has one: the TCP transport writes a turn's frames at its end);
2. complete the operation of every ``Completion`` (its token is an ``Op``: a future plus
   what to put in it);
3. tell role-change handlers about every ``RoleChange``, in order (exceptions are logged);
4. arm one timer for ``next_deadline_ms`` (re-armed only when the deadline moves earlier;
   an early tick is harmless).

It never sleeps and never polls: it runs only when an envelope arrives, a timer fires or the
host submits an operation. All of it runs on the runtime's thread.

Three ways to end: ``stop()`` is a clean shutdown (pending operations fail, and what the node
still has to say is sent); ``kill()`` is the process dying (pending operations fail, as a
client whose connection broke sees them, but nothing more is sent); ``halt(reason)`` is the
fail-stop of a node whose disk failed: as ``kill()``, and every operation the node still had
(or completed in the crank that found the failure) ends with ``DISK_ERROR``, never SUCCESS.
``health`` (optional) is asked before every crank sends anything: a reason (the store's
``failed``) halts the node there, so nothing the node decided after its disk failed leaves it.
After any of them, inputs are ignored and no timer is armed; ``halted`` names the reason of a
halt and ``halt_handlers`` hear it once. ``process()`` executes whatever the node has ready; a host that
changed the node directly (e.g. a test forcing roles) calls it.

Each entry point first stores the driver's ``log_context`` (set by the server) in
``runtime.log_context.CURRENT``, so that what the node logs can name its group, id and term.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, InvalidStateError
from typing import Any, Callable

from dledger.core import Node, Ready, RoleChange
from dledger.errors import DISK_ERROR
from dledger.protocol import AppendEntryResponse, Envelope, LeadershipTransferResponse, MembershipResponse
from dledger.runtime.log_context import CURRENT

log = logging.getLogger(__name__)

APPEND, WRITE, READ, TRANSFER, MEMBERSHIP = "append", "write", "read", "transfer", "membership"


class Op:
    """A host operation in flight: the future to complete and how. ``started_ms`` (when the
    host called, on the server's clock) and ``nbytes`` (the bodies' size) are for metrics."""

    __slots__ = ("future", "kind", "started_ms", "nbytes")

    def __init__(self, future: Future, kind: str, started_ms: float = 0, nbytes: int = 0) -> None:
        self.future = future
        self.kind = kind
        self.started_ms = started_ms
        self.nbytes = nbytes

    def finish(self, response: Any, result: Any) -> None:
        try:
            self.future.set_result((response, result) if self.kind == WRITE else response)
        except InvalidStateError:
            pass                    # cancelled by the host, or answered already


class Driver:
    def __init__(self, node: Node, runtime, transport,
                 health: Callable[[], str | None] | None = None) -> None:
        self.node = node
        self.runtime = runtime
        self.transport = transport
        self.health = health
        self.role_change_handlers: list[Callable[[RoleChange], None]] = []
        self.ready_listeners: list[Callable[[Ready], None]] = []
        self.halt_handlers: list[Callable[[str], None]] = []
        self._timer = None
        self._timer_at: int | None = None
        self.stopped = False
        #: why the node halted (its disk failed), or None
        self.halted: str | None = None
        #: who log records are about while this driver runs (``runtime.log_context``)
        self.log_context = None
        #: writes what a turn sent at its end, when the transport queues it (``TcpTransport``)
        self._flush = getattr(transport, "flush", None)
        transport.set_receiver(self.on_envelope)

    # -- inputs ---------------------------------------------------------------------------
    def start(self) -> None:
        CURRENT.ctx = self.log_context
        self.process()

    def on_envelope(self, env: Envelope) -> None:
        CURRENT.ctx = self.log_context
        if self.stopped:
            return
        self.node.receive(self.runtime.now_ms(), env)
        self.process()

    def _on_timer(self) -> None:
        CURRENT.ctx = self.log_context
        self._timer = None
        self._timer_at = None
        if self.stopped:
            return
        self.node.tick(self.runtime.now_ms())
        self.process()

    def wake(self) -> None:
        """Run the node now and execute its Ready: something outside it changed what it may
        do (a snapshot finished: applying resumes)."""
        CURRENT.ctx = self.log_context
        if self.stopped:
            return
        self.node.tick(self.runtime.now_ms())
        self.process()

    def refuse(self, op: Op) -> None:
        """An operation that reached a node no longer running: DISK_ERROR after a halt, else
        the error of a shut-down server."""
        if self.halted is not None:
            resp = LeadershipTransferResponse() if op.kind == TRANSFER else \
                MembershipResponse() if op.kind == MEMBERSHIP else AppendEntryResponse()
            resp.code = DISK_ERROR
            op.finish(resp, None)
        else:
            try:
                op.future.set_exception(RuntimeError("the server is shut down"))
            except InvalidStateError:
                pass

    def propose_many(self, items: list[tuple[Op, list, int]]) -> None:
        CURRENT.ctx = self.log_context
        if self.stopped:
            for op, _b, _m in items:
                self.refuse(op)
            return
        self.node.propose_many(self.runtime.now_ms(), items)
        self.process()

    def read(self, op: Op, mode) -> None:
        CURRENT.ctx = self.log_context
        if self.stopped:
            self.refuse(op)
            return
        self.node.read(self.runtime.now_ms(), op, mode)
        self.process()

    def get(self, op: Op, index: int, mode) -> None:
        CURRENT.ctx = self.log_context
        if self.stopped:
            self.refuse(op)
            return
        self.node.get(self.runtime.now_ms(), op, index, mode)
        self.process()

    def transfer_leadership(self, op: Op, target: str) -> None:
        CURRENT.ctx = self.log_context
        if self.stopped:
            self.refuse(op)
            return
        self.node.transfer_leadership(self.runtime.now_ms(), op, target)
        self.process()

    def change_membership(self, op: Op, change: str, node_id: str, address: str) -> None:
        CURRENT.ctx = self.log_context
        if self.stopped:
            self.refuse(op)
            return
        self.node.change_membership(self.runtime.now_ms(), op, change, node_id, address)
        self.process()

    def stop(self) -> None:
        """Shut down cleanly: pending operations fail; the last messages are sent."""
        CURRENT.ctx = self.log_context
        if self.stopped:
            return
        self.node.stop()
        self.process()
        self.stopped = True
        self._cancel_timer()

    def kill(self) -> None:
        """Die as a killed process: the timer is cancelled and nothing more is sent; the
        host's pending operations fail (a client sees its connection break)."""
        CURRENT.ctx = self.log_context
        if self.stopped:
            return
        self.stopped = True
        self._cancel_timer()
        self.node.stop()
        self.process(send=False)

    def halt(self, reason: str) -> None:
        """Fail-stop (the disk failed): die as ``kill()`` does, and end every operation the
        node had, or answered in this crank, with ``DISK_ERROR``; nothing more is sent."""
        CURRENT.ctx = self.log_context
        if self.stopped:
            return
        self.stopped = True
        self.halted = reason
        self._cancel_timer()
        self.node.stop()
        ready = self.node.take_ready()
        for c in ready.completions:
            resp = c.response
            if hasattr(resp, "code"):
                resp.code = DISK_ERROR
            try:
                c.token.finish(resp, None)
            except Exception:  # a host callback on the future failed
                log.exception("completing %r failed", c.token)
        ready.messages = []
        ready.completions = []
        for listener in self.ready_listeners:
            listener(ready)
        for handler in self.halt_handlers:
            try:
                handler(reason)
            except Exception:
                log.exception("halt handler %r failed", handler)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_at = None

    # -- the crank ------------------------------------------------------------------------
    def process(self, *, send: bool = True) -> None:
        """Execute the node's ``Ready`` (``send=False``: drop its messages); halt instead
        when ``health`` reports a failure."""
        if self.health is not None and not self.stopped:
            failure = self.health()
            if failure is not None:
                self.halt(failure)
                return
        ready = self.node.take_ready()
        if send and ready.messages:
            transport_send = self.transport.send
            for env in ready.messages:
                transport_send(env)
            if self._flush is not None:
                self._flush()
        for c in ready.completions:
            try:
                c.token.finish(c.response, c.result)
            except Exception:  # a host callback on the future failed
                log.exception("completing %r failed", c.token)
        for change in ready.role_changes:
            for handler in self.role_change_handlers:
                try:
                    handler(change)
                except Exception:
                    log.exception("role change handler %r failed on %s", handler, change)
        for listener in self.ready_listeners:
            listener(ready)
        when = ready.next_deadline_ms
        if when is not None and not self.stopped and (self._timer_at is None or when < self._timer_at):
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = when
            self._timer = self.runtime.call_at(when, self._on_timer)
