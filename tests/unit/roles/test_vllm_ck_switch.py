"""Role vllm's vllm_source_ck_flash_attention: only a ROCm source build installs CK
flash-attention, so elsewhere the switch fails in tasks/assert.yml, before any change, with the
reason of the fact vllm_attention (tasks/attention.yml, run first as in tasks/main.yml). One
local play, one inventory host per stack; assert.yml only reads."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from local_play import run_local_playbook

PLAY = [{
    "hosts": "all",
    "gather_facts": False,
    "tasks": [
        {"ansible.builtin.include_role": {"name": "instinct.vllm.vllm", "tasks_from": t}}
        for t in ("attention.yml", "assert.yml")
    ],
}]  # fmt: skip
STACKS = {
    "rocm_source": "rocm-6.2.1",
    "rocm_wheel": "rocm-7.2.1",
    "cpu_wheel": "cpu",
    "cpu_target": "sandbox-rocm-6.2.1",
}


@pytest.fixture(scope="module")
def failures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """host -> the message it failed with ('' when it passed)."""
    tmp = tmp_path_factory.mktemp("vllm-ck-switch")
    (tmp / "play.yml").write_text(yaml.safe_dump(PLAY))
    common: dict[str, Any] = {
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "vllm_source_ck_flash_attention": True,
        "vllm_source_ck_flash_attention_spec": "/srv/wheels/flash_attn.whl",
    }
    hosts = {h: {"instinct_vllm_stack": s} for h, s in STACKS.items()}
    (tmp / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": common, "hosts": hosts}}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ANSIBLE_STDOUT_CALLBACK", "ansible.builtin.json")
        done = run_local_playbook(tmp / "play.yml", {}, str(tmp / "hosts.yml"))
    found = dict.fromkeys(STACKS, "")
    for task in json.loads(done.stdout)["plays"][0]["tasks"]:
        for host, result in task["hosts"].items():
            if result.get("failed"):
                found[host] = str(result.get("msg", ""))
    return found


def test_a_rocm_source_build_takes_the_switch(failures: dict[str, str]) -> None:
    assert failures["rocm_source"] == ""


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("rocm_wheel", "only the source method installs CK flash-attention, not method wheel"),
        ("cpu_wheel", "CK flash-attention is a ROCm kernel and stack cpu has no ROCm"),
        ("cpu_target", "stack sandbox-rocm-6.2.1 has no ROCm"),
    ],
)
def test_elsewhere_the_switch_fails_naming_why(
    failures: dict[str, str], host: str, why: str
) -> None:
    assert failures[host].startswith("vllm_source_ck_flash_attention is true, but ")
    assert why in failures[host]
