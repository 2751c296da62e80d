# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The report: PNG plots (matplotlib, Agg) and Markdown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.instinct.vllm.plugins.plugin_utils._benchmark_report.gate import (
    Comparison,
)
from ansible_collections.instinct.vllm.plugins.plugin_utils._benchmark_report.results import (
    NODES_MEAN,
    levels,
)

try:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    HAS_MATPLOTLIB = True
    MATPLOTLIB_ERROR = None
except ImportError as exc:  # the controller venv pins it (requirements/dev.txt)
    HAS_MATPLOTLIB = False
    MATPLOTLIB_ERROR = str(exc)

#: (file, title, y label, [(metric, line style, legend suffix)])
PLOTS: tuple[tuple[str, str, str, tuple[tuple[str, str, str], ...]], ...] = (
    ("output_throughput.png", "Output tokens/s", "tokens/s", (("output_throughput", "-", ""),)),
    ("ttft.png", "Time to first token", "ms",
     (("p50_ttft_ms", "-", " p50"), ("p99_ttft_ms", "--", " p99"))),
    ("tpot.png", "Time per output token", "ms",
     (("p50_tpot_ms", "-", " p50"), ("p99_tpot_ms", "--", " p99"))),
)  # fmt: skip


def plot(summary: Mapping[str, Any], out_dir: str | Path, subtitle: str) -> list[str]:
    """One PNG per metric family, concurrency on x (log 2), one line (colour) per target."""
    if not HAS_MATPLOTLIB:
        raise RuntimeError(f"matplotlib is required on the controller: {MATPLOTLIB_ERROR}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    targets = [t for t in summary["targets"] if t != NODES_MEAN]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    written = []
    for name, title, ylabel, series in PLOTS:
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        for index, label in enumerate(targets):
            by_conc = levels(summary["targets"], label)
            xs = sorted(by_conc)
            for metric, style, suffix in series:
                ys = [by_conc[c].get(metric) for c in xs]
                points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
                if points:
                    ax.plot(
                        *zip(*points, strict=True),
                        style,
                        marker="o",
                        color=colours[index % len(colours)],
                        label=f"{label}{suffix}",
                    )
        ax.set_xscale("log", base=2)
        ticks = sorted({c for t in targets for c in levels(summary["targets"], t)})
        ax.set_xticks(ticks, [str(c) for c in ticks])
        ax.minorticks_off()
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}\n{subtitle}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name)
        plt.close(fig)
        written.append(str(out / name))
    return written


def _num(value: Any, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def markdown(
    summary: Mapping[str, Any],
    plots: Sequence[str],
    comparisons: Sequence[Comparison],
    violations: Sequence[str],
    baseline_path: str | None,
) -> str:
    meta = summary.get("meta", {})
    lines = [
        f"# vLLM serving benchmark {meta.get('run_id', '')}",
        "",
        f"Random dataset, {meta.get('input_len')} tokens in / {meta.get('output_len')} out, "
        f"entry point `{meta.get('entry_point', '?')}` (vLLM {meta.get('vllm_version', '?')}), "
        f"model `{meta.get('model', '?')}`.",
        "",
        f"**Gate: {'FAILED' if violations else 'passed'}**"
        + (f" against baseline `{baseline_path}`" if baseline_path else " (no baseline)"),
        "",
    ]
    lines += [f"- {v}" for v in violations] + ([""] if violations else [])
    head = (
        "| concurrency | prompts ok | failed | req/s | output tok/s | TTFT p50 | TTFT p99 "
        "| TPOT p50 | TPOT p99 |"
    )
    shown = [t for t in summary["targets"] if t != NODES_MEAN or len(summary.get("nodes", [])) > 1]
    for label in shown:
        by_conc = levels(summary["targets"], label)
        lines += [f"## {label}", "", head, "|" + "---|" * 9]
        for conc, m in sorted(by_conc.items()):
            cells = [
                str(conc),
                _num(m.get("completed"), ".0f"),
                _num(m.get("failed"), ".0f"),
                _num(m.get("request_throughput"), ".2f"),
            ]
            cells += [
                _num(m.get(k))
                for k in (
                    "output_throughput",
                    "p50_ttft_ms",
                    "p99_ttft_ms",
                    "p50_tpot_ms",
                    "p99_tpot_ms",
                )
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines.append("Latencies in ms. Plots:")
    lines.append("")
    lines += [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    lines.append("")
    if comparisons:
        lines += [
            "## Against the baseline",
            "",
            "| target | baseline | concurrency | metric | baseline | now | ratio |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {c.target} | {c.against} | {c.concurrency} | {c.metric} | {c.baseline:.1f} "
            f"| {c.value:.1f} | {c.ratio:.2f} |"
            for c in comparisons
        ]
        lines.append("")
    elif baseline_path:
        lines += ["No target / concurrency in common with the baseline.", ""]
    return "\n".join(lines)
