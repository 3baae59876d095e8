"""The handshake, stepped by hand (no sockets): both sides prove the secret, the MACs bind the
group, both ids and both fresh nonces, and a recorded handshake never works twice."""

import itertools

import msgpack
import pytest
from hypothesis import given, strategies as st

from dledger.transport.auth import (ClientHandshake, HandshakeError, Peer, ServerHandshake, load_secret)

KEY = b"k" * 32
OTHER = b"o" * 32
PEER = Peer("g", "n0", "n1")


def counter_nonces():
    c = itertools.count()
    return lambda n: next(c).to_bytes(n, "big")


def run(client: ClientHandshake, server: ServerHandshake) -> Peer:
    challenge = server.on_hello(client.hello())
    return server.on_proof(client.on_challenge(challenge))


def test_matching_secrets_authenticate_and_name_group_and_ids():
    assert run(ClientHandshake(PEER, [KEY]), ServerHandshake([KEY])) == PEER


def test_no_secret_on_either_side_still_names_group_and_ids():
    assert run(ClientHandshake(PEER), ServerHandshake()) == PEER


@pytest.mark.parametrize("client_keys,server_keys", [([KEY], [OTHER]), ([], [KEY]), ([KEY], [])])
def test_a_wrong_or_missing_secret_fails_on_some_side(client_keys, server_keys):
    with pytest.raises(HandshakeError):
        run(ClientHandshake(PEER, client_keys), ServerHandshake(server_keys))


def test_an_impostor_server_is_caught_before_the_client_proves_anything():
    client = ClientHandshake(PEER, [KEY])
    impostor = ServerHandshake([OTHER])
    with pytest.raises(HandshakeError, match="server did not prove"):
        client.on_challenge(impostor.on_hello(client.hello()))


def test_a_recorded_handshake_replayed_on_a_new_connection_fails():
    client = ClientHandshake(PEER, [KEY])
    hello = client.hello()
    proof = client.on_challenge(ServerHandshake([KEY]).on_hello(hello))
    fresh = ServerHandshake([KEY])            # a new connection: a new server nonce
    fresh.on_hello(hello)                     # the recorded hello is accepted as a hello...
    with pytest.raises(HandshakeError, match="did not prove"):
        fresh.on_proof(proof)                 # ...but its recorded proof answers the old nonce


def test_a_recorded_challenge_does_not_fool_a_client_with_a_fresh_nonce():
    first = ClientHandshake(PEER, [KEY])
    challenge = ServerHandshake([KEY]).on_hello(first.hello())
    with pytest.raises(HandshakeError):
        ClientHandshake(PEER, [KEY]).on_challenge(challenge)


@pytest.mark.parametrize("other", [Peer("h", "n0", "n1"), Peer("g", "n2", "n1"), Peer("g", "n0", "n2"),
                                   Peer("g", "n0", "n1", "client")])
def test_the_mac_binds_group_both_ids_and_the_kind(other):
    """A proof made for one (group, src, dst, kind) fails for any other, even with identical nonces."""
    client = ClientHandshake(PEER, [KEY], nonce=lambda n: b"c" * n)
    server = ServerHandshake([KEY], nonce=lambda n: b"s" * n)
    proof = client.on_challenge(server.on_hello(client.hello()))
    victim = ServerHandshake([KEY], nonce=lambda n: b"s" * n)
    victim.on_hello(ClientHandshake(other, [KEY], nonce=lambda n: b"c" * n).hello())
    with pytest.raises(HandshakeError):
        victim.on_proof(proof)


def test_the_listener_refuses_an_unserved_group_or_id_at_hello():
    server = ServerHandshake([KEY], accept=lambda p: None if p.group == "g" else f"no group {p.group!r}")
    with pytest.raises(HandshakeError, match="no group 'x'"):
        server.on_hello(ClientHandshake(Peer("x", "n0", "n1"), [KEY]).hello())


def test_rotation_the_first_key_signs_and_any_key_verifies():
    assert run(ClientHandshake(PEER, [OTHER, KEY]), ServerHandshake([KEY, OTHER])) == PEER
    with pytest.raises(HandshakeError):
        run(ClientHandshake(PEER, [OTHER]), ServerHandshake([KEY]))


def test_a_proof_before_a_hello_is_refused():
    with pytest.raises(HandshakeError, match="before hello"):
        ServerHandshake([KEY]).on_proof(msgpack.packb(["proof", b"x" * 32]))


@given(garbage=st.binary(max_size=200) | st.builds(msgpack.packb, st.lists(
    st.one_of(st.text(max_size=30), st.binary(max_size=40), st.integers(-(1 << 63), (1 << 64) - 1), st.none()), max_size=7)))
def test_garbage_in_any_handshake_step_raises_handshake_error_only(garbage):
    server = ServerHandshake([KEY])
    with pytest.raises(HandshakeError):
        server.on_hello(garbage)
    with pytest.raises(HandshakeError):
        ClientHandshake(PEER, [KEY]).on_challenge(garbage)
    server = ServerHandshake([KEY])
    server.on_hello(ClientHandshake(PEER, [KEY]).hello())
    with pytest.raises(HandshakeError):
        server.on_proof(garbage)


def test_the_secret_comes_from_a_file_one_key_a_line_or_the_environment(tmp_path):
    f = tmp_path / "secret"
    f.write_bytes(b"first-key-0123456789\n\nsecond-key-0123456789\n")
    assert load_secret(str(f), environ={}) == (b"first-key-0123456789", b"second-key-0123456789")
    assert load_secret(None, environ={"DLEDGER_SECRET": "from-the-env-0123456789"}) == (b"from-the-env-0123456789",)
    assert load_secret(str(f), environ={"DLEDGER_SECRET": "ignored-when-a-file-is-named"})[0] == b"first-key-0123456789"
    assert load_secret(None, environ={}) == ()


def test_a_short_or_empty_secret_is_refused(tmp_path):
    f = tmp_path / "secret"
    f.write_bytes(b"short\n")
    with pytest.raises(ValueError, match="at least 16"):
        load_secret(str(f), environ={})
    f.write_bytes(b"\n")
    with pytest.raises(ValueError, match="no key"):
        load_secret(str(f), environ={})


def test_an_unknown_connection_kind_is_refused_at_hello():
    hello = ClientHandshake(PEER, [KEY]).hello()
    forged = hello.replace(b"\xa4peer", b"\xa5admin")
    assert forged != hello
    with pytest.raises(HandshakeError, match="unknown connection kind"):
        ServerHandshake([KEY]).on_hello(forged)
    with pytest.raises(ValueError):
        ClientHandshake(Peer("g", "n0", "n1", "admin"), [KEY])
