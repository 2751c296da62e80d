"""Kernel ABI range and sliding-window rules: the stack data (files/stacks.yml, validated by
plugin_utils/stack_matrix.py) and the preflight checks that read it (plugin_utils/preflight.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from ansible_collections.instinct.vllm.plugins.plugin_utils import preflight as pf
from ansible_collections.instinct.vllm.plugins.plugin_utils import stack_matrix as sm

NO_GPUS: dict[str, Any] = {"count": 0, "gpus": [], "archs": [], "driver": {}}


def host(kernel: str) -> dict[str, Any]:
    return {
        "distribution": "Ubuntu",
        "distribution_version": "24.04",
        "kernel": kernel,
        "architecture": "x86_64",
    }


def check(result: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [c for c in result["checks"] if c["name"] == name]
    return found


def run(stack: str, kernel: str = "6.8.0-41-generic", **settings: Any) -> dict[str, Any]:
    return pf.evaluate(sm.get_stack(stack), host(kernel), NO_GPUS, settings)


# --- kernel release parsing ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        ("6.8.0-41-generic", (6, 8, 0, 41)),
        ("6.8.0-44-generic", (6, 8, 0, 44)),
        ("6.8.0-1015-azure", (6, 8, 0, 1015)),
        ("6.14.0-24-generic", (6, 14, 0, 24)),
        ("6.1.0-26-amd64", (6, 1, 0, 26)),
        ("6.8.0-31", (6, 8, 0, 31)),
        ("6.8.0-41.41~22.04.1-generic", (6, 8, 0, 41)),
        ("6.18.44-fc-v973", None),  # no ABI number after the version
        ("6.8.0", None),
        ("", None),
        (None, None),
    ],
)
def test_kernel_abi_parses_ubuntu_releases(release: Any, expected: Any) -> None:
    assert sm.kernel_abi(release) == expected


def test_kernel_abi_compares_numbers_not_strings() -> None:
    # as strings "6.8.0-100" < "6.8.0-41" and "6.10.0-1" < "6.8.0-41"; as ABIs they are above
    assert sm.kernel_abi("6.8.0-100-generic") > sm.kernel_abi("6.8.0-41-generic")  # type: ignore[operator]
    assert sm.kernel_abi("6.10.0-1-generic") > sm.kernel_abi("6.8.0-41-generic")  # type: ignore[operator]
    assert sm.kernel_abi("6.8.0-9-generic") < sm.kernel_abi("6.8.0-31-generic")  # type: ignore[operator]


# --- the data ----------------------------------------------------------------------------------


def test_every_rocm_stack_records_its_kernel_abis_and_their_source() -> None:
    for name in sm.stack_names():
        rocm = sm.get_stack(name)["rocm"]
        if rocm and any("dkms" in p for p in rocm["driver_packages"]):
            assert sm.kernel_abi(rocm["kernel_abi"]["min"]), name
            assert rocm["kernel_abi"].get("source"), name
    # AMD's ROCm 6.2.1 requirements: Ubuntu 24.04 and 24.04.1, "6.8 [GA]" (their GA kernels)
    abi = sm.get_stack("rocm-6.2.1")["rocm"]["kernel_abi"]
    assert (abi["min"], abi["max"]) == ("6.8.0-31", "6.8.0-41")
    assert "docs-6.2.1/reference/system-requirements" in abi["source"]


def test_rocm_721_has_the_graphics_repo_line() -> None:
    repos = sm.get_stack("rocm-7.2.1")["rocm"]["repos"]
    lines = [f"{r['uris']} {r['suites']} {r['components']}" for r in repos]
    assert "https://repo.radeon.com/graphics/7.2.1/ubuntu noble main" in lines
    assert "https://repo.radeon.com/rocm/apt/7.2.1 noble main" in lines


@pytest.mark.parametrize("name", sm.stack_names())
def test_role_rocm_accepts_and_renders_every_repo_of_the_stack(name: str) -> None:
    """Role rocm writes one deb822 file <name>.sources per entry of rocm.repos (repos.yml
    loops over all of them after the per-entry assert in assert.yml): every entry must pass
    that assert, and the file names must not collide."""
    rocm = sm.get_stack(name)["rocm"]
    if rocm is None:
        pytest.skip("a stack without ROCm")
    names = [r["name"] for r in rocm["repos"]]
    assert len(names) == len(set(names)), names
    for repo in rocm["repos"]:
        assert re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", repo["name"])
        assert re.match(r"^(https?|file)://", repo["uris"])
        assert repo["suites"] and repo["components"]


@pytest.mark.parametrize(
    ("abi", "key"),
    [
        ({"min": "6.8"}, "kernel_abi.min"),
        ({"min": "6.8.0-31", "max": "latest"}, "kernel_abi.max"),
        ({"min": "6.8.0-41", "max": "6.8.0-31"}, "kernel_abi.max"),
        ({"min": None}, "kernel_abi.min"),
        ("6.8.0-31", "kernel_abi: expected a mapping"),
        ({"min": "6.8.0-31", "source": 3}, "kernel_abi.source"),
    ],
)
def test_malformed_kernel_abi_is_named(abi: Any, key: str) -> None:
    extra = {"bad": {"extends": "rocm-6.2.1", "rocm": {"kernel_abi": abi}}}
    with pytest.raises(sm.StackError) as err:
        sm.get_stack("bad", extra)
    assert "instinct_vllm_stacks_extra['bad']" in str(err.value) and key in str(err.value)


def test_malformed_attention_rule_is_named() -> None:
    extra = {"bad": {"extends": "rocm-6.2.1", "vllm": {"attention": {"sliding_window": "no"}}}}
    with pytest.raises(sm.StackError, match=r"vllm\.attention\.sliding_window: expected one of"):
        sm.get_stack("bad", extra)


# --- preflight: kernel ABI -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "inside"),
    [
        ("6.8.0-31-generic", True),  # Ubuntu 24.04's GA kernel
        ("6.8.0-40-generic", True),
        ("6.8.0-41-generic", True),  # Ubuntu 24.04.1's
        ("6.8.0-44-generic", False),  # ROCm issue 3701
        ("6.8.0-100-generic", False),  # a patched noble node
        ("6.8.0-11-generic", False),
        ("6.11.0-19-generic", False),
    ],
)
def test_running_kernel_against_the_validated_abis(kernel: str, inside: bool) -> None:
    result = run("rocm-6.2.1", kernel)
    found = check(result, "kernel_abi")
    assert found["ok"] is inside
    # the default policy fails (NO_GPUS fails too: only the kernel's error counts here)
    assert any("(ansible_facts.kernel)" in e for e in result["errors"]) is not inside
    if not inside:
        assert found["level"] == "error"
        assert kernel in found["msg"] and "6.8.0-31 to 6.8.0-41" in found["msg"]
        assert "preflight_kernel_abi_policy: warn (now fail)" in found["msg"]
        assert "rocm_kernel_pin: true" in found["msg"] and "kernel 6.8.0-41" in found["msg"]
        assert "docs-6.2.1/reference/system-requirements" in found["msg"]


def test_kernel_abi_policy_warn_lets_it_pass() -> None:
    result = run("rocm-6.2.1", "6.8.0-100-generic", kernel_abi_policy="warn")
    assert check(result, "kernel_abi")["level"] == "warning"
    assert any("6.8.0-100-generic" in w and "ROCm issue 3701" in w for w in result["warnings"])
    assert check(run("rocm-6.2.1", "6.8.0-41-generic", kernel_abi_policy="fail"), "kernel_abi")[
        "ok"
    ]


def test_kernel_pin_turns_it_into_a_warning_naming_the_kernel_installed() -> None:
    result = run("rocm-6.2.1", "6.8.0-100-generic", kernel_pin=True)
    found = check(result, "kernel_abi")
    assert found["level"] == "warning"
    assert "installs the stack's kernel 6.8.0-41" in found["msg"]
    # a stack without a newest validated ABI has nothing to install: still a failure
    below = check(run("rocm-7.2.1", "6.8.0-20-generic", kernel_pin=True), "kernel_abi")
    assert below["level"] == "error" and "install and boot a kernel in that range" in below["msg"]


def test_open_range_and_unparseable_kernels() -> None:
    assert check(run("rocm-7.2.1", "6.14.0-99-generic"), "kernel_abi")["ok"]
    found = check(run("rocm-7.2.1", "6.8.0-20-generic"), "kernel_abi")
    assert not found["ok"] and "6.8.0-31 to the newest" in found["msg"]
    odd = check(run("rocm-6.2.1", "6.18.44-fc-v973"), "kernel_abi")
    assert odd["level"] == "error" and "no X.Y.Z-N ABI" in odd["msg"]
    assert check(run("cpu", "6.18.44-fc-v973"), "kernel_abi")["ok"]  # no ROCm, no DKMS


# --- preflight: sliding window ----------------------------------------------------------------

MISTRAL_V01 = {"architectures": ["MistralForCausalLM"], "sliding_window": 4096}
QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "sliding_window": 131072,
    "use_sliding_window": False,
}


@pytest.mark.parametrize(
    ("config", "window"),
    [
        (MISTRAL_V01, 4096),
        ({"sliding_window": None}, None),  # Mistral v0.2 and later
        (QWEN2, None),  # use_sliding_window false: vLLM ignores the window
        ({"sliding_window": [4096, None, 4096]}, 4096),
        ({"sliding_window": True}, None),
        ({}, None),
        (None, None),
    ],
)
def test_sliding_window_as_vllm_reads_it(config: Any, window: Any) -> None:
    assert pf.sliding_window(config) == window


def test_sliding_window_model_refused_without_ck_flash_attention() -> None:
    result = run("rocm-6.2.1", model_config=MISTRAL_V01)
    assert not result["ok"]
    [msg] = [e for e in result["errors"] if "sliding window" in e]
    assert "4096" in msg and "vllm_source_ck_flash_attention: true" in msg
    assert "Triton flash-attention" in msg


@pytest.mark.parametrize(
    "settings",
    [
        {"model_config": MISTRAL_V01, "ck_flash_attention": True},
        {"model_config": MISTRAL_V01, "max_model_len": 4096},  # never reaches the window
        {"model_config": QWEN2},
        {"model_config": {"sliding_window": None}},
        {},
    ],
)
def test_sliding_window_accepted(settings: dict[str, Any]) -> None:
    assert check(run("rocm-6.2.1", **settings), "sliding_window")["ok"]


# CK flash-attention runs only when installed and not overridden by the service's environment
# (vLLM 0.6.6.post1 reads VLLM_USE_TRITON_FLASH_ATTN as true when it is "true" or "1", any case).
@pytest.mark.parametrize(
    ("ck", "environment", "accepted"),
    [
        (False, {}, False),
        (False, {"VLLM_USE_TRITON_FLASH_ATTN": "0"}, False),  # no CK to run
        (True, {}, True),
        (True, {"VLLM_USE_TRITON_FLASH_ATTN": "0"}, True),
        (True, {"VLLM_USE_TRITON_FLASH_ATTN": False}, True),
        (True, {"VLLM_USE_TRITON_FLASH_ATTN": "yes"}, True),  # vLLM reads "yes" as false
        (True, {"VLLM_USE_TRITON_FLASH_ATTN": "1"}, False),
        (True, {"VLLM_USE_TRITON_FLASH_ATTN": "TRUE"}, False),
        (True, {"VLLM_USE_TRITON_FLASH_ATTN": True}, False),
        (True, None, True),
    ],
)
def test_sliding_window_needs_ck_installed_and_not_forced_off(
    ck: bool, environment: dict[str, Any] | None, accepted: bool
) -> None:
    result = run(
        "rocm-6.2.1",
        model_config=MISTRAL_V01,
        ck_flash_attention=ck,
        service_environment=environment,
    )
    assert check(result, "sliding_window")["ok"] is accepted
    if not accepted:
        [msg] = [e for e in result["errors"] if "sliding window" in e]
        # both variables named, and which one is wrong here
        assert "vllm_source_ck_flash_attention: true" in msg
        assert "VLLM_USE_TRITON_FLASH_ATTN out of vllm_service_environment" in msg
        value = (environment or {}).get("VLLM_USE_TRITON_FLASH_ATTN")
        wrong = (
            f"vllm_service_environment sets VLLM_USE_TRITON_FLASH_ATTN={value}"
            if ck
            else "vllm_source_ck_flash_attention is false"
        )
        assert wrong in msg


def test_forced_triton_with_ck_on_a_stack_that_honours_windows_is_not_this_rule() -> None:
    forced = {"VLLM_USE_TRITON_FLASH_ATTN": "1"}
    settings = {"ck_flash_attention": True, "service_environment": forced}
    assert check(run("rocm-7.2.1", sliding_window=4096, **settings), "sliding_window")["ok"]
    # a window the context never reaches
    assert check(
        run("rocm-6.2.1", sliding_window=4096, max_model_len=4096, **settings), "sliding_window"
    )["ok"]


def test_declared_window_and_stacks_that_honour_it() -> None:
    assert not check(run("rocm-6.2.1", sliding_window=4096), "sliding_window")["ok"]
    assert not check(run("rocm-6.2.1", sliding_window=4096, max_model_len=8192), "sliding_window")[
        "ok"
    ]
    # rocm-7.2.1 has no attention rule: its backends honour sliding windows
    assert check(run("rocm-7.2.1", sliding_window=4096), "sliding_window")["ok"]
