"""scripts/job-order: recorded time, else budget, else first; a prerequisite carries the chain
waiting on it; ties by name; a bad --after is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "job-order"
job_order = load_script("job_order", SCRIPT)


def test_recorded_time_beats_the_budget() -> None:
    assert job_order.order(["a", "b"], {"a": 10}, {"a": 500, "b": 100}, {}) == ["b", "a"]


def test_an_untimed_job_starts_first() -> None:
    assert job_order.order(["a", "new"], {}, {"a": 500}, {}) == ["new", "a"]


def test_a_prerequisite_starts_before_a_longer_job_on_its_own() -> None:
    # serving 900 + fleet 900 waiting on it outweighs vllm-source's 1500
    budgets = {"vllm-source": 1500, "serving": 900, "fleet": 900, "model": 300}
    jobs = ["fleet", "model", "serving", "vllm-source"]
    got = job_order.order(jobs, {}, budgets, {"fleet": "serving"})
    assert got == ["serving", "vllm-source", "fleet", "model"]
    # without the edge, the longest job first
    assert job_order.order(jobs, {}, budgets, {})[0] == "vllm-source"


def test_a_prerequisite_not_in_the_run_adds_nothing() -> None:
    assert job_order.order(["fleet", "model"], {}, {"fleet": 100, "model": 200},
                           {"fleet": "serving"}) == ["model", "fleet"]


def test_ties_by_name() -> None:
    assert job_order.order(["b", "a"], {}, {"a": 5, "b": 5}, {}) == ["a", "b"]


def test_cli_reads_files_and_skips_comments(tmp_path: Path) -> None:
    budgets = tmp_path / "budgets"
    budgets.write_text("# seconds\nslow 900\nfast 10\nbroken\n")
    durations = tmp_path / "durations"
    durations.write_text("fast 2000\n")
    run = subprocess.run([sys.executable, SCRIPT, "--durations", durations, "--budgets", budgets,
                          "--durations", tmp_path / "missing", "slow", "fast"],
                         capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["slow", "fast"]  # the last --durations (missing) wins: budgets
    run = subprocess.run([sys.executable, SCRIPT, "--durations", durations,
                          "--budgets", budgets, "slow", "fast"],
                         capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["fast", "slow"]


def test_bad_after_is_refused() -> None:
    with pytest.raises(SystemExit, match="--after wants JOB=PREREQ"):
        job_order.parse_after(["fleet"])


def test_the_suite_uses_it_with_its_prerequisites() -> None:
    text = (ROOT / "scripts" / "test").read_text()
    assert "scripts/job-order --durations \"$DURATIONS\" --budgets molecule/budgets" in text
    assert "declare -A AFTER=()" in text  # no scenario waits for another today
