"""Role firewall's nftables rules for a fleet of one gateway, one Prometheus host and three vLLM
nodes (the third runs two vLLM instances), and the gateway-less single node (the demo).

Real ansible-playbook on localhost, through thin test roles that carry the real roles'
defaults and vars: on each node, role vllm_service's publish.yml (the serving facts), then role
firewall's rules template, rendered for that node. The gateway's and the Prometheus host's
network facts are set by a module that returns them, as setup's would be. Each rendered file
must pass `nft -c -f`; loaded into a throwaway network namespace, its table must hold the ports
and sources of the inventory; and over a veth pair, TCP from the gateway's, the Prometheus
host's and the extra network's addresses reaches the guarded ports, from the other node's
does not, and a port it does not guard (SSH) stays open to every source. The demo: the real
role on a node with no gateway in the inventory leaves the ports open, says so and changes
nothing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from local_play import run_local_playbook

ROOT = Path(__file__).resolve().parents[3]
NETNS_TCP = Path(__file__).resolve().parents[1] / "netns_tcp.py"
NFT = shutil.which("nft") or "/usr/sbin/nft"
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
FACTS = {  # what setup's network subset reports (a subset of it)
    "fw-gw": {"all_ipv4_addresses": ["10.77.0.2", "127.0.0.1"],
              "all_ipv6_addresses": ["fd77::2", "fe80::2", "::1"]},
    "fw-mon": {"all_ipv4_addresses": ["10.77.0.3"], "all_ipv6_addresses": []},
}
EXTRA = ["10.77.9.0/24"]  # the controller's network (firewall_allow_extra)
NODE2_PORT = 9123  # node 2's vLLM port, from vllm_service_flags_extra; it has no status port
NODE3_STATUS_PORT = 9000  # node 3 runs two vLLM instances: ports 8000, 8001 and 9000, 9001
THIN_ROLES = {
    "vllm_service_publish": ("vllm_service", """
- ansible.builtin.include_role:
    name: instinct.vllm.stack
- ansible.builtin.include_role:
    name: instinct.vllm.fleet_pki_facts
- ansible.builtin.include_tasks: @ROOT@/roles/vllm_service/tasks/publish.yml
"""),
    "firewall_render": ("firewall", """
- ansible.builtin.template:
    src: @ROOT@/roles/firewall/templates/instinct-vllm.nft.j2
    dest: "@OUT@/{{ inventory_hostname }}.nft"
    mode: "0600"
  delegate_to: localhost
"""),
}
PLAYBOOK = """
- hosts: gateways:monitoring
  gather_facts: false
  tasks:
    - test_facts: {{facts: "{{{{ test_network_facts }}}}"}}
- hosts: vllm_nodes
  gather_facts: false
  roles: [{roles}/vllm_service_publish, {roles}/firewall_render]
"""
DEMO_PLAYBOOK = """
- hosts: vllm_nodes
  gather_facts: false
  roles: [instinct.vllm.firewall]
