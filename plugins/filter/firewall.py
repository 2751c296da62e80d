# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for role firewall: the source addresses that may reach a node's vLLM ports.

Usage::

    (groups['gateways'] + groups['monitoring']) | instinct.vllm.firewall_sources(hostvars, extra)
        -> {'ipv4': ['10.0.0.5', '10.1.0.0/24'], 'ipv6': ['fd00::5']}

Each host's addresses are its hostvar ``firewall_source_addresses`` (an address or network, or
a list of them) when set; else every address of its network facts (``all_ipv4_addresses`` and
``all_ipv6_addresses``), loopback and IPv6 link-local left out; else its ``ansible_host`` when
that is an IP address. A host with none of these is an error naming it. ``extra`` (addresses
or networks in CIDR notation, host bits allowed) is added. The result is split by family,
overlaps merged, sorted; a single address is written without its prefix length.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_FACTS = ("all_ipv4_addresses", "all_ipv6_addresses")
_OVERRIDE = "firewall_source_addresses"


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, (str, bytes)):
        return [value]
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _network(text: Any, where: str) -> Network:
    try:
        return ipaddress.ip_network(str(text).strip(), strict=False)
    except ValueError:
        raise AnsibleFilterError(
            f"instinct.vllm.firewall_sources: {where}: {text!r} is not an IP address or network"
        ) from None


def _fact_addresses(hv: Mapping[str, Any]) -> list[str] | None:
    """Every address of the host's network facts (gathered or delegated), or None without them."""
    facts = hv.get("ansible_facts") or {}
    found: list[str] | None = None
    for name in _FACTS:
        value = facts.get(name, hv.get(f"ansible_{name}"))
        if value is not None:
            found = (found or []) + [str(a).split("%", maxsplit=1)[0] for a in _as_list(value)]
    return found


def _is_scoped(network: Network) -> bool:
    """Loopback and IPv6 link-local: never a remote source (loopback is allowed on its own)."""
    return network.is_loopback or (network.version == 6 and network.is_link_local)


def _host_networks(name: str, hv: Mapping[str, Any]) -> list[Network]:
    override = hv.get(_OVERRIDE)
    if override not in (None, "", []):
        return [_network(a, f"host {name!r}, {_OVERRIDE}") for a in _as_list(override)]
    addresses = _fact_addresses(hv)
    if addresses is not None:
        networks = [_network(a, f"host {name!r}, network facts") for a in addresses]
        return [n for n in networks if not _is_scoped(n)]
    host = hv.get("ansible_host")
    try:
        return [ipaddress.ip_network(str(host))]
    except ValueError:
        raise AnsibleFilterError(
            f"instinct.vllm.firewall_sources: host {name!r} has no address: gather its network "
            f"facts (ansible.builtin.setup, gather_subset network) or set its {_OVERRIDE}"
        ) from None


def _render(networks: Iterable[Network]) -> list[str]:
    return [str(n.network_address) if n.num_addresses == 1 else str(n) for n in networks]


def firewall_sources(
    hosts: Any, hostvars: Mapping[str, Any], extra: Any = None
) -> dict[str, list[str]]:
    """Inventory host names (and extra networks) -> {'ipv4': [...], 'ipv6': [...]}."""
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("instinct.vllm.firewall_sources: expects a list of host names")
    if extra is not None and not isinstance(extra, (list, tuple)):
        raise AnsibleFilterError("instinct.vllm.firewall_sources: extra must be a list")
    networks: list[Network] = []
    for host in hosts:
        name = str(host)
        networks += _host_networks(name, hostvars.get(name) or {})
    networks += [_network(a, f"extra[{i}]") for i, a in enumerate(extra or [])]
    v4 = [n for n in networks if isinstance(n, ipaddress.IPv4Network)]
    v6 = [n for n in networks if isinstance(n, ipaddress.IPv6Network)]
    return {"ipv4": _render(ipaddress.collapse_addresses(v4)),
            "ipv6": _render(ipaddress.collapse_addresses(v6))}


class FilterModule:
    """instinct.vllm firewall filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"firewall_sources": firewall_sources}
