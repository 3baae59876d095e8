"""The ``currterm`` file: the durable current term and vote of a node (Java DLedger's ``currterm`` properties file).

Format (Java ``Properties`` text, key order free)::

    voteLeader=n0
    currTerm=3

Rules:
- ``save`` returns only after the new content is durable (tmp file, fsync, rename, directory
  fsync). Callers answer a vote or act on a new term only after ``save`` returned.
- A ``currterm`` without a ``crc`` line (written by Java DLedger) that exists but cannot be
  parsed raises ``TermFileError`` naming the file: startup stops (Java logs and carries on at
  term 0, which can double-vote). One dledger wrote (it shows a ``crc`` line, or is one flipped
  bit away from a file whose ``crc`` holds: ``properties.damaged_checked_file``) is *damaged*
  instead, whatever the flip did to its syntax (a ``vote`` line left without ``=`` by a flip
  that turned a letter into a line break, a term that no longer parses): see below.
- When ``currterm`` is missing but a ``currterm.tmp`` or ``currterm.bak`` left by an interrupted
  rewrite validates, the copy with the highest term is used (the Java writer deletes ``currterm``
  before renaming its ``.tmp``).
- dledger writes a ``crc`` line (see ``properties.py``). A ``currterm`` that parses but whose
  ``crc`` does not hold, or that holds a key neither writer uses, is *damaged*: its term and
  vote are not used (``damaged`` names the reason) and the store reports the term as lost
  (``SuspectReason.TERM_LOST``) instead of starting from it or from term 0 (the term is then
  raised to the log's last entry's, and protocol-aware recovery relearns the rest from the
  other members, so the node never votes twice in a term). A leftover ``.tmp``/``.bak`` is
  read only when ``currterm`` is missing (a dledger ``.tmp`` left then is a first save that
  never returned); a damaged one is ignored. A file without a
  ``crc`` line (written by Java DLedger) is accepted unchecked. A term beyond ``MAX_TERM``
  (near the int64 limit) is refused with ``TermFileError``.
- A ``save`` the disk refuses (the ``OSError`` of the tmp file's creation, write, fsync, the
  rename or the directory fsync) raises ``DLedgerError``: ``DISK_FULL`` for ``ENOSPC``/
  ``EDQUOT``, ``DISK_ERROR`` for anything else (``EIO``). The in-memory term and vote stay as
  they were, so nothing that depends on the new ones (a vote granted, a term acted on) happens.
  The store fails on a ``DISK_ERROR`` (``mmap_file_store.persist_term``); a full disk is
  retried by the next ``save``, which writes a new tmp file from scratch.
"""

from __future__ import annotations

import errno
import logging
import os

from dledger.entry import MAX_TERM
from dledger.errors import DISK_ERROR, DISK_FULL, DLedgerError, TermFileError
from dledger.store.properties import damaged_checked_file, read_checked, write_properties_atomic

log = logging.getLogger(__name__)

TERM_FILE_NAME = "currterm"
_KEYS = frozenset(("currTerm", "voteLeader"))


def disk_error_code(exc: OSError) -> int:
    """The response code of a refused write: DISK_FULL for a full disk, else DISK_ERROR."""
    return DISK_FULL if exc.errno in (errno.ENOSPC, errno.EDQUOT) else DISK_ERROR


class DamagedTermFile(Exception):
    """The term file parses but fails its checksum (or holds a foreign key): not to be used."""


def _parse(path: str) -> tuple[int, str | None] | None:
    try:
        return _parse_fields(path)
    except TermFileError as exc:
        if damaged_checked_file(path):
            # written by dledger (it carried a crc line) and damaged since: a flip that broke the
            # syntax (a line without '=', a term that is not a number) is damage like any other
            raise DamagedTermFile(f"{exc} (damaged: it was written with a crc line)") from None
        raise


def _parse_fields(path: str) -> tuple[int, str | None] | None:
    try:
        props, crc = read_checked(path)
    except ValueError as exc:
        raise TermFileError(f"term file {path} is corrupt: {exc}") from exc
    if props is None:
        return None
    if crc == "bad" or (crc == "missing" and damaged_checked_file(path)):
        raise DamagedTermFile(f"term file {path} fails its checksum")
    unknown = set(props) - _KEYS
    if unknown:
        raise DamagedTermFile(f"term file {path} holds unknown keys {sorted(unknown)}")
    raw = props.get("currTerm")
    if raw is None:
        raise TermFileError(f"term file {path} is corrupt: no currTerm")
    try:
        term = int(raw)
    except ValueError as exc:
        raise TermFileError(f"term file {path} is corrupt: currTerm={raw!r}") from exc
    if term < 0:
        raise TermFileError(f"term file {path} is corrupt: negative currTerm {term}")
    if term > MAX_TERM:
        raise TermFileError(f"term file {path} field currTerm={term} is beyond the largest term "
                            f"{MAX_TERM}")
    vote = props.get("voteLeader") or None
    return term, vote


class TermFile:
    """Current term and vote, persisted in ``<dir>/currterm``."""

    def __init__(self, directory: str, *, read_only: bool = False) -> None:
        self.path = os.path.join(directory, TERM_FILE_NAME)
        self.read_only = read_only
        self.term = 0
        self.vote_for: str | None = None
        #: True when the file was missing and the state was taken from a leftover copy.
        self.recovered_from: str | None = None
        self.existed = False
        #: why the file was not used (it is damaged), or None
        self.damaged: str | None = None
        #: how the file is written (a simulated disk wraps it: ``dledger.sim.disk.PowerLoss.attach``)
        self.writer = write_properties_atomic

    def load(self) -> None:
        try:
            found = _parse(self.path)
        except DamagedTermFile as exc:
            self.damaged = str(exc)
            log.error("%s: the term and vote it held are lost", exc)
            return
        if found is not None:
            self.existed = True
            self.term, self.vote_for = found
            return
        best: tuple[int, str | None, str] | None = None
        for suffix in (".tmp", ".bak"):
            path = self.path + suffix
            try:
                got = _parse(path)
            except (TermFileError, DamagedTermFile) as exc:
                # dledger renames its .tmp over currterm only once it is complete and synced: a
                # .tmp left without a currterm is a first save that never returned
                log.warning("ignoring leftover %s", exc)
                continue
            if got is not None and (best is None or got[0] > best[0]):
                best = (got[0], got[1], path)
        if best is not None:
            self.term, self.vote_for, self.recovered_from = best
            self.existed = True
            log.warning("term file %s missing; recovered term %d from %s", self.path, best[0], best[2])

    def save(self, term: int, vote_for: str | None) -> None:
        """Persist ``term`` and ``vote_for`` durably, then update the in-memory copy."""
        if term < 0:
            raise ValueError(f"term must be >= 0, got {term}")
        if not self.read_only:
            try:
                self.writer(self.path, [("voteLeader", vote_for or ""), ("currTerm", str(term))])
            except OSError as exc:
                raise DLedgerError(f"term file {self.path} not written (term {term}, vote {vote_for}): {exc}; "
                                   f"term {self.term} and vote {self.vote_for} stay",
                                   disk_error_code(exc)) from exc
        self.term, self.vote_for = term, vote_for
        self.existed = True
