"""Fuzzing every request handler of the node: well-formed and malformed requests of every
type (vote, heartbeat, push APPEND/COMPARE/TRUNCATE/COMMIT and unknown push types, append,
batch append, get in every read mode, metadata, pull, leadership transfer, install snapshot,
and responses sent as requests or with no matching request), with terms and indexes at the
format's limits and beyond, negative values, non-contiguous or oversized pushes, and wrong
group, peer and sender ids. Every message first crosses the production codec as bytes, as it
would on the wire, sometimes with its body mutated and its checksum recomputed.

What must hold, for every message:
- only documented answers escape: ``receive`` raises nothing (the node has no catch-all for
  builtin exceptions: only ``PeerProtocolError``, the peer's fault, is answered
  UNEXPECTED_ARGUMENT, so a handler tripping over a request is a failure here), every answer
  is the response type of its request with a ``DLedgerResponseCode`` member, and it crosses
  the codec;
- a request the node must refuse (wrong group, addressed to another member, from a sender
  or leader that is not a peer, or a term/index out of bounds) changes nothing: term, vote,
  role, log end and commit index stay as they were;
- whatever arrives: terms stay incrementable, the commit index never goes back nor beyond
  the log, committed entries keep their bytes (an install from the node's leader may move its
  log start past some: those are gone here, and only those);
- the cluster keeps serving: afterwards a leader is elected and an append commits.
"""

from __future__ import annotations

import zlib
from dataclasses import fields

from hypothesis import HealthCheck, event, given, settings, strategies as st

from dledger.core import Role
from dledger.entry import MAX_INDEX, MAX_TERM
from dledger.protocol import (MESSAGE_TYPES, PEER_TERM_BOUND, TERM_STEP, AppendEntryRequest,
                              BatchAppendEntryRequest, DLedgerResponseCode as Code, Envelope, FrameError,
                              GetEntriesRequest, HeartBeatRequest, InstallSnapshotRequest, LeadershipTransferRequest,
                              MetadataRequest, PullEntriesRequest, PushEntryRequest, PushEntryType, ReadMode,
                              VoteRequest, decode_envelope, encode_envelope, out_of_range)
from dledger.core.node import RESPONSE_OF
from core.wiring import Wired

INT64_MAX = (1 << 63) - 1
EXTREMES = [-(1 << 63), -2, -1, 0, 1, 2, 3, 4, 5, 1 << 31, MAX_INDEX, MAX_INDEX + 1, PEER_TERM_BOUND,
            PEER_TERM_BOUND + 1, MAX_TERM, MAX_TERM + 1, INT64_MAX - 1, INT64_MAX]
REQUESTS = [VoteRequest, HeartBeatRequest, PushEntryRequest, AppendEntryRequest, BatchAppendEntryRequest,
            GetEntriesRequest, MetadataRequest, PullEntriesRequest, LeadershipTransferRequest,
            InstallSnapshotRequest]
RESPONSES = [cls for cls, _ in MESSAGE_TYPES if cls not in REQUESTS]
PEER_REQUESTS = (VoteRequest, HeartBeatRequest, PushEntryRequest, LeadershipTransferRequest, InstallSnapshotRequest)
CLIENT_REQUESTS = (AppendEntryRequest, BatchAppendEntryRequest, MetadataRequest)
COMMITTED = 4
#: entries the leader and one follower hold that the lagging follower misses
LAGGED = 3


_CLUSTERS: dict[int, Wired] = {}


def _cluster(seed: int) -> tuple[Wired, dict]:
    """A 3-node cluster with a leader, ``COMMITTED`` entries committed everywhere and
    ``LAGGED`` more committed on the leader and one follower while the other was cut off."""
    w = Wired(3, seed=seed)
    assert w.run_until(lambda: w.leader() is not None, 3_000)
    lead = w.leader()
    w.propose(lead, "setup", [b"e%d" % i for i in range(COMMITTED)])
    assert w.run_until(lambda: all(n.committed_index >= COMMITTED - 1 for n in w.nodes.values()), 2_000)
    follower, lagging = [i for i in w.ids if i != lead]
    w.cut.add(lagging)
    w.propose(lead, "lagged", [b"l%d" % i for i in range(LAGGED)])
    assert w.run_until(lambda: w.nodes[follower].committed_index >= COMMITTED + LAGGED - 1, 2_000)
    w.cut.discard(lagging)
    assert w.nodes[lagging].store.ledger_end_index == COMMITTED - 1
    w.completions.clear()
    return w, {"<leader>": lead, "<follower>": follower, "<lagging>": lagging}


