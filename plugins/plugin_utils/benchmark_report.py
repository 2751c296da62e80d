# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark report on the controller: raw result JSON -> summary, gate, plots, Markdown.

Public facade over ``_benchmark_report`` (used by the action plugin ``benchmark_report``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ansible_collections.instinct.vllm.plugins.plugin_utils._benchmark_report.gate import (
    THRESHOLDS,
    Comparison,
    ThresholdError,
    check_thresholds,
    compare,
    evaluate,
)
from ansible_collections.instinct.vllm.plugins.plugin_utils._benchmark_report.render import (
    HAS_MATPLOTLIB,
    markdown,
    plot,
)
from ansible_collections.instinct.vllm.plugins.plugin_utils._benchmark_report.results import (
    NODES_MEAN,
    ResultError,
    load_runs,
    summary,
)

__all__ = [
    "HAS_MATPLOTLIB",
    "NODES_MEAN",
    "THRESHOLDS",
    "Comparison",
    "ResultError",
    "ThresholdError",
    "build_report",
    "check_thresholds",
    "compare",
    "evaluate",
    "load_runs",
    "summary",
]


def _read_baseline(path: str | None) -> dict[str, Any] | None:
    if not path:
        return None
    file = Path(path)
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ResultError(f"baseline {path}: not JSON ({exc})") from exc
    if not isinstance(data, dict) or "targets" not in data:
        raise ResultError(f"baseline {path}: not a benchmark summary (no 'targets')")
    return data


def build_report(
    files: Iterable[str | Path],
    nodes: Iterable[str],
    out_dir: str | Path,
    meta: Mapping[str, Any],
    thresholds: Mapping[str, Any],
    baseline: str | None = None,
    threshold_variable: str = "benchmark_thresholds",
) -> dict[str, Any]:
    """Write summary.json, the plots and report.md into ``out_dir``; return paths, the
    summary, the comparisons and the gate's violations (the caller fails on them)."""
    limits = check_thresholds(thresholds, threshold_variable)
    runs = load_runs(files)
    current = summary(runs, nodes, meta)
    base = _read_baseline(baseline)
    comparisons = compare(current, base) if base else []
    violations = evaluate(current, limits, comparisons, threshold_variable)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    subtitle = f"{meta.get('input_len')} in / {meta.get('output_len')} out, {meta.get('model', '')}"
    plots = plot(current, out, subtitle)
    baseline_used = baseline if base else None
    report = markdown(current, plots, comparisons, violations, baseline_used)
    (out / "summary.json").write_text(
        json.dumps(current, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    (out / "report.md").write_text(report, encoding="utf-8")
    return {
        "report": str(out / "report.md"),
        "summary_file": str(out / "summary.json"),
        "plots": plots,
        "summary": current,
        "baseline": baseline_used,
        "comparisons": [c.__dict__ | {"ratio": c.ratio} for c in comparisons],
        "violations": violations,
        "passed": not violations,
        "markdown": report,
    }
