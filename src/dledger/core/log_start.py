"""Moving a follower's log start: how a commit log catches up past the leader's retention.

A leader whose store no longer holds the entry a follower needs next (retention deleted the
segment, ``store.clean``; or the log's head was reset, ``store.reset``) cannot push it. For a
log whose entries are the data (no state machine) it moves the follower's log start to its
own instead, with an ``InstallSnapshotRequest`` that carries no snapshot:

- ``last_included_index``/``last_included_term``: the leader's before-begin index and its
  term; ``next_pos``: the leader's position of the entry after it (positions stay
  byte-identical with the leader's: a broker's physical offsets are these positions);
- the follower keeps its log when it holds ``last_included_index`` with that term (an entry
  it holds that is still in the leader's log is never thrown away); otherwise it drops its
  log (what follows ``last_included_index`` first, when its entry there is of another term:
  by log matching none of those are the leader's), and its store's crash-ordered ``reset``
  makes it begin after ``last_included_index``, its next entry at ``next_pos``;
- a follower whose log is empty after that very begin but whose next entry would land
  elsewhere (a reset a crash interrupted, finished at recovery without the leader's
  position) is moved to ``next_pos`` again: the store's ``reset`` does that for an empty log;
- an entry the follower verified against this leader, or committed, is never dropped: an
  install that would is refused (a stale or bogus request).

The leader's side builds the request (``install_request``); the install dispatch sends it
and handles its answer (``core.install_dispatch``), its dispatcher in INSTALL_SNAPSHOT
(``core.follower_progress``). The follower's side is
``check_install`` (nonsense is the peer's fault) and ``move_log_start``; the entry handler
answers (``core.entry_handler``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dledger.entry import decode_header
from dledger.errors import INCONSISTENT_STATE, DLedgerError, PeerProtocolError
from dledger.protocol import InstallSnapshotRequest

if TYPE_CHECKING:
    from dledger.store import LogStore


# -- the leader ---------------------------------------------------------------------------------
def next_pos_after_begin(store: "LogStore") -> int | None:
    """The position of the entry after the leader's before-begin index (None: its log holds
    no entry after its begin yet, so there is nothing to place)."""
    begin = store.ledger_before_begin_index
    if store.ledger_end_index <= begin:
        return None
    return decode_header(store.get_raw(begin + 1)).pos


def install_request(member, store: "LogStore", peer: str, term: int, incarnation: int) -> InstallSnapshotRequest | str:
    """The install that moves ``peer``'s log start to this leader's (of ``term``), or why
    there is none to send yet (a string). Reading the leader's own log may raise
    ``DLedgerError``."""
    begin, begin_term = store.ledger_before_begin_index, store.ledger_before_begin_term
    if begin < 0:
        return "this leader's log begins at 0"
    if begin_term < 0:
        return f"the term of this leader's before-begin entry {begin} is unknown"
    pos = next_pos_after_begin(store)
    if pos is None:
        return f"this leader's log holds no entry after its begin {begin} yet"
    return InstallSnapshotRequest(group=member.group, local_id=member.self_id, remote_id=peer,
                                  leader_id=member.self_id, term=term, last_included_index=begin,
                                  last_included_term=begin_term, next_pos=pos,
                                  commit_index=member.committed_index, incarnation=incarnation)


# -- the follower -------------------------------------------------------------------------------
def check_install(req: InstallSnapshotRequest) -> None:
    """Raise ``PeerProtocolError`` for an install no leader sends: no begin, no term, no
    position."""
    if req.last_included_index < 0:
        raise PeerProtocolError(f"install from {req.leader_id}: last_included_index "
                                f"{req.last_included_index} names no entry")
    if req.last_included_term < 0:
        raise PeerProtocolError(f"install from {req.leader_id}: last_included_term "
                                f"{req.last_included_term} is no term")
    if req.next_pos < 0:
        raise PeerProtocolError(f"install from {req.leader_id}: next_pos {req.next_pos} is no position")


def move_log_start(store: "LogStore", index: int, term: int, next_pos: int, keep: int) -> bool:
    """Make the follower's log begin after ``index`` (of ``term``), its next entry at
    ``next_pos``, unless it holds ``index`` with ``term``. ``keep``: the highest index this
    follower verified against the leader or committed (never dropped). True when the log
    was dropped; ``DLedgerError`` (INCONSISTENT_STATE) when it may not be."""
    begin, end = store.ledger_before_begin_index, store.ledger_end_index
    if index < begin:
        raise DLedgerError(f"this log begins after entry {begin}, above {index}", INCONSISTENT_STATE)
    local = store.get_entry_term(index) if index <= end else None
    if local == term:
        if begin == index == end:
            # an empty log after this begin: its next entry must land at the leader's position
            # (the store does nothing when it already does)
            store.reset(index, term, next_pos)
        return False
    if local is not None and begin < index <= keep:
        raise DLedgerError(f"entry {index} is of term {local} here, verified or committed, and of term {term} "
                           f"at the leader", INCONSISTENT_STATE)
    if end > index:
        # entry ``index`` is of another term here: none of those after it is the leader's (the
        # store refuses to truncate a committed one)
        store.truncate(index + 1)
    store.reset(index, term, next_pos)
    return True
