"""The amdgpu-exporter test stub (tests/aptrepo): real exporter names, recorded values only."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from script_loader import load_script

# tests/unit/conftest.py's (this directory's conftest.py shadows it as a module)
ROOT = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

STUB = ROOT / "tests" / "aptrepo" / "stubs" / "amd_metrics_exporter.py"
MONITOR = FIXTURES / "instinct" / "amd-smi_monitor_putm_mi300x_8gpu.txt"
STATIC = FIXTURES / "instinct" / "amd-smi_static_json_mi300x_8gpu_rocm7.2.1.json"


def load():
    return load_script("amd_metrics_exporter_stub", STUB)


def test_monitor_table_parsed_as_recorded() -> None:
    rows = load().parse_monitor(MONITOR.read_text())
    assert sorted(rows) == list(range(8))
    assert rows[0] == {"POWER": 182, "GPU_TEMP": 42, "MEM_TEMP": 41, "GFX_UTIL": 83,
                       "GFX_CLOCK": 1613, "MEM_UTIL": 0, "MEM_CLOCK": 1230}
    assert rows[7]["POWER"] == 118 and rows[7]["MEM_TEMP"] == 37


def test_metrics_use_the_exporter_names_and_labels() -> None:
    stub = load()
    text = stub.render(
        stub.parse_monitor(MONITOR.read_text()), json.loads(STATIC.read_text()), "node1"
    )
    labels = 'gpu_id="0",serial_number="692409006566",card_model="AMD Instinct MI300X"'
    assert f'gpu_package_power{{{labels},hostname="node1"}} 182' in text
    assert re.search(r'^gpu_junction_temperature\{gpu_id="3",.*\} 40$', text, re.M)
    assert re.search(r'^gpu_total_vram\{gpu_id="7",.*\} 196592$', text, re.M)
    assert 'clock_type="GPU_CLOCK_TYPE_MEMORY"} 1230' in text
    assert 'gpu_nodes_total{hostname="node1"} 8' in text
    assert "gpu_used_vram" not in text  # not in the recordings: not served


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing")
def test_exposition_is_valid_for_promtool() -> None:
    stub = load()
    text = stub.render(
        stub.parse_monitor(MONITOR.read_text()), json.loads(STATIC.read_text()), "n"
    )
    run = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                         text=True, check=False, timeout=60)
    # The one lint is the real exporter's own name (a gauge called gpu_nodes_total).
    problems = [x for x in (run.stdout + run.stderr).splitlines() if x.strip()]
    assert problems == ['gpu_nodes_total non-counter metrics should not have "_total" suffix']


def test_port_comes_from_the_config(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"ServerPort": 5123}')
    assert load().port_from(["-amd-metrics-config", str(config)]) == 5123
