"""Java ``Properties``-style ``key=value`` files, written atomically.

Used by the ``currterm`` term file and the ``checkpoint`` file (both in Java DLedger's properties format, see docs/format.md). Reading follows
the subset of Java's Properties syntax those files use: one ``key=value`` (or ``key:value``) per
line, ``#``/``!`` comments, surrounding blanks ignored. Writing goes to ``<name>.tmp``, which is
fsynced and then renamed over ``<name>``, and the directory is fsynced, so a reader sees either
the old content or the new one, never a torn mix.

Checksum: the writer ends the file with ``crc=<8 hex digits>``, the CRC-32 of every byte before
that line (Java's Properties reader ignores the extra key). ``read_checked`` tells whether it
holds: ``"ok"``, ``"missing"`` (a file written by Java DLedger or an older dledger: unchecked,
accepted as before) or ``"bad"`` (the file is damaged: a bit flip in any byte is detected).
"""

from __future__ import annotations

import os
import re
import zlib

from dledger.store.mmap_file import fsync_dir

CRC_KEY = "crc"
_CRC_LINE = b"\n" + CRC_KEY.encode() + b"="


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


def read_checked(path: str) -> tuple[dict[str, str] | None, str]:
    """``(properties, crc)``: the parsed file (None when missing) and ``"ok"``, ``"missing"``
    or ``"bad"`` for its ``crc`` line (see the module docstring). ``ValueError`` when the file
    cannot be parsed at all; the ``crc`` key is not in the returned properties."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None, "missing"
    cut = data.rfind(_CRC_LINE)
    state = "missing"
    if cut >= 0 or data.startswith(_CRC_LINE[1:]):
        state = "ok" if _crc_holds(data) else "bad"
    if "\x00" in data.decode("latin-1"):
        raise ValueError("file holds NUL bytes")
    props = parse_properties(data.decode("latin-1"))
    props.pop(CRC_KEY, None)
    return props, state


def _crc_holds(data: bytes) -> bool:
    cut = data.rfind(_CRC_LINE)
    if cut < 0 and not data.startswith(_CRC_LINE[1:]):
        return False
    # exactly as the writer writes it (8 lowercase hex digits): a flip of a letter's case is
    # damage too
    return data[cut + 1:] == _crc_line(data[:cut + 1])


def _crc_line(content: bytes) -> bytes:
    return f"{CRC_KEY}={zlib.crc32(content):08x}\n".encode("latin-1")


def damaged_checked_file(path: str) -> bool:
    """Does ``path`` show that it was written with a ``crc`` line and was damaged since? Its
    ``crc`` line fails (``read_checked`` says ``"bad"``), it holds a ``crc`` key anywhere but
    at its end, a line of it starts with ``crc``, or it is one flipped bit away from a file whose ``crc`` holds (the flip hit the
    ``crc`` line's own key, separator or line break, so the line no longer reads as one). A
    file without any of these traces (one written by Java DLedger) is not: its syntax errors
    stay errors. False when the file is missing."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return False
    if data.rfind(_CRC_LINE) >= 0 or data.startswith(_CRC_LINE[1:]):
        return not _crc_holds(data)
    if re.search(rb"(^|[^A-Za-z0-9_])crc\s*[=:]", data) or any(_near_crc(line) for line in data.split(b"\n")):
        # a line that starts with ``crc``, or with a key a flip or two away from it (its
        # separator or value damaged too: two flips over a long run, seeds 400185 and 6147):
        # Java DLedger writes no such line (its keys are far from it)
        return True
    buf = bytearray(data)
    for i in range(len(buf)):
        for bit in range(8):
            buf[i] ^= 1 << bit
            found = _crc_holds(bytes(buf))
            buf[i] ^= 1 << bit
            if found:
                return True
    return False


def _near_crc(line: bytes) -> bool:
    """Does ``line`` start with ``crc`` or with 3 bytes at most 2 flipped bits away from it?"""
    head = line[:3]
    return len(head) == 3 and sum(bin(a ^ b).count("1") for a, b in zip(head, b"crc")) <= 2


def write_properties_atomic(path: str, items: list[tuple[str, str]], *, sync: bool = True) -> None:
    """Replace ``path`` with ``key=value`` lines and a closing ``crc`` line, atomically (tmp +
    fsync + rename + dir fsync)."""
    content = "".join(f"{k}={v}\n" for k, v in items).encode("latin-1")
    content += _crc_line(content)
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
