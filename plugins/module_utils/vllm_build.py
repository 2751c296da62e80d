"""Building vLLM from source (public facade of the private package `_vllm_build`).

The modules vllm_build_env, vllm_source_requirements, vllm_build and vllm_patch import from
here; the build inputs, key and environment live in `_vllm_build/build.py`, the patch series
in `_vllm_build/patch.py`.
"""

from __future__ import annotations

from ansible_collections.instinct.vllm.plugins.module_utils._vllm_build.build import (
    GIB,
    BuildInputError,
    build_env,
    build_key,
    check_source,
    key_inputs,
    max_jobs,
    parse_meminfo,
    read_stamp,
    requirements_from,
    resolve_archs,
    run_build,
)
from ansible_collections.instinct.vllm.plugins.module_utils._vllm_build.patch import (
    PatchError,
    apply_series,
)

__all__ = [
    "GIB",
    "BuildInputError",
    "PatchError",
    "apply_series",
    "build_env",
    "build_key",
    "check_source",
    "key_inputs",
    "max_jobs",
    "parse_meminfo",
    "read_stamp",
    "requirements_from",
    "resolve_archs",
    "run_build",
]
