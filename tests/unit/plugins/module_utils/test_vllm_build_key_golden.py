"""The build key is pinned: a silent change of its format would orphan every cached wheel.

The cache (``vllm_source_cache_dir`` on the controller, the stamp next to an installed wheel)
is looked up by ``build_key``. If ``key_inputs`` or ``build_key`` changes what it hashes (a key
renamed, a value normalised differently, another JSON separator, a longer digest), every node
rebuilds vLLM (about an hour on an MI300X node) and every cached wheel is dead weight. These
tests use fixed inputs - not files/stacks.yml, whose edits change keys on purpose - and the
literal expected values; the digest was checked outside Python with
``printf '%s' '<canonical JSON>' | sha256sum | cut -c1-16``.

A deliberate format change updates the literals here and says so in a changelog fragment
("every cached wheel is rebuilt once").
"""

from __future__ import annotations

import json

from ansible_collections.instinct.vllm.plugins.module_utils import vllm_build as vb

SDIST = "https://files.pythonhosted.org/packages/source/v/vllm/vllm-0.6.6.post1.tar.gz"
SOURCE = {
    "url": SDIST,
    "sha256": "a" * 64,
    "subdir": "vllm-0.6.6.post1",
    "target_device": "rocm",
    "build_requirements": [],
    "runtime_requirements": [],
    "extension_modules": [],
}

ROCM_CANONICAL = (
    '{"archs":["gfx942","gfx90a"],'
    '"knobs":{"env":{"CMAKE_BUILD_TYPE":"Release"},"target_device":"rocm"},'
    '"patches":[{"name":"0001-cmake-pin.patch","sha256":"' + "b" * 64 + '"}],'
    '"rocm":"6.2.1",'
    '"torch":{"index":"https://download.pytorch.org/whl/rocm6.2","version":"2.5.1"},'
    '"vllm":{"sha256":"' + "a" * 64 + '","url":"' + SDIST + '","version":"0.6.6.post1"}}'
)
ROCM_KEY = "ff5ceb523d941ed5"

CPU_CANONICAL = (
    '{"archs":[],"knobs":{"env":{},"target_device":"cpu"},"patches":[],"rocm":null,'
    '"torch":{"index":null,"version":"2.5.1"},'
    '"vllm":{"sha256":"' + "a" * 64 + '","url":"' + SDIST + '","version":"0.6.6.post1"}}'
)
CPU_KEY = "13ef3c500da33dc4"


def _rocm_inputs() -> dict:
    return vb.key_inputs(
        vllm_version="0.6.6.post1",
        source=SOURCE,
        patches=[{"name": "0001-cmake-pin.patch", "sha256": "b" * 64}],
        torch_version="2.5.1",
        torch_index="https://download.pytorch.org/whl/rocm6.2",
        rocm_version="6.2.1",
        archs=["gfx942", "gfx90a"],
        extra_env={"CMAKE_BUILD_TYPE": "Release"},
    )


def _cpu_inputs() -> dict:
    return vb.key_inputs(
        vllm_version="0.6.6.post1",
        source=dict(SOURCE, target_device="cpu"),
        patches=[],
        torch_version="2.5.1",
        torch_index=None,
        rocm_version="6.2.1",
        archs=["gfx942"],
        extra_env=None,
    )


def _canonical(inputs: dict) -> str:
    return json.dumps(inputs, sort_keys=True, separators=(",", ":"))


def test_rocm_key_inputs_are_pinned() -> None:
    assert _canonical(_rocm_inputs()) == ROCM_CANONICAL


def test_rocm_build_key_is_pinned() -> None:
    assert vb.build_key(_rocm_inputs()) == ROCM_KEY


def test_cpu_key_inputs_are_pinned() -> None:
    """A target without GPU code: rocm and archs drop out, no env is {}."""
    assert _canonical(_cpu_inputs()) == CPU_CANONICAL


def test_cpu_build_key_is_pinned() -> None:
    assert vb.build_key(_cpu_inputs()) == CPU_KEY


def test_the_key_hashes_the_canonical_json() -> None:
    """build_key of a plain mapping: the hash is over the canonical JSON, nothing else."""
    assert vb.build_key(json.loads(ROCM_CANONICAL)) == ROCM_KEY
