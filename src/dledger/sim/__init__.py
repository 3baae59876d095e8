"""dledger.sim: the deterministic simulator users import in pytest.

- ``Cluster``: n production ``DLedgerServer`` nodes on virtual time and a simulated network
  (``run_for``, ``run_until``, ``leader``, ``append``, ``partition``, ``heal``, ``crash``,
  ``restart``, ``history``, ``check``);
- ``SimScheduler``, ``SimNetwork``/``NetworkOptions``, ``FaultyStore``: the environment;
- ``History``/``check_commit_log`` and ``check_logs``/``InvariantChecker``: the checkers;
- ``run_swarm``/``SwarmOptions``: one seeded fault run (``python -m dledger.sim``).
"""

from dledger.sim.checkers import InvariantChecker, InvariantViolation, RecordingStateMachine, check_logs
from dledger.sim.cluster import Cluster
from dledger.sim.disk import FaultyStore
from dledger.sim.faults import SwarmOptions, run_swarm
from dledger.sim.history import History, LogEntry, Operation, check_commit_log
from dledger.sim.network import NetworkOptions, SimNetwork
from dledger.sim.scheduler import SimScheduler

__all__ = ["Cluster", "FaultyStore", "History", "InvariantChecker", "InvariantViolation", "LogEntry", "NetworkOptions",
           "Operation", "RecordingStateMachine", "SimNetwork", "SimScheduler", "SwarmOptions", "check_commit_log",
           "check_logs", "run_swarm"]
