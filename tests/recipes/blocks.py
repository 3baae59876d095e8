"""The fenced blocks of README.md and docs/*.md, their run markers and the output they show.

A block is marked by an HTML comment on the line right above its opening fence:

    <!-- run [OPTION ...] -->     run it, check what it prints
    <!-- no-run: REASON -->       do not run it, and say why

Every shell or Python block must carry one of the two (``MUST_MARK``). The options are
described in docs/writing-docs.md; ``Marker`` parses them. ``matches`` compares what a
block printed with what the doc shows, with two wildcards: ``...`` inside a line stands
for any text, and a line that is only ``...`` for any number of lines (none included).
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shlex

ROOT = pathlib.Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*(run|no-run)\b(.*?)-->\s*$")
SHELL_LANGS = {"sh", "bash", "shell", "console"}
# the first word of an unlabeled block that makes it a command, not a listing or output
COMMAND_WORDS = {"python", "python3", "dledger", "make", "pytest", "git", "curl", "pip", "time",
                 "cd", "export", "printf", "kill", "seq", "cat", "echo", "bash", "sh", "for",
                 "sudo", "java", "spark-submit"}
OPTIONS = {"timeout", "setup", "sub", "ports", "output", "session", "by", "pytest"}
SETUPS = {"replicas", "spark", "server", "broker-store", "rocketmq-4", "rocketmq-5"}


class MarkerError(ValueError):
    """A marker that cannot be read, or a block that needs one and has none."""


@dataclasses.dataclass
class Marker:
    kind: str                                   # "run" or "no-run"
    reason: str = ""                            # no-run's reason
    timeout: float = 60.0
    setups: list[str] = dataclasses.field(default_factory=list)
    subs: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    ports: list[int] = dataclasses.field(default_factory=list)
    output: bool = False
    session: str | None = None
    by: str | None = None
    pytest: bool = False

    @classmethod
    def parse(cls, line: str, where: str) -> Marker | None:
        m = MARKER.match(line.strip())
        if not m:
            if line.strip().startswith("<!--") and re.match(r"<!--\s*(run|no-run)", line.strip()):
                raise MarkerError(f"{where}: a marker that does not end on its line: {line.strip()!r}")
            return None
        kind, rest = m.group(1), m.group(2).strip()
        if kind == "no-run":
            reason = rest[1:].strip() if rest.startswith(":") else ""
            if not reason:
                raise MarkerError(f"{where}: no-run needs a reason: <!-- no-run: why -->")
            return cls(kind, reason=reason)
        marker = cls(kind)
        try:
            words = shlex.split(rest)
        except ValueError as exc:
            raise MarkerError(f"{where}: cannot split the run options {rest!r}: {exc}") from None
        for word in words:
            key, _, value = word.partition("=")
            if key not in OPTIONS:
                raise MarkerError(f"{where}: unknown run option {key!r} (known: {', '.join(sorted(OPTIONS))})")
            if key in ("output", "pytest"):
                setattr(marker, key, True)
            elif not value:
                raise MarkerError(f"{where}: the run option {key!r} needs a value ({key}=...)")
            elif key == "timeout":
                marker.timeout = float(value)
            elif key == "setup":
                for name in value.split(","):
                    if name not in SETUPS:
                        raise MarkerError(f"{where}: unknown setup {name!r} (known: {', '.join(sorted(SETUPS))})")
                    marker.setups.append(name)
            elif key == "sub":
                old, sep, new = value.partition("=>")
                if not sep or not old:
                    raise MarkerError(f"{where}: sub takes 'OLD=>NEW', not {value!r}")
                marker.subs.append((old, new))
            elif key == "ports":
                marker.ports = [int(p) for p in value.split(",")]
            else:
                setattr(marker, key, value)
        return marker


@dataclasses.dataclass
class Block:
    path: pathlib.Path
    line: int                                   # the opening fence's line, from 1
    lang: str
    text: str
    marker: Marker | None
    expected: str | None = None                 # the next block's text, with the option "output"

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def is_session(self) -> bool:
        """Lines typed at a prompt (``$ ``), each followed by what it prints."""
        return self.text.lstrip().startswith("$ ")

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL_LANGS or (self.lang == "" and self.is_command())

    def is_command(self) -> bool:
        first = next((ln.strip() for ln in self.text.splitlines() if ln.strip()), "")
        if first.startswith("$ "):
            return True
        words = first.split()
        if not words:
            return False
        if re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            return True                             # VAR=value: a shell line
        return words[0] in COMMAND_WORDS or words[0].endswith("/python")

    @property
    def must_mark(self) -> bool:
        return self.lang == "python" or self.is_shell


def doc_files() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks_of(path: pathlib.Path) -> list[Block]:
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2), i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[:3]):
            j += 1
        where = f"{path.relative_to(ROOT)}:{start + 1}"
        marker = Marker.parse(lines[start - 1], where) if start > 0 else None
        found.append(Block(path, start + 1, lang, "\n".join(lines[start + 1:j]) + "\n", marker))
        i = j + 1
    for k, block in enumerate(found):
        if block.marker and block.marker.output:
            if k + 1 == len(found):
                raise MarkerError(f"{block.where}: 'output' but no block follows")
            block.expected = found[k + 1].text
    return found


def all_blocks() -> list[Block]:
    return [b for path in doc_files() for b in blocks_of(path)]


def session_steps(text: str) -> list[tuple[str, list[str]]]:
    """A session block as (command, the lines the doc shows it print) pairs. A command whose
    line ends in a backslash goes on to the next line."""
    steps: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    k = 0
    while k < len(lines):
        line = lines[k]
        if not line.startswith("$ "):
            if not steps:
                raise MarkerError(f"a session's first line is not a command: {line!r}")
            steps[-1][1].append(line)
            k += 1
            continue
        command = line[2:]
        while command.endswith("\\") and k + 1 < len(lines):
            k += 1
            command += "\n" + lines[k]
        steps.append((command, []))
        k += 1
    return steps


# -- expected output --------------------------------------------------------------------------

def _line_pattern(expected: str) -> re.Pattern:
    return re.compile(".*".join(re.escape(part) for part in expected.rstrip().split("...")), re.S)


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether the ``actual`` lines are what ``expected`` shows, wildcards included."""
    actual = [a.rstrip() for a in actual]
    memo: dict[tuple[int, int], bool] = {}

    def at(e: int, a: int) -> bool:
        if (e, a) not in memo:
            if e == len(expected):
                memo[e, a] = a == len(actual)
            elif expected[e].strip() == "...":
                memo[e, a] = at(e + 1, a) or (a < len(actual) and at(e, a + 1))
            else:
                memo[e, a] = (a < len(actual) and _line_pattern(expected[e]).fullmatch(actual[a]) is not None
                              and at(e + 1, a + 1))
        return memo[e, a]

    return at(0, 0)


def mismatch(what: str, expected: list[str], actual: list[str]) -> str:
    return (f"{what}: the output is not what the doc shows\n--- the doc shows:\n"
            + "\n".join(expected) + "\n--- it printed:\n" + "\n".join(actual))