def _state(node) -> tuple:
    return (node.term, node.member_state.curr_vote_for, node.role, node.store.ledger_end_index,
            node.committed_index)


def _raw(w: Wired, lead: str, first: int, count: int) -> bytes:
    st_ = w.nodes[lead].store
    return b"".join(bytes(st_.get_raw(i)) for i in range(first, min(first + count, st_.ledger_end_index + 1)))


def _plausible(draw, cls, f, src: str, dst: str):
    """A value of field ``f`` a correct peer could send (placeholders resolved by ``_build``)."""
    if f.name == "group":
        return "g"
    if f.name == "remote_id":
        return dst
    if f.name in ("local_id", "leader_id", "transfer_id"):
        return draw(st.sampled_from(["<leader>", "<leader>", src]), label=f.name)
    if f.name in ("transferee_id", "node_id"):
        return draw(st.sampled_from(["n0", "n1", "n2"]), label=f.name)
    if f.name == "code":
        return 200
    if f.name == "type":
        return draw(st.sampled_from(list(PushEntryType)), label="type")
    if f.name == "read_mode":
        return draw(st.sampled_from(list(ReadMode)), label="read_mode")
    if f.type == "int" and f.name.endswith("term"):
        return draw(st.sampled_from(["<term>", "<term>", "<term-1>", "<term+1>", -1, 0]), label=f.name)
    if f.type == "int":
        return draw(st.integers(-1, COMMITTED + LAGGED + 2), label=f.name)
    if f.type == "bool":
        return draw(st.booleans(), label=f.name)
    if f.name == "entries" and f.type == "bytes":
        return draw(st.sampled_from(["<records>", "<records>", b""]), label="entries")
    if f.type == "bytes":
        return draw(st.binary(max_size=32), label=f.name)
    if f.type == "list":
        return draw(st.lists(st.binary(max_size=16), min_size=1, max_size=3)
                    if f.name in ("batch_msgs", "entries") else st.lists(st.integers(-1, 8), max_size=3), label=f.name)
    if f.type == "dict":
        return {}
    return draw(st.sampled_from(["n0", "n1", "n2"]), label=f.name)


def _wild(draw, cls, f, src: str, dst: str):
    """Any value of the field's wire type: extremes, strangers, garbage."""
    names = st.sampled_from(["n0", "n1", "n2", "n3", "", "g", "G", "sim", "../n0"]) | st.text(max_size=6)
    if f.type == "int" and f.name == "type":
        return draw(st.sampled_from(EXTREMES), label="type")
    if f.type == "int":
        return draw(st.sampled_from(EXTREMES), label=f.name)
    if f.type == "bool":
        return draw(st.booleans(), label=f.name)
    if f.name == "entries" and f.type == "bytes":
        return draw(st.binary(max_size=200) | st.sampled_from(["<records>", b"\0" * 70_000]), label="entries")
    if f.type == "bytes":
        return draw(st.binary(max_size=64) | st.just(b"x" * 70_000), label=f.name)
    if f.type == "list":
        return draw(st.lists(st.binary(max_size=16), max_size=3) if f.name in ("batch_msgs", "entries")
                    else st.lists(st.sampled_from(EXTREMES), max_size=3), label=f.name)
    if f.type == "dict":
        return draw(st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2), label=f.name)
    return draw(names | (st.none() if f.type == "str | None" else st.nothing()), label=f.name)


