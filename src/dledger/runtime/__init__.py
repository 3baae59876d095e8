"""Runtimes give the sans-IO core time and a network.

- ``Driver`` (driver.py): the one crank, shared by every runtime: feeds a ``Node`` with time
  and envelopes and executes each ``Ready``;
- ``Runtime`` protocol (clock.py): everything a server takes from its environment: the
  monotonic clock and timers (``now_ms``, ``call_at``, ``call_soon``, ``call_soon_threadsafe``,
  ``run_sync``), the wall clock (``wall_time``) and the flush policy (``background_flush``);
- ``AsyncioRuntime`` (asyncio_runtime.py): one event loop per process, in a background thread
  for synchronous hosts or the host's own loop. The simulator (``dledger.sim``) provides a
  virtual-time runtime with the same protocol.
"""

from dledger.runtime.clock import Runtime, TimerHandle
from dledger.runtime.driver import Driver

__all__ = ["Driver", "Runtime", "TimerHandle"]
