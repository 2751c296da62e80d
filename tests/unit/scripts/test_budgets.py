"""scripts/budgets: each scenario's time against molecule/budgets, over-budget ones named, exit 0;
and every Molecule scenario has a budget."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BUDGETS = ROOT / "molecule" / "budgets"


def budgets() -> dict[str, int]:
    rows = [line.split() for line in BUDGETS.read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    return {name: int(secs) for name, secs in rows}


def test_every_scenario_has_a_budget():
    scenarios = {p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml")}
    assert set(budgets()) == scenarios


def test_report(tmp_path):
    (tmp_path / "molecule-vllm-source.result").write_text(f"0 {budgets()['vllm-source'] + 7}\n")
    (tmp_path / "molecule-sandbox.result").write_text("1 10\n")
    (tmp_path / "molecule-brand-new.result").write_text("0 5\n")
    run = subprocess.run([ROOT / "scripts" / "budgets", tmp_path, BUDGETS], capture_output=True,
                         text=True, check=False)
    assert run.returncode == 0
    lines = run.stdout.splitlines()
    assert any(line.startswith("vllm-source") and "OVER by 7s" in line for line in lines)
    assert any(line.startswith("sandbox") and "OVER" not in line for line in lines)
    assert any(line.startswith("brand-new") and "(no budget)" in line for line in lines)
    assert lines[-1] == "over budget: vllm-source"


def test_nothing_ran(tmp_path):
    run = subprocess.run([ROOT / "scripts" / "budgets", tmp_path, BUDGETS], capture_output=True,
                         text=True, check=True)
    assert run.stdout == ""


def test_docs_table_matches_the_budgets():
    text = (ROOT / "docs" / "development.md").read_text()
    table = text.split("<!-- budgets:", 1)[1].split("\n\n", 1)[0]
    rows = [line.strip("| ").split(" | ") for line in table.splitlines()[3:]]
    assert {row[0]: int(row[1].removesuffix(" s")) for row in rows} == budgets()


def test_the_budgets_fill_two_lanes_of_the_target():
    """With the static checks' time they add up to no more than two lanes of the suite's warm
    target (docs/development.md, "The whole suite")."""
    static, target, lanes = 720, 2400, 2
    assert static + sum(budgets().values()) <= lanes * target, budgets()