@st.composite
def scenario(draw):
    """(cluster seed, [(src, dst, request id, is_response, class, fields, mutation)]): each
    message is plausible (what a correct peer or client could send), plausible with one to
    three fields replaced by wild values, or wild in every field."""
    seed = draw(st.integers(1, 3), label="seed")
    out = []
    for k in range(draw(st.integers(1, 5), label="messages")):
        src = draw(st.sampled_from(["<leader>", "<leader>", "n0", "n1", "n2", "n9"]), label="src")
        dst = draw(st.sampled_from(["<lagging>", "<lagging>", "<follower>", "<leader>"]), label="dst")
        as_response = draw(st.integers(0, 9), label="response?") == 0
        cls = draw(st.sampled_from(RESPONSES if as_response else REQUESTS), label="type")
        shape = draw(st.sampled_from(["plausible", "plausible", "perturbed", "perturbed", "wild"]), label="shape")
        kw = {f.name: (_wild if shape == "wild" else _plausible)(draw, cls, f, src, dst) for f in fields(cls)}
        if cls is PushEntryRequest and shape != "wild" and draw(st.booleans(), label="leader's push"):
            # what the leader itself would send: its ids and term, its records from a first
            # index around the followers' ends (contiguous, overlapping or beyond: parked)
            first = draw(st.integers(COMMITTED, COMMITTED + LAGGED) | st.integers(0, COMMITTED + LAGGED), label="first")
            kw.update(local_id="<leader>", leader_id="<leader>", term="<term>", first_entry_index=first,
                      count=draw(st.integers(1, 3), label="count"), entries="<records>",
                      pre_log_index=first - 1, pre_log_term="<pre-term>", last_entry_term="<term>",
                      commit_index=draw(st.integers(-1, COMMITTED + LAGGED), label="commit"),
                      type=draw(st.sampled_from([PushEntryType.APPEND] * 3 + [PushEntryType.COMMIT, PushEntryType.COMPARE,
                                                                              PushEntryType.TRUNCATE]), label="type"))
            src = "<leader>"
        if shape == "perturbed":
            for f in draw(st.lists(st.sampled_from(fields(cls)), min_size=1, max_size=3, unique=True), "bad"):
                kw[f.name] = _wild(draw, cls, f, src, dst)
        rid = draw(st.integers(-(1 << 63), INT64_MAX) | st.integers(-3, 3), label="rid")
        mutation = draw(st.none() | st.none() | st.none() | st.tuples(st.integers(0, 10_000), st.integers(1, 255)),
                        label="mutation")
        out.append((src, dst, rid, as_response, cls, kw, mutation))
    return seed, out


def _resolve(w: Wired, roles: dict, value):
    if isinstance(value, str) and value.startswith("<") and value.endswith(">"):
        term = w.nodes[roles["<leader>"]].term
        return {"<term>": term, "<term-1>": term - 1, "<term+1>": term + 1}.get(value, roles.get(value, value))
    return value


def _build(w: Wired, roles: dict, cls, kw: dict):
    kw = {name: _resolve(w, roles, value) for name, value in kw.items()}
    leader_store = w.nodes[roles["<leader>"]].store
    if kw.get("pre_log_term") == "<pre-term>":
        p = kw["pre_log_index"]
        kw["pre_log_term"] = leader_store.get_entry_term(p) if 0 <= p <= leader_store.ledger_end_index else -1
    if kw.get("entries") == "<records>":
        first, count = kw.get("first_entry_index", 0), kw.get("count", 1)
        kw["entries"] = _raw(w, roles["<leader>"], first, count) if 0 <= first <= COMMITTED + LAGGED else b""
    return cls(**kw)


def _must_refuse(node, env: Envelope) -> bool:
    """Requests the node must refuse before any state change."""
    req, member = env.msg, node.member_state
    if env.is_response or type(req) not in RESPONSE_OF:
        return False
    if req.group != member.group or out_of_range(req, member.curr_term) is not None:
        return True
    if isinstance(req, PEER_REQUESTS):
        if req.remote_id != member.self_id:
            return True
        named = req.transfer_id if isinstance(req, LeadershipTransferRequest) else req.leader_id
        # a candidate or leader that names a newer configuration than the node's (one that may
        # have made it a member, which the node has not got yet) is judged as a member is
        newer = isinstance(req, (VoteRequest, HeartBeatRequest)) and req.config_index > member.config_index
        if not member.is_peer_member(named) and not newer or named == member.self_id and not isinstance(
                req, LeadershipTransferRequest):
            return True
    if isinstance(req, GetEntriesRequest) and req.read_mode == ReadMode.RAFT_LOG_READ:
        return False                         # a log read appends a NOOP on the leader, as ``read`` does
    if isinstance(req, (GetEntriesRequest, PullEntriesRequest)):
        return True                          # reads: never a state change
    return False


def _committed_bytes(node) -> dict[int, bytes]:
    """The committed entries the node holds (after its log's begin), by index."""
    store = node.store
    return {i: bytes(store.get_raw(i)) for i in range(store.ledger_before_begin_index + 1, node.committed_index + 1)}


def _deliver_one(w: Wired, env: Envelope) -> list:
    """Hand ``env`` to its addressee; return its direct answers (the rest is queued)."""
    node = w.nodes[env.dst]
    node.receive(w.now, env)
    ready = node.take_ready()
    answers = [m for m in ready.messages if m.is_response and m.request_id == env.request_id and m.dst == env.src]
    w.queue.extend(m for m in ready.messages if m not in answers)
    for c in ready.completions:
        w.completions[c.token] = c
    w.role_changes[env.dst].extend(ready.role_changes)
    return answers


