"""Java ``Properties``-style ``key=value`` files, written atomically.

Used by the ``currterm`` term file and the ``checkpoint`` file (both in Java DLedger's properties format, see docs/format.md). Reading follows
the subset of Java's Properties syntax those files use: one ``key=value`` (or ``key:value``) per
line, ``#``/``!`` comments, surrounding blanks ignored. Writing goes to ``<name>.tmp``, which is
fsynced and then renamed over ``<name>``, and the directory is fsynced, so a reader sees either
the old content or the new one, never a torn mix.
"""

from __future__ import annotations

import os

from dledger.store.mmap_file import fsync_dir


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``key=value`` lines; raises ``ValueError`` on a line that has no separator."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            raise ValueError(f"not a key=value line: {raw!r}")
        out[line[:cut].strip()] = line[cut + 1:].strip()
    return out


def read_properties(path: str) -> dict[str, str] | None:
    """The parsed file, or None when it does not exist. ``ValueError`` when unparsable."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None
    try:
        text = data.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes every byte
        raise ValueError(str(exc)) from exc
    if "\x00" in text:
        raise ValueError("file holds NUL bytes")
    return parse_properties(text)


def write_properties_atomic(path: str, items: list[tuple[str, str]], *, sync: bool = True) -> None:
    """Replace ``path`` with ``key=value`` lines, atomically (tmp + fsync + rename + dir fsync)."""
    content = "".join(f"{k}={v}\n" for k, v in items).encode("latin-1")
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(content)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")
