"""Building vLLM from source: build key, build environment, requirements, log classification.

Everything here is pure (no Ansible import, standard library only) so the modules that use
it stay thin and the unit tests exercise exactly what runs on a host:

* :func:`build_key` - the hash that names one build: vLLM source, patch contents, torch,
  ROCm, arch list and the knobs that change the compiled output (not ``MAX_JOBS``, which only
  changes how fast it compiles).
* :func:`max_jobs` - ``min(cores, MemAvailable / GiB per job)``, at least 1: hipcc jobs
  killed by the OOM killer look like compiler crashes, so memory caps the parallelism too.
* :func:`resolve_archs` - ``PYTORCH_ROCM_ARCH`` from an override, the GPU facts or the stack.
* :func:`build_env` - the exact environment ``setup.py bdist_wheel`` runs with.
* :func:`requirements_from` - a requirements file flattened (``-r`` followed) without the
  packages the stack installs itself (torch), like vLLM's own ``use_existing_torch.py`` but
  without editing the source tree.
* :func:`failure` - a failed build's class and fix (the table in module_utils/build_log.py,
  which diagnose reads too), with the line that decided it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils import build_log
from ansible_collections.instinct.vllm.plugins.module_utils._fileutil import sha256_file

#: Targets of vLLM 0.6.x's setup.py (VLLM_TARGET_DEVICE) this collection knows how to build.
#: ``empty`` builds no compiled extension (pure-Python wheel, version suffix ``+empty``).
TARGET_DEVICES: tuple[str, ...] = ("rocm", "empty", "cpu")
#: Targets that compile HIP code and so need PYTORCH_ROCM_ARCH, ROCM_PATH and HIP_PATH.
ROCM_TARGETS: tuple[str, ...] = ("rocm",)
#: Packages the stack installs (pinned, from its own index); dropped from vLLM's requirements.
STACK_OWNED: tuple[str, ...] = ("torch",)
_ARCH_RE = re.compile(r"^gfx[0-9a-f]{3,4}(:[a-z0-9+-]+)*$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
GIB = 1024**3

# --- inputs ----------------------------------------------------------------------------------


class BuildInputError(ValueError):
    """A build input is invalid; the message names the variable or stack key."""


def check_source(source: Any, where: str = "vllm.source") -> dict[str, Any]:
    """Validate a stack's ``vllm.source`` block and return it with defaults filled in."""
    if not isinstance(source, Mapping):
        raise BuildInputError(
            f"{where}: the stack has no source block (expected a mapping with url, sha256, "
            f"subdir, target_device, patches), got {type(source).__name__}"
        )
    out = dict(source)
    for key in ("url", "sha256", "subdir", "target_device"):
        if not isinstance(out.get(key), str) or not out[key]:
            raise BuildInputError(
                f"{where}.{key}: expected a non-empty string, got {out.get(key)!r}"
            )
    if not out["url"].startswith(("https://", "http://", "file://")):
        raise BuildInputError(
            f"{where}.url: expected an http(s):// or file:// URL, got {out['url']!r}"
        )
    if not _SHA256_RE.match(out["sha256"]):
        raise BuildInputError(
            f"{where}.sha256: expected 64 lowercase hex digits, got {out['sha256']!r}"
        )
    if out["target_device"] not in TARGET_DEVICES:
        raise BuildInputError(
            f"{where}.target_device: {out['target_device']!r} is not one of "
            + ", ".join(TARGET_DEVICES)
        )
    out.setdefault("patches", None)
    out.setdefault("build_requirements", ["requirements-build.txt"])
    out.setdefault("runtime_requirements", ["requirements-common.txt"])
    out.setdefault("extension_modules", [])
    for key in ("build_requirements", "runtime_requirements", "extension_modules"):
        value = out[key]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise BuildInputError(f"{where}.{key}: expected a list of strings, got {value!r}")
    if out["patches"] is not None and (not isinstance(out["patches"], str) or not out["patches"]):
        raise BuildInputError(
            f"{where}.patches: expected a directory name or null, got {out['patches']!r}"
        )
    return out


def split_archs(value: str | Sequence[str] | None) -> list[str]:
    """``"gfx942;gfx90a"``, ``"gfx942,gfx90a"`` or a list -> ``["gfx942", "gfx90a"]``."""
    if value is None:
        return []
    items = re.split(r"[;,\s]+", value) if isinstance(value, str) else list(value)
    seen: list[str] = []
    for item in items:
        item = str(item).strip()
        if item and item not in seen:
            seen.append(item)
    return seen


