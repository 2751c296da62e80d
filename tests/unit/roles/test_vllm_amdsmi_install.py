"""Role vllm installs the amdsmi binding from the node's ROCm with the venv's own setuptools:
the task's pip arguments, rendered by Jinja as Ansible does, build the amdsmi stub (shaped like
ROCm 6.2.1's share/amd_smi) with no index and no find-links - which only works without pip's
isolated build environment (it would have to fetch setuptools)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import yaml

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "galaxy.yml").is_file())
TASKS = ROOT / "roles" / "vllm" / "tasks" / "rocm.yml"
STUB = ROOT / "tests" / "aptrepo" / "stubs" / "amd_smi"


def install_task() -> dict:
    (block,) = [t for t in yaml.safe_load(TASKS.read_text()) if "block" in t]
    (task,) = [t for t in block["block"] if "ansible.builtin.pip" in t]
    return task["ansible.builtin.pip"]


def rendered_args(pip_args: list[str]) -> list[str]:
    env = jinja2.Environment()
    env.filters["quote"] = shlex.quote
    text = env.from_string(install_task()["extra_args"]).render(_vllm_pip_args=pip_args)
    return shlex.split(text)


def test_the_binding_is_built_without_build_isolation():
    args = rendered_args(["--constraint", "/opt/vllm/lock.txt"])
    assert args == [
        "--constraint",
        "/opt/vllm/lock.txt",
        "--no-deps",
        "--force-reinstall",
        "--no-build-isolation",
    ]


def test_the_rendered_arguments_build_the_binding_offline(tmp_path: Path):
    args = rendered_args(["--no-index"])
    source = tmp_path / "amd_smi"  # pip builds in place: a copy keeps the stub clean
    shutil.copytree(STUB, source)
    env = {
        **os.environ,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_FIND_LINKS": "",
        "TMPDIR": str(tmp_path),
    }
    argv = [sys.executable, "-m", "pip", "install", "--target", str(tmp_path / "site"), *args]
    proc = subprocess.run(
        [*argv, str(source)], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "amdsmi" / "__init__.py").is_file()
