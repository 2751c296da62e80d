"""Role benchmark with mTLS: a node's sweep presents the node's own certificate and trusts the
fleet CA (role vllm_service's published vllm_service_resolved.tls, omitted when TLS is off);
the gateway sweep goes to the gateway's public TLS and presents none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

TASKS = Path(__file__).resolve().parents[3] / "roles" / "benchmark" / "tasks"
MODULE = "instinct.vllm.vllm_bench_sweep"
TLS = {
    "ca_path": "{{ vllm_service_resolved.tls.ca | default(omit) }}",
    "client_cert": "{{ vllm_service_resolved.tls.cert | default(omit) }}",
    "client_key": "{{ vllm_service_resolved.tls.key | default(omit) }}",
}


def _sweeps(name: str) -> list[dict[str, Any]]:
    """The module's arguments of every sweep (not plan) in tasks/<name>."""
    tasks = yaml.safe_load((TASKS / name).read_text(encoding="utf-8"))
    calls = [t[MODULE] for t in tasks if MODULE in t]
    return [c for c in calls if not c.get("plan")]


def test_a_node_sweep_presents_the_nodes_certificate() -> None:
    sweeps = _sweeps("sweep.yml")
    assert len(sweeps) == 1
    assert {k: sweeps[0].get(k) for k in TLS} == TLS
    assert sweeps[0]["shim_dir"]  # where the module puts the TLS sitecustomize


def test_the_gateway_sweep_presents_no_certificate() -> None:
    sweeps = _sweeps("gateway.yml")
    assert len(sweeps) == 1 and not set(TLS) & set(sweeps[0])
