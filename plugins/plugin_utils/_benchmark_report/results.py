# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark result JSON files (``vllm bench serve --save-result`` and the 0.6.x script write
the same keys) -> one normalized summary of the run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: The metrics a summary keeps per (target, concurrency).
METRICS: tuple[str, ...] = (
    "completed",
    "failed",
    "duration",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "mean_ttft_ms",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p50_tpot_ms",
    "p99_tpot_ms",
    "p50_itl_ms",
    "p99_itl_ms",
    "p50_e2el_ms",
    "p99_e2el_ms",
)
#: Mean over the node targets, used when a baseline lacks a node's own name.
NODES_MEAN = "nodes (mean)"
_NAME = re.compile(r"^(?P<label>.+)-c(?P<conc>\d+)\.json$")


class ResultError(Exception):
    """A result file is missing, unreadable or lacks the keys the report needs."""


def _metric(result: Mapping[str, Any], key: str) -> float | int | None:
    value = result.get(key)
    if value is None and key.startswith("p50_"):
        value = result.get("median_" + key[4:])  # without --metric-percentiles 50
    if key == "failed" and value is None and "num_prompts" in result and "completed" in result:
        value = int(result["num_prompts"]) - int(result["completed"])
    return value if isinstance(value, int | float) else None


def normalize(result: Mapping[str, Any]) -> dict[str, Any]:
    missing = [k for k in ("output_throughput", "completed") if k not in result]
    if missing:
        raise ResultError(f"result lacks {', '.join(missing)}")
    return {k: _metric(result, k) for k in METRICS}


def load_runs(files: Iterable[str | Path]) -> dict[str, dict[int, dict[str, Any]]]:
    """``<label>-c<N>.json`` files -> {label: {concurrency: metrics}}."""
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted(Path(f) for f in files):
        match = _NAME.match(path.name)
        if not match:
            raise ResultError(f"{path}: not named <target>-c<concurrency>.json")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            metrics = normalize(data)
        except (OSError, ValueError, ResultError) as exc:
            raise ResultError(f"{path}: {exc}") from exc
        metrics["input_len"] = data.get("random_input_len") or data.get("input_len")
        conc = int(data.get("max_concurrency") or match.group("conc"))
        runs.setdefault(match.group("label"), {})[conc] = metrics
    if not runs:
        raise ResultError("no result files")
    return runs


def nodes_mean(runs: Mapping[str, Mapping[int, Mapping[str, Any]]], nodes: Iterable[str]) -> dict:
    """Per concurrency, the mean of every metric over the node targets."""
    chosen = [runs[n] for n in nodes if n in runs]
    levels = sorted({c for r in chosen for c in r})
    mean: dict[int, dict[str, Any]] = {}
    for conc in levels:
        rows = [r[conc] for r in chosen if conc in r]
        mean[conc] = {}
        for key in METRICS:
            values = [row[key] for row in rows if row.get(key) is not None]
            mean[conc][key] = sum(values) / len(values) if values else None
    return mean


def summary(
    runs: Mapping[str, Mapping[int, Mapping[str, Any]]],
    nodes: Iterable[str],
    meta: Mapping[str, Any],
) -> dict[str, Any]:
    """The run as stored next to the report (and usable as the next baseline)."""
    node_list = [n for n in nodes if n in runs]
    targets = {
        label: {str(c): m for c, m in sorted(levels.items())} for label, levels in runs.items()
    }
    if len(node_list) > 0:
        targets[NODES_MEAN] = {str(c): m for c, m in nodes_mean(runs, node_list).items()}
    return {"format": 1, "meta": dict(meta), "nodes": node_list, "targets": targets}


def levels(summary_targets: Mapping[str, Mapping[str, Any]], label: str) -> dict[int, dict]:
    return {int(c): m for c, m in (summary_targets.get(label) or {}).items()}
