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
import shutil
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.filter.gateway import gateway_nodes
from gateway_harness import (
    NO_HAPROXY,
    TIMEOUT,
    Gateway,
    Node,
    node_server,
    request,
    running_gateway,
    wait_for,
)
from tls_pki import Ca, mtls_server_context

pytestmark = NO_HAPROXY


@contextlib.contextmanager
def tls_node(directory: Path, ca: Ca, name: str) -> Iterator[Node]:
    """The stand-in node behind TLS, its certificate signed by ``ca`` for ``name`` and
    127.0.0.1, requiring a client certificate signed by ``ca``."""
    directory.mkdir(exist_ok=True)
    ca.directory = directory
    crt, key = ca.issue(name, dns=(name,), ips=("127.0.0.1",))
    with node_server(mtls_server_context(ca.path, crt, key)) as state:
        yield state


def fleet_files(directory: Path, fleet: Ca) -> None:
    """What role gateway's tls.yml installs from role fleet_pki's files."""
    shutil.copy(fleet.path, directory / "fleet-ca.crt")
    crt, key = fleet.issue("gateway", dns=(), ips=())
    shutil.copy(crt, directory / "fleet-client.pem")
    shutil.copy(key, directory / "fleet-client.pem.key")


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
    fleet = Ca(tmp_path, "fleet-root")
    fleet_files(tmp_path, fleet)
    other = Ca(tmp_path, "other-ca")
    with contextlib.ExitStack() as stack:
        nodes = [stack.enter_context(tls_node(tmp_path / name, ca, cert_name))
                 for name, ca, cert_name in [("node1", fleet, "node1"),
                                             ("node2", other, "node2"),
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
            answers = [request(gw, "GET", "/v1/models", "other")[0] for _request in range(6)]
    assert answers == [200] * 6
    assert nodes[0].paths().count("/v1/models") == 6
    assert nodes[1].paths() == [] and nodes[2].paths() == []


def test_every_instance_of_a_node_is_verified_against_the_hosts_name(tmp_path):
    """A node with two vLLM instances (vllm_service_instances: 2): its servers node1:0 and
    node1:1, as filter instinct.vllm.gateway_nodes names them, each present the node's
    certificate (issued for the inventory host node1). Both come UP and share the requests."""
    fleet = Ca(tmp_path, "fleet-root")
    fleet_files(tmp_path, fleet)
    with contextlib.ExitStack() as stack:
        nodes = [stack.enter_context(tls_node(tmp_path / f"node1-{i}", fleet, "node1"))
                 for i in (0, 1)]
        fact = {"port": nodes[0].port, "status_port": 0, "instance_count": 2,
                "instances": [{"index": i, "port": n.port, "status_port": 0}
                              for i, n in enumerate(nodes)]}
        backends = gateway_nodes(["node1"], {"node1": {"ansible_host": "127.0.0.1",
                                                       "vllm_service_resolved": fact}})
        assert [b["name"] for b in backends] == ["node1:0", "node1:1"]
        with running_gateway(tmp_path, nodes[0].port, backends, MTLS) as gw:
            assert "server node1:0 127.0.0.1:" in gw.cfg and "verifyhost node1:" not in gw.cfg

            def settled() -> bool:
                gw.alive()
                states = server_states(gw)
                return [states.get(f"node1:{i}", "").split(" ")[0] for i in (0, 1)] == [
                    "UP", "UP"]

            wait_for(settled, "node1:0 and node1:1 UP", timeout=3 * TIMEOUT)
            answers = [request(gw, "GET", "/v1/models", "other")[0] for _request in range(6)]
    assert answers == [200] * 6
    served = [n.paths().count("/v1/models") for n in nodes]
    assert sum(served) == 6 and min(served) > 0, served


def test_a_client_without_a_fleet_certificate_cannot_talk_to_the_node(tmp_path):
    fleet = Ca(tmp_path, "fleet-root")
    with tls_node(tmp_path, fleet, "node1") as node:
        context = ssl.create_default_context(cafile=fleet.path)
        plain = socket.create_connection(("127.0.0.1", node.port), timeout=TIMEOUT)
        with pytest.raises(OSError), context.wrap_socket(plain, server_hostname="node1") as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: node1\r\n\r\n")
            if sock.recv(100) == b"":  # TLS 1.3: the refusal comes with the first read
                raise ConnectionError("closed without an answer")
        assert node.paths() == []
