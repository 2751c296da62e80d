"""playbooks/acceptance.yml's vllm_platform check, run for real on localhost against the stand-in
vLLM (tests/unit/fixtures/acceptance): role vllm's fact vllm_attention (its tasks/attention.yml)
gives the check the expected implementation and the environment that selects it. One run, one
inventory host per case; the reports say which kernel would run."""

from __future__ import annotations

import getpass
import json
import os
import sys
from typing import Any

import pytest
import yaml
from local_play import ROOT, run_local_playbook

FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "acceptance"
WITH_FLASH_ATTN = os.pathsep.join([str(FIXTURES / "fake_vllm"), str(FIXTURES / "fake_flash_attn")])
COMMON = {
    "ansible_connection": "local",
    "ansible_python_interpreter": sys.executable,
    "instinct_vllm_stack": "rocm-6.2.1",
    # role vllm's variable: its published fact vllm_venv_python is <venv>/bin/python (a venv
    # has that link), which the set_fact of role vllm_facts puts above inventory variables
    "vllm_venv_path": os.path.dirname(os.path.dirname(sys.executable)),
    "vllm_service_name": "instinct-vllm-test-no-such-unit",
    # the checks run as the service's user: here the login user, no groups, no become (the
    # become itself is tests/unit/test_acceptance_playbook.py's)
    "vllm_service_user": getpass.getuser(),
    "vllm_service_supplementary_groups": [],
    "ansible_become": False,
}
CASES: dict[str, dict[str, Any]] = {
    # CK flash-attention installed: the fact's VLLM_USE_TRITON_FLASH_ATTN=0 selects it
    "ck": {"vllm_source_ck_flash_attention": True, "path": WITH_FLASH_ATTN},
    # installed by the switch, but its package does not import on the node
    "ck_missing": {"vllm_source_ck_flash_attention": True, "path": str(FIXTURES / "fake_vllm")},
    # off: vLLM 0.6.6's default, Triton flash-attention, accepted
    "default": {"path": WITH_FLASH_ATTN},
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("acceptance-attention")
    hosts = {
        name: {
            **{k: v for k, v in case.items() if k != "path"},
            "vllm_service_environment": {"PYTHONPATH": case["path"], "FAKE_VLLM_PLATFORM": "ROCM"},
        }
        for name, case in CASES.items()
    }
    inventory = {"all": {"children": {"vllm_nodes": {"vars": COMMON, "hosts": hosts}}}}
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory))
    extra = {"acceptance_report_dir": str(tmp / "reports")}
    playbook = ROOT / "playbooks" / "acceptance.yml"
    done = run_local_playbook(playbook, extra, str(tmp / "hosts.yml"), ["--tags", "vllm_platform"])
    assert "acceptance failed on ck_missing" in done.stdout, done.stdout[-3000:]
    return {n: json.loads((tmp / "reports" / f"{n}.json").read_text()) for n in CASES}


@pytest.mark.parametrize(
    ("case", "status", "impl"),
    [("ck", "ok", "ck"), ("ck_missing", "failed", "naive"), ("default", "ok", "triton")],
)
def test_the_report_names_the_kernel_that_runs(
    reports: dict[str, dict[str, Any]], case: str, status: str, impl: str
) -> None:
    check = reports[case]["checks"]["vllm_platform"]
    assert check["status"] == status, check["reason"]
    assert check["detail"]["attention_impl"] == impl
    assert check["detail"]["attention_backend"] == "ROCM_FLASH"


def test_ck_expected_from_role_vllms_fact(reports: dict[str, dict[str, Any]]) -> None:
    ck, default = (reports[n]["checks"]["vllm_platform"]["detail"] for n in ("ck", "default"))
    assert ck["expected_attention"] == "ck" and default["expected_attention"] == "default"
    assert ck["env"] == {"VLLM_USE_TRITON_FLASH_ATTN": "0"}  # the fact's environment reached vLLM
    assert "VLLM_USE_TRITON_FLASH_ATTN" not in default["env"]
    missing = reports["ck_missing"]["checks"]["vllm_platform"]["reason"]
    assert "flash_attn does not import (ModuleNotFoundError" in missing
