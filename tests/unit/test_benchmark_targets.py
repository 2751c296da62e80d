"""Role benchmark's gateway target, from its own defaults and vars: the first host of the
gateway group (instinct_vllm_gateway_group, default gateways, as gateway.yml and
rolling_update.yml) gives the URL it publishes (role gateway's gateway_resolved, published by
playbooks/benchmark.yml's first play, role gateway_facts) and the first clear client key;
without the group there is no gateway run and the nodes' key stays the default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from local_play import ROOT, run_local_playbook

WANTED = ["_benchmark_gateways", "benchmark_gateway_url", "benchmark_gateway_api_key",
          "benchmark_api_key", "instinct_vllm_gateway_group"]  # fmt: skip
INVENTORY = {
    "all": {
        "children": {
            "vllm_nodes": {"hosts": {"node1": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}, "vars": {
                "vllm_service_api_key": "node-key"}},
            "GROUP": {"hosts": {"gw1": {
                "ansible_host": "192.0.2.10",
                "gateway_port": 9443,
                "gateway_api_keys": [{"name": "hashed", "key_sha256": "ab" * 32},
                                     {"name": "clear", "key": "client-key"}],
            }}},
        }
    }
}  # fmt: skip


def targets(tmp_path: Path, group: str, extra: dict[str, Any]) -> dict[str, Any]:
    role = ROOT / "roles" / "benchmark"
    variables = {**yaml.safe_load((role / "defaults" / "main.yml").read_text()),
                 **yaml.safe_load((role / "vars" / "main.yml").read_text())}
    out = tmp_path / "targets.json"
    # playbooks/benchmark.yml's first play: the gateways publish their facts
    publish = yaml.safe_load((ROOT / "playbooks" / "benchmark.yml").read_text())[0]
    assert publish["roles"] == [{"role": "instinct.vllm.gateway_facts"}]
    probe = [publish, {
        "name": "role benchmark's target variables",
        "hosts": "vllm_nodes",
        "gather_facts": False,
        "vars": {k: variables[k] for k in WANTED},
        "tasks": [{"ansible.builtin.copy": {
            "dest": str(out), "mode": "0600",
            "content": "{{ {'url': benchmark_gateway_url | trim, 'key': benchmark_gateway_api_key"
                       " | trim} | to_json }}"}}],
    }]  # fmt: skip
    (tmp_path / "probe.yml").write_text(yaml.safe_dump(probe))
    inventory = json.loads(json.dumps(INVENTORY).replace("GROUP", group))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    result = run_local_playbook(tmp_path / "probe.yml", extra, str(tmp_path / "hosts.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    ("group", "extra"), [("gateways", {}), ("edge", {"instinct_vllm_gateway_group": "edge"})]
)
def test_the_gateway_group_gives_url_and_clear_key(tmp_path, group, extra) -> None:
    assert targets(tmp_path, group, extra) == {
        "url": "https://192.0.2.10:9443",
        "key": "client-key",
    }


def test_no_gateway_group_no_gateway_run(tmp_path) -> None:
    # the play's group is not the one gateway.yml would use: no gateway run
    assert targets(tmp_path, "gateway", {}) == {"url": "", "key": "node-key"}
