"""Preflight checks (plugin_utils/preflight.py) with GPU facts built from real MI300X outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils._gpu_facts import collect as gf
from ansible_collections.instinct.vllm.plugins.plugin_utils import preflight as pf
from ansible_collections.instinct.vllm.plugins.plugin_utils import stack_matrix as sm

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "instinct"
GIB = 1024**3


def gpu_facts_8x_mi300x(tmp_path: Path) -> dict[str, Any]:
    outputs = {
        "lspci": (FIX / "lspci_grep_mi300_8gpu.txt").read_text(),
        "rocminfo": (FIX / "rocminfo_mi300x_8gpu_xeon8470.txt").read_text(),
    }

    def run(argv: list[str]) -> tuple[int, str, str]:
        return 0, outputs[Path(argv[0]).name], ""

    tools = {key: None for key in gf.TOOLS} | {
        "lspci": "/usr/bin/lspci",
        "rocminfo": "/opt/rocm/bin/rocminfo",
    }
    return gf.collect(
        tools,
        run,
        sys_module_dir=str(tmp_path),
        modprobe_dir=str(tmp_path),
        dev_dir=str(tmp_path),
        rocm_path=str(tmp_path),
    )


NO_GPUS: dict[str, Any] = {
    "count": 0,
    "archs": [],
    "gpus": [],
    "problems": [],
    "pci": {"status": "ok"},
    "rocminfo": {"status": "not_installed"},
    "driver": {"blacklisted_in": []},
}


def host(**over: Any) -> dict[str, Any]:
    facts = {
        "distribution": "Ubuntu",
        "distribution_version": "24.04",
        "kernel": "6.8.0-41-generic",
        "architecture": "x86_64",
        "memtotal_mb": 2 * 1024 * 1024,
        "mounts": [
            {"mount": "/", "size_available": 100 * GIB},
            {"mount": "/srv", "size_available": 3000 * GIB},
        ],
    }
    facts.update(over)
    return facts


def settings(**over: Any) -> dict[str, Any]:
    base = {
        "disk_requirements": [
            {"path": "/opt", "min_free_gib": 50, "purpose": "build"},
            {"path": "/srv/models", "min_free_gib": 140, "purpose": "model"},
        ],
        "min_memory_gib": 32,
        "gpu_count": None,
        "tensor_parallel_size": 8,
        "num_attention_heads": 64,
        "model_architecture": "LlamaForCausalLM",
        "secure_boot": "disabled",
        "secure_boot_policy": "warn",
    }
    base.update(over)
    return base


@pytest.fixture
def gpus(tmp_path: Path) -> dict[str, Any]:
    return gpu_facts_8x_mi300x(tmp_path)


def errors_of(result: dict[str, Any], name: str) -> list[str]:
    return [c["msg"] for c in result["checks"] if c["name"] == name and c["level"] == "error"]


def test_good_mi300x_node_passes(gpus: dict[str, Any]) -> None:
    result = pf.evaluate(sm.get_stack("rocm-6.2.1"), host(), gpus, settings())
    assert result["ok"], result["errors"]
    assert result["errors"] == [] and result["warnings"] == []
    assert {c["name"] for c in result["checks"]} >= {
        "os",
        "cpu_arch",
        "memory",
        "disk:/opt",
        "disk:/srv/models",
        "gpu_count",
        "gpu_arch",
        "gpu_vram",
        "tensor_parallel",
        "model_architecture",
        "amdgpu_blacklist",
        "secure_boot",
    }


def test_hwe_kernel_on_rocm_621(gpus: dict[str, Any]) -> None:
    result = pf.evaluate(
        sm.get_stack("rocm-6.2.1"), host(kernel="6.11.0-29-generic"), gpus, settings()
    )
    (msg,) = errors_of(result, "os")
    assert "hwe kernel" in msg and "rocm-6.2.1" in msg
    # 6.11 is not in 7.2.1's series (its CPU twin, any kernel, is named)
    assert "GA kernel (6.8" in msg and " rocm-7.2.1" not in msg and "(rocm-7.2.1" not in msg
    result = pf.evaluate(
        sm.get_stack("rocm-6.2.1"), host(kernel="6.14.0-27-generic"), gpus, settings()
    )
    assert "rocm-7.2.1" in errors_of(result, "os")[0]  # 6.14 HWE is supported there


def test_wrong_os_names_the_stacks_that_fit(gpus: dict[str, Any]) -> None:
    result = pf.evaluate(
        sm.get_stack("rocm-6.2.1"),
        host(distribution="Debian", distribution_version="12.8", kernel="6.1.0-26-amd64"),
        gpus,
        settings(),
    )
    (msg,) = errors_of(result, "os")
    assert "Debian 12.8 is not supported" in msg
    assert "(cpu, sandbox-rocm-6.2.1, sandbox-rocm-7.2.3)" in msg


def test_the_published_matrix_names_an_extra_stack_that_fits(gpus: dict[str, Any]) -> None:
    """The suggestions come from the matrix role stack publishes (instinct_vllm_stack_matrix),
    extra stacks included; without it, from files/stacks.yml alone."""
    debian = {"os": [{"distribution": "Debian", "version": "12", "codename": "bookworm",
                      "kernel_flavours": ["any"]}],
              "model_architectures": ["GptOssForCausalLM"]}  # fmt: skip
    matrix = sm.all_stacks({"site-debian": {"extends": "rocm-6.2.1", **debian}})[0]
    on_debian = host(distribution="Debian", distribution_version="12.8", kernel="6.1.0-26-amd64")
    stack = sm.get_stack("rocm-6.2.1")
    gpt_oss = settings(model_architecture="GptOssForCausalLM")
    result = pf.evaluate(stack, on_debian, gpus, gpt_oss, matrix)
    assert "site-debian" in errors_of(result, "os")[0]
    assert "site-debian" in errors_of(result, "model_architecture")[0]
    result = pf.evaluate(stack, on_debian, gpus, gpt_oss)
    assert "site-debian" not in errors_of(result, "os")[0]
    assert "site-debian" not in errors_of(result, "model_architecture")[0]


def test_tp_must_divide_gpu_count(gpus: dict[str, Any]) -> None:
    result = pf.evaluate(sm.get_stack("rocm-6.2.1"), host(), gpus, settings(tensor_parallel_size=3))
    (msg,) = errors_of(result, "tensor_parallel")
    assert "preflight_tensor_parallel_size=3" in msg and "8 GPU(s)" in msg
    assert "1, 2, 4, 8" in msg


def test_tp_must_divide_attention_heads(gpus: dict[str, Any]) -> None:
    result = pf.evaluate(
        sm.get_stack("rocm-6.2.1"),
        host(),
        gpus,
        settings(tensor_parallel_size=8, num_attention_heads=28),
    )
    (msg,) = errors_of(result, "tensor_parallel")
    assert "num_attention_heads=28" in msg and "1, 2, 4" in msg and ", 8" not in msg
    result = pf.evaluate(
        sm.get_stack("rocm-6.2.1"), host(), gpus, settings(tensor_parallel_size=16)
    )
    assert errors_of(result, "tensor_parallel")


@pytest.mark.parametrize(("tp", "instances"), [(1, 8), (2, 4), (4, 2), (8, 1)])
def test_instances_times_tp_equal_to_the_gpus_pass(
    gpus: dict[str, Any], tp: int, instances: int
) -> None:
    result = pf.evaluate(
        sm.get_stack("rocm-6.2.1"),
        host(),
        gpus,
        settings(tensor_parallel_size=tp, instances=instances),
    )
    assert result["ok"], result["errors"]


def test_instances_times_tp_short_of_the_gpus_fails(gpus: dict[str, Any]) -> None:
    result = pf.evaluate(
        sm.get_stack("rocm-6.2.1"), host(), gpus, settings(tensor_parallel_size=1, instances=4)
    )
    (msg,) = errors_of(result, "tensor_parallel")
    assert "vllm_service_instances=4" in msg and "preflight_tensor_parallel_size=1" in msg
    assert "8 GPU(s)" in msg
    assert "vllm_service_instances: 8" in msg  # the count that fits TP 1
    assert "preflight_tensor_parallel_size=2" in msg  # the TP that fits 4 instances


def test_instances_times_tp_over_the_gpus_names_the_pairs_that_fit(
    gpus: dict[str, Any],
) -> None:
    result = pf.evaluate(
        sm.get_stack("rocm-6.2.1"),
        host(),
        gpus,
        settings(tensor_parallel_size=4, instances=4, num_attention_heads=28),
    )
    (msg,) = errors_of(result, "tensor_parallel")
    assert "vllm_service_instances=4" in msg and "is 16 GPU(s)" in msg
    assert "vllm_service_instances: 2" in msg
    assert "preflight_tensor_parallel_size=2" in msg
    assert "8 x 1, 4 x 2, 2 x 4" in msg and "1 x 8" not in msg  # 28 heads: no TP 8


def test_instances_must_be_at_least_one(gpus: dict[str, Any]) -> None:
    for stack, facts in (("rocm-6.2.1", gpus), ("cpu", NO_GPUS)):
        result = pf.evaluate(
            sm.get_stack(stack), host(), facts, settings(tensor_parallel_size=1, instances=0)
        )
        (msg,) = errors_of(result, "tensor_parallel")
        assert "vllm_service_instances=0" in msg and ">= 1" in msg


def test_one_instance_keeps_the_tp_rules(gpus: dict[str, Any]) -> None:
    """One instance (the default) may use fewer GPUs than found; TP must divide them."""
    stack = sm.get_stack("rocm-6.2.1")
    for tp in (1, 2, 4, 8):
        result = pf.evaluate(stack, host(), gpus, settings(tensor_parallel_size=tp, instances=1))
        assert result["ok"], result["errors"]
    result = pf.evaluate(stack, host(), gpus, settings(tensor_parallel_size=3, instances=1))
    (msg,) = errors_of(result, "tensor_parallel")
    assert "preflight_tensor_parallel_size=3 does not divide the 8 GPU(s)" in msg
    assert "vllm_service_instances" not in msg


def test_instances_on_a_stack_without_gpus_are_not_counted() -> None:
    result = pf.evaluate(
        sm.get_stack("cpu"),
        host(distribution="Debian", distribution_version="12.8", kernel="6.1.0-26-amd64"),
        NO_GPUS,
        settings(tensor_parallel_size=1, num_attention_heads=4, instances=2),
    )
    assert result["ok"], result["errors"]


def test_gpt_oss_on_rocm_621_names_serving_stacks(gpus: dict[str, Any]) -> None:
    result = pf.evaluate(
        sm.get_stack("rocm-6.2.1"), host(), gpus, settings(model_architecture="GptOssForCausalLM")
    )
    (msg,) = errors_of(result, "model_architecture")
    assert (
        "GptOssForCausalLM" in msg and "rocm-7.2.1" in msg and "preflight_model_architecture" in msg
    )
    ok = pf.evaluate(
        sm.get_stack("rocm-7.2.1"), host(), gpus, settings(model_architecture="GptOssForCausalLM")
    )
    assert ok["ok"], ok["errors"]


def test_gpu_stack_without_gpus(gpus: dict[str, Any]) -> None:
    result = pf.evaluate(sm.get_stack("rocm-6.2.1"), host(), NO_GPUS, settings())
    (msg,) = errors_of(result, "gpu_count")
    assert "no AMD Instinct GPU" in msg and "instinct_vllm_stack: cpu" in msg


def test_cpu_stack_needs_no_gpu() -> None:
    result = pf.evaluate(
        sm.get_stack("cpu"),
        host(distribution="Debian", distribution_version="12.8", kernel="6.1.0-26-amd64"),
        NO_GPUS,
        settings(tensor_parallel_size=1, num_attention_heads=4),
    )
    assert result["ok"], result["errors"]


def test_expected_gpu_count_and_arch(gpus: dict[str, Any]) -> None:
    result = pf.evaluate(sm.get_stack("rocm-6.2.1"), host(), gpus, settings(gpu_count=4))
    assert "preflight_gpu_count expects 4" in errors_of(result, "gpu_count")[0]
    mi100 = sm.get_stack("rocm-6.2.1", {"rocm-6.2.1": {"gpu_archs": ["gfx908"]}})
    result = pf.evaluate(mi100, host(), gpus, settings())
    assert "gfx942" in errors_of(result, "gpu_arch")[0]


def test_memory_and_disk(gpus: dict[str, Any]) -> None:
    small = host(memtotal_mb=16 * 1024, mounts=[{"mount": "/", "size_available": 20 * GIB}])
    result = pf.evaluate(sm.get_stack("rocm-6.2.1"), small, gpus, settings())
    assert "16.0 GiB" in errors_of(result, "memory")[0]
    assert "20.0 GiB free on / for /opt (build)" in errors_of(result, "disk:/opt")[0]
    assert errors_of(result, "disk:/srv/models")
    unknown = pf.evaluate(sm.get_stack("rocm-6.2.1"), host(mounts=[]), gpus, settings())
    assert any("unknown" in w for w in unknown["warnings"]) and unknown["ok"]


def with_mok(gpus: dict[str, Any], state: str | None) -> dict[str, Any]:
    return {**gpus, "driver": {**gpus["driver"], "mok_key": state}}


@pytest.mark.parametrize("state", ["not_enrolled", "no_key", "unknown", None])
def test_secure_boot_without_an_enrolled_dkms_key_fails_by_default(
    gpus: dict[str, Any], state: str | None
) -> None:
    """Installing amdgpu-dkms would need a MOK enrolment at the console: refused first."""
    on = settings(secure_boot="enabled", secure_boot_policy="fail")
    result = pf.evaluate(sm.get_stack("rocm-6.2.1"), host(), with_mok(gpus, state), on)
    [msg] = errors_of(result, "secure_boot")
    assert not result["ok"]
    assert "/var/lib/shim-signed/mok/MOK.der" in msg and "mokutil --import" in msg
    assert "preflight_secure_boot_policy: warn (now fail;" in msg
    default = {k: v for k, v in on.items() if k != "secure_boot_policy"}  # fail by default
    again = pf.evaluate(sm.get_stack("rocm-6.2.1"), host(), with_mok(gpus, state), default)
    assert errors_of(again, "secure_boot") == [msg]


def test_secure_boot_with_an_enrolled_key_passes(gpus: dict[str, Any]) -> None:
    on = settings(secure_boot="enabled", secure_boot_policy="fail")
    result = pf.evaluate(sm.get_stack("rocm-6.2.1"), host(), with_mok(gpus, "enrolled"), on)
    assert result["ok"] and not errors_of(result, "secure_boot")


def test_secure_boot_policy_warn_and_ignore(gpus: dict[str, Any]) -> None:
    stack = sm.get_stack("rocm-6.2.1")
    unenrolled = with_mok(gpus, "not_enrolled")
    warn = pf.evaluate(stack, host(), unenrolled, settings(secure_boot="enabled"))
    assert warn["ok"] and any("Secure Boot" in w and "mokutil" in w for w in warn["warnings"])
    ignore = settings(secure_boot="enabled", secure_boot_policy="ignore")
    assert pf.evaluate(stack, host(), unenrolled, ignore)["warnings"] == []
    cpu = pf.evaluate(
        sm.get_stack("cpu"),
        host(),
        NO_GPUS,
        settings(secure_boot="enabled", tensor_parallel_size=1),
    )
    assert cpu["warnings"] == []


def test_amdgpu_blacklist_fails(gpus: dict[str, Any]) -> None:
    gpus["driver"]["blacklisted_in"] = ["/etc/modprobe.d/blacklist-amdgpu.conf"]
    result = pf.evaluate(sm.get_stack("rocm-6.2.1"), host(), gpus, settings())
    assert "blacklist-amdgpu.conf" in errors_of(result, "amdgpu_blacklist")[0]


def test_all_problems_reported_at_once(gpus: dict[str, Any]) -> None:
    result = pf.evaluate(
        sm.get_stack("rocm-6.2.1"),
        host(kernel="6.11.0-29-generic"),
        gpus,
        settings(tensor_parallel_size=3, model_architecture="GptOssForCausalLM"),
    )
    # the HWE kernel is outside both the stack's kernel series and its validated ABIs
    failed = [c["name"] for c in result["checks"] if c["level"] == "error"]
    assert failed == ["os", "tensor_parallel", "model_architecture", "kernel_abi"]


@pytest.mark.parametrize(
    ("path", "mount"),
    [("/srv/models/llama", "/srv"), ("/opt", "/"), ("/srvx", "/"), ("/srv", "/srv")],
)
def test_mount_for(path: str, mount: str) -> None:
    found = pf.mount_for(path, host()["mounts"])
    assert found is not None and found["mount"] == mount
