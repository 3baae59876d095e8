"""A dependency-free progress bar for long work (to stderr; quiet when stderr is not a terminal
unless forced). Used by the CLI, the demo and the benchmarks."""

from __future__ import annotations

import os
import sys
import time


class Progress:
    def __init__(self, total: int, label: str, *, unit: str = "", stream=None, force: bool | None = None) -> None:
        self.total = max(total, 0)
        self.label = label
        self.unit = unit
        self.stream = stream or sys.stderr
        if force is None:
            force = os.environ.get("DLEDGER_PROGRESS") == "1"
        self.enabled = force or (hasattr(self.stream, "isatty") and self.stream.isatty())
        self.done = 0
        self._start = time.monotonic()
        self._last_draw = 0.0

    def update(self, done: int) -> None:
        self.done = done
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last_draw < 0.1 and done < self.total:
            return
        self._last_draw = now
        frac = done / self.total if self.total else 1.0
        width = 30
        fill = int(frac * width)
        rate = done / max(now - self._start, 1e-9)
        self.stream.write(f"\r{self.label} [{'#' * fill}{'.' * (width - fill)}] {done}/{self.total} "
                          f"{self.unit} {rate:,.0f}/s ")
        self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.update(self.done)
            self.stream.write("\n")
            self.stream.flush()
