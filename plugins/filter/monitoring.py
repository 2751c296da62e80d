# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for role monitoring: Prometheus static_configs from inventory hosts.

Usage::

    groups['vllm_nodes'] | instinct.vllm.scrape_targets(hostvars, 'vllm_service_resolved.port')
        -> [{'targets': ['10.20.0.11:8000'], 'labels': {'node': 'mi300x-01'}}, ...]
        a node with two vLLM instances:
        -> [{'targets': ['10.20.0.12:8000'], 'labels': {'node': 'mi300x-02',
                                                         'vllm_instance': 'vllm@0'}},
            {'targets': ['10.20.0.12:8001'], 'labels': {'node': 'mi300x-02',
                                                         'vllm_instance': 'vllm@1'}}, ...]

A host's address is its hostvar ``monitoring_scrape_address``, else ``ansible_host``, else its
inventory name; IPv6 addresses get brackets. The port is the hostvar named by ``port_var`` (a
dotted path reads into a fact: ``vllm_service_resolved.port``), else ``default_port``. One
static_config per host, labelled ``node=<inventory name>`` so dashboards and alerts name hosts
as the inventory does.

Several instances: when the dict that holds the dotted path's key also holds ``instances`` (a
list of dicts, as ``vllm_service_resolved`` does: one per vLLM instance of the node), the port
is each instance's key of that name. A host with several gets one static_config per instance,
labelled ``node=<inventory name>`` and ``vllm_instance=<the instance's name>`` (e.g.
``vllm@1``); a host with one stays one static_config, labelled as above, at that instance's
port.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

ADDRESS_VARS = ("monitoring_scrape_address", "ansible_host")
INSTANCE_LABEL = "vllm_instance"  # not "instance": Prometheus' own label (address:port)


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


def _port(host: str, raw: Any, what: str) -> int:
    """``raw`` as a port 1-65535, else an error naming the host and ``what`` (its variable)."""
    try:
        port = int(raw)
    except (TypeError, ValueError):
        port = 0
    if isinstance(raw, bool) or not 0 < port < 65536:
        raise AnsibleFilterError(
            f"instinct.vllm.scrape_targets: host {host}: {what} must be a port 1-65535 "
            f"(is {raw!r})"
        )
    return port


def _instances(host: str, hvars: Mapping[str, Any], port_var: str) -> list[Mapping[str, Any]]:
    """The entries of ``instances`` beside the dotted ``port_var``'s key (e.g.
    vllm_service_resolved.instances for vllm_service_resolved.port), [] without it."""
    parent = port_var.rpartition(".")[0]
    instances = _lookup(hvars, f"{parent}.instances", None) if parent else None
    if instances is None:
        return []
    if (not isinstance(instances, (list, tuple)) or not instances
            or not all(isinstance(i, Mapping) for i in instances)):
        raise AnsibleFilterError(
            f"instinct.vllm.scrape_targets: host {host}: {parent}.instances must be a "
            f"non-empty list of mappings (is {instances!r})"
        )
    return list(instances)


def _host_configs(
    host: str, hvars: Mapping[str, Any], port_var: str, default_port: Any
) -> list[dict[str, Any]]:
    """One host's static_configs: one, or one per instance when it runs several."""
    address = _address(host, hvars)
    instances = _instances(host, hvars, port_var)
    if len(instances) < 2:
        raw = _lookup(hvars, port_var, default_port) if port_var else default_port
        if instances:
            raw = instances[0].get(port_var.rpartition(".")[2], raw)
        port = _port(host, raw, port_var or "default_port")
        return [{"targets": [f"{address}:{port}"], "labels": {"node": host}}]
    parent, _dot, key = port_var.rpartition(".")
    configs = []
    for i, instance in enumerate(instances):
        port = _port(host, instance.get(key), f"{parent}.instances[{i}].{key}")
        configs.append({"targets": [f"{address}:{port}"],
                        "labels": {"node": host, INSTANCE_LABEL: str(instance.get("name", i))}})
    return configs


def scrape_targets(
    hosts: Any, hostvars: Mapping[str, Any], port_var: str = "", default_port: Any = 0
) -> list[dict[str, Any]]:
    """Inventory host names -> Prometheus static_configs (one per host, or per instance)."""
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("instinct.vllm.scrape_targets: expects a list of host names")
    configs: list[dict[str, Any]] = []
    for host in hosts:
        hvars = hostvars.get(host) if host in hostvars else {}
        configs += _host_configs(str(host), hvars or {}, port_var, default_port)
    return configs


class FilterModule:
    """instinct.vllm monitoring filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"scrape_targets": scrape_targets}
