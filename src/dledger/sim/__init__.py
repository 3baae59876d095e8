"""dledger.sim: the deterministic simulator users import in pytest.

- ``Cluster``: n production ``DLedgerServer`` nodes on virtual time and a simulated network
  (``run_for``, ``run_until``, ``step``, ``leader``, ``append``, ``read``, ``partition``,
  ``heal``, ``crash``, ``power_loss``, ``restart``, ``history``, ``check``);
- the environment: ``SimScheduler`` (virtual time) and ``SimProcess`` (one node's process on
  it, killed as a whole), ``SimNetwork``/``NetworkOptions`` (every envelope through the wire
  codec), ``FaultyStore`` and ``PowerLoss`` (storage faults, power loss);
- ``History``/``check_commit_log`` and ``check_logs``/``InvariantChecker``: the checkers;
- ``run_swarm``/``SwarmOptions``: one seeded fault run (``python -m dledger.sim``).
"""

from dledger.sim.checkers import InvariantChecker, InvariantViolation, RecordingStateMachine, check_logs
from dledger.sim.cluster import Cluster
from dledger.sim.disk import FaultyStore, PowerLoss
from dledger.sim.faults import SwarmOptions, run_swarm
from dledger.sim.history import History, LogEntry, Operation, check_commit_log
from dledger.sim.network import NetworkOptions, SimNetwork
from dledger.sim.scheduler import ProcessKilled, SimProcess, SimScheduler

__all__ = ["Cluster", "FaultyStore", "History", "InvariantChecker", "InvariantViolation", "LogEntry", "NetworkOptions",
           "Operation", "PowerLoss", "ProcessKilled", "RecordingStateMachine", "SimNetwork", "SimProcess",
           "SimScheduler", "SwarmOptions", "check_commit_log", "check_logs", "run_swarm"]
