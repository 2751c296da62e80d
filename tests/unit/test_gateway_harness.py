"""The loopback ports the gateway harness hands to the servers a test starts."""

from __future__ import annotations

import socket

from gateway_harness import free_port


def test_free_port_never_hands_out_a_port_twice() -> None:
    """2000 ports from the ephemeral range (28232 ports here) would repeat one by chance
    (birthday bound: near certain); two stand-in servers of one test must never share one."""
    ports = [free_port() for _count in range(2000)]
    assert len(set(ports)) == len(ports)


def test_a_free_port_can_be_bound() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))
