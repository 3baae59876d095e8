"""The ``membership`` file: the group's configuration at the start of this node's log.

Format (``key=value`` lines closed by a ``crc`` line, as the ``currterm`` file)::

    index=-1
    term=-1
    voters=n0-10.0.0.1:20911;n1-10.0.0.2:20911;n2-10.0.0.3:20911
    learners=

``index`` is the log index of the configuration entry the record holds (-1: the bootstrap
configuration, the ``peers`` of a new group). The node rewrites it (``save``: tmp file, fsync,
rename, directory fsync) whenever a configuration entry commits and when an install moves its log
start; configuration entries above it are read from the log itself (``core.membership``). Java
DLedger neither writes nor reads it.

``load`` returns the properties (None: no file yet); a file that fails its ``crc`` or does not
parse raises ``ValueError`` naming it (the node then trusts no membership of its own and learns
it from the leader, as a node that joins).
"""

from __future__ import annotations

import os

from dledger.store.properties import read_checked, write_properties_atomic

MEMBERSHIP_FILE_NAME = "membership"


class MembershipFile:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, MEMBERSHIP_FILE_NAME)
        #: how the file is written (a simulated disk may wrap it)
        self.writer = write_properties_atomic

    def load(self) -> dict[str, str] | None:
        try:
            props, crc = read_checked(self.path)
        except ValueError as exc:
            raise ValueError(f"membership file {self.path} is corrupt: {exc}") from None
        if props is not None and crc != "ok":
            raise ValueError(f"membership file {self.path} fails its checksum")
        return props

    def save(self, items: list[tuple[str, str]]) -> None:
        self.writer(self.path, items)