"""


def fleet_inventory() -> dict[str, Any]:
    node = {**LOCAL, "vllm_service_api_key": "k" * 32, "vllm_venv_python": "/opt/vllm/bin/python"}
    return {"all": {"children": {
        "gateways": {"hosts": {"fw-gw": {**LOCAL, "ansible_host": "192.0.2.1",
                                         "test_network_facts": FACTS["fw-gw"]}}},
        "monitoring": {"hosts": {"fw-mon": {**LOCAL, "test_network_facts": FACTS["fw-mon"]}}},
        "vllm_nodes": {"vars": {"firewall_allow_extra": EXTRA}, "hosts": {
            "fw-node1": {**node, "ansible_host": "10.77.0.11"},
            "fw-node2": {**node, "ansible_host": "10.77.0.12",
                         "vllm_service_flags_extra": f"--port={NODE2_PORT}",
                         "vllm_service_status_port": 0},
            "fw-node3": {**node, "ansible_host": "10.77.0.13", "vllm_service_instances": 2,
                         "vllm_service_status_port": NODE3_STATUS_PORT}}},
    }}}


def thin_role(directory: Path, name: str, real: str, tasks: str, out: Path) -> None:
    role = directory / name
    (role / "tasks").mkdir(parents=True)
    for part in ("defaults", "vars"):
        (role / part).symlink_to(ROOT / "roles" / real / part)
    (role / "tasks" / "main.yml").write_text(
        "---" + tasks.replace("@ROOT@", str(ROOT)).replace("@OUT@", str(out)))


FACTS_MODULE = """#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}})
module.exit_json(changed=False, ansible_facts=module.params["facts"])
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("firewall")
    roles, out = tmp / "roles", tmp / "out"
    out.mkdir()
    for name, (real, tasks) in THIN_ROLES.items():
        thin_role(roles, name, real, tasks, out)
    (tmp / "hosts.yml").write_text(yaml.safe_dump(fleet_inventory()))
    (tmp / "play.yml").write_text(PLAYBOOK.format(roles=roles))
    (tmp / "library").mkdir()
    (tmp / "library" / "test_facts.py").write_text(FACTS_MODULE)
    run = run_local_playbook(tmp / "play.yml", {}, inventory=str(tmp / "hosts.yml"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return out


def nft_available() -> bool:
    return Path(NFT).exists() and subprocess.run(
        ["unshare", "-rn", NFT, "list", "ruleset"], capture_output=True, check=False
    ).returncode == 0


needs_nft = pytest.mark.skipif(not nft_available(), reason="no nft, or no network namespace")


def loaded_sets(rules: Path) -> dict[str, list[str]]:
    """The table's sets, as nft lists them once the file is loaded in a throwaway namespace."""
    listed = subprocess.run(
        ["unshare", "-rn", "sh", "-c", f'"{NFT}" -f "{rules}" && "{NFT}" --json list ruleset'],
        check=True, capture_output=True, text=True).stdout
    sets = {}
    for entry in json.loads(listed)["nftables"]:
        if "set" in entry:
            assert entry["set"]["table"] == "instinct_vllm"
            sets[entry["set"]["name"]] = [
                e if not isinstance(e, dict) else f"{e['prefix']['addr']}/{e['prefix']['len']}"
                for e in entry["set"].get("elem", [])]
    return sets


def test_no_flush_and_only_its_own_table(rendered: Path) -> None:
    for rules in rendered.glob("*.nft"):
        text = rules.read_text()
        assert "flush" not in text
        assert set(re.findall(r"^table (\S+ \S+)", text, re.M)) == {"inet instinct_vllm"}


@needs_nft
@pytest.mark.parametrize("node", ["fw-node1", "fw-node2", "fw-node3"])
def test_nft_accepts_the_rules(rendered: Path, node: str) -> None:
    check = subprocess.run(["unshare", "-rn", NFT, "-c", "-f", str(rendered / f"{node}.nft")],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr


@needs_nft
@pytest.mark.parametrize(("node", "ports"), [
    ("fw-node1", [8000, 8001]),
    ("fw-node2", [NODE2_PORT]),
    # every instance's vLLM and status port
    ("fw-node3", [8000, 8001, NODE3_STATUS_PORT, NODE3_STATUS_PORT + 1])])
def test_the_table_guards_the_published_ports_for_the_inventory_sources(
        rendered: Path, node: str, ports: list[int]) -> None:
    assert loaded_sets(rendered / f"{node}.nft") == {
        "guarded_ports": ports,
        # the gateway's 10.77.0.2 and Prometheus' 10.77.0.3 (merged), firewall_allow_extra
        "allowed_ipv4": ["10.77.0.2/31", "10.77.9.0/24"],
        "allowed_ipv6": ["fd77::2"],  # the gateway's; not its link-local or loopback address
    }


@needs_nft
def test_tcp_over_a_veth_pair(rendered: Path, tmp_path: Path) -> None:
    """fw-node1's rules: the gateway, Prometheus and the controller's network reach 8000/8001,
    fw-node2 does not; SSH (22) is open to all."""
    if subprocess.run(["unshare", "-n", "true"], check=False).returncode != 0:
        pytest.skip("needs root for a veth pair between network namespaces")
    tries = [(src, dst, port)
             for src, dst in [("10.77.0.2", "10.77.0.11"), ("10.77.0.3", "10.77.0.11"),
                              ("10.77.9.5", "10.77.0.11"), ("fd77::2", "fd77::11"),
                              ("10.77.0.12", "10.77.0.11"), ("fd77::12", "fd77::11")]
             for port in (8000, 8001, 22)]
    cases = {"node": ["10.77.0.11", "10.77.9.1", "fd77::11"],
             "peer": ["10.77.0.2", "10.77.0.3", "10.77.0.12", "10.77.9.5", "fd77::2", "fd77::12"],
             "ports": [8000, 8001, 22], "tries": tries}
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    run = subprocess.run(["unshare", "-n", sys.executable, str(NETNS_TCP),
                          str(rendered / "fw-node1.nft"), str(tmp_path / "cases.json")],
                         capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode == 0, run.stderr
    got = dict(zip([f"{s}->{p}" for s, _d, p in tries], json.loads(run.stdout), strict=True))
    refused = {"10.77.0.12", "fd77::12"}  # fw-node2: neither a gateway nor a monitoring host
    expected = {f"{s}->{p}": "timeout" if s in refused and p != 22 else "open"
                for s, _d, p in tries}
    assert got == expected


def test_a_node_without_a_gateway_stays_open(tmp_path: Path) -> None:
    """The real role, on a single node with no gateway group (the demo): a warning, no change."""
    inventory = {"all": {"children": {"vllm_nodes": {"hosts": {
        "demo-node": {**LOCAL, "vllm_service_api_key": "k" * 32}}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(DEMO_PLAYBOOK)
    run = run_local_playbook(tmp_path / "play.yml", {}, inventory=str(tmp_path / "hosts.yml"),
                             flags=["--check"], env={"ANSIBLE_DISPLAY_SKIPPED_HOSTS": "false"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "TCP 8000, 8001 stay open to every source" in run.stdout
    assert "no host in group gateways" in run.stdout
    assert "changed=0" in run.stdout
    assert "Install nftables" not in run.stdout  # skipped: not shown
    assert "Write the table's rules" not in run.stdout
