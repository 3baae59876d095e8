"""The transcript file format, shared by the transcript drivers (``tests/core/transcript.py``,
``tests/store/recovery_transcript.py``), in the style of etcd-io/raft's ``testdata``.

A transcript is a sequence of commands, each followed by a line ``----`` and the output it
produced, then a blank line. Lines starting with ``#`` (outside an output block) and blank
lines are kept verbatim. A driver runs each command and ``render`` writes the file back with
the actual output; ``check_golden`` compares it with the file (``pytest --update-goldens``
rewrites the file instead: read the diff before committing it).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

SEPARATOR = "----"


class TranscriptError(Exception):
    """A transcript that cannot be run as written (bad syntax, unknown command or name, ...)."""


@dataclass
class Command:
    line: str
    lineno: int
    expected: list[str] = field(default_factory=list)


def parse(text: str, name: str = "<transcript>") -> list[str | Command]:
    """Split a transcript into verbatim lines (comments, blank lines) and commands."""
    lines = text.split("\n")
    items: list[str | Command] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            items.append(line)
            i += 1
            continue
        if i + 1 >= len(lines) or lines[i + 1] != SEPARATOR:
            raise TranscriptError(f"{name}:{i + 1}: a command is followed by a line '{SEPARATOR}'")
        cmd = Command(line, i + 1)
        i += 2
        while i < len(lines) and lines[i].strip():
            cmd.expected.append(lines[i])
            i += 1
        items.append(cmd)
    return items


def render(items: list[str | Command], outputs: dict[int, list[str]]) -> str:
    """The transcript with each command's output replaced by ``outputs[id(command)]``."""
    lines: list[str] = []
    for item in items:
        if isinstance(item, str):
            lines.append(item)
        else:
            lines.extend([item.line, SEPARATOR, *outputs[id(item)]])
    return "\n".join(lines)


def check_golden(path: Path, actual: str, update: bool) -> str | None:
    """Compare a transcript's actual output with its file. Returns None when they are equal (or
    ``update``: then the file is rewritten), else the failure message: the first command whose
    output differs and a diff."""
    expected = path.read_text()
    if actual == expected:
        return None
    if update:
        path.write_text(actual)
        return None
    first = next((c for c, a in zip(parse(expected), parse(actual)) if not isinstance(c, str)
                  and c.expected != a.expected), None)
    where = f"first difference at line {first.lineno} ({first.line})" if first else "the file differs"
    diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                        f"{path.name} (expected)", f"{path.name} (actual)", n=2))
    return f"{path.name}: {where}; rerun with --update-goldens to accept the new output\n{diff}"
