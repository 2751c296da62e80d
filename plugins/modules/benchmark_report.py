# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the benchmark_report action (plugins/action/benchmark_report.py does the
work, on the controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: benchmark_report
short_description: Report a vLLM benchmark run - summary, plots, baseline comparison, gate
version_added: "0.2.0"
description:
  - Reads the result JSON files of M(instinct.vllm.vllm_bench_sweep) (C(<target>-c<N>.json),
    fetched to the controller), writes C(summary.json), PNG plots (output tokens/s, TTFT and
    TPOT p50 / p99 against concurrency, one line per target) made with matplotlib, and
    C(report.md) into I(dest).
  - Compares every target and concurrency level with a stored baseline summary (a target the
    baseline lacks is compared with the baseline's nodes mean) and evaluates the
    I(thresholds); the violations are returned (the playbook's gate fails on them).
  - Runs on the controller only (an action plugin); needs matplotlib there.
options:
  results:
    description: The result files on the controller.
    type: list
    elements: path
    required: true
  nodes:
    description: Which targets are nodes (their mean is stored for later comparisons).
    type: list
    elements: str
    default: []
  dest:
    description: Directory for the report.
    type: path
    required: true
  meta:
    description: Run details shown in the report (run_id, input_len, output_len, model,
      entry_point, vllm_version).
    type: dict
    default: {}
  thresholds:
    description:
      - C(min_output_throughput) (tokens/s), C(max_ttft_p99_ms), C(max_tpot_p99_ms),
        C(max_failed_requests) per target and level; C(max_throughput_drop),
        C(max_ttft_p50_increase), C(max_ttft_p99_increase), C(max_tpot_p99_increase) as
        fractions against the baseline.
        A null value is off.
    type: dict
    default: {}
  threshold_variable:
    description: Variable name the violations cite.
    type: str
    default: benchmark_thresholds
  baseline:
    description: A stored C(summary.json) to compare with (absent file - no comparison).
    type: path
extends_documentation_fragment:
  - instinct.vllm.attributes
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
  action:
    description: >-
      Indicates this has a corresponding action plugin so some parts of the options can be
      executed on the controller.
    support: full
author:
  - instinct.vllm maintainers (@instinct-vllm)
"""

EXAMPLES = r"""
- name: Report and compare with the baseline
  instinct.vllm.benchmark_report:
    results: "{{ query('ansible.builtin.fileglob', run_dir ~ '/raw/*.json') }}"
    nodes: "{{ ansible_play_hosts }}"
    dest: "{{ run_dir }}"
    baseline: "{{ benchmark_output_dir }}/baseline.json"
    thresholds: {max_throughput_drop: 0.1, max_ttft_p99_increase: 0.25}
  run_once: true
  register: report
"""

RETURN = r"""
report:
  description: Path of report.md.
  type: str
  returned: success
summary_file:
  description: Path of summary.json (copy it to the baseline path to make it the baseline).
  type: str
  returned: success
plots:
  description: Paths of the PNG plots.
  type: list
  elements: str
  returned: success
summary:
  description: The run summary (targets -> concurrency -> metrics).
  type: dict
  returned: success
baseline:
  description: The baseline compared with, or null.
  type: str
  returned: success
comparisons:
  description: target, against, concurrency, metric, baseline, value, ratio.
  type: list
  elements: dict
  returned: success
violations:
  description: The gate's violations, each naming its threshold variable.
  type: list
  elements: str
  returned: success
passed:
  description: No violation.
  type: bool
  returned: success
markdown:
  description: report.md as text.
  type: str
  returned: success
"""
