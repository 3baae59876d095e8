"""Peer authentication: the connection handshake (sans-IO), the shared secret, TLS contexts.

Every TCP connection starts with three handshake frames before any envelope:

1. client -> server ``HELLO``: protocol label, cluster group, client id, server id, the
   client's fresh 32-byte nonce, and the kind of connection: ``peer`` (a member of the group
   sending Raft traffic) or ``client`` (an application sending client requests);
2. server -> client ``CHALLENGE``: the server's fresh nonce and its MAC;
3. client -> server ``PROOF``: the client's MAC.

Each MAC is HMAC-SHA256 under the shared secret over one msgpack list: the label
``dledger-handshake-v1``, the side (``server`` or ``client``), the group, both ids, the kind
and both nonces. So a MAC is good for one connection only: a recorded ``PROOF`` fails against the
server's next nonce, a recorded ``CHALLENGE`` against the client's next nonce, and neither
carries over to another group, another pair of ids or the other kind. MACs are compared with
``hmac.compare_digest``. Both sides prove the secret, so a client never sends envelopes to an
impostor either.

Without a secret the handshake still names group and ids (the listener routes on them) and
both MACs are empty; a side with a secret refuses a peer without one, and the other way round.

A listener that refuses a connection before the challenge (a group or node it does not serve,
a sender that is not a member, a plain connection to a TLS listener, too many connections)
says why in place of the challenge: a ``REFUSED`` frame (``refusal(reason)``) holding one line
of text, then it closes. The connecting side raises ``HandshakeRefused`` with that reason. The
reason only repeats what the connecting side sent or could learn by trying; a wrong MAC is
never explained beyond "did not prove the shared secret".
Several secrets may be given (key rotation): the first signs, any of them verifies.

Nothing here is pickle: handshake frames are msgpack lists whose every item is type-checked.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets as _secrets
import ssl
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import msgpack

LABEL = "dledger-handshake-v1"
NONCE_BYTES = 32
MIN_SECRET_BYTES = 16
SECRET_ENV = "DLEDGER_SECRET"
_HELLO, _CHALLENGE, _PROOF, _REFUSED = "hello", "challenge", "proof", "refused"
#: the longest reason a refusal carries
MAX_REASON = 200
PEER, CLIENT = "peer", "client"
KINDS = (PEER, CLIENT)


class HandshakeError(Exception):
    """The peer failed the handshake (bad frame, unknown group or id, wrong MAC)."""


class HandshakeRefused(HandshakeError):
    """The listener refused the connection and said why (``reason``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"refused the connection: {reason}")
        self.reason = reason


def refusal(reason: str) -> bytes:
    """The frame payload a listener sends in place of the challenge to say why it refuses a
    connection (it closes the connection after it)."""
    return msgpack.packb([_REFUSED, reason[:MAX_REASON]], use_bin_type=True)


def _refusal_reason(payload: bytes) -> str | None:
    """The reason of a ``refusal`` frame; None for any other frame."""
    try:
        obj = msgpack.unpackb(payload, raw=False, max_str_len=1024, max_bin_len=64, max_array_len=8,
                              max_map_len=0, max_ext_len=0)
    except Exception:
        return None
    if isinstance(obj, list) and len(obj) == 2 and obj[0] == _REFUSED and isinstance(obj[1], str):
        return obj[1][:MAX_REASON]
    return None


@dataclass(frozen=True, slots=True)
class Peer:
    """Who is on the other side of an authenticated connection, and for which endpoint."""

    group: str
    src: str        # the connecting node (or client)
    dst: str        # the node it connected to
    kind: str = PEER  # PEER: a member of the group; CLIENT: an application's client


def _mac(secret: bytes, side: str, peer: Peer, client_nonce: bytes, server_nonce: bytes) -> bytes:
    msg = msgpack.packb([LABEL, side, peer.group, peer.src, peer.dst, peer.kind, client_nonce, server_nonce],
                        use_bin_type=True)
    return hmac.new(secret, msg, hashlib.sha256).digest()


def _verifies(keys: Sequence[bytes], mac: bytes, side: str, peer: Peer, cn: bytes, sn: bytes) -> bool:
    ok = False
    for key in keys:                       # no early exit: the time does not say which key matched
        ok |= hmac.compare_digest(_mac(key, side, peer, cn, sn), mac)
    return ok


def _unpack(payload: bytes, kind: str, types: tuple) -> list:
    if len(payload) > 1024:
        raise HandshakeError(f"the {kind} frame is too long")
    try:
        obj = msgpack.unpackb(payload, raw=False, use_list=True, max_str_len=256, max_bin_len=64,
                              max_array_len=8, max_map_len=0, max_ext_len=0)
    except Exception:
        raise HandshakeError(f"the {kind} frame is not msgpack") from None
    if not isinstance(obj, list) or len(obj) != len(types) + 1 or obj[0] != kind:
        raise HandshakeError(f"expected a {kind} frame")
    for value, typ in zip(obj[1:], types):
        if not isinstance(value, typ):
            raise HandshakeError(f"bad {kind} frame")
    return obj[1:]


def _nonce(source: Callable[[int], bytes]) -> bytes:
    nonce = source(NONCE_BYTES)
    if len(nonce) != NONCE_BYTES:
        raise ValueError("a nonce is 32 bytes")
    return nonce


