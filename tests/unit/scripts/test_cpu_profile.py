"""scripts/cpu-profile: what it reads from cgroups and /proc, and how it sums the samples."""

from __future__ import annotations

import json
from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]
cp = load_script("instinct_cpu_profile", ROOT / "scripts" / "cpu-profile")


def test_usage_reads_cgroup_v1_and_v2(tmp_path):
    v1, v2, empty = tmp_path / "v1", tmp_path / "v2", tmp_path / "none"
    for d in (v1, v2, empty):
        d.mkdir()
    (v1 / "cpuacct.usage").write_text("2500000000\n")
    (v2 / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n")
    assert cp.usage(v1) == 2.5
    assert cp.usage(v2) == 1.5
    assert cp.usage(empty) is None


def test_machine_cpu_splits_busy_and_idle():
    # user nice system idle iowait irq softirq steal (jiffies of 1/100 s)
    stat = "cpu  1000 0 500 7000 300 0 100 50 0 0\ncpu0 1 2 3 4\n"
    assert cp.machine_cpu(stat) == (16.5, 73.0)


def test_only_molecule_test_commands_name_a_scenario():
    assert cp.molecule_scenario(["/v/bin/python3", "/v/bin/molecule", "test", "-s", "fleet"]) \
        == "fleet"
    assert cp.molecule_scenario(["/v/bin/molecule", "test", "-s", "awx"]) == "awx"
    assert cp.molecule_scenario(["/v/bin/molecule", "converge", "-s", "awx"]) is None
    assert cp.molecule_scenario(["python3", "other", "test", "-s", "x"]) is None
    assert cp.molecule_scenario(["/v/bin/molecule", "test", "-s"]) is None


def test_container_groups_are_found_below_the_root(tmp_path):
    for path in ("libpod_parent/libpod-aaa", "machine.slice/libpod-bbb.scope",
                 "machine.slice/libpod-conmon-bbb.scope", "other/x"):
        (tmp_path / path).mkdir(parents=True)
    found = dict(cp.container_groups(tmp_path))
    assert found == {"aaa": tmp_path / "libpod_parent/libpod-aaa",
                     "bbb": tmp_path / "machine.slice/libpod-bbb.scope"}


def row(t: float, busy: float, idle: float, containers: dict, scenarios: dict) -> dict:
    return {"t": t, "busy": busy, "idle": idle, "cores": 2, "containers": containers,
            "scenarios": scenarios}


ROWS = [
    row(0, 100, 50, {"node-a": 10.0}, {"fleet": 5.0}),
    row(10, 118, 52, {"node-a": 20.0, "node-b": 3.0}, {"fleet": 9.0, "serving": 1.0}),
    row(20, 136, 54, {"node-a": 25.0, "node-b": 7.0}, {"fleet": 12.0, "serving": 2.5}),
]


def test_spent_counts_from_each_names_first_sample():
    # node-b and serving appeared after the first sample: all their CPU is inside the span
    assert cp.spent(ROWS, "containers") == {"node-a": 15.0, "node-b": 7.0}
    assert cp.spent(ROWS, "scenarios") == {"fleet": 7.0, "serving": 2.5}


def test_report_names_totals_and_shares(tmp_path):
    lines = cp.report_lines(ROWS)
    assert lines[0] == "wall 20 s, CPU 36 s (90% of 2 cores), idle 4 s"
    assert lines[1] == "containers 22 s:"
    assert lines[2].split() == ["node-a", "15", "s"]
    assert "scenarios' controller side 10 s:" in lines
    out = tmp_path / "cpu.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert cp.main(["report", str(out), "--since", "10"]) == 0
    assert cp.main(["report", str(out), "--since", "15"]) == 1  # one sample is no span
