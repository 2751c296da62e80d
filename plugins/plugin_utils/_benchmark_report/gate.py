# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gate: absolute thresholds and the comparison with a stored baseline."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.instinct.vllm.plugins.plugin_utils._benchmark_report.results import (
    NODES_MEAN,
    levels,
)

#: Threshold names (the keys of benchmark_thresholds) and what each bounds. 0 / None: off.
THRESHOLDS: dict[str, str] = {
    "min_output_throughput": "output tokens/s at every concurrency level, at least",
    "max_ttft_p99_ms": "TTFT p99 (ms), at most",
    "max_tpot_p99_ms": "TPOT p99 (ms), at most",
    "max_failed_requests": "failed requests per level, at most",
    "max_throughput_drop": "fraction output tokens/s may fall below the baseline (0.1 = 10 %)",
    "max_ttft_p50_increase": "fraction TTFT p50 may rise above the baseline",
    "max_ttft_p99_increase": "fraction TTFT p99 may rise above the baseline",
    "max_tpot_p99_increase": "fraction TPOT p99 may rise above the baseline",
}


class ThresholdError(Exception):
    """An unknown or invalid threshold (names the variable)."""


def check_thresholds(thresholds: Mapping[str, Any], variable: str) -> dict[str, float | None]:
    unknown = sorted(set(thresholds) - set(THRESHOLDS))
    if unknown:
        raise ThresholdError(
            f"{variable}: unknown threshold(s) {', '.join(unknown)}; known: {', '.join(THRESHOLDS)}"
        )
    out: dict[str, float | None] = {}
    for key, value in thresholds.items():
        if value is None or value == "":
            out[key] = None
            continue
        try:
            number = float(value)
        except (TypeError, ValueError) as exc:
            raise ThresholdError(f"{variable}.{key}: {value!r} is not a number") from exc
        if number < 0:
            raise ThresholdError(f"{variable}.{key}: {value!r} is negative")
        out[key] = number
    return out


@dataclass
class Comparison:
    target: str
    against: str
    concurrency: int
    metric: str
    baseline: float
    value: float

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("inf")


COMPARED = ("output_throughput", "p50_ttft_ms", "p99_ttft_ms", "p99_tpot_ms")


def compare(current: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[Comparison]:
    """Every (target, concurrency, metric) present in both; a target missing from the
    baseline is compared with the baseline's nodes mean."""
    out: list[Comparison] = []
    base_targets = baseline.get("targets") or {}
    for label in current.get("targets") or {}:
        against = label if label in base_targets else NODES_MEAN
        if against not in base_targets:
            continue
        mine, theirs = levels(current["targets"], label), levels(base_targets, against)
        for conc in sorted(set(mine) & set(theirs)):
            for metric in COMPARED:
                value, base = mine[conc].get(metric), theirs[conc].get(metric)
                if value is not None and base:
                    out.append(Comparison(label, against, conc, metric, float(base), float(value)))
    return out


def evaluate(
    current: Mapping[str, Any],
    thresholds: Mapping[str, float | None],
    comparisons: list[Comparison],
    variable: str,
) -> list[str]:
    """Violations, each naming the threshold variable, the target, the level, both numbers."""
    bad: list[str] = []
    t = thresholds
    for label, by_conc in (current.get("targets") or {}).items():
        if label == NODES_MEAN:
            continue
        for conc, m in sorted(levels({label: by_conc}, label).items()):
            where = f"{label} at concurrency {conc}"
            tput = m.get("output_throughput")
            if (
                t.get("min_output_throughput")
                and tput is not None
                and tput < t["min_output_throughput"]
            ):
                bad.append(
                    f"{variable}.min_output_throughput: {where}: {tput:.1f} tok/s < "
                    f"{t['min_output_throughput']:g}"
                )
            for key, metric in (
                ("max_ttft_p99_ms", "p99_ttft_ms"),
                ("max_tpot_p99_ms", "p99_tpot_ms"),
            ):
                value = m.get(metric)
                if t.get(key) and value is not None and value > t[key]:
                    bad.append(f"{variable}.{key}: {where}: {value:.1f} ms > {t[key]:g}")
            failed = m.get("failed")
            limit = t.get("max_failed_requests")
            if limit is not None and failed is not None and failed > limit:
                bad.append(
                    f"{variable}.max_failed_requests: {where}: {failed:g} failed > {limit:g}"
                )
    for c in comparisons:
        if c.target == NODES_MEAN:
            continue
        where = f"{c.target} at concurrency {c.concurrency} (baseline {c.against})"
        if c.metric == "output_throughput" and t.get("max_throughput_drop") is not None:
            floor = 1 - t["max_throughput_drop"]
            if c.ratio < floor:
                bad.append(
                    f"{variable}.max_throughput_drop: {where}: {c.value:.1f} tok/s is "
                    f"{c.ratio:.0%} of {c.baseline:.1f} (floor {floor:.0%})"
                )
        for key, metric in (
            ("max_ttft_p50_increase", "p50_ttft_ms"),
            ("max_ttft_p99_increase", "p99_ttft_ms"),
            ("max_tpot_p99_increase", "p99_tpot_ms"),
        ):
            if c.metric == metric and t.get(key) is not None and c.ratio > 1 + t[key]:
                bad.append(
                    f"{variable}.{key}: {where}: {c.value:.1f} ms is {c.ratio:.0%} of "
                    f"{c.baseline:.1f} (ceiling {1 + t[key]:.0%})"
                )
    return bad
