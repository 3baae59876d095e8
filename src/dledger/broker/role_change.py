"""The role-change handler: master when this node leads, slave otherwise (RocketMQ's
``DLedgerRoleChangeHandler``, which calls ``BrokerController.changeToMaster`` /
``changeToSlave``).

The server tells each transition once, in order, on its runtime thread; ``RoleTracker`` keeps
the store's role from them: writable (MASTER) exactly while the node is the leader, read-only
(SLAVE) otherwise. ``history`` lists ``(term, role)`` of every switch it made, so a host (or a
test) can see that each one was told once and in order. RocketMQ waits, on becoming master,
until the log is committed and dispatched to its end before rebuilding the queue-offset table;
here the table is rebuilt at the leader's first message of the term from the consume queues
and the undispatched tail of the log (``commit_log``), so the switch needs no wait.
"""

from __future__ import annotations

from dledger.core import Role

MASTER = "MASTER"
SLAVE = "SLAVE"


class RoleTracker:
    def __init__(self, self_id: str) -> None:
        self.self_id = self_id
        self.role = SLAVE
        self.term = -1
        self.leader_id: str | None = None
        self.history: list[tuple[int, str]] = []

    @property
    def writable(self) -> bool:
        return self.role == MASTER

    def on_change(self, change) -> None:
        role = MASTER if change.role is Role.LEADER else SLAVE
        self.leader_id = change.leader_id
        if change.term < self.term:
            return
        if role != self.role or (role == MASTER and change.term != self.term):
            self.history.append((change.term, role))
        self.role, self.term = role, change.term
