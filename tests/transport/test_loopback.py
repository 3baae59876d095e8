import socket

from dledger.transport.loopback import free_ports


def test_free_ports_are_distinct_and_can_be_bound_at_once():
    ports = free_ports(5)
    assert len(set(ports)) == 5 and all(0 < p < 65536 for p in ports)
    socks = [socket.socket() for _ in ports]
    try:
        for s, p in zip(socks, ports):
            s.bind(("127.0.0.1", p))
    finally:
        for s in socks:
            s.close()
