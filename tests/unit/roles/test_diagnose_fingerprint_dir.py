"""Role diagnose reads the fingerprint directory role fingerprint_gate writes to from the fact
that role publishes (fingerprint_gate_resolved, through the dependency fingerprint_gate_facts),
not from a copy of its default."""

from __future__ import annotations

from pathlib import Path

import yaml

ROLES = Path(__file__).resolve().parents[3] / "roles"


def _yaml(*parts: str) -> object:
    return yaml.safe_load(ROLES.joinpath(*parts).read_text())


def test_diagnose_defaults_to_the_fingerprint_gates_published_directory() -> None:
    diagnose = _yaml("diagnose", "defaults", "main.yml")
    assert diagnose["diagnose_fingerprint_dir"] == "{{ fingerprint_gate_resolved.baseline_dir }}"
    deps = [d["role"] for d in _yaml("diagnose", "meta", "main.yml")["dependencies"]]
    assert "instinct.vllm.fingerprint_gate_facts" in deps


def test_fingerprint_gate_publishes_where_it_keeps_the_records() -> None:
    facts = _yaml("fingerprint_gate", "tasks", "facts.yml")[0]["ansible.builtin.set_fact"]
    resolved = facts["fingerprint_gate_resolved"]
    assert resolved["baseline_dir"] == "{{ instinct_vllm_fingerprint_baseline_dir }}"
    # publish.yml keeps each node's last fingerprint there (role diagnose's nodes/<host>.json)
    assert resolved["nodes_dir"] == "{{ instinct_vllm_fingerprint_baseline_dir }}/nodes"
    include = _yaml("fingerprint_gate_facts", "tasks", "main.yml")[0]
    assert include["ansible.builtin.include_role"] == {
        "name": "instinct.vllm.fingerprint_gate", "tasks_from": "facts", "public": True}
    tasks = _yaml("fingerprint_gate", "tasks", "main.yml")
    main = [t["ansible.builtin.import_tasks"] for t in tasks]
    assert main[0] == "facts.yml"
