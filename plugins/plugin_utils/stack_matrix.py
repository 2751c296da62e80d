# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stack matrix: load ``files/stacks.yml``, merge extra stacks over it, validate, select.

A *stack* names everything that must agree on a node (OS and kernel flavour, ROCm repos and
packages, PyTorch, vLLM and how it is installed, GPU archs, model architectures it serves).
The data lives in ``<collection root>/files/stacks.yml``; this module is the only reader.

Extra stacks (the collection variable ``instinct_vllm_stacks_extra``) are merged over the
file by name:

* an entry whose name is already known is deep-merged over that stack (mappings merge key by
  key, every other value - lists included - replaces the old one), e.g. a site mirror:
  ``{"rocm-6.2.1": {"rocm": {"key_url": "https://mirror/rocm.gpg.key"}}}``;
* a new name is a complete stack, or names ``extends: <known stack>`` to start from a deep
  copy of that stack and merge its own keys over it.

A stack of the file itself may say ``extends: <stack of the file>`` too (the sandbox stack
that is ``rocm-6.2.1`` with only the device changed); it is resolved before the extra stacks
are merged, so an extra stack merged over the parent does not reach the child.

Only the standard library is imported at module import time; PyYAML (always present on an
Ansible controller) is imported when the file is read.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

STACK_VAR = "instinct_vllm_stack"
EXTRA_VAR = "instinct_vllm_stacks_extra"

