"""Role monitoring's node_exporter configuration: the systemd collector reports the vLLM unit
role vllm_service publishes (vllm_service_resolved.unit), AMD's exporter unit and the extra
units, whatever the unit is called. Real ansible-playbook on localhost: the role's template
with its defaults and vars."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from local_play import role_play, run_local_playbook

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "monitoring"
PLAYBOOK = role_play("""\
    - ansible.builtin.template:
        src: "{{ role }}/templates/node-exporter.default.j2"
        dest: "{{ out }}"
        mode: "0644"
""")


def unit_include(tmp_path: Path, **variables: object) -> list[str]:
    play, out = tmp_path / "play.yml", tmp_path / "prometheus-node-exporter"
    play.write_text(PLAYBOOK)
    run = run_local_playbook(play, {"role": str(ROLE), "out": str(out),
                                    "ansible_python_interpreter": sys.executable, **variables})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    found = re.search(r"--collector\.systemd\.unit-include=\((\S+)\)", out.read_text())
    assert found, out.read_text()
    return [name.replace("[.]", ".") for name in found.group(1).split("|")]


@pytest.mark.parametrize("unit", ["vllm.service", "llm-a.service"])
def test_the_published_vllm_unit_is_reported(tmp_path: Path, unit: str) -> None:
    units = unit_include(tmp_path, vllm_service_resolved={"unit": unit})
    assert units == [unit, "amd-metrics-exporter.service", "gpuagent.service"]


def test_extra_units_and_no_repeats(tmp_path: Path) -> None:
    units = unit_include(tmp_path, vllm_service_resolved={"unit": "vllm.service"},
                         monitoring_node_exporter_units=["vllm.service", "extra.service"])
    assert units == ["vllm.service", "amd-metrics-exporter.service", "extra.service"]


def test_every_instance_unit_is_reported(tmp_path: Path) -> None:
    """A node with two vLLM instances (vllm_service_instances: 2): vllm@0 and vllm@1."""
    resolved = {"unit": "vllm@0.service", "instances": [
        {"index": 0, "unit": "vllm@0.service"}, {"index": 1, "unit": "vllm@1.service"}]}
    units = unit_include(tmp_path, vllm_service_resolved=resolved)
    assert units == ["vllm@0.service", "vllm@1.service", "amd-metrics-exporter.service",
                     "gpuagent.service"]
