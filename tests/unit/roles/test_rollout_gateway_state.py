"""Role rollout's gateway_state.yml against the real HAProxy of role gateway: a node's admin
state (maint, ready, drain) is set for every HAProxy server of the node, one per vLLM instance.

The gateway (tests/unit/gateway_harness.py) serves node1, which runs two vLLM instances (its
servers node1:0 and node1:1, as filter instinct.vllm.gateway_nodes names them from the fact
role vllm_service publishes), and node2, whose fact has no instances (an older fact: one
server, named after the host). Real ansible-playbook on localhost runs the task file on one
node with the role's defaults and vars; the module gateway_server, delegated to the gateway,
talks to its admin socket. Then `show stat` must show every server of that node, and none of
the other node's, in the state.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
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
from local_play import ROOT, run_local_playbook

pytestmark = NO_HAPROXY
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
PLAYBOOK = """
- hosts: "{{ node }}"
  gather_facts: false
  vars_files:
    - "{{ root }}/roles/rollout/defaults/main.yml"
    - "{{ root }}/roles/rollout/vars/main.yml"
  tasks:
    - ansible.builtin.include_tasks: "{{ root }}/roles/rollout/tasks/gateway_state.yml"
      vars:
        _rollout_state: "{{ state }}"
"""


def two_instances(ports: list[int]) -> dict[str, Any]:
    """vllm_service_resolved of a node with one instance per port (no agent check)."""
    return {"port": ports[0], "status_port": 0, "instance_count": len(ports),
            "instances": [{"index": i, "name": f"vllm@{i}", "unit": f"vllm@{i}.service",
                           "port": port, "status_port": 0} for i, port in enumerate(ports)]}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """The running gateway in front of node1 (two instances) and node2 (an older fact), the
    stand-in servers, and the inventory of the gateway and the two nodes."""
    directory = tmp_path_factory.mktemp("rollout-gateway-state")
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(node_server()) for _node in range(3)]
        ports = [server.port for server in servers]
        nodes = {
            "node1": {**LOCAL, "ansible_host": "127.0.0.1",
                      "vllm_service_resolved": two_instances(ports[:2])},
            "node2": {**LOCAL, "ansible_host": "127.0.0.1",
                      "vllm_service_resolved": {"port": ports[2], "status_port": 0}},
        }
        backends = gateway_nodes(list(nodes), nodes)
        gw = stack.enter_context(running_gateway(directory, ports[0], backends))
        inventory = {"all": {"children": {
            "gateways": {"hosts": {"gw1": {**LOCAL, "gateway_resolved": {
                "admin_socket": str(directory / "admin.sock"), "backend": "vllm"}}}},
            "vllm_nodes": {"hosts": nodes},
        }}}
        (directory / "hosts.yml").write_text(yaml.safe_dump(inventory))
        (directory / "play.yml").write_text(PLAYBOOK)
        wait_for(lambda: set(states(gw).values()) == {"UP"} and len(states(gw)) == 3,
                 "node1:0, node1:1 and node2 UP", timeout=3 * TIMEOUT)
        yield Fleet(gw, directory, servers)


@dataclass
class Fleet:
    gw: Gateway
    dir: Path
    servers: list[Node]  # node1:0, node1:1, node2


def states(gw: Gateway) -> dict[str, str]:
    """Each server's status in `show stat` (empty until the socket answers)."""
    gw.alive()
    try:
        lines = gw.runtime("show stat").splitlines()
    except OSError:
        return {}
    header = lines[0].lstrip("# ").split(",")
    rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
    return {r["svname"]: r["status"] for r in rows if r.get("svname", "").startswith("node")}


def set_state(directory: Path, node: str, state: str, **extra: object) -> str:
    run = run_local_playbook(directory / "play.yml",
                             {"root": str(ROOT), "node": node, "state": state, **extra},
                             inventory=str(directory / "hosts.yml"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return run.stdout


def test_every_instance_of_the_node_changes_state_and_no_other_server(fleet: Fleet) -> None:
    gw, directory = fleet.gw, fleet.dir
    set_state(directory, "node1", "maint")
    assert states(gw) == {"node1:0": "MAINT", "node1:1": "MAINT", "node2": "UP"}
    set_state(directory, "node1", "ready")  # waits until the health check sees them UP
    assert states(gw) == {"node1:0": "UP", "node1:1": "UP", "node2": "UP"}
    out = set_state(directory, "node1", "drain")
    assert states(gw) == {"node1:0": "DRAIN", "node1:1": "DRAIN", "node2": "UP"}
    for server in ("node1:0", "node1:1"):  # the report names the gateway and each server
        assert f"gw1, server {server}: drain UP -> DRAIN, in flight 0, waited" in out
    set_state(directory, "node1", "ready")
    assert states(gw) == {"node1:0": "UP", "node1:1": "UP", "node2": "UP"}


def test_a_node_whose_fact_has_no_instances_is_its_one_server(fleet: Fleet) -> None:
    gw, directory = fleet.gw, fleet.dir
    set_state(directory, "node2", "maint")
    assert states(gw) == {"node1:0": "UP", "node1:1": "UP", "node2": "MAINT"}
    set_state(directory, "node2", "ready")
    assert states(gw) == {"node1:0": "UP", "node1:1": "UP", "node2": "UP"}


def test_a_drain_that_times_out_names_the_servers_still_busy(fleet: Fleet) -> None:
    """A request held on one of node1's instances outlives instinct_vllm_drain_timeout (1 s,
    action proceed): the warning counts it and names the gateway and that server."""
    gw, directory = fleet.gw, fleet.dir
    set_state(directory, "node2", "maint")  # the request goes to an instance of node1
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(request, gw, "GET", "/v1/hold", "other")
        wait_for(lambda: sum(s.held_now() for s in fleet.servers[:2]) == 1, "the request held")
        busy = next(f"node1:{i}" for i in (0, 1) if fleet.servers[i].held_now() == 1)
        try:
            out = set_state(directory, "node1", "drain", instinct_vllm_drain_timeout=1)
        finally:
            for server in fleet.servers:
                server.release.set()
        assert held.result(TIMEOUT)[0] == 200
    for server in fleet.servers:
        server.release.clear()
    assert f"node1: still 1 request(s) in flight (gw1, server {busy}) after" in out
    set_state(directory, "node1", "ready")
    set_state(directory, "node2", "ready")
    assert states(gw) == {"node1:0": "UP", "node1:1": "UP", "node2": "UP"}
