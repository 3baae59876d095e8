"""The sans-IO Raft core: MemberState, LeaderElector (votes, heartbeats, read index,
leadership transfer), EntryPusher (with one FollowerProgress per follower), EntryHandler,
StateMachineCaller, built by ``Node``; a peer's message goes through ``Node.step``
(``step``: the term gate of ``term_gate``, then the step function of the node's role); the
components return intents (``intents``) that the node applies; quorum math in
``quorum.Majority``, state tables in ``transitions`` (docs/architecture.md has the module map).

Rules for every module here: no ``time``, ``asyncio``, ``socket``, ``threading`` and no
module-level ``random``. Time comes in as ``now_ms`` arguments, randomness from the
``random.Random`` handed to ``Node``, and effects leave through ``Node.take_ready()``.
"""

from dledger.core.member_state import MemberState, Role, RoleChange, RoleEvent
from dledger.core.node import Completion, Node, Ready
from dledger.core.state_machine_caller import ApplyEntry, StateMachine

__all__ = ["ApplyEntry", "Completion", "MemberState", "Node", "Ready", "Role", "RoleChange", "RoleEvent",
           "StateMachine"]
