"""scripts/fleet-bench report: the fleet figures (as the fleet scenario writes them) into their
own section of docs/benchmarks.md, the rest of the file kept (scripts/bench does the same with
its own section: test_bench.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]


def load(name: str, path: Path) -> ModuleType:
    return load_script(name, path)


fb = load("instinct_fleet_bench", ROOT / "scripts" / "fleet-bench")

# The shape molecule/fleet/tests/conftest.py writes (values made up for the test).
FIGURES = {
    "started_utc": "2026-12-01 12:00",
    "machine_at_start": {"host": "vm", "cpus": 2, "cpu": "AMD EPYC", "mem_gib": 23.5,
                         "kernel": "6.1", "loadavg": [1.5, 2.0, 2.5]},
    "state_over_reload": {"drained_then_reload": "DRAIN", "maint_then_restart": "MAINT"},
    "rollout_good": {"nodes": 2, "serial": 1, "rc": 0, "seconds": 901.2, "requests": 4321,
                     "failed": 0, "client_workers": 2,
                     "restarts": {"n1": {"engine_down_s": 77.0, "succeeded_meanwhile": 345,
                                         "main_pid": ["10", "20"], "staging_s": 120.5,
                                         "out_of_rotation_s": 95.2,
                                         "old_engine_stop_s": 1.4}}},
    "rollout_gate_fails": {"nodes": 2, "serial": 1, "rc": 2, "seconds": 300.5, "requests": 1200,
                           "failed": 0, "client_workers": 2},
    "ttft_c16": {"gateway": {"requests": 900, "failed": 0, "ttft_p50_ms": 390.5,
                             "ttft_p90_ms": 650.0},
                 "direct": {"requests": 1000, "failed": 0, "ttft_p50_ms": 290.0,
                            "ttft_p90_ms": 500.0},
                 "overhead_p50_ms": 100.5, "concurrency": 16, "max_tokens": 16,
                 "seconds_per_round": 15.0, "rounds": 2, "node": "n2"},
    "ejection": {"node": "n2", "stopped": "VLLM::EngineCore", "down_after_s": 1.84,
                 "status": "DOWN (agent)", "streams_on_node_at_down": 2,
                 "health_while_stopped": 200, "requests": 120, "failed": 1,
                 "failed_after_down": 0, "up_after_sigcont_s": 2.1},
    "saturation": {"node": "n2", "probe_timeout_s": 15.0, "max_marker_s": 21.4, "clients": 40,
                   "ramp_s": 88.1, "hold_s": 600.2, "direct_requests": 3100, "direct_failed": 0,
                   "direct_cut": 90,
                   "requests": 2500, "failed": 0, "states": ["UP"], "seconds": 750.3},
    "finished_utc": "2026-12-01 12:50",
    "loadavg_at_end": [3.0, 2.5, 2.0],
    "pytest_exit_status": 0,
}


def test_the_section_carries_the_measured_figures():
    text = fb.section(FIGURES, "a test")
    assert text.startswith(fb.BEGIN) and text.rstrip().endswith(fb.END)
    assert "Rolling 2 nodes: 901.2 s, 0 failed of 4321 client requests" in text
    assert "| rc 2, 300.5 s | 1200 | **0** |" in text
    assert ("n1: down 77.0 s, 345 requests succeeded meanwhile; staged 120.5 s in rotation, "
            "out of rotation 95.2 s (the old engine's stop 1.4 s)") in text
    assert "TTFT p50 at concurrency 16: 100.5 ms** (390.5 ms through the gateway, 290.0 ms" in text
    assert "2026-12-01 12:00 - 2026-12-01 12:50 UTC on vm: 2 CPUs (AMD EPYC)" in text
    assert "after a configuration reload: DRAIN" in text
    assert ("SIGSTOP of n2's VLLM::EngineCore under 4 streams -> DOWN (agent) at the gateway in "
            "1.84 s (its /health: 200); 2 stream(s) on it then; 1 failed of 120 client "
            "requests, 0 after DOWN; SIGCONT -> UP in 2.1 s.") in text
    assert ("n2's queue deeper than its probe timeout (15.0 s; a 1-token request waited up to "
            "21.4 s) with 40 clients, held 600.2 s after a 88.1 s ramp: gateway states UP (no "
            "ejection); 0 failed of 3100 direct requests answered (90 more were cut at the "
            "hold's end, not waited for), 0 failed of 2500 client requests through the "
            "gateway.") in text
    assert "| a flag and a model revision on every node (node 1 the canary) |" in text


def test_a_rollout_names_its_own_change():
    good = {**FIGURES["rollout_good"], "change": "a flag, a vLLM venv and a model revision"}
    text = fb.section({**FIGURES, "rollout_good": good}, "a test")
    assert "| a flag, a vLLM venv and a model revision | 2 (1) | rc 0, 901.2 s |" in text


def test_a_second_report_replaces_the_section_and_keeps_the_rest():
    doc = "# Benchmarks\n\n## model_convert\n\ntable\n"
    once = fb.with_section(doc, fb.section(FIGURES, "a test"))
    changed = {**FIGURES, "rollout_good": {**FIGURES["rollout_good"], "seconds": 1.5}}
    twice = fb.with_section(once, fb.section(changed, "a test"))
    assert twice.startswith(doc.rstrip("\n"))
    assert twice.count(fb.BEGIN) == 1 and "1.5 s, 0 failed" in twice and "901.2 s" not in twice


def test_report_writes_the_doc_and_fails_on_a_failed_run(tmp_path):
    figures, out = tmp_path / "figures.json", tmp_path / "benchmarks.md"
    figures.write_text(json.dumps(FIGURES))
    out.write_text("# Benchmarks\n")
    assert fb.main(["report", "--figures", str(figures), "--out", str(out)]) == 0
    assert "Rolling 2 nodes" in out.read_text()
    figures.write_text(json.dumps({**FIGURES, "pytest_exit_status": 1}))
    assert fb.main(["report", "--figures", str(figures), "--out", str(out)]) == 1


def test_report_refuses_figures_without_a_rollout(tmp_path):
    figures = tmp_path / "figures.json"
    figures.write_text(json.dumps({"started_utc": "x"}))
    assert fb.main(["report", "--figures", str(figures), "--out", str(tmp_path / "b.md")]) == 1


def test_the_section_says_how_the_load_was_paced():
    back_to_back = fb.section(FIGURES, "a test")  # no pause recorded: back to back
    assert "2 concurrent streams through the gateway for the whole rollout, back to back)" \
        in back_to_back
    paced = {**FIGURES["rollout_good"], "client_pause_s": 0.25}
    text = fb.section({**FIGURES, "rollout_good": paced}, "a test")
    assert "for the whole rollout, each pausing 0.25 s between two chats)" in text


def test_run_is_the_long_variant_unless_the_environment_says_otherwise(tmp_path, monkeypatch):
    seen = {}

    def fake_run(cmd, env, check):
        seen.update(env)
        return type("Done", (), {"returncode": 3})()

    monkeypatch.setattr(fb.subprocess, "run", fake_run)
    monkeypatch.setenv("FLEET_SATURATION_SECONDS", "90")
    monkeypatch.delenv("FLEET_LOAD_PAUSE", raising=False)
    figures = tmp_path / "figures.json"  # never written: the run "failed" before its figures
    assert fb.main(["run", "--figures", str(figures), "--out", str(tmp_path / "b.md")]) == 3
    assert (seen["FLEET_NEW_VENV"], seen["FLEET_LOAD_PAUSE"], seen["FLEET_TTFT_SECONDS"]) == \
        ("1", "0", "15")
    assert seen["FLEET_SATURATION_SECONDS"] == "90" and seen["SCENARIOS"] == "fleet"
