"""Linearizability checking of client histories (Wing-Gong search with Lowe's memoisation).

A history is a list of ``Op``: what a client asked (``input``), what it was told
(``output``), when it invoked the call and when the answer came (``call_ms``, ``return_ms``).
It is linearizable for a sequential ``Model`` when every operation can be given one point
between its call and its return such that applying the operations in the order of those
points, one at a time, gives exactly the outputs the clients saw.

Rules this checker keeps:
- An operation whose outcome is unclear (a timeout, a lost answer, a crash of the node that
  took it) is *indeterminate*: ``return_ms=None`` and ``output=None``. It may take effect at
  any point after its call, or never; it is never a failure by itself. (Its return is placed at
  the end of time and the model accepts any output for it, which covers both: taking effect
  after every observation is the same as not taking effect.)
- Operations that return before another is called are ordered; all others are concurrent. Equal
  times count as concurrent (the conservative reading).
- The history is split by key when the model allows it (``Model.partition``), and each key is
  checked on its own (P-compositionality, as Porcupine does): linearizability is local.
- The search is bounded: after ``max_steps`` steps for one key it stops and answers
  ``UNKNOWN`` rather than hang; ``OK`` and ``ILLEGAL`` are proofs.

The search (Lowe, "Testing for linearizability", 2017; the algorithm of Porcupine): walk the
call and return events in time order as a linked list; at a call, try to linearize that
operation now (the model accepts its output in the current state, and the pair (set of
linearized operations, state) was not tried before); at a return of an operation not yet
linearized, backtrack. A history is linearizable when every event has been consumed.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, TypeVar

S = TypeVar("S")


class _Any:
    """The output of an indeterminate operation: models accept any answer for it."""

    def __repr__(self) -> str:
        return "ANY"


ANY = _Any()


class CheckResult(Enum):
    OK = "ok"
    ILLEGAL = "illegal"
    UNKNOWN = "unknown"


@dataclass(slots=True, frozen=True)
class Op:
    """One client operation. ``return_ms=None``: indeterminate (its ``output`` is ignored)."""

    client: Hashable
    input: Any
    output: Any
    call_ms: float
    return_ms: float | None

    @property
    def indeterminate(self) -> bool:
        return self.return_ms is None


class Model(Protocol[S]):
    """A sequential specification."""

    def init(self) -> S:
        """The state before any operation."""

    def step(self, state: S, input: Any, output: Any) -> tuple[bool, S]:
        """Apply ``input`` to ``state``: is ``output`` what it answers (``ANY``: the answer
        is unknown, accept any), and the state after it."""

    def partition(self, ops: list[Op]) -> dict[Hashable, list[Op]]:
        """Independent sub-histories (by key); ``{None: ops}`` when there is no split."""


@dataclass(slots=True)
class KeyResult:
    key: Hashable
    result: CheckResult
    steps: int
    ops: int
    #: for ILLEGAL: the longest sequence of operations that could be linearized before the
    #: search got stuck (the last one tried and refused follows it), as a hint
    longest_prefix: list[Op] = field(default_factory=list)


@dataclass(slots=True)
class Verdict:
    result: CheckResult
    keys: list[KeyResult]

    @property
    def ok(self) -> bool:
        return self.result is CheckResult.OK

    def describe(self) -> str:
        bad = [k for k in self.keys if k.result is not CheckResult.OK]
        if not bad:
            return f"linearizable ({len(self.keys)} key(s))"
        lines = []
        for k in bad:
            lines.append(f"key {k.key!r}: {k.result.value} after {k.steps} steps over {k.ops} operations")
            for op in k.longest_prefix[-8:]:
                lines.append(f"    linearized: {op.input!r} -> {op.output!r} "
                             f"[{op.call_ms}, {op.return_ms}] by {op.client!r}")
        return "\n".join(lines)


class _Event:
    __slots__ = ("op_id", "is_call", "match", "prev", "next")

    def __init__(self, op_id: int, is_call: bool) -> None:
        self.op_id = op_id
        self.is_call = is_call
        self.match: _Event | None = None
        self.prev: _Event | None = None
        self.next: _Event | None = None


def _events(ops: list[Op]) -> _Event:
    """A doubly linked list of call/return events in time order, behind a sentinel head."""
    timed = []
    for i, op in enumerate(ops):
        ret = math.inf if op.return_ms is None else op.return_ms
        if ret < op.call_ms:
            raise ValueError(f"operation {op!r} returns before it is called")
        # at equal times calls come first: operations touching in time are concurrent
        timed.append((op.call_ms, 0, i))
        timed.append((ret, 1, i))
    timed.sort()
    head = _Event(-1, False)
    prev = head
    calls: dict[int, _Event] = {}
    for _t, kind, i in timed:
        ev = _Event(i, kind == 0)
        if kind == 0:
            calls[i] = ev
        else:
            calls[i].match = ev
        prev.next, ev.prev = ev, prev
        prev = ev
    return head


def _lift(call: _Event) -> None:
    """Take a call and its return out of the list."""
    call.prev.next = call.next
    if call.next is not None:
        call.next.prev = call.prev
    ret = call.match
    ret.prev.next = ret.next
    if ret.next is not None:
        ret.next.prev = ret.prev


def _unlift(call: _Event) -> None:
    """Put them back (in the reverse order of ``_lift``)."""
    ret = call.match
    ret.prev.next = ret
    if ret.next is not None:
        ret.next.prev = ret
    call.prev.next = call
    if call.next is not None:
        call.next.prev = call


def check_ops(model: Model, ops: list[Op], *, max_steps: int = 1_000_000,
              key: Hashable = None) -> KeyResult:
    """Check one (sub-)history; see the module docstring."""
    if not ops:
        return KeyResult(key, CheckResult.OK, 0, 0)
    head = _events(ops)
    state = model.init()
    linearized = 0
    cache: set[tuple[int, Hashable]] = set()
    stack: list[tuple[_Event, Any]] = []
    longest: list[int] = []
    steps = 0
    entry = head.next
    while head.next is not None:
        steps += 1
        if steps > max_steps:
            return KeyResult(key, CheckResult.UNKNOWN, steps, len(ops), [ops[i] for i in longest])
        if entry.is_call:
            op = ops[entry.op_id]
            ok, new_state = model.step(state, op.input, ANY if op.return_ms is None else op.output)
            if ok:
                bits = linearized | (1 << entry.op_id)
                memo = (bits, _freeze(new_state))
                if memo not in cache:
                    cache.add(memo)
                    stack.append((entry, state))
                    state, linearized = new_state, bits
                    _lift(entry)
                    if len(stack) > len(longest):
                        longest = [e.op_id for e, _s in stack]
                    entry = head.next
                    continue
            entry = entry.next
        else:
            # an operation returned that could not be linearized before: undo the last choice
            if not stack:
                return KeyResult(key, CheckResult.ILLEGAL, steps, len(ops), [ops[i] for i in longest])
            call, state = stack.pop()
            linearized &= ~(1 << call.op_id)
            _unlift(call)
            entry = call.next
    return KeyResult(key, CheckResult.OK, steps, len(ops))


def _freeze(state: Any) -> Hashable:
    if isinstance(state, dict):
        return frozenset(state.items())
    if isinstance(state, list):
        return tuple(state)
    return state


def check(model: Model, ops: Iterable[Op], *, max_steps_per_key: int = 1_000_000) -> Verdict:
    """Check a whole history, key by key. ``ILLEGAL`` if any key is, else ``UNKNOWN`` if any
    key ran out of steps, else ``OK``."""
    ops = list(ops)
    results = [check_ops(model, sub, max_steps=max_steps_per_key, key=k)
               for k, sub in sorted(model.partition(ops).items(), key=lambda kv: repr(kv[0]))]
    if any(r.result is CheckResult.ILLEGAL for r in results):
        overall = CheckResult.ILLEGAL
    elif any(r.result is CheckResult.UNKNOWN for r in results):
        overall = CheckResult.UNKNOWN
    else:
        overall = CheckResult.OK
    return Verdict(overall, results)


# =========================================================================================
# models
# =========================================================================================
class KVModel:
    """A map of registers: ``("put", key, value)`` answers None; ``("get", key)`` answers the
    value (None when never put); ``("cas", key, expected, new)`` answers whether it swapped.
    Split by key; the state of one key is its value."""

    def init(self) -> Any:
        return None

    def step(self, state: Any, input: Any, output: Any) -> tuple[bool, Any]:
        kind = input[0]
        if kind == "put":
            return True, input[2]
        if kind == "get":
            return output is ANY or output == state, state
        if kind == "cas":
            swapped = state == input[2]
            if output is not ANY and output != swapped:
                return False, state
            return True, (input[3] if swapped else state)
        raise ValueError(f"unknown KV operation {input!r}")

    def partition(self, ops: list[Op]) -> dict[Hashable, list[Op]]:
        out: dict[Hashable, list[Op]] = {}
        for op in ops:
            out.setdefault(op.input[1], []).append(op)
        return out


class RegisterModel:
    """One register: ``("write", v)`` answers None, ``("read",)`` answers the value
    (``initial`` before any write)."""

    def __init__(self, initial: Any = None) -> None:
        self.initial = initial

    def init(self) -> Any:
        return self.initial

    def step(self, state: Any, input: Any, output: Any) -> tuple[bool, Any]:
        if input[0] == "write":
            return True, input[1]
        return output is ANY or output == state, state

    def partition(self, ops: list[Op]) -> dict[Hashable, list[Op]]:
        return {None: ops}