def resolve_archs(
    override: str | Sequence[str] | None,
    facts_archs: Sequence[str] | None,
    stack_archs: Sequence[str],
    target_device: str,
    override_var: str = "vllm_source_pytorch_rocm_arch",
) -> tuple[list[str], str]:
    """The GPU archs to compile for and where they came from (override, gpu_facts, stack).

    The override wins; else the archs gpu_facts found on the host; else the stack's list.
    For a ROCm target every arch must be one the stack supports (a wrong arch compiles fine
    and dies at run time with illegal-instruction errors). Feature suffixes such as
    ``gfx942:sramecc+:xnack-`` are reduced to the base arch.
    """
    if split_archs(override):
        archs, origin = split_archs(override), override_var
    elif facts_archs:
        archs, origin = split_archs(facts_archs), "gpu_facts"
    else:
        archs, origin = split_archs(stack_archs), "stack gpu_archs"
    archs = [a.split(":", 1)[0] for a in archs]
    archs = list(dict.fromkeys(archs))
    for arch in archs:
        if not _ARCH_RE.match(arch):
            raise BuildInputError(f"{origin}: {arch!r} is not a GPU arch name like gfx942")
    if target_device in ROCM_TARGETS:
        if not archs:
            raise BuildInputError(
                f"no GPU arch to build for: set {override_var}, run gpu_facts, "
                "or give the stack gpu_archs"
            )
        unsupported = [a for a in archs if a not in stack_archs]
        if unsupported:
            raise BuildInputError(
                f"{origin}: {', '.join(unsupported)} not in the stack's gpu_archs "
                f"({', '.join(stack_archs) or 'none'}); set {override_var} to build anyway"
            )
    return archs, origin


# --- resources -------------------------------------------------------------------------------


