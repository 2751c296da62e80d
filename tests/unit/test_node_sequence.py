"""One node sequence: site.yml and rolling_update.yml (role rollout) take a node through the
same roles, from role node, and neither names one of those roles itself (docs/gateway.md,
"Rolling update", step 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
ROLES = ROOT / "roles"
NODE_ROLES = ("preflight", "rocm", "vllm", "model", "firewall", "vllm_service")
INCLUDES = ("ansible.builtin.include_role", "ansible.builtin.import_role")
TASK_FILES = ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks")


def _tasks(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every task, blocks and rescues flattened, in order."""
    flat: list[dict[str, Any]] = []
    for task in tasks:
        flat.append(task)
        for key in ("block", "rescue", "always"):
            flat.extend(_tasks(task.get(key, [])))
    return flat


def _roles(tasks: list[dict[str, Any]]) -> list[str]:
    """(role, tasks_from) of each include_role / import_role, as "role" or "role:tasks_from"."""
    found = []
    for task in _tasks(tasks):
        for key in INCLUDES:
            if key in task:
                role = task[key]["name"].removeprefix("instinct.vllm.")
                entry = task[key].get("tasks_from")
                found.append(f"{role}:{entry}" if entry else role)
    return found


def _node_play(playbook: str) -> dict[str, Any]:
    return yaml.safe_load((PLAYBOOKS / playbook).read_text())[0]


def _node_tasks(entry: str) -> list[dict[str, Any]]:
    return yaml.safe_load((ROLES / "node" / "tasks" / entry).read_text())


def test_node_sequence_runs_every_role_and_the_contract_in_order() -> None:
    assert _roles(_node_tasks("stage.yml")) == [
        "preflight", "rocm", "vllm", "model", "vllm_service:publish", "vllm:contract",
        "firewall", "fleet_pki", "vllm_service:stage"]
    assert _roles(_node_tasks("switch.yml")) == ["vllm_service:switch"]
    assert [t["ansible.builtin.import_tasks"] for t in _node_tasks("main.yml")] == [
        "stage.yml", "switch.yml"]


def _site_tasks() -> list[dict[str, Any]]:
    return _node_play("site.yml")["tasks"]


def _rollout_tasks() -> list[dict[str, Any]]:
    gateways, pick, canary, rest = yaml.safe_load((PLAYBOOKS / "rolling_update.yml").read_text())
    # first the gateways publish their facts (gateway_resolved: the drain's runtime API, backend)
    assert [r["role"] for r in gateways["roles"]] == ["instinct.vllm.gateway_facts"]
    assert gateways["gather_facts"] is False and "tasks" not in gateways
    assert _roles(pick["tasks"]) == ["rollout:canary"]
    assert [r["role"] for r in canary["roles"]] == [r["role"] for r in rest["roles"]] == [
        "instinct.vllm.rollout"]
    assert canary["roles"][0]["rollout_canary"] is True and "rollout_canary" not in rest["roles"][0]
    assert (canary["hosts"], rest["hosts"]) == ("instinct_vllm_rollout_canary",
                                                "instinct_vllm_rollout_rest")
    tasks = ROLES / "rollout" / "tasks"  # main.yml and the staging it imports
    return [task for entry in ("main.yml", "stage.yml")
            for task in yaml.safe_load((tasks / entry).read_text())]


@pytest.mark.parametrize("where", [_site_tasks, _rollout_tasks], ids=["site.yml", "rollout"])
def test_both_include_the_node_sequence_and_name_no_node_role(where: Any) -> None:
    found = [r.split(":")[0] if r.startswith("node") else r for r in _roles(where())]
    entries = 1 if where is _site_tasks else 2  # the rollout: stage, then switch
    assert found.count("node") == entries, f"{where.__name__}: role node included {found}"
    # publishing the serving facts (vllm_service:publish) changes nothing on a node; the
    # rollout's reboot once drained is role rocm's own rule (rocm:pending_reboot: the reboot its
    # staging deferred), not a step of the node sequence
    allowed = {"vllm_service:publish"}
    if where is _rollout_tasks:
        allowed.add("rocm:pending_reboot")
    named = [r for r in found if r.split(":")[0] in NODE_ROLES and r not in allowed]
    assert not named, f"{where.__name__} runs {named} itself, outside the node sequence"
