"""The ``Runtime`` protocol: everything a server and its driver take from their environment.

A runtime is the process's view of the world; the server asks it, never the wall clock, the
operating system or its own type:
- time: ``now_ms()`` is monotonic milliseconds (virtual in the simulator), used for every
  deadline; ``wall_time()`` is seconds since the epoch, used only where file ages matter
  (segment cleaning);
- timers: ``call_at``, ``call_soon`` (from the runtime's thread), ``call_soon_threadsafe``
  (from any thread), ``run_sync(fn)`` (run ``fn`` on the runtime's thread and return its
  result, directly when already there);
- flush policy: ``background_flush`` says whether the periodic msync of ``page_cache`` mode
  may run on a thread of its own. True on the real runtime (it keeps msync off the loop);
  false in the simulator, where one thread must do everything so that a seed replays exactly.

All callbacks run on the runtime's own thread, one at a time.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Runtime(Protocol):
    #: whether the store's periodic msync may run on a background thread
    background_flush: bool

    def now_ms(self) -> int: ...

    def wall_time(self) -> float: ...

    def call_at(self, when_ms: int, fn: Callable[..., Any], *args: Any) -> TimerHandle: ...

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def call_soon_threadsafe(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def run_sync(self, fn: Callable[[], Any]) -> Any: ...
