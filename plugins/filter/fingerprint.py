# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for role fingerprint_gate; the logic is in plugin_utils/fingerprint_gate.py. Each
filter is documented in the YAML file of its name beside this one.

Usage::

    _peers.results | default([]) | instinct.vllm.fingerprint_consensus(skip='')
        -> {status: ok|failed|skipped, ok, skipped, summary, reason, peer, peers, max_abs, ...}
    fingerprint_gate_result | instinct.vllm.fingerprint_record(node=inventory_hostname,
        fingerprint=_fp.fingerprint, baseline=_baseline, time=now(utc=true).isoformat())
        -> the node's last fingerprint as kept on the controller (role diagnose reads it)
    _unit.content | b64decode | instinct.vllm.vllm_unit_release
        -> {model, served_model_name, url, flags}: what a vLLM unit file serves
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.module_utils.fingerprint import unit_claims
from ansible_collections.instinct.vllm.plugins.plugin_utils.fingerprint_gate import (
    consensus_verdict,
    node_record,
)


def _plain(value: Any) -> Any:
    """Plain dicts and lists of a templated value."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def fingerprint_consensus(results: Any, skip: str = "") -> dict[str, Any]:
    """The peers' results (a loop's results) -> one consensus verdict."""
    if results is not None and not isinstance(results, (list, tuple)):
        raise AnsibleFilterError("instinct.vllm.fingerprint_consensus: expects a list of results")
    try:
        return consensus_verdict(_plain(results), str(skip or ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"instinct.vllm.fingerprint_consensus: {exc}") from exc


def fingerprint_record(result: Any, node: str = "", fingerprint: Any = None, baseline: Any = None,
                       time: str = "") -> dict[str, Any]:
    """fingerprint_gate_result -> the node's last fingerprint record."""
    if not isinstance(result, Mapping):
        raise AnsibleFilterError("instinct.vllm.fingerprint_record: expects a dict")
    return node_record(_plain(result), str(node), _plain(fingerprint) or None,
                       _plain(baseline) or None, str(time))


def vllm_unit_release(text: Any) -> dict[str, Any]:
    """A vLLM unit file's text -> the release it serves (model, served name, URL, flags)."""
    if not isinstance(text, str):
        raise AnsibleFilterError("instinct.vllm.vllm_unit_release: expects the unit file's text")
    try:
        claims = unit_claims(text, None, packages=False)
    except ValueError as exc:
        raise AnsibleFilterError(f"instinct.vllm.vllm_unit_release: {exc}") from exc
    return {"model": claims.model, "served_model_name": claims.served_model_name,
            "url": claims.url, "flags": claims.flags}


class FilterModule:
    """instinct.vllm fingerprint filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"fingerprint_consensus": fingerprint_consensus,
                "fingerprint_record": fingerprint_record,
                "vllm_unit_release": vllm_unit_release}