def parse_meminfo(text: str) -> int:
    """Bytes available for new work (``MemAvailable``; ``MemFree`` on very old kernels)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"^(\w+):\s+(\d+)\s*kB", line)
        if match:
            values[match.group(1)] = int(match.group(2)) * 1024
    for key in ("MemAvailable", "MemFree"):
        if key in values:
            return values[key]
    raise BuildInputError("/proc/meminfo has neither MemAvailable nor MemFree")


def max_jobs(
    cores: int, mem_available: int, gib_per_job: float, override: int = 0
) -> tuple[int, str]:
    """``MAX_JOBS`` and the reason: the override, else ``min(cores, available GiB // per job)``."""
    if override and override > 0:
        return override, "vllm_source_max_jobs"
    if gib_per_job <= 0:
        raise BuildInputError(f"vllm_source_gib_per_job must be > 0, got {gib_per_job}")
    by_mem = int(mem_available // int(gib_per_job * GIB))
    jobs = max(1, min(cores, by_mem))
    reason = "cores" if cores <= by_mem else "memory"
    return jobs, (
        f"min({cores} cores, {mem_available / GIB:.1f} GiB available / "
        f"{gib_per_job:g} GiB per job) -> {reason}"
    )


# --- environment and key ---------------------------------------------------------------------


def build_env(
    target_device: str,
    archs: Sequence[str],
    jobs: int,
    venv: str,
    rocm_path: str | None,
    extra: Mapping[str, str] | None = None,
    base_path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
) -> dict[str, str]:
    """The environment ``setup.py bdist_wheel`` runs with (added to the host's own)."""
    env: dict[str, str] = {
        "VLLM_TARGET_DEVICE": target_device,
        "MAX_JOBS": str(jobs),
        "PATH": f"{venv}/bin:{base_path}",
    }
    if target_device in ROCM_TARGETS:
        if not rocm_path:
            raise BuildInputError("the stack has no rocm.path and vllm_source_rocm_path is empty")
        env.update(
            {
                "PYTORCH_ROCM_ARCH": ";".join(archs),
                "ROCM_PATH": rocm_path,
                "HIP_PATH": rocm_path,
                "PATH": f"{venv}/bin:{rocm_path}/bin:{base_path}",
            }
        )
    for key, value in (extra or {}).items():
        if key in ("MAX_JOBS", "PYTORCH_ROCM_ARCH", "VLLM_TARGET_DEVICE"):
            raise BuildInputError(
                f"vllm_source_build_env: set {key} through its own variable, "
                "not the extra environment"
            )
        env[str(key)] = str(value)
    return env


def key_inputs(
    vllm_version: str,
    source: Mapping[str, Any],
    patches: Sequence[Mapping[str, str]],
    torch_version: str,
    torch_index: str | None,
    rocm_version: str | None,
    archs: Sequence[str],
    extra_env: Mapping[str, str] | None,
) -> dict[str, Any]:
    """Everything that changes the wheel, as one canonical mapping (hashed by build_key).

    ``patches`` is the ordered list of ``{"name", "sha256"}`` of the series. The archs count
    only for targets that compile GPU code.
    """
    target = str(source["target_device"])
    return {
        "vllm": {"version": vllm_version, "url": source["url"], "sha256": source["sha256"]},
        "patches": [{"name": p["name"], "sha256": p["sha256"]} for p in patches],
        "torch": {"version": torch_version, "index": torch_index},
        "rocm": rocm_version if target in ROCM_TARGETS else None,
        "archs": list(archs) if target in ROCM_TARGETS else [],
        "knobs": {"target_device": target, "env": dict(sorted((extra_env or {}).items()))},
    }


def build_key(inputs: Mapping[str, Any]) -> str:
    """First 16 hex digits of the SHA-256 of the canonical JSON of :func:`key_inputs`."""
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def read_stamp(path: str | Path) -> dict[str, Any] | None:
    """The stamp a finished install wrote, or None (missing or unreadable)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --- requirements ----------------------------------------------------------------------------


def _req_name(line: str) -> str:
    match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
    return match.group(1).lower().replace("_", "-") if match else ""


def requirements_from(
    root: str | Path, files: Iterable[str], drop: Sequence[str] = STACK_OWNED
) -> list[str]:
    """Requirement lines of ``files`` (relative to ``root``), ``-r`` followed, comments and
    pip options removed, without the packages named in ``drop``; order kept, no duplicates."""
    root = Path(root)
    out: list[str] = []

    def read(name: str, seen: tuple[str, ...]) -> None:
        path = root / name
        if name in seen:
            raise BuildInputError(f"{path}: '-r' include loop")
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise BuildInputError(f"cannot read the requirements file {path}: {exc}") from exc
        for raw in text.splitlines():
            line = raw.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith(("-r ", "--requirement ")):
                read(line.split(None, 1)[1].strip(), (*seen, name))
                continue
            if line.startswith("-"):
                continue
            if _req_name(line) in drop:
                continue
            if line not in out:
                out.append(line)

    for name in files:
        read(name, ())
    return out


def tail(text: str, lines: int = 40) -> list[str]:
    """The last ``lines`` non-empty lines of ``text``."""
    kept = [line for line in text.splitlines() if line.strip()]
    return kept[-lines:]


# --- running the build -----------------------------------------------------------------------


def find_wheel(dist_dir: str | Path, name: str = "vllm") -> Path | None:
    """The newest ``<name>-*.whl`` in ``dist_dir``."""
    wheels = sorted(Path(dist_dir).glob(f"{name}-*.whl"), key=lambda p: p.stat().st_mtime)
    return wheels[-1] if wheels else None


def run_build(
    src: str,
    python: str,
    env: Mapping[str, str],
    log_path: str,
    dist_dir: str,
    base_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``python setup.py bdist_wheel --dist-dir dist_dir`` in ``src`` with ``env`` over
    ``base_env``, stdout and stderr to ``log_path``. Returns ``{rc, wheel, sha256}`` on success,
    ``{rc, category, evidence, hint, tail}`` on failure."""
    import os
    import subprocess

    full_env = dict(os.environ if base_env is None else base_env)
    full_env.update(env)
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    Path(dist_dir).mkdir(parents=True, exist_ok=True)
    argv = [python, "setup.py", "bdist_wheel", "--dist-dir", dist_dir]
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("# " + " ".join(f"{k}={v}" for k, v in sorted(env.items())) + "\n")
        log.write("# " + " ".join(argv) + "\n")
        log.flush()
        proc = subprocess.run(
            argv, cwd=src, env=full_env, stdout=log, stderr=subprocess.STDOUT, check=False
        )
    text = Path(log_path).read_text(encoding="utf-8", errors="replace")
    wheel = find_wheel(dist_dir) if proc.returncode == 0 else None
    if proc.returncode == 0 and wheel is not None:
        return {"rc": 0, "wheel": str(wheel), "sha256": sha256_file(wheel)}
    found = failure(text, proc.returncode, dist_dir)
    return {
        "rc": proc.returncode if proc.returncode != 0 else 1,
        "category": found.cls,
        "evidence": found.line,
        "hint": found.fix,
        "tail": tail(text),
    }


def failure(text: str, returncode: int, dist_dir: str) -> build_log.BuildVerdict:
    """The class of a failed build: its log's, else a SIGKILL is an OOM kill; a build that
    exited 0 without a wheel is unknown whatever its log says."""
    if returncode == 0:
        return build_log.verdict(
            build_log.UNKNOWN, f"setup.py succeeded but left no vllm-*.whl in {dist_dir}"
        )
    found = build_log.classify(text)
    if found.cls == build_log.UNKNOWN and returncode in (-9, 137):
        return build_log.verdict(
            "build_oom_kill", f"setup.py was killed by signal 9 (rc {returncode})"
        )
    return found
