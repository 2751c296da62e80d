"""playbooks/acceptance.yml runs its checks as the service's user: a real ansible-playbook on
localhost whose become method is a recorder (it logs the user it was asked to become, then runs
the command as is), so the test sees what Ansible rendered for each check, not the YAML text.
cpu stack: the GPU checks skip, the platform probe runs against the stand-in vLLM package,
serve (mode temporary, check mode) skips, and so the fingerprint (no service to judge: its own
tests are in test_acceptance_fingerprint_playbook.py); every check still runs the module
through become."""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "acceptance.yml"
FAKE_VLLM = ROOT / "tests" / "unit" / "fixtures" / "acceptance" / "fake_vllm"
ROLE_DEFAULTS = ROOT / "roles" / "vllm_service" / "defaults" / "main.yml"

RECORD_BECOME = '''
DOCUMENTATION = """
name: record
short_description: Log the user to become, run the command as the login user (tests only)
description: Log the user to become, run the command as the login user (tests only).
author: instinct.vllm tests
options:
  become_user:
    description: The user to become.
    default: root
    vars:
      - name: ansible_become_user
    keyword:
      - name: become_user
"""
import os
import shlex

from ansible.plugins.become import BecomeBase


class BecomeModule(BecomeBase):
    name = "record"

    def build_become_command(self, cmd, shell):
        super().build_become_command(cmd, shell)
        if not cmd:
            return cmd
        log = shlex.quote(os.environ["RECORD_BECOME_LOG"])
        user = shlex.quote(self.get_option("become_user"))
        return f"echo {user} >> {log} && {self._build_success_command(cmd, shell)}"
'''


def login_user() -> tuple[str, str]:
    """This process's user and its primary group (id -nG lists it)."""
    entry = pwd.getpwuid(os.getuid())
    return entry.pw_name, grp.getgrgid(entry.pw_gid).gr_name


def run_acceptance(tmp_path: Path, **extra: object) -> tuple[subprocess.CompletedProcess, list]:
    plugins = tmp_path / "become"
    plugins.mkdir(exist_ok=True)
    (plugins / "record.py").write_text(RECORD_BECOME)
    log = tmp_path / "become.log"
    log.unlink(missing_ok=True)
    variables = {
        "instinct_vllm_hosts": "localhost",
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "ansible_become_method": "record",
        "instinct_vllm_stack": "cpu",
        "vllm_venv_python": sys.executable,
        "vllm_service_environment": {"PYTHONPATH": str(FAKE_VLLM), "FAKE_VLLM_PLATFORM": "CPU"},
        "acceptance_serve_mode": "temporary",
        "acceptance_report_dir": str(tmp_path / "reports"),
        **extra,
    }
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_BECOME_PLUGINS=str(plugins),
        # become even when the user to become is the login user (the first test's case)
        ANSIBLE_BECOME_ALLOW_SAME_USER="1",
        ANSIBLE_NOCOLOR="1",
        RECORD_BECOME_LOG=str(log),
    )
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "--check"]
    argv += [str(PLAYBOOK), "-e", json.dumps(variables)]
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False
    )
    became = log.read_text().split() if log.exists() else []
    return proc, became


def test_every_check_runs_as_the_service_user(tmp_path: Path):
    user, group = login_user()
    proc, became = run_acceptance(
        tmp_path, vllm_service_user=user, vllm_service_supplementary_groups=[group]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # gpu_matmul, vllm_platform, gpu_health, collectives, firmware, serve: each once, as
    # vllm_service_user; then kernel_log as root (reading the kernel log needs it). The
    # fingerprint (as root) did not run: serve had no service, only a temporary server.
    assert became == [user] * 6 + ["root"], proc.stdout
    # the gate's message, as the YAML callback wraps it
    assert (
        "gpu_matmul=skipped, vllm_platform=ok, gpu_health=skipped, serve=skipped, "
        "fingerprint=skipped, collectives=skipped, firmware=skipped, kernel_log=skipped"
    ) in " ".join(proc.stdout.split())


def test_without_the_variable_the_user_is_the_roles_default(tmp_path: Path):
    default = yaml.safe_load(ROLE_DEFAULTS.read_text())["vllm_service_user"]
    try:
        pwd.getpwnam(default)
        pytest.skip(f"this machine has a user {default}")
    except KeyError:
        pass
    proc, became = run_acceptance(tmp_path)
    assert proc.returncode != 0
    assert became == []  # stopped before any check ran
    assert f"The checks run as the service's user {default} (vllm_service_user)" in proc.stdout
    assert "no such user" in proc.stdout  # id's own words


def test_a_user_without_the_units_groups_is_refused(tmp_path: Path):
    user = login_user()[0]
    proc, became = run_acceptance(
        tmp_path, vllm_service_user=user, vllm_service_supplementary_groups=["no-such-group-x1"]
    )
    assert proc.returncode != 0 and became == []
    assert "it is not in no-such-group-x1." in proc.stdout
    assert "/dev/kfd and /dev/dri/renderD* belong to render" in proc.stdout
