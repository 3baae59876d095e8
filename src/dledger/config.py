"""DLedgerConfig: every option of a node, documented beside its default.

Field names are Java DLedger's ``DLedgerConfig`` fields in snake_case. Defaults are DLedger's except the
election timing, which is ten to twenty times faster so that a failover takes well under a
second (DLedger's 2 s heartbeat x 3 gives 6 s): a follower gives up on its leader after
``max_heart_beat_leak * heart_beat_time_interval_ms`` = 300 ms, then waits a random
``min_vote_interval_ms .. max_vote_interval_ms`` before it asks for votes.

Rules:
- ``validate()`` raises ``ConfigError`` (a ``ValueError``) naming the first bad field;
- ``peers`` is ``"n0-127.0.0.1:20911;n1-127.0.0.1:20912"``: the id is the text before the
  first ``-`` (ids may not contain ``-``; addresses may); ``self_id`` must be one of them;
- this module is a leaf (standard library only).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace

FILE = "file"
MEMORY = "memory"
#: the wire's frame limit (``protocol.MAX_FRAME_BYTES``; this module imports nothing of dledger)
MAX_FRAME_BYTES = 64 * 1024 * 1024
#: the largest record a store holds (``entry.MAX_RECORD_SIZE``) and the blank a segment keeps
MAX_RECORD_SIZE = 4 * 1024 * 1024
MIN_BLANK_LEN = 8
#: room for a push's envelope (ids, terms, indexes, msgpack and CRC framing) beyond its records
FRAME_HEADROOM = 64 * 1024


class ConfigError(ValueError):
    """A configuration field has a bad value; ``field`` names it."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"DLedgerConfig.{field_name}: {message}")
        self.field = field_name


#: a node id becomes a directory name (``dledger-<id>``): letters, digits, ``_`` and ``.``, not
#: starting with ``.`` (so never ``..``, ``/`` or NUL)
_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]*")


def check_node_id(field_name: str, node_id: str, where: str = "") -> None:
    """Refuse an id that could not safely name a directory or a peer."""
    if not _ID_RE.fullmatch(node_id):
        raise ConfigError(field_name, f"{where}id {node_id!r} may hold only letters, digits, '_' and '.' "
                                      f"and may not start with '.'")


