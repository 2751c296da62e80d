# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run vLLM's serving benchmark over a concurrency sweep (thin module; the logic is in
module_utils/vllm_bench.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_bench_sweep
short_description: Run vLLM's own serving benchmark over a concurrency sweep
version_added: "0.2.0"
description:
  - Runs the installed vLLM's benchmark once per concurrency level against an
    OpenAI-compatible endpoint, with the random dataset and the node's tokenizer (offline),
    and saves each level's result JSON in I(result_dir).
  - The entry point is the one the installed vLLM has - C(vllm bench serve) on current vLLM,
    C(benchmarks/benchmark_serving.py) from the sdist (I(script)) on the 0.6.x line, where
    a stand-in C(datasets) module is put on PYTHONPATH when the venv has none. The module
    decides it (from I(vllm_version), read from the venv when empty); with I(plan) it only
    says which, so a playbook can provide the script first.
  - The benchmark's output is appended to I(log) while it runs (the playbook tails it); run
    the module with C(async) and C(poll=0) to show progress.
  - The API key goes to the benchmark as OPENAI_API_KEY in its environment, never in argv.
  - "Mutual TLS: vLLM's benchmark has no option for a client certificate or a CA. With
    I(client_cert) and I(client_key), or I(ca_path), the module writes a C(sitecustomize.py)
    into I(shim_dir) (required then), puts that directory first on the benchmark's PYTHONPATH
    and the paths into the benchmark's environment (C(INSTINCT_BENCH_TLS_CA),
    C(INSTINCT_BENCH_TLS_CERT), C(INSTINCT_BENCH_TLS_KEY)). Python imports the file when the
    benchmark starts; it changes one thing in that process: C(ssl.create_default_context)
    then makes client contexts that trust I(ca_path) (unless the caller names its own CA) and
    present I(client_cert). The benchmark's client, aiohttp, builds the context of its
    C(https://) requests with that function (both entry points), so it presents the
    certificate a node serving mutual TLS requires. Server contexts, and contexts made
    otherwise, are untouched. A C(sitecustomize) the venv's Python ships (Debian's and
    Ubuntu's do) would be shadowed by this one, so it runs it next."
  - Without these options the module writes no C(sitecustomize.py) (it removes one an earlier
    run left in I(shim_dir)) and sets none of these variables; the benchmark's environment is
    as without them (an C(https://) URL is then verified against the system's CAs, and no
    client certificate is presented).
  - The files are checked before the first run; one that cannot be loaded fails the module,
    naming it.
options:
  venv:
    description: >-
      The vLLM virtualenv on the node (role benchmark passes role vllm_service's published
      C(vllm_service_resolved.venv)).
    type: path
    required: true
  entry_point:
    description: C(auto) picks C(cli) for vLLM 0.10 and later, else C(legacy).
    type: str
    choices: [auto, cli, legacy]
    default: auto
  vllm_version:
    description: The installed vLLM version (for C(auto)); empty reads it from I(venv).
    type: str
    default: ""
  plan:
    description: Only return I(entry_point) and I(vllm_version), run nothing (the other
      options are then not needed).
    type: bool
    default: false
  script:
    description: benchmark_serving.py (C(legacy) only); its directory must hold
      backend_request_func.py too.
    type: path
  label:
    description: Name of the target in result file names (C(<label>-c<N>.json)). Required
      unless I(plan).
    type: str
  base_url:
    description: The endpoint, e.g. C(http://127.0.0.1:8000). Required unless I(plan).
    type: str
  model:
    description: The served model name. Required unless I(plan).
    type: str
  tokenizer:
    description: Tokenizer directory on the node (the model directory). Required unless I(plan).
    type: path
  endpoint:
    description: API path.
    type: str
    default: /v1/completions
  api_key:
    description: The API key (sent as a bearer token; never logged).
    type: str
    default: ""
  input_len:
    description: Random prompt length in tokens. Required unless I(plan).
    type: int
  output_len:
    description: Tokens generated per request (with ignore_eos). Required unless I(plan).
    type: int
  concurrency:
    description: The sweep's concurrency levels, in order. Required unless I(plan).
    type: list
    elements: int
  num_prompts:
    description: Prompts per level, one per concurrency level (empty - computed from
      I(prompts_per_concurrency) and I(min_prompts)).
    type: list
    elements: int
    default: []
  prompts_per_concurrency:
    description: Prompts per level = this x the concurrency, at least I(min_prompts).
    type: int
    default: 8
  min_prompts:
    description: Fewest prompts in a level.
    type: int
    default: 32
  seed:
    description: Random dataset seed.
    type: int
    default: 0
  extra_args:
    description: More benchmark arguments.
    type: list
    elements: str
    default: []
  result_dir:
    description: Where the result JSON files go. Required unless I(plan).
    type: path
  log:
    description: The benchmark's output (appended). Required unless I(plan).
    type: path
  shim_dir:
    description: Directory for the stand-in C(datasets) module (C(legacy) only) and the TLS
      C(sitecustomize.py); required with I(ca_path) or I(client_cert).
    type: path
  run_timeout:
    description: Seconds one level may take.
    type: int
    default: 3600
extends_documentation_fragment:
  - instinct.vllm.attributes
  - instinct.vllm.tls_client
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
author:
  - instinct.vllm maintainers (@instinct-vllm)
"""

EXAMPLES = r"""
- name: Which entry point the installed vLLM has (cli or legacy)
  instinct.vllm.vllm_bench_sweep:
    plan: true
    venv: "{{ vllm_service_resolved.venv }}"
  register: bench_plan

- name: Benchmark the node's own endpoint
  instinct.vllm.vllm_bench_sweep:
    label: "{{ inventory_hostname }}"
    base_url: http://127.0.0.1:8000
    model: gpt-oss-120b
    tokenizer: /srv/models/gpt-oss-120b
    api_key: "{{ vllm_service_api_key }}"
    input_len: 512
    output_len: 128
    concurrency: [1, 8, 32]
    vllm_version: 0.11.0
    result_dir: /var/tmp/instinct-bench/results
    log: /var/tmp/instinct-bench/bench.log
  async: 7200
  poll: 0

- name: Benchmark a node that serves mutual TLS, with the node's own certificate
  instinct.vllm.vllm_bench_sweep:
    label: "{{ inventory_hostname }}"
    base_url: https://127.0.0.1:8000
    model: gpt-oss-120b
    tokenizer: /srv/models/gpt-oss-120b
    api_key: "{{ vllm_service_api_key }}"
    input_len: 512
    output_len: 128
    concurrency: [1, 8, 32]
    ca_path: /etc/vllm-tls/ca.crt
    client_cert: /etc/vllm-tls/node.crt
    client_key: /etc/vllm-tls/node.key
    shim_dir: /var/tmp/instinct-bench/shim
    result_dir: /var/tmp/instinct-bench/results
    log: /var/tmp/instinct-bench/bench.log
  async: 7200
  poll: 0
"""

RETURN = r"""
entry_point:
  description: The entry point used (or, with I(plan), to use), cli or legacy.
  type: str
  returned: success
vllm_version:
  description: The vLLM version the entry point was chosen for.
  type: str
  returned: success
datasets_shim:
  description: Whether the stand-in datasets module was used (legacy entry point, no datasets).
  type: bool
  returned: success
tls_shim:
  description: Whether the TLS C(sitecustomize.py) was used (I(ca_path) or I(client_cert) set).
  type: bool
  returned: success
runs:
  description: Per level - label, concurrency, num_prompts, file, rc, seconds, summary
    (completed, output_throughput, request_throughput, p50/p99 TTFT and TPOT in ms).
  type: list
  elements: dict
  returned: success
"""

import os  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils._tls_client import (  # noqa: E402
    TLS_REQUIRED_TOGETHER,
    TLS_SPEC,
    TlsClient,
    TlsConfigError,
)
from ansible_collections.instinct.vllm.plugins.module_utils.vllm_bench import (  # noqa: E402
    BenchError,
    Target,
    Workload,
    as_dicts,
    bench_env,
    num_prompts_for,
    plan,
    run_sweep,
    tls_on,
    write_shims,
)

#: What a sweep needs (the module's plan mode needs none of them).
SWEEP_OPTIONS = [
    "label",
    "base_url",
    "model",
    "tokenizer",
    "input_len",
    "output_len",
    "concurrency",
    "result_dir",
    "log",
]


def _needs_shim(venv: str) -> bool:
    probe = subprocess.run(
        [f"{venv}/bin/python", "-c", "import datasets"], capture_output=True, check=False
    )
    return probe.returncode != 0


def _shims(params: dict[str, Any], entry: str, tls: TlsClient) -> tuple[str | None, bool]:
    """Write what the run needs into shim_dir (the stand-in datasets, the TLS sitecustomize):
    (the directory for PYTHONPATH or None, whether the stand-in datasets is in it)."""
    if tls_on(tls):
        if not params["shim_dir"]:
            raise BenchError("ca_path or client_cert needs shim_dir (for the TLS sitecustomize)")
        tls.ssl_context()  # the files load, or TlsConfigError names the one that does not
    if not params["shim_dir"]:
        return None, False
    datasets = entry == "legacy" and _needs_shim(params["venv"])
    return write_shims(params["shim_dir"], datasets, tls_on(tls)), datasets


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "entry_point": {"type": "str", "default": "auto", "choices": ["auto", "cli", "legacy"]},
            "vllm_version": {"type": "str", "default": ""},
            "plan": {"type": "bool", "default": False},
            "script": {"type": "path"},
            "label": {"type": "str"},
            "base_url": {"type": "str"},
            "model": {"type": "str"},
            "tokenizer": {"type": "path"},
            "endpoint": {"type": "str", "default": "/v1/completions"},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "input_len": {"type": "int"},
            "output_len": {"type": "int"},
            "concurrency": {"type": "list", "elements": "int"},
            "num_prompts": {"type": "list", "elements": "int", "default": []},
            "prompts_per_concurrency": {"type": "int", "default": 8},
            "min_prompts": {"type": "int", "default": 32},
            "seed": {"type": "int", "default": 0},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "result_dir": {"type": "path"},
            "log": {"type": "path"},
            "shim_dir": {"type": "path"},
            "run_timeout": {"type": "int", "default": 3600},
            **TLS_SPEC,
        },
        required_if=[("plan", False, SWEEP_OPTIONS)],
        required_together=TLS_REQUIRED_TOGETHER,
        supports_check_mode=False,
    )
    p = module.params
    try:
        entry, version = plan(p["entry_point"], p["vllm_version"], p["venv"])
    except BenchError as exc:
        module.fail_json(msg=str(exc))
    if p["plan"]:
        module.exit_json(changed=False, entry_point=entry, vllm_version=version)
    if not p["num_prompts"]:
        p["num_prompts"] = num_prompts_for(
            p["concurrency"], p["prompts_per_concurrency"], p["min_prompts"]
        )
    if len(p["concurrency"]) != len(p["num_prompts"]) or not p["concurrency"]:
        module.fail_json(msg="concurrency and num_prompts must be non-empty lists of one length")
    try:
        if entry == "legacy" and not (p["script"] and Path(p["script"]).is_file()):
            raise BenchError(
                f"vLLM {version}: benchmark_serving.py not found (script: {p['script']})"
            )
        tls = TlsClient.from_params(p)
        shim, datasets = _shims(p, entry, tls)
        target = Target(p["label"], p["base_url"], p["model"], p["tokenizer"], p["endpoint"])
        work = Workload(
            p["input_len"], p["output_len"], tuple(p["concurrency"]), tuple(p["num_prompts"]),
            p["seed"], tuple(p["extra_args"]),
        )  # fmt: skip
        env = bench_env(os.environ, p["api_key"], shim, tls)
        runs = run_sweep(
            entry, p["venv"], p["script"] or "", target, work, p["result_dir"], p["log"], env,
            p["run_timeout"],
        )  # fmt: skip
    except (BenchError, TlsConfigError, OSError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(
        changed=True, entry_point=entry, vllm_version=version,
        datasets_shim=datasets, tls_shim=tls_on(tls), runs=as_dicts(runs),
    )  # fmt: skip


if __name__ == "__main__":
    main()
