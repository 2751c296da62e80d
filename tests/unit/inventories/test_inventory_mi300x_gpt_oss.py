"""inventories/mi300x-gpt-oss resolves to the job it exists for: OpenAI's gpt-oss-120b served as
it is published, on stack rocm-7.2.3, eight engines of one GPU each per node, with the flags of
vLLM's MI300X recipe that the stack's traps leave standing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.instinct.vllm.plugins.filter.service_instances import service_instances
from ansible_collections.instinct.vllm.plugins.filter.vllm_args import vllm_flags
from ansible_collections.instinct.vllm.plugins.plugin_utils import preflight as pf
from ansible_collections.instinct.vllm.plugins.plugin_utils import stack_matrix as sm

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = ROOT / "inventories" / "mi300x-gpt-oss"
HOSTS = ("mi300x-01", "mi300x-02")
EIGHT_MI300X = {"count": 8, "archs": ["gfx942"], "gpus": [], "problems": []}
NODE = {"distribution": "Ubuntu", "distribution_version": "24.04", "kernel": "6.8.0-41-generic",
        "architecture": "x86_64", "memtotal_mb": 2 * 1024 * 1024, "mounts": []}


@pytest.fixture(scope="module")
def hostvars() -> dict[str, Any]:
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run([str(bin_dir / "ansible-inventory"), "-i", str(INVENTORY), "--list"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
                         check=False)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)["_meta"]["hostvars"]


def test_every_node_serves_the_native_checkpoint_on_the_rocm_7_stack(hostvars) -> None:
    assert sorted(hostvars) == sorted(HOSTS)
    for host in HOSTS:
        hv = hostvars[host]
        assert hv["instinct_vllm_stack"] == "rocm-7.2.3"
        assert hv["model_source"] == "huggingface"
        assert hv["model_hf_repo"] == "openai/gpt-oss-120b"
        assert "model_convert_profile" not in hv  # auto: a native checkpoint is not converted
        # served where role model keeps a native checkpoint (model_root/model_name-src)
        root = yaml.safe_load((ROOT / "roles/model/defaults/main.yml").read_text())["model_root"]
        served = f"{root}/{hv['model_name']}-src"
        assert hv["vllm_service_model"].endswith(f"default('{served}') }}}}")
        stack = sm.get_stack(hv["instinct_vllm_stack"])
        assert hv["preflight_model_architecture"] in stack["model_architectures"]


def settings(hv: dict[str, Any], **over: Any) -> dict[str, Any]:
    return {"tensor_parallel_size": hv["vllm_service_flags"]["tensor-parallel-size"],
            "instances": hv["vllm_service_instances"],
            "num_attention_heads": hv["preflight_model_num_attention_heads"],
            "model_architecture": hv["preflight_model_architecture"], **over}


def checks(result: dict[str, Any], name: str) -> list[str]:
    return [c["msg"] for c in result["checks"] if c["name"] == name and c["level"] == "error"]


def test_eight_engines_of_one_gpu_fill_the_node(hostvars) -> None:
    """Preflight's own rules: instances x tensor-parallel-size is the node's GPU count, the
    size divides the heads, the architecture is the stack's."""
    hv = hostvars[HOSTS[0]]
    assert hv["vllm_service_instances"] == hv["preflight_gpu_count"] == 8
    stack = sm.get_stack(hv["instinct_vllm_stack"])
    result = pf.evaluate(stack, NODE, EIGHT_MI300X, settings(hv))
    assert checks(result, "tensor_parallel") == [] and checks(result, "model_architecture") == []
    short = pf.evaluate(stack, NODE, EIGHT_MI300X, settings(hv, instances=4))
    assert checks(short, "tensor_parallel")  # the same rule refuses four engines of one GPU


def test_each_engine_has_its_own_ports(hostvars) -> None:
    hv = hostvars[HOSTS[0]]
    instances = service_instances("vllm", hv["vllm_service_instances"], hv["vllm_service_port"],
                                  hv["vllm_service_status_port"], "/var/lib/vllm", 1)
    ports = [i["port"] for i in instances]
    status = [i["status_port"] for i in instances]
    assert ports == list(range(8000, 8008)) and not set(ports) & set(status)
    assert [i["gpus"] for i in instances] == [str(n) for n in range(8)]


def test_the_recipes_flags_agree_with_the_stacks_service_needs(hostvars) -> None:
    """What the role asserts: no flag the stack forces is set otherwise, gpu-memory-utilization
    is not above the stack's cap, and the recipe's names are vLLM's flags (normalised)."""
    hv = hostvars[HOSTS[0]]
    service = sm.get_stack(hv["instinct_vllm_stack"])["vllm"]["service"]
    flags = vllm_flags(hv["vllm_service_flags"])
    for name, value in vllm_flags(service["flags"]).items():
        assert flags.get(name, value) == value, name
    assert float(flags.get("gpu-memory-utilization", 0)) <= service["gpu_memory_utilization_max"]
    assert flags["attention-backend"] == "ROCM_AITER_UNIFIED_ATTN"
    assert flags["block-size"] == 64 and flags["max-num-batched-tokens"] == 8192
    env = hv["vllm_service_environment"]
    assert env == {"VLLM_ROCM_USE_AITER": "1", "AMDGCN_USE_BUFFER_OPS": "0"}
    assert not {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"} & set(env)
