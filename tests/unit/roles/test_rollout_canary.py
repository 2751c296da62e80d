"""The canary of playbooks/rolling_update.yml, run for real on local hosts: its canary play (role
rollout, entry point canary) puts the first instinct_vllm_canary nodes, in inventory order, into
the canary group and the rest into the other; the canary's play and the rest's keep the
playbook's serial and max_fail_percentage, so a canary that fails ends the run before any
other node is touched. The roll itself is stood in for by a task that records the host (and
fails where asked)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from local_play import ROOT, run_local_playbook

NODES = ["n1", "n2", "n3"]


def playbook(tmp: Path) -> Path:
    plays = yaml.safe_load((ROOT / "playbooks" / "rolling_update.yml").read_text())
    gateways, pick, canary, rest = plays
    which = "{{ 'canary' if rollout_canary | default(false) else 'rest' }}"
    record = {"ansible.builtin.lineinfile": {
        "path": str(tmp / "rolled.txt"), "create": True, "mode": "0600",
        "line": "{{ inventory_hostname }} " + which}}
    fail = {"ansible.builtin.fail": {"msg": "gate failed"},
            "when": "inventory_hostname in (fail_on | default([]))"}
    plays = [gateways, pick]  # no gateway in this inventory: the first play has no host
    for play in (canary, rest):
        params = {k: v for k, v in play["roles"][0].items() if k != "role"}
        plays.append({**{k: v for k, v in play.items() if k != "roles"}, "become": False,
                      "gather_facts": False, "vars": params, "tasks": [record, fail]})
    path = tmp / "rolling.yml"
    path.write_text(yaml.safe_dump(plays, sort_keys=False))
    return path


def roll(tmp_path: Path, nodes: list[str] | None = None,
         **extra: object) -> tuple[int, list[str], str]:
    nodes = NODES if nodes is None else nodes
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
             "vllm_service_api_key": "k" * 32, "vllm_venv_python": "/opt/vllm/venv/bin/python"}
    inventory = {"all": {"children": {"vllm_nodes": {"hosts": {n: local for n in nodes}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    run = run_local_playbook(playbook(tmp_path), {**extra}, str(tmp_path / "hosts.yml"))
    rolled = tmp_path / "rolled.txt"
    lines = rolled.read_text().splitlines() if rolled.exists() else []
    return run.returncode, lines, run.stdout + run.stderr


@pytest.mark.parametrize(("canary", "first"), [(1, ["n1"]), (2, ["n1", "n2"]), (0, [])])
def test_the_first_nodes_roll_first_as_the_canary(tmp_path, canary, first) -> None:
    rc, lines, out = roll(tmp_path, instinct_vllm_canary=canary)
    assert rc == 0, out[-3000:]
    assert sorted(lines) == sorted([f"{n} canary" for n in first]
                                   + [f"{n} rest" for n in NODES if n not in first])
    assert [line.split()[0] for line in lines[:len(first)]] == first  # the canary before the rest


def test_the_default_canary_is_one_node(tmp_path) -> None:
    rc, lines, out = roll(tmp_path)
    assert rc == 0, out[-3000:]
    assert lines[0] == "n1 canary" and [line.endswith("rest") for line in lines[1:]] == [True] * 2


def test_a_failed_canary_stops_the_rollout_before_the_rest(tmp_path) -> None:
    rc, lines, out = roll(tmp_path, fail_on=["n1"])
    assert rc != 0 and lines == ["n1 canary"], out[-3000:]


def test_a_failed_batch_of_the_rest_stops_the_next_batches(tmp_path) -> None:
    rc, lines, out = roll(tmp_path, fail_on=["n2"])
    assert rc != 0 and lines == ["n1 canary", "n2 rest"], out[-3000:]


def test_every_node_rolls_in_inventory_order(tmp_path) -> None:
    # the groups keep the inventory's order, not the order in which the hosts answered the split
    nodes = [f"m{i:02d}" for i in range(12, 0, -1)]  # not sorted: inventory order is not by name
    rc, lines, out = roll(tmp_path, nodes, instinct_vllm_canary=3)
    assert rc == 0, out[-3000:]
    assert [line.split()[0] for line in lines] == nodes


def test_a_negative_canary_fails_naming_the_variable(tmp_path) -> None:
    rc, lines, out = roll(tmp_path, instinct_vllm_canary=-1)
    assert rc != 0 and not lines
    assert "instinct_vllm_canary" in out, out[-3000:]
