# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for role monitoring: Prometheus static_configs from inventory hosts.

Usage::

    groups['vllm_nodes'] | instinct.vllm.scrape_targets(hostvars, 'vllm_service_resolved.port')
        -> [{'targets': ['10.20.0.11:8000'], 'labels': {'node': 'mi300x-01'}}, ...]

A host's address is its hostvar ``monitoring_scrape_address``, else ``ansible_host``, else its
inventory name; IPv6 addresses get brackets. The port is the hostvar named by ``port_var`` (a
dotted path reads into a fact: ``vllm_service_resolved.port``), else ``default_port``. One
static_config per host, labelled ``node=<inventory name>`` so dashboards and alerts name hosts
as the inventory does.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

ADDRESS_VARS = ("monitoring_scrape_address", "ansible_host")


def _address(host: str, hvars: Mapping[str, Any]) -> str:
    for var in ADDRESS_VARS:
        value = hvars.get(var)
        if value not in (None, ""):
            text = str(value)
            break
    else:
        text = host
    try:
        if ipaddress.ip_address(text).version == 6:
            return f"[{text}]"
    except ValueError:
        pass
    return text


def _lookup(hvars: Mapping[str, Any], path: str, default: Any) -> Any:
    """hvars[a][b]... for the dotted ``path`` a.b..., else ``default``."""
    value: Any = hvars
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return default
        value = value[part]
    return value


def _port(host: str, hvars: Mapping[str, Any], port_var: str, default_port: Any) -> int:
    raw = _lookup(hvars, port_var, default_port) if port_var else default_port
    try:
        port = int(raw)
    except (TypeError, ValueError):
        port = 0
    if not 0 < port < 65536:
        raise AnsibleFilterError(
            f"instinct.vllm.scrape_targets: host {host}: {port_var or 'default_port'} must be a "
            f"port 1-65535 (is {raw!r})"
        )
    return port


def scrape_targets(
    hosts: Any, hostvars: Mapping[str, Any], port_var: str = "", default_port: Any = 0
) -> list[dict[str, Any]]:
    """Inventory host names -> Prometheus static_configs (one per host)."""
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("instinct.vllm.scrape_targets: expects a list of host names")
    configs = []
    for host in hosts:
        hvars = hostvars.get(host) if host in hostvars else {}
        hvars = hvars or {}
        target = f"{_address(host, hvars)}:{_port(host, hvars, port_var, default_port)}"
        configs.append({"targets": [target], "labels": {"node": str(host)}})
    return configs


class FilterModule:
    """instinct.vllm monitoring filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"scrape_targets": scrape_targets}
