"""The ``Runtime`` protocol: what a driver needs from its environment.

All callbacks run on the runtime's own thread, one at a time. ``now_ms`` is monotonic
milliseconds (virtual in the simulator). ``run_sync(fn)`` runs ``fn`` on the runtime's thread
and returns its result (directly when already there).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Runtime(Protocol):
    def now_ms(self) -> int: ...

    def call_at(self, when_ms: int, fn: Callable[..., Any], *args: Any) -> TimerHandle: ...

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def call_soon_threadsafe(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def run_sync(self, fn: Callable[[], Any]) -> Any: ...
