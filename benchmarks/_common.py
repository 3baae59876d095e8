"""Shared bits of the benchmark scripts: machine description and a plain table printer."""

from __future__ import annotations

import os
import platform
import sys


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as fh:
            kb = int(fh.readline().split()[1])
            mem = f", {kb / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{os.cpu_count()} cores ({cpu}){mem}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def command() -> str:
    return " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells[1:]:
        print("| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |")
