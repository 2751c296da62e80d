"""The harness's task clock: the task_times callback writes a line per task (and nothing to
stdout, so playbooks a test reads as JSON stay clean), scripts/task-times sums them per run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent

PLAYBOOK = """
- name: Two tasks
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Sleep a little
      ansible.builtin.command: sleep 0.3
      changed_when: false
    - name: Say something
      ansible.builtin.debug:
        msg: hello
"""


def play(tmp_path: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    book = tmp_path / "two.yml"
    book.write_text(PLAYBOOK)
    env = dict(
        os.environ,
        INSTINCT_TASK_TIMES=str(out),
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_CALLBACK_PLUGINS=str(ROOT / "molecule/shared/callback_plugins"),
        ANSIBLE_CALLBACKS_ENABLED="task_times",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
    )
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(book), *extra],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )


def test_a_line_per_task_and_clean_stdout(tmp_path: Path) -> None:
    out = tmp_path / "tasks.tsv"
    result = play(tmp_path, out)
    json.loads(result.stdout)  # the json callback's output is still the whole of stdout
    lines = [line.split("\t") for line in out.read_text().splitlines()]
    assert [f[5] for f in lines] == ["Sleep a little", "Say something"]
    assert {f[2] for f in lines} == {"two.yml"} and {f[3] for f in lines} == {"run"}
    assert float(lines[0][1]) >= 0.3
    assert lines[0][6] == "1"


def test_runs_numbered_and_summed(tmp_path: Path) -> None:
    out = tmp_path / "tasks.tsv"
    play(tmp_path, out)
    play(tmp_path, out)
    play(tmp_path, out, "--check")
    report = subprocess.run(
        [sys.executable, str(ROOT / "scripts/task-times"), "--top", "1", str(out)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    labels = [line.split("s  ", 1)[1] for line in report.splitlines()[1:4]]
    assert labels == ["two.yml (run)", "two.yml (run) #2", "two.yml (check)"]
    assert "x3   Sleep a little" in report.splitlines()[5]


def test_nothing_written_without_the_variable(tmp_path: Path) -> None:
    env_out = tmp_path / "never.tsv"
    book = tmp_path / "two.yml"
    book.write_text(PLAYBOOK)
    env = {k: v for k, v in os.environ.items() if k != "INSTINCT_TASK_TIMES"}
    env.update(
        ANSIBLE_CALLBACK_PLUGINS=str(ROOT / "molecule/shared/callback_plugins"),
        ANSIBLE_CALLBACKS_ENABLED="task_times",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
    )
    subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(book)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        check=True,
    )
    assert not env_out.exists() and not list(tmp_path.glob("*.tsv"))
