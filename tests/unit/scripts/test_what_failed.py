"""scripts/test ends a failed run with the lines of each failed stage's log that name what failed
(pytest's FAILED and ERROR lines, ansible-test's ERROR: ones, Ansible's fatal ones, each with
the two lines after it, Molecule's CRITICAL ones): the end of the output is often all a CI page
shows."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

FLEET_LOG = """\
CRITICAL 'molecule/default/molecule.yml' glob failed.  Exiting.
INFO     default scenario not found, disabling shared state.
TASK [instinct.vllm.rollout : Drain the node] ****
ok: [fleet-node1]
fatal: [fleet-node2]: FAILED! => changed=false
  msg: the gateway did not drain fleet-node2 within 30 s
  rc: 1
PLAY RECAP ****
tests/test_fleet.py::test_both_nodes_in_rotation PASSED
FAILED tests/test_fleet.py::test_rolling_update_loses_no_request - assert 3 == 0
CRITICAL Ansible return code was 2, command was: ansible-playbook
"""


def what_failed(tmp_path: Path, *stages: str) -> str:
    text = (ROOT / "scripts" / "test").read_text()
    match = re.search(r"^what_failed\(\) \{.*?^\}\n", text, re.S | re.M)
    assert match, "what_failed() not found in scripts/test"
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "molecule-fleet.log").write_text(FLEET_LOG)
    (logs / "static.log").write_text("ruff ok\nERROR tests/unit/test_x.py - ImportError\n")
    script = f"ROOT={tmp_path}; LOGS={logs}\n{match.group(0)}what_failed \"$@\"\n"
    return subprocess.run(["bash", "-c", script, "what_failed", *stages], check=True,
                          capture_output=True, text=True).stdout


def test_a_failed_scenario_names_its_failed_task_and_test(tmp_path: Path) -> None:
    out = what_failed(tmp_path, "molecule:fleet")
    assert out.splitlines() == [
        "molecule:fleet (logs/molecule-fleet.log):",
        "  fatal: [fleet-node2]: FAILED! => changed=false",
        "    msg: the gateway did not drain fleet-node2 within 30 s",
        "    rc: 1",
        "  FAILED tests/test_fleet.py::test_rolling_update_loses_no_request - assert 3 == 0",
        "  CRITICAL Ansible return code was 2, command was: ansible-playbook",
    ]


def test_static_stages_share_one_log_printed_once(tmp_path: Path) -> None:
    out = what_failed(tmp_path, "ruff", "pytest-unit", "molecule:missing")
    assert out.splitlines() == [
        "ruff (logs/static.log):",
        "  ERROR tests/unit/test_x.py - ImportError",
    ]


SANITY_LOG = """\
Running sanity test "pylint"
ERROR: Found 1 pylint issue(s) which need to be resolved:
ERROR: tests/unit/test_x.py:13:29: disallowed-name: Disallowed name "_"
Running sanity test "shebang"
"""


def test_a_failed_sanity_test_names_the_file_and_the_rule(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "static.log").write_text(SANITY_LOG)
    text = (ROOT / "scripts" / "test").read_text()
    match = re.search(r"^what_failed\(\) \{.*?^\}\n", text, re.S | re.M)
    assert match
    script = f"ROOT={tmp_path}; LOGS={logs}\n{match.group(0)}what_failed ansible-test-sanity\n"
    out = subprocess.run(["bash", "-c", script], check=True, capture_output=True,
                         text=True).stdout
    assert '  ERROR: tests/unit/test_x.py:13:29: disallowed-name: Disallowed name "_"' in out


def test_the_summary_of_a_failed_run_says_what_failed(tmp_path: Path) -> None:
    text = (ROOT / "scripts" / "test").read_text()
    functions = "".join(
        re.search(rf"^{name}\(\) \{{.*?^\}}\n", text, re.S | re.M).group(0)  # type: ignore[union-attr]
        for name in ("what_failed", "summary"))
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "molecule-fleet.log").write_text(FLEET_LOG)
    script = (f"ROOT={tmp_path}; LOGS={logs}; suite_start=$(date +%s); PASSED=1\n"
              "SUMMARY=('molecule:fleet  FAILED'); FAILED=(molecule:fleet)\n"
              f"{functions}summary\n")
    out = subprocess.run(["bash", "-c", script], check=True, capture_output=True,
                         text=True).stdout
    assert "  FAILED tests/test_fleet.py::test_rolling_update_loses_no_request" in out
    assert out.index("molecule:fleet (logs/molecule-fleet.log):") < out.index("failed stage(s)")