def _leader_elected_and_append_commits(w: Wired) -> None:
    for attempt in range(40):
        top = max(n.term for n in w.nodes.values())
        leads = [i for i, n in w.nodes.items() if n.role is Role.LEADER and n.term == top]
        if len(leads) == 1:
            tok = ("after", attempt)
            w.propose(leads[0], tok, [b"after"])
            w.run_until(lambda: tok in w.completions, 500)
            if tok in w.completions and w.completions[tok].response.code == Code.SUCCESS:
                return
        w.run(250)                  # refused (e.g. a transfer runs) or no leader yet: time moves on
    raise AssertionError({i: (n.role, n.term) for i, n in w.nodes.items()})


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_fuzzed_requests_get_documented_answers_change_nothing_they_must_not_and_the_node_keeps_serving(case):
    seed, messages = case
    w, roles = _cluster(seed)
    _fuzz(w, roles, messages)
    _leader_elected_and_append_commits(w)


def _fuzz(w: Wired, roles: dict, messages: list) -> None:
    for src, dst, rid, as_response, cls, kw, mutation in messages:
        msg = _build(w, roles, cls, kw)
        src, dst = roles.get(src, src), roles[dst]
        wire = encode_envelope(Envelope(src, dst, rid, as_response, msg))
        if mutation is not None:
            at, xor = mutation
            body = bytearray(wire[:-4])
            body[at % len(body)] ^= xor
            wire = bytes(body) + zlib.crc32(body).to_bytes(4, "big")
        try:
            env = decode_envelope(wire)
        except FrameError:
            continue
        if env.dst not in w.nodes:
            continue
        node = w.nodes[env.dst]
        before, committed = _state(node), _committed_bytes(node)
        before_begin = node.store.ledger_before_begin_index
        refuse = _must_refuse(node, env)
        answers = _deliver_one(w, env)
        # only documented answers, one at most, each able to cross the wire
        assert len(answers) <= 1, answers
        event(f"{type(env.msg).__name__}{' (refused)' if refuse else ''} -> "
              f"{Code.of(answers[0].msg.code).name if answers else 'no direct answer'}")
        for a in answers:
            assert not env.is_response, (env, a)
            assert type(a.msg) is RESPONSE_OF[type(env.msg)], (env, a)
            assert Code.of(a.msg.code) is not Code.UNKNOWN and a.msg.code == Code(a.msg.code), (env, a)
            assert decode_envelope(encode_envelope(a)) == a
        after = _state(node)
        if refuse:
            assert after == before, (env, before, after, answers)
        term, _vote, _role, end, commit = after
        assert term >= before[0] and term <= max(PEER_TERM_BOUND, before[0] + TERM_STEP)
        assert before[4] <= commit <= end, (env, before, after)
        held = _committed_bytes(node)
        begin = node.store.ledger_before_begin_index
        assert {i: held[i] for i in committed if i > begin} == {i: b for i, b in committed.items() if i > begin}
        assert begin == before_begin or isinstance(env.msg, InstallSnapshotRequest), (env, before_begin, begin)
        w.deliver()


def test_a_transfer_request_replayed_to_a_lagging_follower_leaves_the_cluster_live():
    """Found by the fuzzer above: the leader's own transfer request, replayed (or forged) to
    a follower that lags, made it stand in the next term with its short log. Its answers
    (refusals carrying the higher term) deposed the leader, which kept asking for votes in
    its old term, won them again from the other follower and was deposed again: no leader
    lasted and the lagging node stayed a candidate for ever. A node that learnt of a higher
    term now asks in that term."""
    w, roles = _cluster(1)
    lead, lagging = roles["<leader>"], roles["<lagging>"]
    term = w.nodes[lead].term
    _deliver_one(w, Envelope(lead, lagging, 0, False, LeadershipTransferRequest(
        group="g", remote_id=lagging, local_id=lead, leader_id=lead, term=term, transfer_id=lead,
        transferee_id=lagging, take_leadership_ledger_index=0)))
    w.deliver()
    _leader_elected_and_append_commits(w)
    w.run(2_000)
    assert [n.role for n in w.nodes.values()].count(Role.LEADER) == 1
    assert Role.CANDIDATE not in [n.role for n in w.nodes.values()]
    assert len({n.store.ledger_end_index for n in w.nodes.values()}) == 1
