"""One node sequence: site.yml and rolling_update.yml take a node through the same roles,
from playbooks/tasks/node.yml, and neither names one of those roles itself (docs/gateway.md,
"Rolling update", step 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
NODE_ROLES = ("preflight", "rocm", "vllm", "model", "vllm_service")
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


def test_node_sequence_runs_every_role_and_the_contract_in_order() -> None:
    sequence = yaml.safe_load((PLAYBOOKS / "tasks" / "node.yml").read_text())
    assert _roles(sequence) == [
        "preflight", "rocm", "vllm", "model", "vllm_service:publish", "vllm:contract",
        "vllm_service"]


@pytest.mark.parametrize("playbook", ["site.yml", "rolling_update.yml"])
def test_playbook_imports_the_node_sequence_and_names_no_node_role(playbook: str) -> None:
    tasks = _tasks(_node_play(playbook)["tasks"])
    imported = [t[k] for t in tasks for k in TASK_FILES if k in t]
    assert imported.count("tasks/node.yml") == 1, f"{playbook} does not import tasks/node.yml once"
    # publishing the serving facts (vllm_service:publish) changes nothing on a node
    named = [r for r in _roles(tasks)
             if r.split(":")[0] in NODE_ROLES and r != "vllm_service:publish"]
    assert not named, f"{playbook} runs {named} itself, outside the node sequence"
