"""plugin_utils/benchmark_report.py: summary, gate, baseline comparison, plots, Markdown - on
result JSON recorded from the dev serving node (fixtures/benchmark/SOURCES.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.plugin_utils import benchmark_report as br

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "benchmark"
RECORDED = FIX / "serving-node-c2.json"
META = {"run_id": "t1", "input_len": 32, "output_len": 16, "model": "gptoss-legacy-demo",
        "entry_point": "cli", "vllm_version": "0.32.0+cpu"}  # fmt: skip


def recorded() -> dict:
    return json.loads(RECORDED.read_text(encoding="utf-8"))


def results(tmp_path: Path, **targets: dict) -> list[str]:
    """Write {<target>-c<N>.json: data} into tmp_path/raw."""
    raw = tmp_path / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for name, data in targets.items():
        (raw / f"{name}.json").write_text(json.dumps(data), encoding="utf-8")
    return [str(p) for p in sorted(raw.glob("*.json"))]


def sweep_files(tmp_path: Path) -> list[str]:
    """The recorded sweep files (every level the dev node ran), copied under tmp_path/raw."""
    raw = tmp_path / "raw"
    raw.mkdir(exist_ok=True)
    for path in FIX.glob("serving-node-c*.json"):
        shutil.copy(path, raw / path.name)
    return [str(p) for p in sorted(raw.glob("*.json"))]


def test_recorded_result_normalizes() -> None:
    metrics = br.load_runs([RECORDED])["serving-node"][2]
    data = recorded()
    assert metrics["output_throughput"] == data["output_throughput"]
    assert metrics["p99_ttft_ms"] == data["p99_ttft_ms"]
    assert metrics["p50_tpot_ms"] == data["p50_tpot_ms"]
    assert metrics["completed"] == data["completed"] and metrics["failed"] == 0


def test_report_files_and_plots(tmp_path: Path) -> None:
    out = br.build_report(sweep_files(tmp_path), ["serving-node"], tmp_path / "r", META, {})
    assert out["passed"] and out["violations"] == []
    names = sorted(Path(p).name for p in out["plots"])
    assert names == ["output_throughput.png", "tpot.png", "ttft.png"]
    for plot in out["plots"]:
        assert Path(plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = Path(out["report"]).read_text(encoding="utf-8")
    assert "## serving-node" in text and "![ttft](ttft.png)" in text
    assert br.NODES_MEAN not in text  # one node: its mean is no news
    assert f"{recorded()['output_throughput']:.1f}" in text
    assert "Gate: passed** (no baseline)" in text
    stored = json.loads(Path(out["summary_file"]).read_text(encoding="utf-8"))
    assert stored["targets"]["serving-node"]["2"]["p99_ttft_ms"] == recorded()["p99_ttft_ms"]
    assert br.NODES_MEAN in stored["targets"]


def test_gate_fails_beyond_what_the_node_does(tmp_path: Path) -> None:
    tput = recorded()["output_throughput"]
    out = br.build_report(
        [RECORDED], ["serving-node"], tmp_path / "r", META,
        {"min_output_throughput": tput * 10, "max_ttft_p99_ms": 1.0},
    )  # fmt: skip
    assert not out["passed"]
    assert any(v.startswith("benchmark_thresholds.min_output_throughput: serving-node at "
                            "concurrency 2") for v in out["violations"])  # fmt: skip
    assert any(v.startswith("benchmark_thresholds.max_ttft_p99_ms") for v in out["violations"])
    assert "Gate: FAILED" in Path(out["report"]).read_text(encoding="utf-8")


def test_gate_passes_at_what_the_node_does(tmp_path: Path) -> None:
    data = recorded()
    out = br.build_report(
        [RECORDED], ["serving-node"], tmp_path / "r", META,
        {"min_output_throughput": data["output_throughput"] * 0.5,
         "max_ttft_p99_ms": data["p99_ttft_ms"] * 2, "max_failed_requests": 0},
    )  # fmt: skip
    assert out["passed"], out["violations"]


def test_baseline_same_run_passes_and_regression_fails(tmp_path: Path) -> None:
    first = br.build_report([RECORDED], ["serving-node"], tmp_path / "a", META, {})
    limits = {"max_throughput_drop": 0.1, "max_ttft_p99_increase": 0.25}
    same = br.build_report([RECORDED], ["serving-node"], tmp_path / "b", META, limits,
                           baseline=first["summary_file"])  # fmt: skip
    assert same["passed"] and same["baseline"] == first["summary_file"]
    assert {c["metric"] for c in same["comparisons"]} >= {"output_throughput", "p99_ttft_ms"}
    assert all(c["ratio"] == pytest.approx(1.0) for c in same["comparisons"])
    # derived from the recording: half the throughput, twice the TTFT p99
    slow = recorded()
    slow["output_throughput"] /= 2
    slow["p99_ttft_ms"] *= 2
    files = results(tmp_path / "slow", **{"serving-node-c2": slow})
    worse = br.build_report(files, ["serving-node"], tmp_path / "c", META, limits,
                            baseline=first["summary_file"])  # fmt: skip
    assert not worse["passed"]
    assert any("max_throughput_drop: serving-node at concurrency 2" in v and "50%" in v
               for v in worse["violations"])  # fmt: skip
    assert any("max_ttft_p99_increase" in v for v in worse["violations"])
    assert "## Against the baseline" in worse["markdown"]


def test_ttft_p50_against_the_baseline(tmp_path: Path) -> None:
    """The canary's bound on the median: TTFT p50 up 60 % fails max_ttft_p50_increase 0.5, with
    p99 unchanged; within it passes."""
    first = br.build_report([RECORDED], ["serving-node"], tmp_path / "a", META, {})
    slow = recorded()
    slow["p50_ttft_ms"] *= 1.6
    files = results(tmp_path / "slow", **{"serving-node-c2": slow})
    worse = br.build_report(files, ["serving-node"], tmp_path / "b", META,
                            {"max_ttft_p50_increase": 0.5}, baseline=first["summary_file"])
    assert not worse["passed"]
    assert [v.split(":")[0] for v in worse["violations"]] == [
        "benchmark_thresholds.max_ttft_p50_increase"]
    assert "160%" in worse["violations"][0]
    ok = br.build_report(files, ["serving-node"], tmp_path / "c", META,
                         {"max_ttft_p50_increase": 0.7}, baseline=first["summary_file"])
    assert ok["passed"], ok["violations"]


def test_new_node_compared_with_the_baseline_nodes_mean(tmp_path: Path) -> None:
    first = br.build_report([RECORDED], ["serving-node"], tmp_path / "a", META, {})
    files = results(tmp_path / "n", **{"node-9-c2": recorded()})
    out = br.build_report(files, ["node-9"], tmp_path / "b", META, {"max_throughput_drop": 0.1},
                          baseline=first["summary_file"])  # fmt: skip
    against = {c["against"] for c in out["comparisons"] if c["target"] == "node-9"}
    assert against == {br.NODES_MEAN}


def test_one_line_per_target_and_gateway(tmp_path: Path) -> None:
    files = results(tmp_path, **{"node-1-c2": recorded(), "node-2-c2": recorded(),
                                 "gateway-c2": recorded()})  # fmt: skip
    out = br.build_report(files, ["node-1", "node-2"], tmp_path / "r", META, {})
    assert set(out["summary"]["targets"]) == {"node-1", "node-2", "gateway", br.NODES_MEAN}
    assert out["summary"]["nodes"] == ["node-1", "node-2"]


def test_failed_requests_gate(tmp_path: Path) -> None:
    data = recorded()
    data["failed"] = 3
    files = results(tmp_path, **{"serving-node-c2": data})
    out = br.build_report(files, ["serving-node"], tmp_path / "r", META, {"max_failed_requests": 0})
    assert out["violations"] == [
        "benchmark_thresholds.max_failed_requests: serving-node at concurrency 2: 3 failed > 0"
    ]


def test_bad_threshold_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(br.ThresholdError, match="benchmark_thresholds: unknown threshold"):
        br.build_report([RECORDED], [], tmp_path, META, {"ttft": 1})
    with pytest.raises(br.ThresholdError, match=r"benchmark_thresholds\.max_ttft_p99_ms"):
        br.build_report([RECORDED], [], tmp_path, META, {"max_ttft_p99_ms": "fast"})


def test_bad_result_files(tmp_path: Path) -> None:
    with pytest.raises(br.ResultError, match="no result files"):
        br.load_runs([])
    bad = tmp_path / "x-c1.json"
    bad.write_text("{}", encoding="utf-8")
    with pytest.raises(br.ResultError, match="lacks output_throughput"):
        br.load_runs([bad])
    odd = tmp_path / "odd.json"
    odd.write_text("{}", encoding="utf-8")
    with pytest.raises(br.ResultError, match="not named"):
        br.load_runs([odd])