#: Top-level keys every stack must have (value may be null where the schema allows it).
REQUIRED_KEYS: tuple[str, ...] = (
    "description",
    "os",
    "cpu_archs",
    "gpu_archs",
    "rocm",
    "torch",
    "vllm",
    "model_architectures",
    "min_vram_gib_per_gpu",
)
INSTALL_METHODS: tuple[str, ...] = ("wheel", "source", "container")
#: What vLLM's own platform detection may be expected to report (vllm.platform).
VLLM_PLATFORMS: tuple[str, ...] = ("rocm", "cuda", "cpu", "unspecified")
#: Kernel flavours a stack may list for an OS release (see ``kernel_flavour``).
KERNEL_FLAVOURS: tuple[str, ...] = ("ga", "hwe", "any")
#: ``vllm.attention.sliding_window``: how the stack's default attention backend treats a
#: model's sliding window (optional key; absent means supported).
SLIDING_WINDOW_SUPPORT: tuple[str, ...] = ("supported", "requires_ck_flash_attention")
#: Keys of the optional ``vllm.service`` block: what role vllm_service must do for the stack.
SERVICE_KEYS: tuple[str, ...] = (
    "flags",
    "environment",
    "capabilities",
    "gpu_memory_utilization_max",
)
_CAPABILITY = re.compile(r"^CAP_[A-Z0-9_]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class StackError(ValueError):
    """A stack is unknown or malformed; the message names the variable or file and the key."""


def default_matrix_path() -> Path:
    """``<collection root>/files/stacks.yml`` (this file is <root>/plugins/module_utils/)."""
    return Path(__file__).resolve().parents[2] / "files" / "stacks.yml"


def load_matrix_file(path: Path | None = None) -> dict[str, Any]:
    """Read the whole matrix file (``stacks`` plus OS tables) as a dict."""
    import yaml  # controller-side only; see the module docstring

    path = path or default_matrix_path()
    try:
        with path.open(encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise StackError(f"cannot read the stack matrix {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise StackError(f"the stack matrix {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("stacks"), dict):
        raise StackError(f"the stack matrix {path} must be a mapping with a 'stacks' mapping")
    return data


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``over`` merged in: mappings recurse, anything else replaces."""
    merged: dict[str, Any] = copy.deepcopy(dict(base))
    for key, value in over.items():
        old = merged.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(old, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def resolve_file_extends(base: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The file's stacks with each ``extends: <stack>`` replaced by that stack deep-merged
    under the entry's own keys (chains allowed; a cycle or an unknown parent is an error
    naming the file's stack)."""
    resolved: dict[str, dict[str, Any]] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> dict[str, Any]:
        if name in resolved:
            return resolved[name]
        where = f"files/stacks.yml stack '{name}'"
        entry = base[name]
        if not isinstance(entry, Mapping):
            return entry  # validate_stack names the type later
        over = dict(entry)
        parent = over.pop("extends", None)
        if parent is None:
            resolved[name] = copy.deepcopy(over)
        elif not isinstance(parent, str) or parent not in base:
            raise StackError(
                f"{where}.extends: unknown stack {parent!r}; known stacks: "
                + ", ".join(sorted(base))
            )
        elif parent in chain:
            raise StackError(f"{where}.extends: a cycle ({' -> '.join((*chain, name, parent))})")
        else:
            resolved[name] = deep_merge(resolve(parent, (*chain, name)), over)
        return resolved[name]

    return {name: resolve(name, ()) for name in base}


def merge_stacks(
    base: Mapping[str, Any], extra: Mapping[str, Any] | None
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Merge ``extra`` stacks over ``base`` (the file's stacks, ``extends`` resolved first).

    Returns the merged stacks and, for each name, where it came from (used in error messages).
    """
    stacks: dict[str, dict[str, Any]] = resolve_file_extends(base)
    origin: dict[str, str] = {name: f"files/stacks.yml stack '{name}'" for name in stacks}
    if extra is None:
        return stacks, origin
    if not isinstance(extra, Mapping):
        raise StackError(
            f"{EXTRA_VAR} must be a mapping of stack name to stack, got {type(extra).__name__}"
        )
    for name, over in extra.items():
        where = f"{EXTRA_VAR}['{name}']"
        if not isinstance(name, str) or not name:
            raise StackError(f"{EXTRA_VAR}: stack names must be non-empty strings, got {name!r}")
        if not isinstance(over, Mapping):
            raise StackError(f"{where} must be a mapping, got {type(over).__name__}")
        over = dict(over)
        parent = over.pop("extends", None)
        if name in stacks:
            if parent is not None:
                raise StackError(
                    f"{where}.extends: '{name}' already exists; merge over it directly"
                )
            stacks[name] = deep_merge(stacks[name], over)
            origin[name] = f"{origin[name]} merged with {where}"
        elif parent is not None:
            if parent not in stacks:
                raise StackError(
                    f"{where}.extends: unknown stack '{parent}'; known stacks: "
                    + ", ".join(sorted(stacks))
                )
            stacks[name] = deep_merge(stacks[parent], over)
            origin[name] = f"{where} (extends '{parent}')"
        else:
            stacks[name] = copy.deepcopy(over)
            origin[name] = where
    return stacks, origin


# --- validation ------------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _need_str(where: str, value: Any, nullable: bool = False) -> None:
    if value is None and nullable:
        return
    if not isinstance(value, str) or not value:
        raise StackError(f"{where}: expected a non-empty string, got {_type_name(value)} {value!r}")


def _need_str_list(where: str, value: Any, allow_empty: bool = True) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise StackError(f"{where}: expected a list of strings, got {_type_name(value)} {value!r}")
    if not allow_empty and not value:
        raise StackError(f"{where}: must not be empty")


def _need_mapping(where: str, value: Any, keys: tuple[str, ...]) -> None:
    if not isinstance(value, Mapping):
        raise StackError(f"{where}: expected a mapping, got {_type_name(value)}")
    missing = [k for k in keys if k not in value]
    if missing:
        raise StackError(f"{where}: missing key(s) {', '.join(missing)}")


_SERIES = re.compile(r"^\d+\.\d+$")


def _validate_os(where: str, value: Any) -> None:
    if not isinstance(value, list) or not value:
        raise StackError(f"{where}: expected a non-empty list of OS releases")
    for i, entry in enumerate(value):
        here = f"{where}[{i}]"
        _need_mapping(here, entry, ("distribution", "version", "codename", "kernel_flavours"))
        _need_str(f"{here}.distribution", entry["distribution"])
        _need_str(f"{here}.version", entry["version"])
        _need_str(f"{here}.codename", entry["codename"])
        _need_str_list(f"{here}.kernel_flavours", entry["kernel_flavours"], allow_empty=False)
        bad = [f for f in entry["kernel_flavours"] if f not in KERNEL_FLAVOURS]
        if bad:
            raise StackError(
                f"{here}.kernel_flavours: unknown flavour(s) {', '.join(bad)}; "
                f"use {', '.join(KERNEL_FLAVOURS)}"
            )
        series = entry.get("kernel_series")
        if series is not None:
            _need_str_list(f"{here}.kernel_series", series, allow_empty=False)
            wrong = [s for s in series if not _SERIES.match(s)]
            if wrong:
                raise StackError(f'{here}.kernel_series: expected "X.Y" strings, got {wrong!r}')


def _validate_rocm(where: str, value: Any) -> None:
    if value is None:
        return
    keys = ("version", "key_url", "repos", "pin_origin", "driver_packages", "packages", "path")
    _need_mapping(where, value, keys)
    _need_str(f"{where}.version", value["version"])
    _need_str(f"{where}.key_url", value["key_url"])
    _need_str(f"{where}.pin_origin", value["pin_origin"], nullable=True)
    _need_str_list(f"{where}.driver_packages", value["driver_packages"])
    _need_str_list(f"{where}.packages", value["packages"], allow_empty=False)
    _need_str(f"{where}.path", value["path"])
    _validate_kernel_abi(f"{where}.kernel_abi", value.get("kernel_abi"))
    repos = value["repos"]
    if not isinstance(repos, list) or not repos:
        raise StackError(f"{where}.repos: expected a non-empty list of repositories")
    for i, repo in enumerate(repos):
        here = f"{where}.repos[{i}]"
        _need_mapping(here, repo, ("name", "uris", "suites", "components"))
        for key in ("name", "uris", "suites", "components"):
            _need_str(f"{here}.{key}", repo[key])


_KERNEL_ABI = re.compile(r"^(\d+)\.(\d+)\.(\d+)-(\d+)(?:[.-].*)?$")


def kernel_abi(kernel_release: Any) -> tuple[int, int, int, int] | None:
    """``'6.8.0-41-generic'`` -> ``(6, 8, 0, 41)`` (Ubuntu/Debian ``X.Y.Z-ABI[-flavour]``, the
    flavour ignored); None when the release has no ABI number."""
    match = _KERNEL_ABI.match(str(kernel_release))
    if match is None:
        return None
    major, minor, patch, abi = (int(g) for g in match.groups())
    return major, minor, patch, abi


def _validate_kernel_abi(where: str, value: Any) -> None:
    """Optional ``rocm.kernel_abi``: ``{min: "X.Y.Z-N", max: "X.Y.Z-N" | null, source: str}``."""
    if value is None:
        return
    _need_mapping(where, value, ("min",))
    if "source" in value:
        _need_str(f"{where}.source", value["source"], nullable=True)
    low, high = kernel_abi(value["min"]), kernel_abi(value.get("max"))
    if low is None:
        raise StackError(f'{where}.min: expected a kernel release "X.Y.Z-N", got {value["min"]!r}')
    if value.get("max") is not None and (high is None or high < low):
        raise StackError(
            f'{where}.max: expected a kernel release "X.Y.Z-N" not below min, got {value["max"]!r}'
        )


def _int_greater_pattern(number: int) -> str:
    """A POSIX extended regular expression matching the decimal integers above ``number``
    (no leading zeros), e.g. 41 -> ``(4[2-9]|[5-9][0-9]|[1-9][0-9]{2,})``."""
    digits = str(number)
    options = []
    for i, digit in enumerate(digits):
        if digit == "9":
            continue
        rest = len(digits) - i - 1
        higher = "9" if digit == "8" else f"[{int(digit) + 1}-9]"
        options.append(digits[:i] + higher + ("[0-9]" * rest if rest < 2 else f"[0-9]{{{rest}}}"))
    options.append(f"[1-9][0-9]{{{len(digits)},}}")
    return "(" + "|".join(options) + ")"


def newer_kernel_pattern(abi: Any) -> str:
    """A POSIX extended regular expression (what APT's ``Pin: version /.../`` takes) matching
    the versions of kernel packages of every release newer than ``abi`` (``"6.8.0-41"``, a
    flavour suffix ignored): a higher ABI number, patch level, minor or major version. Ubuntu
    versions a kernel package by its ABI: linux-image-6.8.0-41-generic is ``6.8.0-41.41``,
    an HWE kernel ``6.11.0-19.19~24.04.1``."""
    parsed = kernel_abi(abi)
    if parsed is None:
        raise StackError(f'newer_kernel_pattern: expected a kernel release "X.Y.Z-N", got {abi!r}')
    number = "(0|[1-9][0-9]*)"
    parts = [str(p) for p in parsed]
    versions = []
    for i in range(4):
        tail = [number] * (3 - i)
        fields = [*parts[:i], _int_greater_pattern(parsed[i]), *tail]
        versions.append("\\.".join(fields[:3]) + "-" + fields[3])
    return f"^({'|'.join(versions)})([.+~].*)?$"


def _validate_torch(where: str, value: Any) -> None:
    _need_mapping(where, value, ("version", "index_url", "packages"))
    _need_str(f"{where}.version", value["version"], nullable=True)
    _need_str(f"{where}.index_url", value["index_url"], nullable=True)
    _need_str_list(f"{where}.packages", value["packages"])
    if "triton" in value:
        _need_str(f"{where}.triton", value["triton"], nullable=True)


def _validate_lock(where: str, value: Any) -> None:
    """Optional ``lock``: the stack's pinned companion set (files/locks/<file>)."""
    if value is None:
        return
    _need_mapping(where, value, ("file", "bounds"))
    _need_str(f"{where}.file", value["file"])
    _need_str_list(f"{where}.bounds", value["bounds"])
    for key in ("drop", "free"):
        if key in value:
            _need_str_list(f"{where}.{key}", value[key])
    for key in ("follow", "python"):
        if key in value:
            _need_str(f"{where}.{key}", value[key], nullable=True)
    for key in ("requirements", "constraints"):  # null: none (a stack extending one with them)
        if value.get(key) is not None:
            _need_str_list(f"{where}.{key}", value[key], allow_empty=False)


def _validate_service(where: str, value: Any) -> None:
    """Optional ``vllm.service``: flags forced on the server, environment, unit capabilities and
    the highest gpu-memory-utilization the stack's vLLM starts with (role vllm_service)."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise StackError(f"{where}: expected a mapping, got {_type_name(value)}")
    unknown = sorted(str(k) for k in value if k not in SERVICE_KEYS)
    if unknown:
        raise StackError(
            f"{where}: unknown key(s) {', '.join(unknown)}; use {', '.join(SERVICE_KEYS)}"
        )
    for key in ("flags", "environment"):
        entries = value.get(key, {})
        if not isinstance(entries, Mapping) or not all(isinstance(k, str) and k for k in entries):
            raise StackError(
                f"{where}.{key}: expected a mapping of names to values, got {entries!r}"
            )
    wrong = [k for k in value.get("environment", {}) if not _ENV_NAME.match(k)]
    if wrong:
        raise StackError(f"{where}.environment: not variable names: {wrong!r}")
    caps = value.get("capabilities", [])
    _need_str_list(f"{where}.capabilities", caps)
    wrong = [c for c in caps if not _CAPABILITY.match(c)]
    if wrong:
        raise StackError(f'{where}.capabilities: expected "CAP_..." names, got {wrong!r}')
    cap = value.get("gpu_memory_utilization_max")
    if cap is not None and (
        isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap <= 1
    ):
        raise StackError(
            f"{where}.gpu_memory_utilization_max: expected a number in (0, 1] or null, got {cap!r}"
        )


def _validate_vllm(where: str, value: Any) -> None:
    _need_mapping(where, value, ("version", "install_method", "package", "source"))
    _need_str(f"{where}.version", value["version"])
    _need_str(f"{where}.package", value["package"])
    if value["install_method"] not in INSTALL_METHODS:
        raise StackError(
            f"{where}.install_method: expected one of {', '.join(INSTALL_METHODS)}, "
            f"got {value['install_method']!r}"
        )
    attention = value.get("attention")
    if attention is not None:
        _need_mapping(f"{where}.attention", attention, ("sliding_window",))
        if attention["sliding_window"] not in SLIDING_WINDOW_SUPPORT:
            raise StackError(
                f"{where}.attention.sliding_window: expected one of "
                f"{', '.join(SLIDING_WINDOW_SUPPORT)}, got {attention['sliding_window']!r}"
            )
    if value["source"] is not None and not isinstance(value["source"], Mapping):
        raise StackError(
            f"{where}.source: expected a mapping or null, got {_type_name(value['source'])}"
        )
    for key in ("index_url", "pip_spec", "python"):
        if key in value:
            _need_str(f"{where}.{key}", value[key], nullable=True)
    if "service" in value:
        _validate_service(f"{where}.service", value["service"])
    if "platform" in value and value["platform"] not in VLLM_PLATFORMS:
        raise StackError(
            f"{where}.platform: expected one of {', '.join(VLLM_PLATFORMS)}, "
            f"got {value['platform']!r}"
        )


def validate_stack(stack: Any, where: str) -> None:
    """Raise StackError naming ``where`` and the key if ``stack`` does not follow the schema."""
    if not isinstance(stack, Mapping):
        raise StackError(f"{where}: expected a mapping, got {_type_name(stack)}")
    missing = [k for k in REQUIRED_KEYS if k not in stack]
    if missing:
        raise StackError(f"{where}: missing key(s) {', '.join(missing)}")
    _need_str(f"{where}.description", stack["description"])
    _validate_os(f"{where}.os", stack["os"])
    _need_str_list(f"{where}.cpu_archs", stack["cpu_archs"], allow_empty=False)
    _need_str_list(f"{where}.gpu_archs", stack["gpu_archs"])
    _validate_rocm(f"{where}.rocm", stack["rocm"])
    _validate_torch(f"{where}.torch", stack["torch"])
    _validate_vllm(f"{where}.vllm", stack["vllm"])
    if "lock" in stack:
        _validate_lock(f"{where}.lock", stack["lock"])
        for key in ("requirements", "constraints"):
            if (stack["lock"] or {}).get(key) and stack["vllm"]["source"] is not None:
                raise StackError(
                    f"{where}.lock.{key}: only for a wheel stack (vllm.source names the "
                    "requirement files of a source stack)"
                )
    _need_str_list(f"{where}.model_architectures", stack["model_architectures"], allow_empty=False)
    vram = stack["min_vram_gib_per_gpu"]
    if vram is not None and (
        isinstance(vram, bool) or not isinstance(vram, (int, float)) or vram <= 0
    ):
        raise StackError(
            f"{where}.min_vram_gib_per_gpu: expected a positive number or null, got {vram!r}"
        )
    if stack["rocm"] is None and stack["gpu_archs"]:
        raise StackError(f"{where}.gpu_archs: a stack without rocm cannot list GPU archs")


# --- selection -------------------------------------------------------------------------------


def all_stacks(
    extra: Mapping[str, Any] | None = None, path: Path | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Every stack (file merged with ``extra``) and each one's origin, unvalidated."""
    return merge_stacks(load_matrix_file(path)["stacks"], extra)


def default_stack_name(path: Path | None = None) -> str:
    """The matrix file's top-level ``default``: the stack used when no name is given."""
    data = load_matrix_file(path)
    name = data.get("default")
    if not isinstance(name, str) or name not in data["stacks"]:
        raise StackError(
            f"the stack matrix {path or default_matrix_path()}: 'default' must name one of its "
            f"stacks ({', '.join(sorted(data['stacks']))}), got {name!r}"
        )
    return name


def get_stack(
    name: Any, extra: Mapping[str, Any] | None = None, path: Path | None = None
) -> dict[str, Any]:
    """The validated stack ``name`` with its ``name`` key added.

    ``name`` None means the matrix default (``default_stack_name``).
    """
    if name is None:
        name = default_stack_name(path)
    if not isinstance(name, str) or not name:
        raise StackError(
            f"{STACK_VAR}: expected a stack name (string), got {_type_name(name)} {name!r}"
        )
    stacks, origin = all_stacks(extra, path)
    if name not in stacks:
        raise StackError(
            f"{STACK_VAR}: unknown stack '{name}'; known stacks: {', '.join(sorted(stacks))} "
            f"(add one in {EXTRA_VAR} or files/stacks.yml)"
        )
    stack = stacks[name]
    validate_stack(stack, origin[name])
    return {"name": name, **stack}


def stack_names(extra: Mapping[str, Any] | None = None, path: Path | None = None) -> list[str]:
    """Sorted names of every known stack."""
    return sorted(all_stacks(extra, path)[0])


def stacks_serving(
    architecture: str, extra: Mapping[str, Any] | None = None, path: Path | None = None
) -> list[str]:
    """Sorted names of the stacks whose ``model_architectures`` include ``architecture``."""
    return serving(all_stacks(extra, path)[0], architecture)


def serving(stacks: Mapping[str, Any], architecture: str) -> list[str]:
    """``stacks_serving`` over a matrix already merged (``all_stacks``, the fact
    ``instinct_vllm_stack_matrix``)."""
    return sorted(
        name
        for name, stack in stacks.items()
        if isinstance(stack, Mapping) and architecture in (stack.get("model_architectures") or [])
    )


def stacks_for_os(
    distribution: str,
    version: str,
    flavour: str | None = None,
    extra: Mapping[str, Any] | None = None,
    path: Path | None = None,
    series: str | None = None,
) -> list[str]:
    """Sorted names of the stacks that support this OS release (and kernel flavour/series)."""
    return for_os(all_stacks(extra, path)[0], distribution, version, flavour, series)


def for_os(
    stacks: Mapping[str, Any],
    distribution: str,
    version: str,
    flavour: str | None = None,
    series: str | None = None,
) -> list[str]:
    """``stacks_for_os`` over a matrix already merged (``all_stacks``, the fact
    ``instinct_vllm_stack_matrix``)."""
    names = []
    for name, stack in stacks.items():
        if not isinstance(stack, Mapping):
            continue
        entry = os_entry(stack, distribution, version)
        if entry is None:
            continue
        if flavour is None or flavour_supported(entry, flavour, series):
            names.append(name)
    return sorted(names)


# --- OS and kernel helpers -------------------------------------------------------------------


def version_matches(wanted: Any, actual: Any) -> bool:
    """``"12"`` matches Debian's ``"12"`` and ``"12.8"``; ``"24.04"`` matches ``"24.04"``."""
    wanted, actual = str(wanted), str(actual)
    return actual == wanted or actual.startswith(wanted + ".")


def os_entry(stack: Mapping[str, Any], distribution: str, version: str) -> dict[str, Any] | None:
    """The stack's OS entry for this distribution and version (case-insensitive name; a
    point release such as Debian's ``12.8`` matches the entry ``12``)."""
    for entry in stack.get("os") or []:
        if (
            isinstance(entry, Mapping)
            and str(entry.get("distribution", "")).lower() == str(distribution).lower()
            and version_matches(entry.get("version"), version)
        ):
            return dict(entry)
    return None


def flavour_supported(entry: Mapping[str, Any], flavour: str, series: str | None = None) -> bool:
    """Whether an OS entry accepts this kernel flavour (and series, when the entry lists some)."""
    flavours = entry.get("kernel_flavours") or []
    if "any" in flavours:
        return True
    if flavour not in flavours:
        return False
    allowed = entry.get("kernel_series")
    return not allowed or series is None or series in allowed


def check_os(
    stack: Mapping[str, Any],
    distribution: str,
    version: str,
    kernel_release: str,
    ga_table: Mapping[str, Any],
) -> dict[str, Any]:
    """Check an OS release and running kernel against a stack.

    Returns ``{ok, os_supported, flavour, series, supported_flavours, supported_series, msg}``;
    ``msg`` is empty when ``ok``.
    """
    flavour = kernel_flavour(kernel_release, distribution, version, ga_table)
    series = kernel_series(kernel_release)
    entry = os_entry(stack, distribution, version)
    name = stack.get("name", "?")
    result: dict[str, Any] = {
        "ok": False,
        "os_supported": entry is not None,
        "flavour": flavour,
        "series": series,
        "supported_flavours": list(entry.get("kernel_flavours") or []) if entry else [],
        "supported_series": list(entry.get("kernel_series") or []) if entry else [],
        "msg": "",
    }
    if entry is None:
        releases = ", ".join(
            f"{e.get('distribution')} {e.get('version')}" for e in stack.get("os") or []
        )
        result["msg"] = (
            f"{distribution} {version} is not supported by stack '{name}' (supported: {releases})"
        )
        return result
    if not flavour_supported(entry, flavour, series):
        wanted = "/".join(result["supported_flavours"])
        if result["supported_series"]:
            wanted += f" (kernel series {', '.join(result['supported_series'])})"
        result["msg"] = (
            f"kernel {kernel_release} ({flavour} kernel, series {series}) is not supported by "
            f"stack '{name}' on {distribution} {version}: it needs a {wanted} kernel"
        )
        return result
    result["ok"] = True
    return result


_KERNEL_SERIES = re.compile(r"^(\d+)\.(\d+)")


def kernel_series(kernel_release: str) -> str | None:
    """``'6.8.0-45-generic'`` -> ``'6.8'``; None when the release does not start with X.Y."""
    match = _KERNEL_SERIES.match(str(kernel_release))
    return f"{match.group(1)}.{match.group(2)}" if match else None


def kernel_flavour(
    kernel_release: str, distribution: str, version: str, ga_kernels: Mapping[str, Any]
) -> str:
    """Classify a running kernel as ``ga`` (the release's original series) or ``hwe``.

    ``ga_kernels`` maps ``"<Distribution> <version>"`` to the GA kernel series (the
    ``ga_kernels`` table of files/stacks.yml). Ubuntu's HWE kernels keep the ``-generic``
    suffix, so the series, not the suffix, tells them apart. A release missing from the table
    is ``unknown``.
    """
    ga = None
    for key, series in ga_kernels.items():
        dist, _sep, ver = str(key).partition(" ")
        if dist.lower() == str(distribution).lower() and version_matches(ver, version):
            ga = str(series)
    running = kernel_series(kernel_release)
    if ga is None or running is None:
        return "unknown"
    return "ga" if running == ga else "hwe"


def ga_kernels(path: Path | None = None) -> dict[str, str]:
    """The ``ga_kernels`` table of the matrix file."""
    table = load_matrix_file(path).get("ga_kernels") or {}
    if not isinstance(table, Mapping):
        raise StackError("files/stacks.yml: ga_kernels must be a mapping")
    return {str(k): str(v) for k, v in table.items()}
