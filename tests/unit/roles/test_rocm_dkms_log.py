"""Role rocm: a failed amdgpu-dkms install fails with the tail of the newest DKMS make.log
(roles/rocm/tasks/dkms_log.yml, the rescue of the driver install), run for real with
ansible-playbook on localhost against a temporary /var/lib/dkms/amdgpu stand-in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from local_play import run_local_playbook

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  connection: local
  tasks:
    - ansible.builtin.setup:
        gather_subset: [min]
    - ansible.builtin.include_role:
        name: instinct.vllm.rocm
        tasks_from: dkms_log.yml
"""
APT_ERROR = (
    "E: Sub-process /usr/bin/dpkg returned an error code (1); "
    "Error! Bad return status for module build on kernel: 6.8.0-44-generic (x86_64)"
)


def run_rescue(tmp_path: Path, dkms_dir: Path) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK)
    variables = {
        "ansible_python_interpreter": sys.executable,
        "_rocm_dkms_dir": str(dkms_dir),
        "_rocm_driver_pkgs": ["amdgpu-dkms"],
        "instinct_vllm_stack_resolved": {
            "rocm": {"kernel_abi": {"min": "6.8.0-31", "max": "6.8.0-41"}}
        },
        "ansible_failed_result": {"failed": True, "msg": APT_ERROR},
    }
    return run_local_playbook(play, variables)


def test_failure_shows_the_tail_of_the_newest_make_log(tmp_path: Path) -> None:
    dkms = tmp_path / "dkms" / "amdgpu"
    old = dkms / "6.8.5-2009582.24.04" / "build" / "make.log"
    new = dkms / "6.8.5-2041575.24.04" / "build" / "make.log"
    for path in (old, new):
        path.parent.mkdir(parents=True)
    old.write_text("OLD-BUILD-LOG\n")
    os.utime(old, (1_000_000, 1_000_000))
    lines = [f"L{n:03d} CC [M] amd/amdgpu/file{n}.o" for n in range(1, 100)]
    lines.append(
        "L100 amdgpu_dm_helpers.c:563:64: error: passing argument 2 of drm_dp_add_payload_part2"
    )
    new.write_text("\n".join(lines) + "\n")
    run = run_rescue(tmp_path, dkms)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "amdgpu-dkms did not install on kernel" in out
    assert "Bad return status for module build" in out  # APT's error kept
    assert "L100 amdgpu_dm_helpers.c:563:64: error" in out and "L061" in out
    assert "L060" not in out  # the last 40 lines (rocm_dkms_log_lines) only
    assert "OLD-BUILD-LOG" not in out and str(new) in out
    assert "6.8.0-31 to 6.8.0-41" in out


def test_failure_without_a_build_log_says_so(tmp_path: Path) -> None:
    dkms = tmp_path / "dkms" / "amdgpu"
    dkms.mkdir(parents=True)
    run = run_rescue(tmp_path, dkms)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "no DKMS build log under" in out and "Bad return status" in out
