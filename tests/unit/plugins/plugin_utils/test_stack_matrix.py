"""Tests for the stack matrix (plugin_utils/stack_matrix.py) and its filters."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.instinct.vllm.plugins.plugin_utils import stack_matrix as sm

ROOT = Path(__file__).resolve().parents[4]
MATRIX = ROOT / "files" / "stacks.yml"


@pytest.fixture(scope="module")
def matrix() -> dict:
    return yaml.safe_load(MATRIX.read_text(encoding="utf-8"))


def test_default_path_is_the_collection_file() -> None:
    assert sm.default_matrix_path() == MATRIX.resolve()


def test_every_stack_in_the_file_is_valid(matrix: dict) -> None:
    assert matrix["stacks"], "files/stacks.yml has no stacks"
    for name in matrix["stacks"]:
        stack = sm.get_stack(name)
        assert stack["name"] == name
        for key in sm.REQUIRED_KEYS:
            assert key in stack


def test_required_stacks_exist(matrix: dict) -> None:
    names = sm.stack_names()
    assert "rocm-6.2.1" in names
    assert "cpu" in names


def test_default_stack_facts() -> None:
    stack = sm.get_stack("rocm-6.2.1")
    assert stack["rocm"]["version"] == "6.2.1"
    assert stack["torch"]["version"] == "2.5.1"
    assert stack["torch"]["index_url"].endswith("/whl/rocm6.2")
    assert stack["vllm"]["version"].startswith("0.6.")
    assert stack["vllm"]["install_method"] == "source"
    assert set(stack["gpu_archs"]) == {"gfx942", "gfx90a"}
    assert "GptOssForCausalLM" not in stack["model_architectures"]
    assert "LlamaForCausalLM" in stack["model_architectures"]
    ubuntu = sm.os_entry(stack, "Ubuntu", "24.04")
    assert ubuntu is not None and ubuntu["kernel_flavours"] == ["ga"]
    # Never blacklist amdgpu: no stack's packages mention a blacklist.
    assert not any(
        "blacklist" in p for p in stack["rocm"]["packages"] + stack["rocm"]["driver_packages"]
    )


def test_gpt_oss_is_served_by_a_current_rocm_stack() -> None:
    serving = sm.stacks_serving("GptOssForCausalLM")
    assert serving, "no stack can serve gpt-oss"
    assert "rocm-6.2.1" not in serving
    for name in serving:
        stack = sm.get_stack(name)
        if stack["rocm"] is None:
            continue
        major, minor = (int(x) for x in stack["rocm"]["version"].split(".")[:2])
        assert (major, minor) >= (6, 3), name
        vmaj, vmin, vpatch = (int(x) for x in stack["vllm"]["version"].split(".")[:3])
        assert (vmaj, vmin, vpatch) >= (0, 10, 1), name


def test_unknown_stack_lists_known_names() -> None:
    with pytest.raises(sm.StackError) as err:
        sm.get_stack("rocm-9.9")
    msg = str(err.value)
    assert "instinct_vllm_stack" in msg and "rocm-9.9" in msg
    assert "rocm-6.2.1" in msg and "cpu" in msg


@pytest.mark.parametrize("bad", [3, "", ["cpu"]])
def test_stack_name_must_be_a_string(bad: object) -> None:
    with pytest.raises(sm.StackError, match="instinct_vllm_stack"):
        sm.get_stack(bad)


def test_no_name_is_the_matrix_default() -> None:
    assert sm.default_stack_name() == "rocm-6.2.1"
    assert sm.get_stack(None)["name"] == "rocm-6.2.1"


@pytest.mark.parametrize("default", [None, "rocm-9.9", ["cpu"]])
def test_matrix_default_must_name_a_stack(tmp_path: Path, default: object) -> None:
    data = yaml.safe_load(MATRIX.read_text(encoding="utf-8"))
    data["default"] = default
    path = tmp_path / "stacks.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(sm.StackError, match="'default' must name one of its stacks"):
        sm.get_stack(None, path=path)


def test_extra_new_stack_complete() -> None:
    cpu = copy.deepcopy(sm.get_stack("cpu"))
    del cpu["name"]
    cpu["description"] = "my test stack"
    stack = sm.get_stack("mine", {"mine": cpu})
    assert stack["name"] == "mine" and stack["description"] == "my test stack"


def test_extra_extends_and_deep_merges() -> None:
    extra = {
        "lab": {
            "extends": "rocm-6.2.1",
            "description": "local mirror",
            "rocm": {"key_url": "http://mirror.test/rocm.gpg.key"},
            "gpu_archs": ["gfx942"],
        }
    }
    stack = sm.get_stack("lab", extra)
    base = sm.get_stack("rocm-6.2.1")
    assert "extends" not in stack
    assert stack["rocm"]["key_url"] == "http://mirror.test/rocm.gpg.key"
    assert stack["rocm"]["repos"] == base["rocm"]["repos"]  # untouched sibling keys kept
    assert stack["gpu_archs"] == ["gfx942"]  # lists replace
    assert base["rocm"]["key_url"].startswith("https://repo.radeon.com")  # base not mutated


def test_extra_merges_over_known_stack() -> None:
    stack = sm.get_stack("rocm-6.2.1", {"rocm-6.2.1": {"rocm": {"packages": ["rocm-hip-runtime"]}}})
    assert stack["rocm"]["packages"] == ["rocm-hip-runtime"]
    assert stack["rocm"]["version"] == "6.2.1"


def test_extends_unknown_parent() -> None:
    with pytest.raises(sm.StackError, match=r"instinct_vllm_stacks_extra\['x'\]\.extends.*nope"):
        sm.get_stack("x", {"x": {"extends": "nope"}})


def test_the_sandbox_stack_is_rocm_6_2_1_with_only_the_device_changed() -> None:
    rocm, sandbox = sm.get_stack("rocm-6.2.1"), sm.get_stack("sandbox-rocm-6.2.1")
    assert "extends" not in sandbox
    assert sandbox["vllm"]["version"] == rocm["vllm"]["version"]
    for key in ("url", "sha256", "subdir", "patches", "build_requirements"):
        assert sandbox["vllm"]["source"][key] == rocm["vllm"]["source"][key], key
    assert sandbox["vllm"]["source"]["target_device"] == "cpu"
    assert sandbox["vllm"]["source"]["runtime_requirements"] == ["requirements-cpu.txt"]
    assert sandbox["vllm"]["platform"] == "cpu"
    assert sandbox["torch"]["version"] == rocm["torch"]["version"]
    assert sandbox["torch"]["packages"] == rocm["torch"]["packages"]
    assert sandbox["torch"]["index_url"] == "https://download.pytorch.org/whl/cpu"
    assert sandbox["lock"]["follow"] == "rocm-6.2.1"
    assert sandbox["lock"]["bounds"] == rocm["lock"]["bounds"]
    assert sandbox["rocm"] is None and sandbox["gpu_archs"] == []


def _file_with(tmp_path: Path, **stacks: dict) -> Path:
    data = yaml.safe_load(MATRIX.read_text(encoding="utf-8"))
    data["stacks"].update(stacks)
    path = tmp_path / "stacks.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_file_stacks_extend_in_chains(tmp_path: Path) -> None:
    path = _file_with(
        tmp_path,
        a={"extends": "cpu", "description": "a", "torch": {"version": "9.9"}},
        b={"extends": "a", "description": "b"},
    )
    b = sm.get_stack("b", path=path)
    assert b["description"] == "b"
    assert b["torch"]["version"] == "9.9"  # from a
    assert b["torch"]["packages"] == sm.get_stack("cpu", path=path)["torch"]["packages"]


def test_an_extra_stack_merged_over_a_parent_does_not_reach_the_file_child() -> None:
    extra = {"rocm-6.2.1": {"torch": {"index_url": "https://mirror/rocm"}}}
    assert sm.get_stack("rocm-6.2.1", extra)["torch"]["index_url"] == "https://mirror/rocm"
    child = sm.get_stack("sandbox-rocm-6.2.1", extra)
    assert child["torch"]["index_url"] == "https://download.pytorch.org/whl/cpu"


@pytest.mark.parametrize(
    ("stacks", "error"),
    [
        ({"a": {"extends": "nope"}}, r"files/stacks.yml stack 'a'\.extends: unknown stack 'nope'"),
        ({"a": {"extends": "b"}, "b": {"extends": "a"}}, r"stack '[ab]'\.extends: a cycle"),
        ({"a": {"extends": 3}}, r"stack 'a'\.extends: unknown stack 3"),
    ],
)
def test_file_extends_errors_name_the_stack(tmp_path: Path, stacks: dict, error: str) -> None:
    path = _file_with(tmp_path, **stacks)
    with pytest.raises(sm.StackError, match=error):
        sm.get_stack("cpu", path=path)


def test_extra_must_be_mapping() -> None:
    with pytest.raises(sm.StackError, match="instinct_vllm_stacks_extra must be a mapping"):
        sm.get_stack("cpu", ["cpu"])  # type: ignore[arg-type]
    with pytest.raises(sm.StackError, match=r"instinct_vllm_stacks_extra\['x'\] must be a mapping"):
        sm.get_stack("cpu", {"x": "y"})


def _cpu_with(**changes: object) -> dict:
    cpu = copy.deepcopy(sm.get_stack("cpu"))
    del cpu["name"]
    cpu.update(changes)
    return cpu


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"os": []}, ".os"),
        (
            {
                "os": [
                    {
                        "distribution": "Debian",
                        "version": 12,
                        "codename": "bookworm",
                        "kernel_flavours": ["any"],
                    }
                ]
            },
            ".os[0].version",
        ),
        (
            {
                "os": [
                    {
                        "distribution": "Debian",
                        "version": "12",
                        "codename": "bookworm",
                        "kernel_flavours": ["generic"],
                    }
                ]
            },
            ".os[0].kernel_flavours",
        ),
        ({"cpu_archs": "x86_64"}, ".cpu_archs"),
        ({"gpu_archs": ["gfx942"]}, ".gpu_archs"),
        ({"torch": {"version": "2"}}, ".torch"),
        (
            {
                "vllm": {
                    "version": "1",
                    "install_method": "magic",
                    "package": "vllm",
                    "source": None,
                }
            },
            ".vllm.install_method",
        ),
        ({"model_architectures": []}, ".model_architectures"),
        ({"min_vram_gib_per_gpu": "lots"}, ".min_vram_gib_per_gpu"),
        ({"rocm": {"version": "6.2.1"}}, ".rocm"),
    ],
)
def test_malformed_extra_stack_names_variable_and_key(changes: dict, key: str) -> None:
    with pytest.raises(sm.StackError) as err:
        sm.get_stack("bad", {"bad": _cpu_with(**changes)})
    msg = str(err.value)
    assert msg.startswith("instinct_vllm_stacks_extra['bad']"), msg
    assert key in msg, msg


def test_the_rocm_7_stack_asks_the_service_for_what_its_traps_need() -> None:
    stack = sm.get_stack("rocm-7.2.1")
    assert stack["vllm"]["version"] == "0.20.2"
    assert stack["vllm"]["pip_spec"] == "vllm==0.20.2+rocm721"
    assert stack["vllm"]["index_url"] == stack["torch"]["index_url"]
    assert stack["vllm"]["index_url"].endswith("/rocm/0.20.2/rocm721")
    assert stack["torch"]["version"] == "2.10.0"
    assert stack["vllm"]["service"] == {
        "flags": {"enforce-eager": True},
        "gpu_memory_utilization_max": 0.9,
        "capabilities": ["CAP_SYS_PTRACE"],
    }
    for name in ("rocm-6.2.1", "sandbox-rocm-6.2.1", "cpu"):
        assert "service" not in sm.get_stack(name)["vllm"], name


def _service(service: object) -> dict:
    return _cpu_with(vllm={**sm.get_stack("cpu")["vllm"], "service": service})


@pytest.mark.parametrize(
    ("service", "needle"),
    [
        (["enforce-eager"], ".vllm.service: expected a mapping"),
        ({"flag": {"enforce-eager": True}}, ".vllm.service: unknown key(s) flag"),
        ({"flags": ["--enforce-eager"]}, ".vllm.service.flags: expected a mapping"),
        ({"environment": {"NCCL-X": "1"}}, ".vllm.service.environment: not variable names"),
        ({"capabilities": "CAP_SYS_PTRACE"}, ".vllm.service.capabilities: expected a list"),
        ({"capabilities": ["SYS_PTRACE"]}, '.vllm.service.capabilities: expected "CAP_..."'),
        ({"gpu_memory_utilization_max": 1.5}, ".vllm.service.gpu_memory_utilization_max"),
        ({"gpu_memory_utilization_max": "0.9"}, ".vllm.service.gpu_memory_utilization_max"),
        ({"gpu_memory_utilization_max": True}, ".vllm.service.gpu_memory_utilization_max"),
    ],
)
def test_a_bad_service_block_is_refused(service: object, needle: str) -> None:
    with pytest.raises(sm.StackError) as err:
        sm.get_stack("bad", {"bad": _service(service)})
    msg = str(err.value)
    assert msg.startswith("instinct_vllm_stacks_extra['bad']"), msg
    assert needle in msg, msg


def test_a_service_block_may_be_partial_or_null() -> None:
    assert sm.get_stack("ok", {"ok": _service({"capabilities": []})})["vllm"]["service"]
    assert sm.get_stack("ok", {"ok": _service(None)})["vllm"]["service"] is None


def test_lock_requirements_are_for_a_wheel_stack_only() -> None:
    extra = {"bad": {"extends": "rocm-6.2.1", "lock": {"requirements": ["requirements.txt"]}}}
    with pytest.raises(sm.StackError, match=r"\['bad'\].*\.lock\.requirements: only for a wheel"):
        sm.get_stack("bad", extra)
    extra = {"bad": {"extends": "rocm-7.2.1", "lock": {"constraints": "x.txt"}}}
    with pytest.raises(sm.StackError, match=r"\.lock\.constraints: expected a list"):
        sm.get_stack("bad", extra)


def test_missing_key_is_named() -> None:
    cpu = _cpu_with()
    del cpu["vllm"]
    with pytest.raises(sm.StackError, match=r"\['bad'\]: missing key\(s\) vllm"):
        sm.get_stack("bad", {"bad": cpu})


def test_malformed_file_stack_names_the_file(tmp_path: Path) -> None:
    data = yaml.safe_load(MATRIX.read_text(encoding="utf-8"))
    data["stacks"]["cpu"]["torch"] = "2.13"
    path = tmp_path / "stacks.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(sm.StackError, match=r"files/stacks.yml stack 'cpu'\.torch"):
        sm.get_stack("cpu", path=path)


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(sm.StackError, match="cannot read"):
        sm.load_matrix_file(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("stacks: [", encoding="utf-8")
    with pytest.raises(sm.StackError, match="not valid YAML"):
        sm.load_matrix_file(bad)
    bad.write_text("stacks: []\n", encoding="utf-8")
    with pytest.raises(sm.StackError, match="'stacks' mapping"):
        sm.load_matrix_file(bad)


@pytest.mark.parametrize(
    ("kernel", "dist", "version", "expected"),
    [
        ("6.8.0-45-generic", "Ubuntu", "24.04", "ga"),
        ("6.8.0-1015-azure", "Ubuntu", "24.04", "ga"),
        ("6.11.0-29-generic", "Ubuntu", "24.04", "hwe"),
        ("6.14.0-27-generic", "Ubuntu", "24.04", "hwe"),
        ("5.15.0-122-generic", "Ubuntu", "22.04", "ga"),
        ("6.1.0-26-amd64", "Debian", "12", "ga"),
        ("6.8.0-45-generic", "Fedora", "40", "unknown"),
        ("garbage", "Ubuntu", "24.04", "unknown"),
    ],
)
def test_kernel_flavour(kernel: str, dist: str, version: str, expected: str) -> None:
    assert sm.kernel_flavour(kernel, dist, version, sm.ga_kernels()) == expected


def test_stacks_for_os() -> None:
    assert "rocm-6.2.1" in sm.stacks_for_os("Ubuntu", "24.04", "ga")
    assert "rocm-6.2.1" not in sm.stacks_for_os("Ubuntu", "24.04", "hwe")
    assert "rocm-6.2.1" not in sm.stacks_for_os("Debian", "12")
    assert "cpu" in sm.stacks_for_os("Debian", "12", "hwe")


def test_filter_plugin_wraps_errors() -> None:
    from ansible.errors import AnsibleFilterError
    from ansible_collections.instinct.vllm.plugins.filter.stack import FilterModule

    filters = FilterModule().filters()
    assert filters["stack"]("cpu", {})["name"] == "cpu"
    assert filters["stacks_serving"]("LlamaForCausalLM") == sm.stacks_serving("LlamaForCausalLM")
    extra = {"site": {"extends": "cpu", "model_architectures": ["SiteForCausalLM"]}}
    matrix = filters["stack_matrix"](extra)
    assert matrix == sm.all_stacks(extra)[0] and "site" in matrix and "rocm-6.2.1" in matrix
    assert sm.serving(matrix, "SiteForCausalLM") == sm.stacks_serving("SiteForCausalLM", extra)
    on_debian = sm.stacks_for_os("Debian", "12", "hwe", extra)
    assert sm.for_os(matrix, "Debian", "12", "hwe") == on_debian
    with pytest.raises(AnsibleFilterError, match="instinct_vllm_stacks_extra must be a mapping"):
        filters["stack_matrix"](["not", "a", "mapping"])
    assert filters["kernel_flavour"]("6.11.0-29-generic", "Ubuntu", "24.04") == "hwe"
    with pytest.raises(AnsibleFilterError, match="known stacks"):
        filters["stack"]("nope", {})


@pytest.mark.parametrize(
    ("stack", "dist", "version", "kernel", "ok", "fragment"),
    [
        ("rocm-6.2.1", "Ubuntu", "24.04", "6.8.0-45-generic", True, ""),
        ("rocm-6.2.1", "Ubuntu", "24.04", "6.11.0-29-generic", False, "hwe kernel"),
        ("rocm-6.2.1", "Debian", "12", "6.1.0-26-amd64", False, "Debian 12 is not supported"),
        ("rocm-7.2.1", "Ubuntu", "24.04", "6.14.0-27-generic", True, ""),
        ("rocm-7.2.1", "Ubuntu", "24.04", "6.17.0-5-generic", False, "series 6.8, 6.14"),
        ("cpu", "Debian", "12", "6.1.0-26-amd64", True, ""),
        ("cpu", "Ubuntu", "24.04", "6.11.0-29-generic", True, ""),
    ],
)
def test_check_os(
    stack: str, dist: str, version: str, kernel: str, ok: bool, fragment: str
) -> None:
    result = sm.check_os(sm.get_stack(stack), dist, version, kernel, sm.ga_kernels())
    assert result["ok"] is ok, result
    assert fragment in result["msg"]
    if not ok:
        assert stack in result["msg"]


def test_kernel_series_validated() -> None:
    bad = _cpu_with(
        os=[
            {
                "distribution": "Debian",
                "version": "12",
                "codename": "bookworm",
                "kernel_flavours": ["ga"],
                "kernel_series": ["six"],
            }
        ]
    )
    with pytest.raises(sm.StackError, match=r"\.os\[0\]\.kernel_series"):
        sm.get_stack("bad", {"bad": bad})


def test_debian_point_release_matches() -> None:
    assert sm.os_entry(sm.get_stack("cpu"), "Debian", "12.8") is not None
    assert sm.os_entry(sm.get_stack("cpu"), "Debian", "120") is None
    assert sm.kernel_flavour("6.1.0-26-amd64", "Debian", "12.8", sm.ga_kernels()) == "ga"
