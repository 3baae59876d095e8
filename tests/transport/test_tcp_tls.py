"""Mutual TLS between DLedgerServers: certificates made for the test by the ``openssl``
command (skipped where it is not installed), a cluster that forms over TLS, and listeners
that refuse a plain-TCP client and a client whose certificate another CA signed."""

import asyncio
import shutil
import ssl
import subprocess

import pytest

from dledger.protocol import DLedgerResponseCode as Code
from dledger.transport.auth import Peer, client_tls_context

from transport.tcp_helpers import WAIT, TcpGroup, closed_by_peer, raw_connect

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d, name):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN={name}", "-days", "2", cwd=d)
    return d / f"{name}.pem", d / f"{name}.key"


def make_cert(d, name, ca):
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", ca[0].name, "-CAkey", ca[1].name,
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", cwd=d)
    return str(d / f"{name}.pem"), str(d / f"{name}.key")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, other_ca = make_ca(d, "cluster-ca"), make_ca(d, "other-ca")
    return {"ca": str(ca[0]), "node": make_cert(d, "node", ca), "stranger": make_cert(d, "stranger", other_ca)}


@pytest.fixture
def tls_group(tmp_path, pki):
    secret = tmp_path / "secret"
    secret.write_bytes(b"tls-and-a-secret-0123456789\n")
    cert, key = pki["node"]
    g = TcpGroup(tmp_path, store_type="memory", tls_cert_file=cert, tls_key_file=key, tls_ca_file=pki["ca"],
                 secret_file=str(secret)).start_all()
    yield g
    g.stop_all()


def test_a_cluster_forms_and_commits_over_mutual_tls(tls_group):
    lead = tls_group.leader()
    r = lead.append(b"over tls").result(WAIT)
    assert r.code == Code.SUCCESS and lead.get(r.index).body == b"over tls"
    net = lead._transport.network
    assert net.server_ssl is not None and net.client_ssl is not None


def test_a_plain_tcp_client_is_refused_by_a_tls_listener(tls_group):
    async def go():
        try:
            r, *_ = await raw_connect(tls_group.ports[0], Peer("t", "n1", "n0"))
        except (ConnectionError, asyncio.IncompleteReadError):
            return True
        return await closed_by_peer(r)

    assert asyncio.run(go())
    assert tls_group.leader().append(b"still serving").result(WAIT).code == Code.SUCCESS


def test_a_certificate_from_another_ca_is_refused(tls_group, pki):
    stranger = client_tls_context(*pki["stranger"], pki["ca"])

    async def go():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", tls_group.ports[0], ssl=stranger)
        except (ssl.SSLError, ConnectionError):
            return True                                # refused during the TLS handshake
        return await closed_by_peer(reader)

    assert asyncio.run(go())


def test_the_client_appends_and_reads_over_mutual_tls_and_a_stranger_certificate_is_refused(tls_group, pki):
    from dledger import ClusterUnavailableError, DLedgerClient

    tls_group.leader()
    cert, key = pki["node"]
    secret = b"tls-and-a-secret-0123456789"
    with DLedgerClient(tls_group.peers, "t", secret=secret, timeout_s=WAIT, tls=(cert, key, pki["ca"])) as c:
        r = c.append(b"client over tls")
        assert r.code == Code.SUCCESS and c.get(r.index).body == b"client over tls"
    s_cert, s_key = pki["stranger"]
    with DLedgerClient(tls_group.peers, "t", secret=secret, timeout_s=0.5, tls=(s_cert, s_key, pki["ca"])) as c:
        with pytest.raises(ClusterUnavailableError):
            c.append(b"stranger")
    with DLedgerClient(tls_group.peers, "t", secret=secret, timeout_s=0.5) as c:     # plain TCP
        with pytest.raises(ClusterUnavailableError):
            c.append(b"plain")
