"""MembershipSync: the node's configuration kept in step with its log (``core.membership``).

- **At start** (``load``): the base is the store's membership record; without one, the
  bootstrap configuration (``peers``, every one a voter), recorded at once; except for a node
  that **joins** (``join``) or whose store is new and empty without ``bootstrap``: it takes no
  configuration of its own (it neither votes nor stands) until it learns one: from the log the
  leader pushes to it, from an install, or, for a brand-new group, when protocol-aware recovery
  finds every other member as new as itself (``adopt_bootstrap``). Then the configuration
  entries of the log above the base are read (``store.config_entries``: a stride over the index
  units' magic).
- **After every step** (``sync``, from ``Node._settle_pass``): entries appended since the last
  pass are scanned for configuration entries (each in force at once, committed or not); a cut of
  the log (``cut_at``, told by whoever truncates: a follower's push, the damaged tail, a moved
  log start) drops the configurations above it and rescans from there; entries that committed
  fold into the base, which is recorded durably (retention and snapshots remove only committed
  entries, so the record always covers them).
- **Installs** (``installed``): the leader sends the configuration in force at the install's
  index; it is recorded before the log start moves.

A configuration entry that does not decode is logged and skipped (the leader never writes one:
``Configuration.encode``). Every change of the configuration in force is logged at INFO.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dledger.core.membership import ConfigHistory, Configuration, MembershipError
from dledger.errors import DLedgerError
from dledger.store.suspect import SuspectReason

if TYPE_CHECKING:
    from dledger.core.member_state import MemberState
    from dledger.store import LogStore

log = logging.getLogger(__name__)


def peers_changed_warning(self_id: str, given: dict[str, str], config: Configuration) -> str | None:
    """The warning for ``peers`` given at start whose members differ from the group's
    configuration (None when they agree)."""
    if set(given) == set(config.members):
        return None
    return (f"{self_id}: the peers given at start ({', '.join(sorted(given))}) differ from the group's "
            f"configuration ({config.describe()}, entry {config.index}): they are ignored; change the "
            f"members with `dledger member add|promote|remove` (docs/operations.md)")


class MembershipSync:
    def __init__(self, member_state: "MemberState", store: "LogStore", config) -> None:
        self.member_state = member_state
        self.store = store
        self.cfg = config
        #: the log end the last scan reached, and the term of its entry there
        self.scanned_to = -1
        self.scanned_term = -1
        #: the lowest index a cut reached since the last pass (None: no cut)
        self.cut_from: int | None = None
        #: the base is not recorded yet (a read-only store, or the record could not be written)
        self._unrecorded: Configuration | None = None

    # =====================================================================================
    # start
    # =====================================================================================
    def load(self) -> None:
        member, store, cfg = self.member_state, self.store, self.cfg
        base: Configuration | None = None
        recorded = None
        try:
            recorded = store.membership.load()
            if recorded is not None:
                base = Configuration.from_record(recorded)
        except (ValueError, MembershipError) as exc:
            log.error("%s: %s: this node trusts no membership of its own and learns it from the leader",
                      member.self_id, exc)
            recorded = {}
        if recorded is None and not self._waits_to_learn():
            base = Configuration(dict(member.given_peers))
            self._record(base)
        history = ConfigHistory(base)
        first = base.index + 1 if base is not None else 0
        self._scan(history, first, store.ledger_end_index)
        self.scanned_to, self.scanned_term = store.ledger_end_index, store.ledger_end_term
        member.set_history(history)
        latest = history.latest
        if latest is not None and recorded:
            warning = peers_changed_warning(member.self_id, member.given_peers, latest)
            if warning:
                log.warning("%s", warning)
        if latest is None:
            log.info("%s: no configuration yet (%s): it votes and stands for nothing until the leader's log "
                     "makes it a member", member.self_id, "it joins a group" if getattr(cfg, "join", False)
                     else "a new store: waiting to learn whether the group is new")
        else:
            log.info("%s: configuration of entry %d: %s", member.self_id, latest.index, latest.describe())

    def _waits_to_learn(self) -> bool:
        cfg, store = self.cfg, self.store
        if getattr(cfg, "join", False):
            return True
        empty = store.ledger_end_index < 0 and store.ledger_before_begin_index < 0
        return empty and store.suspect is SuspectReason.FRESH and not getattr(cfg, "bootstrap", False)

    def adopt_bootstrap(self, why: str) -> None:
        """Protocol-aware recovery found a brand-new group (every other member as new as this
        node): take the bootstrap configuration, unless this node joins or knows one already."""
        if not getattr(self.cfg, "join", False):
            self._take_base(dict(self.member_state.given_peers), f"bootstrap configuration taken ({why})")

    def _take_base(self, members: dict[str, str], what: str) -> None:
        """A node that knows no configuration takes the bootstrap one of ``members`` (recorded)."""
        member = self.member_state
        if member.history.base is not None or member.history.entries:
            return
        try:
            base = Configuration(members)
        except MembershipError as exc:
            log.warning("%s: %s refused: %s", member.self_id, what, exc)
            return
        self._record(base)
        member.history.base = base
        log.info("%s: %s", member.self_id, what)
        member.configuration_changed()

    # =====================================================================================
    # every pass
    # =====================================================================================
    def cut_at(self, index: int) -> None:
        """The log lost its entries from ``index`` on (they may be replaced in the same step)."""
        if self.cut_from is None or index < self.cut_from:
            self.cut_from = index

    def sync(self) -> bool:
        """Bring the configuration in step with the log; True when the one in force changed or
        a configuration entry committed.

        A cut is found without being told: the log ends below the last scan, or its entry there
        changed term (two entries of one index and term are the same entry, log matching); the
        configurations above the commit index are then read again (no cut reaches a committed
        entry). The damaged tail, which rewrites entries of its own term, tells its cut
        (``cut_at``)."""
        store, member = self.store, self.member_state
        history = member.history
        end = store.ledger_end_index
        start = self.cut_from
        scanned = self.scanned_to
        # (the term at the last scan's end: the log's own end term when the log did not move, which
        # costs no read; one index read only when it grew)
        if scanned > end or (scanned > store.ledger_before_begin_index
                             and (store.ledger_end_term if scanned == end else self._term_at(scanned)) != self.scanned_term):
            floor = max(min(member.committed_index, end), store.ledger_before_begin_index) + 1
            start = floor if start is None else min(start, floor)
        if start is not None:
            self.cut_from = None
            history.cut(start)
            self._scan(history, start, end)
        elif end > scanned:
            self._scan(history, scanned + 1, end)
        if end != scanned or start is not None:
            self.scanned_to = end
            self.scanned_term = store.ledger_end_term
        committed = history.committed(member.committed_index) if history.entries else None
        if committed is not None or self._unrecorded is not None:
            self._record(committed if committed is not None else self._unrecorded)
        # (a commit matters too: a leader stops pushing to a member whose removal committed)
        return member.configuration_changed() or committed is not None

    def _term_at(self, index: int) -> int:
        try:
            return self.store.get_entry_term(index)
        except DLedgerError:
            return -2

    def installed(self, config: Configuration) -> None:
        """An install moves (or is about to move) the log start to ``config.index`` or past it:
        ``config``, the leader's at the install's index and committed there, becomes the base,
        recorded first."""
        history = self.member_state.history
        if history.base is not None and history.base.index >= config.index:
            return
        self._record(config)
        history.base = config
        history.entries[:] = [c for c in history.entries if c.index > config.index]
        self.member_state.configuration_changed()

    def learned_bootstrap(self, members: dict[str, str], leader: str) -> None:
        """The leader of a group whose configuration is still its bootstrap one named its
        members in a heartbeat: a node that knows no configuration takes it."""
        self._take_base(dict(members), f"bootstrap configuration learnt from leader {leader}")

    # =====================================================================================
    # internals
    # =====================================================================================
    def _scan(self, history: ConfigHistory, first: int, last: int) -> None:
        base = history.base
        if base is not None:
            first = max(first, base.index + 1)
        if first > last:
            return
        store = self.store
        for index in store.config_entries(first, last):
            try:
                entry = store.get(index)
                history.appended(Configuration.decode(entry.body, index, entry.term))
            except (DLedgerError, MembershipError) as exc:
                log.error("%s: configuration entry %d is unreadable, skipped: %s", self.member_state.self_id,
                          index, exc)

    def _record(self, config: Configuration) -> None:
        store = self.store
        if getattr(store, "read_only", False):
            return
        try:
            store.membership.save(config.record())
            self._unrecorded = None
        except OSError as exc:
            self._unrecorded = config
            log.error("%s: cannot record the configuration of entry %d: %s (retried)", self.member_state.self_id,
                      config.index, exc)
