"""Suspect state: a store that may have lost acknowledged entries or a vote it cast.

After some faults a replica cannot vouch for its own state: it must not vote nor count toward
a commit quorum until it has caught up from a leader of the current term (the core decides
that; the store only reports). ``SuspectReason`` says why:

- ``UNCLEAN_SHUTDOWN``: ``page_cache`` mode, the last process did not ``close`` the store (no
  clean-shutdown marker), and the machine may have restarted since (the boot marker does not
  name the running boot): entries it acknowledged may not have reached the disk. A process that
  died while the machine stayed up lost nothing: its writes are in the page cache, which the
  kernel writes back whatever becomes of the process, so the next open in the same boot is not
  suspect for that;
- ``LOST_TAIL``: recovery found that entries which may have been acknowledged are gone (a
  checkpoint vouched for an entry that is not in the files as recorded);
- ``TERM_LOST``: the term file is damaged, or missing while the store holds a log or a
  checkpoint: the node may have voted in a term it no longer knows;
- ``FRESH``: an empty store that has never been cleared (a new node, or one whose directory
  was wiped): it may have voted or acknowledged in an earlier life.

The state is durable: ``<dir>/suspect`` (``reason=<NAME>``, written with tmp + fsync + rename +
directory fsync) is written when a reason is found, before recovery changes anything, and is
removed only by ``clear_suspect``; a second crash before catching up keeps it. The first
reason stays until cleared. A marker that cannot be read still counts (as ``LOST_TAIL``).
``<dir>/clean_shutdown`` is written by a clean ``close`` and removed by the next writable open.
``<dir>/boot`` (``boot=<id>``, written durably) is written by every writable open with the
running boot's id (``StoreIO.boot_id``) once the suspect state is decided, and removed when the
store fails (a failed msync: the kernel may have dropped the dirty pages, so this boot's page
cache no longer vouches for them); where the boot id is unknown the file is not written and
every unclean shutdown counts.
"""

from __future__ import annotations

import enum
import logging
import os

from dledger.store.mmap_file import fsync_dir
from dledger.store.properties import read_checked, write_properties_atomic

log = logging.getLogger(__name__)

SUSPECT_FILE_NAME = "suspect"
CLEAN_SHUTDOWN_FILE_NAME = "clean_shutdown"
BOOT_FILE_NAME = "boot"


class SuspectReason(str, enum.Enum):
    """Why a store is suspect (see the module docstring)."""

    UNCLEAN_SHUTDOWN = "UNCLEAN_SHUTDOWN"
    LOST_TAIL = "LOST_TAIL"
    TERM_LOST = "TERM_LOST"
    FRESH = "FRESH"


def read_suspect(directory: str) -> SuspectReason | None:
    """The durable reason, None when there is no marker."""
    path = os.path.join(directory, SUSPECT_FILE_NAME)
    try:
        props, crc = read_checked(path)
    except ValueError:
        props, crc = {}, "bad"
    if props is None:
        return None
    try:
        if crc == "bad":
            raise ValueError("checksum mismatch")
        return SuspectReason(props.get("reason", ""))
    except ValueError:
        log.warning("suspect marker %s is unreadable: taken as LOST_TAIL", path)
        return SuspectReason.LOST_TAIL


def write_suspect(directory: str, reason: SuspectReason) -> None:
    write_properties_atomic(os.path.join(directory, SUSPECT_FILE_NAME), [("reason", reason.value)])


def remove_file_durably(directory: str, name: str) -> None:
    try:
        os.unlink(os.path.join(directory, name))
    except FileNotFoundError:
        return
    fsync_dir(directory)


def clean_marker_exists(directory: str) -> bool:
    return os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN_FILE_NAME))


def write_clean_marker(directory: str) -> None:
    write_properties_atomic(os.path.join(directory, CLEAN_SHUTDOWN_FILE_NAME), [("clean", "true")])


def read_boot(directory: str) -> str | None:
    """The boot id the last writable open recorded (None: none, or unreadable)."""
    try:
        props, crc = read_checked(os.path.join(directory, BOOT_FILE_NAME))
    except ValueError:
        return None
    if props is None or crc == "bad":
        return None
    return props.get("boot") or None


def write_boot(directory: str, boot_id: str | None) -> None:
    """Record the running boot (or, unknown, forget the last one)."""
    if boot_id is None:
        remove_file_durably(directory, BOOT_FILE_NAME)
    else:
        write_properties_atomic(os.path.join(directory, BOOT_FILE_NAME), [("boot", boot_id)])
