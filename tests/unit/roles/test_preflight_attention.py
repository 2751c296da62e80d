"""Role preflight's sliding-window rule, wired as a site's inventory sets it: role vllm's
vllm_source_ck_flash_attention and role vllm_service's vllm_service_environment and flags reach
the check through the role's defaults (preflight_ck_flash_attention,
preflight_service_environment, preflight_max_model_len: role vllm_service's published fact
vllm_service_resolved) and vars (_preflight_settings). One local play, one inventory host per
case; the role's own defaults and vars (include_role public), its filter over given host and
GPU facts."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from local_play import run_local_playbook

HOST = {
    "distribution": "Ubuntu",
    "distribution_version": "24.04",
    "kernel": "6.8.0-41-generic",
    "architecture": "x86_64",
}
GPUS = {"count": 8, "archs": ["gfx942"], "gpus": [], "driver": {}}
#: Mistral-7B-v0.1's window, served at the role's default context (32768 tokens)
COMMON = {
    "ansible_connection": "local",
    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
    "instinct_vllm_stack": "rocm-6.2.1",
    "preflight_gpu_facts": GPUS,
    "preflight_model_sliding_window": 4096,
    "vllm_service_flags": {"max-model-len": 32768},
}
FORCED = {"VLLM_USE_TRITON_FLASH_ATTN": "1"}
CASES: dict[str, dict[str, Any]] = {
    "ck_off": {},
    "ck_on": {"vllm_source_ck_flash_attention": True},
    "ck_on_zero": {
        "vllm_source_ck_flash_attention": True,
        "vllm_service_environment": {"VLLM_USE_TRITON_FLASH_ATTN": "0"},
    },
    "ck_on_forced": {"vllm_source_ck_flash_attention": True, "vllm_service_environment": FORCED},
    "ck_off_forced": {"vllm_service_environment": FORCED},
    # the extra flags, in another spelling, cap the context at the window: it never slides
    "ck_off_capped": {"vllm_service_flags_extra": {"max_model_len": 4096}},
}


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("preflight-attention")
    play = [{
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {"ansible.builtin.include_role": {
                "name": "instinct.vllm.vllm_service", "tasks_from": "publish", "public": True}},
            {"ansible.builtin.include_role": {
                "name": "instinct.vllm.preflight", "tasks_from": "assert.yml", "public": True}},
            {"ansible.builtin.copy": {
                "dest": f"{tmp}/{{{{ inventory_hostname }}}}.json", "mode": "0600",
                "content": "{{ instinct_vllm_stack_resolved | instinct.vllm.preflight_evaluate("
                           "host_facts, _preflight_gpus, _preflight_settings) | to_json }}"}},
        ],
    }]  # fmt: skip
    (tmp / "play.yml").write_text(yaml.safe_dump(play))
    inventory = {"all": {"vars": {**COMMON, "host_facts": HOST}, "hosts": CASES}}
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory))
    done = run_local_playbook(tmp / "play.yml", {}, str(tmp / "hosts.yml"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    found = {}
    for case in CASES:
        result = json.loads((tmp / f"{case}.json").read_text())
        [found[case]] = [c for c in result["checks"] if c["name"] == "sliding_window"]
    return found


@pytest.mark.parametrize(
    ("case", "accepted"),
    [
        ("ck_off", False),
        ("ck_on", True),
        ("ck_on_zero", True),
        ("ck_on_forced", False),
        ("ck_off_forced", False),
        ("ck_off_capped", True),
    ],
)
def test_a_sliding_window_model_needs_ck_installed_and_not_forced_off(
    checks: dict[str, dict[str, Any]], case: str, accepted: bool
) -> None:
    assert checks[case]["ok"] is accepted, checks[case]["msg"]


def test_the_refusal_names_the_variable_that_is_wrong(checks: dict[str, dict[str, Any]]) -> None:
    assert "here vllm_source_ck_flash_attention is false" in checks["ck_off"]["msg"]
    forced = checks["ck_on_forced"]["msg"]
    assert "here vllm_service_environment sets VLLM_USE_TRITON_FLASH_ATTN=1" in forced
    for case in ("ck_off", "ck_on_forced"):
        assert "set vllm_source_ck_flash_attention: true" in checks[case]["msg"]
        assert "VLLM_USE_TRITON_FLASH_ATTN out of vllm_service_environment" in checks[case]["msg"]