def split_address(addr: str) -> tuple[str, int]:
    """``"host:port"`` (or ``"[v6 host]:port"``) -> ``(host, port)``; ``ValueError`` naming the
    problem when the port is missing, not a number or outside 1..65535."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{addr!r} has no ':port'")
    if "," in addr:
        raise ValueError(f"{addr!r} contains ','; peers are separated by ';'")
    if not port.isdigit():
        raise ValueError(f"{addr!r} has a port that is not a number: {port!r}")
    number = int(port)
    if not 1 <= number <= 65535:
        raise ValueError(f"{addr!r} has port {number}, outside 1..65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, number


def parse_peers(peers: str) -> dict[str, str]:
    """``"n0-host:port;n1-host:port"`` -> ``{"n0": "host:port", ...}`` (order kept). One
    ``ConfigError`` on ``peers`` names the offending part: not ``id-host:port``, a ``,`` where
    ``;`` belongs, a missing or non-numeric port, a bad or duplicate id, a duplicate address."""
    out: dict[str, str] = {}
    seen: dict[tuple[str, int], str] = {}
    for part in peers.split(";"):
        part = part.strip()
        if not part:
            continue
        peer_id, sep, addr = part.partition("-")
        if not sep or not peer_id or not addr:
            raise ConfigError("peers", f"{part!r} is not of the form id-host:port")
        check_node_id("peers", peer_id, f"in {part!r}: ")
        if peer_id in out:
            raise ConfigError("peers", f"peer id {peer_id!r} appears twice")
        try:
            host, port = split_address(addr)
        except ValueError as exc:
            raise ConfigError("peers", f"in {part!r}: {exc}") from None
        if (host, port) in seen:
            raise ConfigError("peers", f"address {addr!r} of {peer_id!r} is also {seen[(host, port)]!r}'s")
        seen[(host, port)] = peer_id
        out[peer_id] = addr
    if not out:
        raise ConfigError("peers", "no peers given")
    return out


def max_safe_drift(lease_ratio: float) -> float:
    """The largest clock drift ``d`` (every clock's rate within ``1 +- d``) under which a read
    lease of ``lease_ratio`` election timeouts is safe."""
    return (1 - lease_ratio) / (1 + lease_ratio)


def lease_is_safe(lease_ratio: float, max_drift: float) -> bool:
    """Whether a lease of ``lease_ratio`` election timeouts, counted on the leader's clock, ends
    before any other majority can elect a leader, counting a whole election timeout on their
    own clocks, with every clock's rate within ``1 +- max_drift``."""
    return lease_ratio * (1 + max_drift) < 1 - max_drift


@dataclass(slots=True, kw_only=True)
class DLedgerConfig:
    """Configuration of one node (one Raft group member)."""

    # -- identity ---------------------------------------------------------------------------
    group: str = "default"                      # raft group name; requests of other groups are refused
    self_id: str = "n0"                         # this node's id; must appear in peers
    peers: str = "n0-127.0.0.1:20911"           # "id-host:port;..." of every member, self included
    preferred_leader_ids: str | None = None     # ";"-separated ids that should hold leadership

    # -- transport --------------------------------------------------------------------------
    transport: str = "tcp"                      # "tcp": listen on self_id's address in peers (the
                                                # default when DLedgerServer gets no transport or hub);
                                                # "inproc": the process-wide in-process hub
    secret_file: str | None = None              # file holding the shared peer secret (one key a line:
                                                # the first signs, every one is accepted, for rotation);
                                                # unset: the DLEDGER_SECRET environment variable, if set
    tls_cert_file: str | None = None            # PEM certificate of this node: turns TLS on (mutual)
    tls_key_file: str | None = None             # its private key
    tls_ca_file: str | None = None              # the cluster CA that signs every node's certificate
    max_connections: int = 256                  # inbound connections one listening port accepts
    max_frame_bytes: int = MAX_FRAME_BYTES      # largest frame sent or accepted on a connection; at
                                                # least a push (max_batch_append_size) or the largest
                                                # record, plus FRAME_HEADROOM, so every push fits one frame

    # -- storage ----------------------------------------------------------------------------
    store_base_dir: str = "/tmp/dledgerstore"  # node dir = <store_base_dir>/dledger-<self_id> (DLedger's)
    store_type: str = FILE                      # "file" or "memory"
    durability: str = "page_cache"              # "page_cache" (survives a process crash) or "fsync"
    mapped_file_size_for_entry_data: int = 1024 * 1024 * 1024   # data segment size (1 GiB)
    mapped_file_size_for_entry_index: int = 32 * 5 * 1024 * 1024  # index segment size (5 Mi units)
    flush_file_interval: int = 10               # ms between background flushes (page_cache mode)
    file_reserved_hours: int = 72               # data file retention
    delete_when: str = "04"                     # ";"-list of hours when expired files are deleted
    disk_space_ratio_to_check_expired: float = 0.70  # start deleting expired files above this
    disk_space_ratio_to_force_clean: float = 0.85    # delete regardless of age above this
    enable_disk_force_clean: bool = True        # allow forced cleaning

    # -- snapshots (a registered state machine with on_snapshot_save/on_snapshot_load) ----------
    snapshot_threshold: int = 0                 # applied entries between snapshots (0: never, the
                                                # default; server.snapshot() still takes one)
    max_snapshot_reserve_num: int = 3           # snapshots kept; the log is kept back to the oldest
    snapshot_follower_window_ms: int = 60000    # a leader keeps the entries a follower it heard from
                                                # within this window needs next (0: none kept for them)

    # -- replication ------------------------------------------------------------------------
    max_pending_requests_num: int = 10000       # pending client appends per term (503 above)
    max_wait_ack_time_ms: int = 2500            # a client append fails with 502 after this
    max_push_timeout_ms: int = 1000             # resend an unacknowledged push after this
    max_push_in_flight: int = 8                 # pushes in flight per follower (pipelining window)
    max_batch_append_size: int = 256 * 1024    # bytes per push (DLedger: 4096 with batching on)
    max_batch_append_count: int = 4096          # entries per push
    peer_push_quota: int = 20 * 1024 * 1024     # bytes/s per follower that lags > 1000 entries and
                                                # more bytes than a full push window
    enable_fast_advance_commit_index: bool = False  # append a NOOP on election so old entries commit
    enable_leader_elector: bool = True          # run elections (off: roles are forced, tests only)

    # -- election ---------------------------------------------------------------------------
    heart_beat_time_interval_ms: int = 100      # heartbeat period (DLedger 2000)
    max_heart_beat_leak: int = 3                # a follower gives up after leak x interval
    min_vote_interval_ms: int = 100             # random delay before a vote round, lower bound (DLedger 300)
    max_vote_interval_ms: int = 200             # ... upper bound (DLedger 1000)
    min_take_leadership_vote_interval_ms: int = 30   # shorter delays while taking leadership
    max_take_leadership_vote_interval_ms: int = 100
    max_leadership_transfer_wait_index: int = 1000   # max lag of a transferee
    leadership_transfer_wait_timeout: int = 1000     # ms a transferee may take to catch up
    preferred_leader_check_interval_ms: int = 1000   # how often a leader checks preferred ids
    rpc_timeout_ms: int = 3000                  # server-to-server request timeout
    lease_ratio: float = 0.8                    # LEASE_READ lease = ratio x (leak x interval)
    max_clock_drift: float = 0.05               # bound on any two clocks' rate difference (+-5 %):
                                                # LEASE_READ is safe only while clocks stay within it
    bootstrap: bool = False                     # this node starts a brand-new cluster: a new, empty
                                                # store is trusted to have never voted nor written
                                                # (docs/embedding.md); never set it for a wiped node
    join: bool = False                          # this node joins a running group: it takes no
                                                # membership of its own and waits to be added
                                                # (``dledger member add``, docs/operations.md)
    learner_max_lag_entries: int = 1000         # a learner is promoted only this close to the leader

    # -- derived ----------------------------------------------------------------------------
    peer_map: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.store_type, str):
            self.store_type = self.store_type.lower()

    # ---------------------------------------------------------------------------------------
    def validate(self) -> "DLedgerConfig":
        """Check every field; raise ``ConfigError`` naming the first bad one. Returns self."""
        for name in ("group", "self_id", "peers", "store_base_dir"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigError(name, f"must be a non-empty string, got {value!r}")
        if "-" in self.self_id:
            raise ConfigError("self_id", f"{self.self_id!r} may not contain '-'")
        check_node_id("self_id", self.self_id)
        self.peer_map = parse_peers(self.peers)
        if self.self_id not in self.peer_map:
            raise ConfigError("self_id", f"{self.self_id!r} is not in peers {list(self.peer_map)}")
        if self.transport not in ("tcp", "inproc"):
            raise ConfigError("transport", f"must be 'tcp' or 'inproc', got {self.transport!r}")
        tls = (self.tls_cert_file, self.tls_key_file, self.tls_ca_file)
        for name, value in zip(("tls_cert_file", "tls_key_file", "tls_ca_file"), tls):
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(name, f"must be a path, got {value!r}")
        if any(tls) and not all(tls):
            missing = [n for n, v in zip(("tls_cert_file", "tls_key_file", "tls_ca_file"), tls) if not v][0]
            raise ConfigError(missing, "TLS needs tls_cert_file, tls_key_file and tls_ca_file together")
        if self.secret_file is not None and (not isinstance(self.secret_file, str) or not self.secret_file):
            raise ConfigError("secret_file", f"must be a path, got {self.secret_file!r}")
        if self.store_type not in (FILE, MEMORY):
            raise ConfigError("store_type", f"must be 'file' or 'memory', got {self.store_type!r}")
        if self.durability not in ("page_cache", "fsync"):
            raise ConfigError("durability", f"must be 'page_cache' or 'fsync', got {self.durability!r}")
        positive = ("mapped_file_size_for_entry_data", "mapped_file_size_for_entry_index",
                    "max_pending_requests_num", "max_wait_ack_time_ms", "max_push_timeout_ms",
                    "max_push_in_flight", "max_batch_append_size", "max_batch_append_count",
                    "peer_push_quota", "heart_beat_time_interval_ms", "max_heart_beat_leak",
                    "min_vote_interval_ms", "max_vote_interval_ms", "min_take_leadership_vote_interval_ms",
                    "max_take_leadership_vote_interval_ms", "max_leadership_transfer_wait_index",
                    "leadership_transfer_wait_timeout", "preferred_leader_check_interval_ms",
                    "rpc_timeout_ms", "flush_file_interval", "file_reserved_hours", "max_connections",
                    "max_frame_bytes")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(name, f"must be a positive integer, got {value!r}")
        if self.mapped_file_size_for_entry_index % 32:
            raise ConfigError("mapped_file_size_for_entry_index",
                              f"must be a multiple of 32, got {self.mapped_file_size_for_entry_index}")
        if self.mapped_file_size_for_entry_data < 4096:
            raise ConfigError("mapped_file_size_for_entry_data",
                              f"must be at least 4096, got {self.mapped_file_size_for_entry_data}")
        self._check_frame_size()
        if self.max_vote_interval_ms < self.min_vote_interval_ms:
            raise ConfigError("max_vote_interval_ms", f"{self.max_vote_interval_ms} is below "
                              f"min_vote_interval_ms {self.min_vote_interval_ms}")
        if self.max_take_leadership_vote_interval_ms < self.min_take_leadership_vote_interval_ms:
            raise ConfigError("max_take_leadership_vote_interval_ms", "is below the min")
        if not 0 < self.lease_ratio < 1:
            raise ConfigError("lease_ratio", f"must be in (0, 1), got {self.lease_ratio!r}")
        if not 0 <= self.max_clock_drift < 1:
            raise ConfigError("max_clock_drift", f"must be in [0, 1), got {self.max_clock_drift!r}")
        if not lease_is_safe(self.lease_ratio, self.max_clock_drift):
            raise ConfigError("lease_ratio", f"{self.lease_ratio} is not safe with max_clock_drift "
                              f"{self.max_clock_drift}: with clock rates within 1 +- d the lease must "
                              f"satisfy lease_ratio * (1 + d) < 1 - d (at most "
                              f"{max_safe_drift(self.lease_ratio):.3f} drift for this ratio)")
        for name, low in (("snapshot_threshold", 0), ("max_snapshot_reserve_num", 1),
                          ("snapshot_follower_window_ms", 0), ("learner_max_lag_entries", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(name, f"must be an integer of at least {low}, got {value!r}")
        for name in ("disk_space_ratio_to_check_expired", "disk_space_ratio_to_force_clean"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 < value < 1:
                raise ConfigError(name, f"must be in (0, 1), got {value!r}")
        if self.join and self.bootstrap:
            raise ConfigError("join", "a node either bootstraps a new group or joins a running one, not both")
        if self.preferred_leader_ids:
            for pid in self.preferred_leader_id_list():
                if pid not in self.peer_map:
                    raise ConfigError("preferred_leader_ids", f"{pid!r} is not a peer")
        return self

    def largest_record(self) -> int:
        """The largest record this node's store accepts (a segment keeps room for its blank)."""
        return min(MAX_RECORD_SIZE, self.mapped_file_size_for_entry_data - MIN_BLANK_LEN)

    def _check_frame_size(self) -> None:
        """A push holds at most ``max_batch_append_size`` bytes of records, or one record when
        that record alone is larger; both must fit one frame, or the push would be refused
        every time it is resent."""
        if self.max_frame_bytes > MAX_FRAME_BYTES:
            raise ConfigError("max_frame_bytes", f"{self.max_frame_bytes} exceeds the wire's limit {MAX_FRAME_BYTES}")
        need = max(self.max_batch_append_size, self.largest_record()) + FRAME_HEADROOM
        if self.max_frame_bytes < need:
            raise ConfigError("max_frame_bytes", f"{self.max_frame_bytes} cannot carry a push: at least {need} "
                              f"(the larger of max_batch_append_size {self.max_batch_append_size} and the "
                              f"largest record {self.largest_record()}, plus {FRAME_HEADROOM} for the envelope)")

    def preferred_leader_id_list(self) -> list[str]:
        if not self.preferred_leader_ids:
            return []
        return [p.strip() for p in self.preferred_leader_ids.split(";") if p.strip()]

    @property
    def peer_ids(self) -> list[str]:
        return list(self.peer_map or parse_peers(self.peers))

    @property
    def default_path(self) -> str:
        """The node's store directory: ``<store_base_dir>/dledger-<self_id>``."""
        return os.path.join(self.store_base_dir, f"dledger-{self.self_id}")

    @property
    def election_timeout_ms(self) -> int:
        """How long a follower waits without heartbeats before it stands for election."""
        return self.max_heart_beat_leak * self.heart_beat_time_interval_ms

    def copy(self, **changes) -> "DLedgerConfig":
        return replace(self, **changes)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.init]
