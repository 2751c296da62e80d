"""scripts/test remembers a scenario's duration (the next run's longest-first order) only when
the scenario passed: a failed or stopped one ends early, and its short time would put the
scenario at the back of the next run's queue."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def report_scenario_source() -> str:
    text = (ROOT / "scripts" / "test").read_text()
    match = re.search(r"^report_scenario\(\) \{.*?^\}\n", text, re.S | re.M)
    assert match, "report_scenario() not found in scripts/test"
    return match.group(0)


def run_report(tmp_path: Path, rc: int) -> str:
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    (logs / "molecule-fleet.result").write_text(f"{rc} 450\n")
    (logs / "molecule-fleet.log").write_text("log\n")
    script = (
        f'ROOT={tmp_path}; LOGS={logs}\n'
        'record() { :; }\n'
        f'remember() {{ echo "$1 $2" >> {tmp_path}/durations; }}\n'
        + report_scenario_source()
        + "report_scenario fleet >/dev/null\n"
    )
    subprocess.run(["bash", "-c", script], check=True)
    remembered = tmp_path / "durations"
    return remembered.read_text() if remembered.exists() else ""


def test_a_passed_scenario_is_remembered(tmp_path: Path) -> None:
    assert run_report(tmp_path, 0) == "fleet 450\n"


def test_a_failed_or_stopped_scenario_is_not(tmp_path: Path) -> None:
    assert run_report(tmp_path, 2) == ""
    assert run_report(tmp_path, 143) == ""
