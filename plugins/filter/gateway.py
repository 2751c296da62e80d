# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for role gateway.

Usage::

    groups['vllm_nodes'] | instinct.vllm.gateway_nodes(hostvars)
        -> [{'name': 'node1', 'host': 'node1', 'address': '10.0.0.11', 'port': 8000,
             'agent_port': 8001}, ...]
    gateway_api_keys | instinct.vllm.gateway_key_hashes
        -> [{'name': 'team-a', 'sha256': '<64 hex>', 'rate_limit': 600 | None,
             'max_concurrency': 8 | None}, ...]

gateway_nodes: each host's ``gateway_node_address`` (else ``ansible_host``, else its name),
and the ports role vllm_service publishes for it (``vllm_service_resolved``): vLLM's ``port``
and ``status_port``, where its watchdog answers the agent check (0 = none); a host without
that fact is an error saying how to publish it. One server per vLLM instance of the node
(``vllm_service_resolved.instances``, each with its own ports; a fact without it is one
instance, its top-level ports): the server is named after the inventory host when the node has
one instance, else ``<host>:<index>``; ``host`` is the inventory host (the name the node's TLS
certificate carries).
gateway_key_hashes: ``key_sha256`` as given (lower case) or the SHA-256 of ``key``; the clear key
does not appear in the result. ``max_concurrency``, when set, must be a positive integer.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")


def gateway_nodes(hosts: Any, hostvars: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Inventory hosts -> HAProxy backend servers (name, host, address, port, agent_port), one
    per vLLM instance of each host."""
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("instinct.vllm.gateway_nodes: expects a list of host names")
    nodes: list[dict[str, Any]] = []
    for host in hosts:
        nodes += _host_servers(str(host), hostvars[str(host)])
    return nodes


def _host_servers(host: str, hv: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One host's servers: its instances, named after the host (one) or "<host>:<index>"."""
    if not _SERVER_NAME.match(host):
        raise AnsibleFilterError(
            f"instinct.vllm.gateway_nodes: host {host!r} is not a valid HAProxy server name"
        )
    resolved = hv.get("vllm_service_resolved")
    if not isinstance(resolved, Mapping):
        raise AnsibleFilterError(
            f"instinct.vllm.gateway_nodes: host {host!r} has no vllm_service_resolved: publish "
            "the node's serving facts first (role instinct.vllm.vllm_service_facts on the "
            "nodes, as playbooks/gateway.yml does)"
        )
    address = str(hv.get("gateway_node_address") or hv.get("ansible_host") or host)
    instances = _instances(host, resolved)
    return [{"name": host if len(instances) == 1 else f"{host}:{index}", "host": host,
             "address": address,
             "port": _port(host, instance, f"{where}.port", 1),
             "agent_port": _port(host, instance, f"{where}.status_port", 0)}
            for index, where, instance in instances]


def _instances(host: str, resolved: Mapping[str, Any]) -> list[tuple[int, str, Mapping[str, Any]]]:
    """(index, key path, mapping) of each vLLM instance of the host: the entries of
    vllm_service_resolved.instances, else the fact itself as instance 0 (older facts)."""
    instances = resolved.get("instances")
    if instances is None:
        return [(0, "vllm_service_resolved", resolved)]
    if (not isinstance(instances, (list, tuple)) or not instances
            or not all(isinstance(i, Mapping) for i in instances)):
        raise AnsibleFilterError(
            f"instinct.vllm.gateway_nodes: host {host!r}: vllm_service_resolved.instances must "
            f"be a non-empty list of mappings (is {instances!r})"
        )
    found = []
    for position, instance in enumerate(instances):
        where = f"vllm_service_resolved.instances[{position}]"
        index = instance.get("index", position)
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise AnsibleFilterError(
                f"instinct.vllm.gateway_nodes: host {host!r}: {where}.index must be an integer "
                f">= 0 (is {index!r})"
            )
        found.append((index, where, instance))
    return found


def _port(host: str, values: Mapping[str, Any], where: str, lowest: int) -> int:
    """values[key] (``where`` is its path, ending with the key) as a port (``lowest``: 0 when 0
    means none)."""
    value = values.get(where.rpartition(".")[2])
    try:
        port = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        port = -1
    if isinstance(value, bool) or not lowest <= port <= 65535:
        raise AnsibleFilterError(
            f"instinct.vllm.gateway_nodes: host {host!r}: {where} must be "
            f"{'0 or ' if lowest == 0 else ''}a port 1-65535 (is {value!r})"
        )
    return port


def gateway_key_hashes(keys: Any) -> list[dict[str, Any]]:
    """gateway_api_keys -> [{name, sha256, rate_limit, max_concurrency}] (no clear key in the
    result)."""
    if not isinstance(keys, (list, tuple)):
        raise AnsibleFilterError(
            "instinct.vllm.gateway_key_hashes: expects gateway_api_keys (a list)"
        )
    out = []
    for i, entry in enumerate(keys):
        if not isinstance(entry, Mapping) or "name" not in entry:
            raise AnsibleFilterError(
                f"instinct.vllm.gateway_key_hashes: gateway_api_keys[{i}] has no name"
            )
        if entry.get("key_sha256"):
            digest = str(entry["key_sha256"]).lower()
        elif entry.get("key"):
            digest = hashlib.sha256(str(entry["key"]).encode()).hexdigest()
        else:
            raise AnsibleFilterError(
                f"instinct.vllm.gateway_key_hashes: gateway_api_keys[{i}] ({entry['name']}) "
                "has neither key nor key_sha256"
            )
        limit = entry.get("rate_limit")
        out.append({"name": str(entry["name"]), "sha256": digest,
                    "rate_limit": None if limit is None else int(limit),
                    "max_concurrency": _positive_or_none(entry, i, "max_concurrency")})
    return out


def _positive_or_none(entry: Mapping[str, Any], i: int, field: str) -> int | None:
    """entry[field] as an integer >= 1, or None when the entry does not set it."""
    value = entry.get(field)
    if value is None:
        return None
    number = None
    if not isinstance(value, bool):
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = None
    if number is None or number < 1 or str(number) != str(value).strip():
        raise AnsibleFilterError(
            f"instinct.vllm.gateway_key_hashes: gateway_api_keys[{i}] ({entry['name']}): "
            f"{field} must be a positive integer (is {value!r})"
        )
    return number


class FilterModule:
    """instinct.vllm gateway filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"gateway_nodes": gateway_nodes, "gateway_key_hashes": gateway_key_hashes}