class ClientHandshake:
    """The connecting side. ``hello()`` -> send; ``on_challenge(payload)`` -> the proof to
    send (``HandshakeError`` when the server did not prove the secret, ``HandshakeRefused``
    when it refused the connection instead of answering)."""

    def __init__(self, peer: Peer, keys: Sequence[bytes] = (), *,
                 nonce: Callable[[int], bytes] = _secrets.token_bytes) -> None:
        if peer.kind not in KINDS:
            raise ValueError(f"unknown connection kind {peer.kind!r}")
        self.peer = peer
        self.keys = tuple(keys)
        self.nonce = _nonce(nonce)

    def hello(self) -> bytes:
        p = self.peer
        return msgpack.packb([_HELLO, LABEL, p.group, p.src, p.dst, self.nonce, p.kind], use_bin_type=True)

    def on_challenge(self, payload: bytes) -> bytes:
        reason = _refusal_reason(payload)
        if reason is not None:
            raise HandshakeRefused(reason)
        server_nonce, mac = _unpack(payload, _CHALLENGE, (bytes, bytes))
        if len(server_nonce) != NONCE_BYTES:
            raise HandshakeError("bad server nonce")
        if self.keys:
            if not _verifies(self.keys, mac, "server", self.peer, self.nonce, server_nonce):
                raise HandshakeError("the server did not prove the shared secret")
            proof = _mac(self.keys[0], "client", self.peer, self.nonce, server_nonce)
        else:
            if mac:
                raise HandshakeError("the server uses a secret and this node has none")
            proof = b""
        return msgpack.packb([_PROOF, proof], use_bin_type=True)


class ServerHandshake:
    """The listening side. ``on_hello(payload)`` -> the challenge to send (``accept(peer)``
    decides whether group and ids are served here); ``on_proof(payload)`` -> the ``Peer``."""

    def __init__(self, keys: Sequence[bytes] = (), accept: Callable[[Peer], str | None] = lambda p: None, *,
                 nonce: Callable[[int], bytes] = _secrets.token_bytes) -> None:
        self.keys = tuple(keys)
        self.accept = accept
        self.nonce = _nonce(nonce)
        self.peer: Peer | None = None
        self.client_nonce = b""

    def on_hello(self, payload: bytes) -> bytes:
        label, group, src, dst, client_nonce, kind = _unpack(payload, _HELLO, (str, str, str, str, bytes, str))
        if label != LABEL:
            raise HandshakeError(f"unsupported handshake {label!r}")
        if len(client_nonce) != NONCE_BYTES:
            raise HandshakeError("bad client nonce")
        if kind not in KINDS:
            raise HandshakeError(f"unknown connection kind {kind!r}")
        peer = Peer(group, src, dst, kind)
        refusal = self.accept(peer)
        if refusal is not None:
            raise HandshakeError(refusal)
        self.peer, self.client_nonce = peer, client_nonce
        mac = _mac(self.keys[0], "server", peer, client_nonce, self.nonce) if self.keys else b""
        return msgpack.packb([_CHALLENGE, self.nonce, mac], use_bin_type=True)

    def on_proof(self, payload: bytes) -> Peer:
        if self.peer is None:
            raise HandshakeError("proof before hello")
        (mac,) = _unpack(payload, _PROOF, (bytes,))
        if self.keys:
            if not _verifies(self.keys, mac, "client", self.peer, self.client_nonce, self.nonce):
                raise HandshakeError(f"{self.peer.src} did not prove the shared secret")
        elif mac:
            raise HandshakeError("the client uses a secret and this node has none")
        return self.peer


# -- the secret -------------------------------------------------------------------------------
class SecretFileError(ValueError):
    """The secret file cannot be read (the message names it and says why)."""


def load_secret(secret_file: str | None = None, environ: Mapping[str, str] = os.environ) -> tuple[bytes, ...]:
    """The shared keys: one a line from ``secret_file`` (the first signs, all verify), else
    ``DLEDGER_SECRET`` from ``environ``, else none (no authentication). Never a command-line
    value. Each key must be at least 16 bytes (``ValueError``); a file that cannot be read
    raises ``SecretFileError`` (a ``ValueError``) naming it."""
    if secret_file is not None:
        try:
            with open(secret_file, "rb") as f:
                keys = tuple(line.strip() for line in f.read().splitlines() if line.strip())
        except OSError as exc:
            raise SecretFileError(f"cannot read the secret file {secret_file}: {exc.strerror or exc}") from None
        if not keys:
            raise ValueError(f"secret file {secret_file} holds no key")
        where = f"secret file {secret_file}"
    elif environ.get(SECRET_ENV):
        keys = (environ[SECRET_ENV].strip().encode(),)
        where = SECRET_ENV
    else:
        return ()
    for key in keys:
        if len(key) < MIN_SECRET_BYTES:
            raise ValueError(f"a key in {where} has {len(key)} bytes; at least {MIN_SECRET_BYTES} are needed")
    return keys


# -- TLS --------------------------------------------------------------------------------------
def server_tls_context(cert_file: str, key_file: str, ca_file: str) -> ssl.SSLContext:
    """Mutual TLS, listening side: presents ``cert_file`` and requires a client certificate
    signed by ``ca_file``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    ctx.load_verify_locations(ca_file)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_tls_context(cert_file: str, key_file: str, ca_file: str) -> ssl.SSLContext:
    """Mutual TLS, connecting side: presents ``cert_file`` and requires a server certificate
    signed by ``ca_file``. Host names are not checked (peers are often addressed by IP); the
    cluster CA vouches for every member, and the handshake binds the node ids."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    ctx.load_verify_locations(ca_file)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


__all__ = ["CLIENT", "ClientHandshake", "HandshakeError", "HandshakeRefused", "KINDS", "LABEL", "PEER", "Peer",
           "SECRET_ENV", "SecretFileError", "ServerHandshake", "client_tls_context", "load_secret", "refusal",
           "server_tls_context"]
