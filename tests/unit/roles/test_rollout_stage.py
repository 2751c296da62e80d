"""Role rollout stages a change while the node serves, then drains and switches it
(docs/gateway.md, "Rolling update"): the task files' order, and a real run of the role on
localhost whose staging fails (preflight finds no GPU), which leaves the node in rotation and
its unit as it was."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
import yaml
from local_play import ROOT, run_local_playbook

ROLES = ROOT / "roles"
INCLUDE_ROLE = "ansible.builtin.include_role"
TASK_FILES = ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks")
NODE_ROLES = ("preflight", "rocm", "vllm", "model", "vllm_service")


def load(role: str, tasks: str) -> list[dict[str, Any]]:
    return yaml.safe_load((ROLES / role / "tasks" / tasks).read_text())


def steps(role: str, tasks: str) -> list[str]:
    """Each step of a task file, in order, blocks and imported task files followed (an include
    of a task file with a variable name is kept as its name): "role:entry" for an included
    role, "tasks:<file>" for an included task file, "gateway:<state>" for gateway_state.yml,
    "rescue:" before the steps of a rescue."""
    return _block(role, load(role, tasks))


def _block(role: str, tasks: list[dict[str, Any]]) -> list[str]:
    found: list[str] = []
    for task in tasks:
        if "block" in task:
            rescue = _block(role, task.get("rescue", []))
            found += [*_block(role, task["block"]), "rescue:", *rescue]
        elif INCLUDE_ROLE in task:
            include = task[INCLUDE_ROLE]
            name = include["name"].removeprefix("instinct.vllm.")
            found.append(f"{name}:{include.get('tasks_from', 'main')}")
        for key in TASK_FILES:
            if key in task:
                file = task[key] if isinstance(task[key], str) else task[key]["file"]
                if file == "gateway_state.yml":
                    found.append(f"gateway:{task['vars']['_rollout_state']}")
                elif "{{" in file:
                    found.append(f"tasks:{file}")
                else:
                    found += steps(role, file)
    return found


def test_the_rollout_stages_before_the_drain_and_switches_after() -> None:
    found = steps("rollout", "main.yml")
    assert found.index("node:stage") < found.index("gateway:drain") < found.index("node:switch")
    # the second switch: each further instance rolled alone (instinct_vllm_rollout_instances)
    assert found.count("node:stage") == 1 and found.count("node:switch") == 2
    assert "node:main" not in found
    assert steps("rollout", "instance.yml") == ["gateway:drain", "node:switch", "gateway:ready"]


def test_the_transformers_reference_is_taken_while_the_node_serves() -> None:
    """The gate fingerprint's reference of the new checkpoint is computed in the staging (the
    node in rotation); the gate after the switch reads the same cache file."""
    found = steps("rollout", "main.yml")
    assert found.index("node:stage") < found.index("fingerprint_gate:reference")
    assert found.index("fingerprint_gate:reference") < found.index("rescue:")
    assert found.index("fingerprint_gate:reference") < found.index("gateway:drain")
    ref = load("fingerprint_gate", "reference.yml")[1]["instinct.vllm.fingerprint"]
    gate = load("fingerprint_gate", "fingerprint.yml")[2]["instinct.vllm.fingerprint"]
    assert ref["reference_only"] is True
    assert ref["reference_cache"] == "{{ _fingerprint_gate_reference_cache }}"
    assert gate["reference_cache"].startswith("{{ _fingerprint_gate_reference_cache if")
    assert ref["reference_model_path"] == "{{ _fingerprint_gate_model_path }}"


def test_a_staging_failure_is_not_rescued_by_the_drain_maint_rescue() -> None:
    """The staging's own rescue only reports and stops: no gateway state, no rollback; the
    block that holds the node out (maint) starts at the drain, after the staging."""
    stage = steps("rollout", "stage.yml")
    assert "rescue:" in stage
    assert not [s for s in stage if s.startswith(("gateway:", "tasks:"))], stage
    main = steps("rollout", "main.yml")
    maint = main.index("gateway:maint")
    assert main.index("node:stage") < main.index("gateway:drain") < maint
    assert main.index("rescue:", main.index("node:stage") + 1) < maint


def test_node_stage_never_touches_the_unit_and_switch_only_does() -> None:
    stage, switch = steps("node", "stage.yml"), steps("node", "switch.yml")
    assert stage == ["preflight:main", "rocm:main", "vllm:main", "model:main",
                     "vllm_service:publish", "vllm:contract", "firewall:main", "fleet_pki:main",
                     "vllm_service:stage"]
    assert switch == ["vllm_service:switch"]
    assert steps("node", "main.yml") == stage + switch


def _imports(tasks: str) -> list[str]:
    return [t["ansible.builtin.import_tasks"] for t in load("vllm_service", tasks)]


def test_vllm_service_stage_checks_everything_and_writes_nothing_the_unit_reads() -> None:
    """stage writes the release's files into the staging directory only; switch puts them in
    place and restarts, after publishing the facts again and nothing else (the node is out of
    rotation meanwhile)."""
    stage, switch = _imports("stage.yml"), _imports("switch.yml")
    assert "check_flags.yml" in stage and stage[-1] == "stage_files.yml"
    assert not {"install.yml", "run.yml"} & set(stage)
    assert switch == ["publish.yml", "install.yml", "retire.yml", "run.yml"]
    staged = load("vllm_service", "stage_files.yml")
    writers = ("ansible.builtin.copy", "ansible.builtin.template")
    dests = [t[m]["dest"] for t in staged for m in writers if m in t]
    # the wrapper, the env file, the unit, and (mTLS) the CA with the node's certificate and key
    assert len(dests) == 5 and all(d.startswith("{{ _vllm_service_staged_dir }}/") for d in dests)
    assert not any("notify" in t for t in staged)
    # together they do what tasks/main.yml does, in its order
    assert stage[:1] == ["publish.yml"]
    assert _imports("main.yml") == stage + switch[1:]


def test_a_rocm_reboot_is_deferred_to_after_the_drain() -> None:
    """The staging runs role rocm with rocm_reboot_policy never; once drained, role rocm's own
    entry point pending_reboot reboots under the inventory's policy and timeout (no copy of
    them in role rollout)."""
    stage = load("rollout", "stage.yml")[0]["block"]
    include = next(t for t in stage if INCLUDE_ROLE in t)
    assert include["vars"]["rocm_reboot_policy"] == "never"
    main = steps("rollout", "main.yml")
    reboot = main.index("rocm:pending_reboot")
    assert main.index("gateway:drain") < reboot < main.index("node:switch")
    assert main.count("rocm:pending_reboot") == 1
    assert not (ROLES / "rollout" / "tasks" / "reboot.yml").exists()
    pending = load("rocm", "pending_reboot.yml")
    assert [t["ansible.builtin.import_tasks"] for t in pending] == ["reboot.yml"]
    assert pending[0]["vars"] == {"_rocm_reboot_phase": "pending", "_rocm_reboot_new": []}
    specs = yaml.safe_load((ROLES / "rocm" / "meta" / "argument_specs.yml").read_text())
    spec = specs["argument_specs"]
    assert set(spec["pending_reboot"]["options"]) == {"rocm_reboot_policy", "rocm_reboot_timeout"}
    assert all(spec["pending_reboot"]["options"][n] == spec["main"]["options"][n]
               for n in spec["pending_reboot"]["options"])


def _names(tasks: list[dict[str, Any]]) -> list[str]:
    found: list[str] = []
    for task in tasks:
        found.append(task.get("name", ""))
        for key in ("block", "rescue"):
            found += _names(task.get(key, []))
    return found


PLAY = """
- name: The rollout on a node whose staging fails
  hosts: vllm_nodes
  gather_facts: true
  roles:
    - role: instinct.vllm.rollout
