"""AsyncioRuntime: the real runtime, one asyncio event loop for every node of the process.

``AsyncioRuntime()`` starts its own loop in a daemon thread (for synchronous hosts);
``AsyncioRuntime(loop=...)`` uses the host's running loop. ``shared()`` is the process-wide
instance that ``DLedgerServer`` uses by default. Timers are ``loop.call_at`` on the loop's
monotonic clock; ``uvloop`` is used for the private loop when it is installed. The wall clock
is ``time.time()``, and the periodic msync of ``page_cache`` mode runs on the store's flush thread
(``background_flush=False`` keeps it on the loop).
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable


class AsyncioRuntime:
    _shared: "AsyncioRuntime | None" = None
    _shared_lock = threading.Lock()

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None, *, background_flush: bool = True) -> None:
        self.background_flush = background_flush
        self._own = loop is None
        self._thread: threading.Thread | None = None
        if loop is None:
            try:
                import uvloop  # type: ignore
                loop = uvloop.new_event_loop()
            except ImportError:
                loop = asyncio.new_event_loop()
            started = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(started.set)
                loop.run_forever()

            self._thread = threading.Thread(target=run, name="dledger-loop", daemon=True)
            self._thread.start()
            started.wait()
        self.loop = loop

    @classmethod
    def shared(cls) -> "AsyncioRuntime":
        with cls._shared_lock:
            if cls._shared is None or cls._shared.loop.is_closed():
                cls._shared = cls()
            return cls._shared

    # -- the Runtime protocol -------------------------------------------------------------
    def now_ms(self) -> int:
        return int(self.loop.time() * 1000)

    def wall_time(self) -> float:
        return time.time()

    def call_at(self, when_ms: int, fn: Callable[..., Any], *args: Any):
        return self.loop.call_at(when_ms / 1000.0, fn, *args)

    def call_soon(self, fn: Callable[..., Any], *args: Any):
        return self.loop.call_soon(fn, *args)

    def call_soon_threadsafe(self, fn: Callable[..., Any], *args: Any):
        return self.loop.call_soon_threadsafe(fn, *args)

    def in_loop_thread(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def run_sync(self, fn: Callable[[], Any]) -> Any:
        if self.in_loop_thread():
            return fn()
        fut: Future = Future()

        def call() -> None:
            try:
                fut.set_result(fn())
            except BaseException as exc:  # handed back to the caller
                fut.set_exception(exc)

        self.loop.call_soon_threadsafe(call)
        return fut.result()

    def close(self) -> None:
        """Stop a private loop: tasks still running on it (a transport's connections) are
        cancelled and given a moment to finish, then the loop stops and closes."""
        if self._own and self._thread is not None:
            async def cancel_tasks() -> None:
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in tasks:
                    task.cancel()
                if tasks:
                    await asyncio.wait(tasks, timeout=1.0)

            if self.loop.is_running():
                try:
                    asyncio.run_coroutine_threadsafe(cancel_tasks(), self.loop).result(timeout=2.0)
                except Exception:  # a task that will not end: the loop stops anyway
                    pass
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
            self.loop.close()
