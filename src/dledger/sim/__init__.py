"""dledger.sim: the deterministic simulator users import in pytest.

- ``Cluster``: n production ``DLedgerServer`` nodes on virtual time and a simulated network
  (``run_for``, ``run_until``, ``step``, ``leader``, ``append``, ``read``, ``partition``,
  ``heal``, ``crash``, ``power_loss``, ``restart``, ``history``, ``check``);
- the environment: ``SimScheduler`` (virtual time) and ``SimProcess`` (one node's process on
  it, killed as a whole), ``SimNetwork``/``NetworkOptions`` (every envelope through the wire
  codec), ``FaultyStore`` and ``PowerLoss`` (storage faults, power loss);
- ``History``/``check_commit_log``/``check_reads`` and ``check_logs``/``InvariantChecker``: the
  checkers; ``linearizability.check`` with ``KVModel`` for the key-value machine of ``kv``;
- ``run_swarm``/``SwarmOptions``: one seeded fault run (``python -m dledger.sim swarm``).
"""

from dledger.sim.checkers import InvariantChecker, InvariantViolation, RecordingStateMachine, check_logs
from dledger.sim.cluster import Cluster
from dledger.sim.disk import FaultyStore, PowerLoss
from dledger.sim.history import History, LogEntry, Operation, check_commit_log, check_reads
from dledger.sim.kv import KVRecorder, KVStateMachine
from dledger.sim.swarm import SwarmFailure, SwarmResult, run_swarm
from dledger.sim.swarm_options import SwarmOptions
from dledger.sim.network import NetworkOptions, SimNetwork
from dledger.sim.scheduler import ProcessKilled, SimProcess, SimScheduler

__all__ = ["Cluster", "FaultyStore", "History", "InvariantChecker", "InvariantViolation", "KVRecorder", "KVStateMachine",
           "LogEntry", "NetworkOptions", "Operation", "PowerLoss", "ProcessKilled", "RecordingStateMachine",
           "SimNetwork", "SimProcess", "SimScheduler", "SwarmFailure", "SwarmOptions", "SwarmResult",
           "check_commit_log", "check_logs", "check_reads", "run_swarm"]