"""


@pytest.fixture(scope="module")
def failed_staging(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Role rollout on localhost (a node with no GPU: preflight fails while staging), a gateway
    whose published admin socket does not exist (any state change there would fail), the unit
    a file."""
    tmp = tmp_path_factory.mktemp("rollout-stage")
    unit = tmp / "vllm.service"
    unit.write_text("[Service]\nExecStart=/opt/vllm/venv-old/bin/vllm serve /srv/models/r1\n")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = tmp / "hosts.json"
    inventory.write_text(json.dumps({"all": {"children": {
        "vllm_nodes": {"hosts": {"node1": local}},
        "gateways": {"hosts": {"gw1": {**local, "gateway_resolved": {
            "admin_socket": str(tmp / "none.sock"), "backend": "vllm", "port": 8443,
            "url": "https://gw1:8443", "metrics_port": 8405}}}},
    }}}))  # fmt: skip
    play = tmp / "rollout.yml"
    play.write_text(PLAY)
    resolved = {
        "name": "vllm", "unit": "vllm.service", "unit_file": str(unit),
        "env_file": str(tmp / "vllm.env"), "user": "vllm", "group": "vllm",
        "supplementary_groups": [], "timeout_start_sec": 3600, "venv": "/opt/vllm/venv-new",
        "python": "/opt/vllm/venv-new/bin/python", "model": "/srv/models/r2",
        "served_model_name": "m", "host": "127.0.0.1", "port": 18999, "status_port": 0,
        "url": "http://127.0.0.1:18999", "flags": {}, "argv": [], "instance_count": 1,
        "instances": [{"index": 0, "name": "vllm", "unit": "vllm.service",
                       "unit_file": str(unit), "port": 18999, "status_port": 0,
                       "url": "http://127.0.0.1:18999", "gpus": "",
                       "state_dir": "/var/lib/vllm"}],
    }  # fmt: skip
    variables = {
        "vllm_service_resolved": resolved, "vllm_service_api_key": "k" * 16,
        "instinct_vllm_release_dir": str(tmp / "release"),
        "preflight_gpu_facts": {"count": 0, "archs": []}, "preflight_disk_requirements": [],
    }  # fmt: skip
    before = unit.stat().st_mtime_ns, unit.read_text()
    run = run_local_playbook(
        play, variables, inventory=str(inventory), timeout=300,
        env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_JSON_INDENT": "0"},
    )  # fmt: skip
    report = json.loads(run.stdout)
    tasks = [t for p in report["plays"] for t in p["tasks"]]
    ran = [t["task"]["name"].split(" : ")[-1] for t in tasks if "node1" in t["hosts"]
           and not t["hosts"]["node1"].get("skipped")]  # fmt: skip
    return {"rc": run.returncode, "ran": ran, "tasks": tasks, "unit_before": before,
            "unit_after": (unit.stat().st_mtime_ns, unit.read_text()), "tmp": tmp,
            "stats": report["stats"]}  # fmt: skip


def test_a_failed_staging_stops_the_rollout_with_a_clear_message(failed_staging) -> None:
    assert failed_staging["rc"] != 0
    stop = [t["hosts"]["node1"] for t in failed_staging["tasks"] if "node1" in t["hosts"]
            and t["task"]["name"].endswith(" : Stop the rollout")]  # fmt: skip
    assert stop and stop[-1]["failed"], failed_staging["ran"][-10:]
    assert "failed staging at task" in stop[-1]["msg"]
    assert "not drained and its unit is unchanged" in stop[-1]["msg"]
    assert "Preflight found" in stop[-1]["msg"]  # the staging's own failure, named


def test_a_failed_staging_drains_nothing_and_leaves_the_unit(failed_staging) -> None:
    ran = failed_staging["ran"]
    assert not [t for t in ran if t.startswith("Set the node state at the gateway")], ran
    assert "Mark the node as changed by this rollout" not in ran
    assert failed_staging["unit_after"] == failed_staging["unit_before"]
    # the running release was kept as the last good one before staging
    kept = failed_staging["tmp"] / "release" / "last-good.service"
    assert kept.read_text() == failed_staging["unit_before"][1]
