"""mTLS from the gateway to the nodes: the real HAProxy with role gateway's haproxy.cfg
(fleet_pki_resolved.enabled) in front of a stand-in node on loopback that serves TLS and
requires a client certificate, as vLLM does with --ssl-cert-reqs 2 (uvicorn's ssl settings).

Checked: requests through the gateway reach the node whose certificate the fleet CA signed for
its inventory name (HAProxy verified it and presented its client certificate); a node whose
certificate another CA signed, or signed for another name, is DOWN and gets no request; a
client without a fleet certificate cannot talk to a node at all.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from gateway_harness import (
    NO_HAPROXY,
    TIMEOUT,
    Gateway,
    Node,
    QuietServer,
    node_handler,
    request,
    running_gateway,
    wait_for,
)

pytestmark = NO_HAPROXY


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class CA:
    """A fleet CA as role fleet_pki makes one (ECDSA P-256)."""

    def __init__(self, common_name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder().subject_name(_name(common_name))
            .issuer_name(_name(common_name)).public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(self.key, hashes.SHA256())
        )  # fmt: skip

    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, directory: Path, stem: str, names: list[str]) -> tuple[Path, Path]:
        """<stem>.pem and <stem>.pem.key: a certificate for ``names`` (DNS names or
        addresses), server and client usage, as role fleet_pki issues a node's."""
        key = ec.generate_private_key(ec.SECP256R1())
        alt: list[x509.GeneralName] = []
        for name in names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alt.append(x509.DNSName(name))
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder().subject_name(_name(names[0]))
            .issuer_name(self.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(self.key, hashes.SHA256())
        )  # fmt: skip
        crt, key_file = directory / f"{stem}.pem", directory / f"{stem}.pem.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(_pem_key(key))
        return crt, key_file


@contextlib.contextmanager
def tls_node(directory: Path, ca: CA, names: list[str]) -> Iterator[Node]:
    """The stand-in node behind TLS that requires a client certificate signed by ``ca``."""
    directory.mkdir(exist_ok=True)
    crt, key = ca.issue(directory, "node", names)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    context.load_verify_locations(cadata=ca.pem().decode())
    context.verify_mode = ssl.CERT_REQUIRED
    state = Node()
    server = QuietServer(("127.0.0.1", 0), node_handler(state))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT)


def fleet_files(directory: Path, fleet: CA) -> None:
    """What role gateway's tls.yml installs from role fleet_pki's files."""
    (directory / "fleet-ca.crt").write_bytes(fleet.pem())
    fleet.issue(directory, "fleet-client", ["gateway"])


MTLS = {"fleet_pki_resolved": {"enabled": True}}


def server_states(gw: Gateway) -> dict[str, str]:
    """Each server's status and last health check from `show stat` (empty until the socket)."""
    try:
        lines = gw.runtime("show stat").splitlines()
    except OSError:
        return {}
    header = lines[0].lstrip("# ").split(",")
    rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
    return {r["svname"]: f"{r['status']} {r['check_status']}" for r in rows
            if r.get("svname", "").startswith("node")}


def test_the_gateway_sends_only_to_nodes_it_verified(tmp_path):
    """node1: the fleet CA, its own name; node2: another CA; node3: the fleet CA, another
    name. Only node1 comes UP and gets the requests; node2 and node3 get none."""
    fleet = CA("instinct-vllm fleet CA")
    fleet_files(tmp_path, fleet)
    with contextlib.ExitStack() as stack:
        nodes = [stack.enter_context(tls_node(tmp_path / name, ca, [cert_name, "127.0.0.1"]))
                 for name, ca, cert_name in [("node1", fleet, "node1"),
                                             ("node2", CA("someone else"), "node2"),
                                             ("node3", fleet, "node-x")]]
        backends = [{"name": f"node{i}", "address": "127.0.0.1", "port": n.port}
                    for i, n in enumerate(nodes, 1)]
        with running_gateway(tmp_path, nodes[0].port, backends, MTLS) as gw:
            assert "ssl verify required ca-file" in gw.cfg and "verifyhost node1" in gw.cfg

            def settled() -> bool:
                gw.alive()
                states = server_states(gw)
                return [states.get(f"node{i}", "").split(" ")[0] for i in (1, 2, 3)] == [
                    "UP", "DOWN", "DOWN"]

            wait_for(settled, "node1 UP, node2 and node3 DOWN", timeout=3 * TIMEOUT)
            answers = [request(gw, "GET", "/v1/models", "other")[0] for _ in range(6)]
    assert answers == [200] * 6
    assert nodes[0].paths().count("/v1/models") == 6
    assert nodes[1].paths() == [] and nodes[2].paths() == []


def test_a_client_without_a_fleet_certificate_cannot_talk_to_the_node(tmp_path):
    fleet = CA("instinct-vllm fleet CA")
    with tls_node(tmp_path, fleet, ["node1", "127.0.0.1"]) as node:
        context = ssl.create_default_context(cadata=fleet.pem().decode())
        plain = socket.create_connection(("127.0.0.1", node.port), timeout=TIMEOUT)
        with pytest.raises(OSError), context.wrap_socket(plain, server_hostname="node1") as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: node1\r\n\r\n")
            if sock.recv(100) == b"":  # TLS 1.3: the refusal comes with the first read
                raise ConnectionError("closed without an answer")
        assert node.paths() == []
