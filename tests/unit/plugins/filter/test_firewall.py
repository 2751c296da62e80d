"""instinct.vllm.firewall_sources: the addresses that may reach a node's vLLM ports."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.filter.firewall import firewall_sources

HOSTVARS = {
    # gathered facts (ansible_facts), loopback and link-local among them
    "gw": {"ansible_host": "203.0.113.9", "ansible_facts": {
        "all_ipv4_addresses": ["10.0.0.5", "127.0.0.1", "192.168.7.5"],
        "all_ipv6_addresses": ["fe80::1%eth0", "::1", "fd00::5", "2001:db8::5"]}},
    # facts injected as top-level variables only
    "mon": {"ansible_all_ipv4_addresses": ["10.0.0.9"], "ansible_all_ipv6_addresses": []},
    # the site's own list wins over the facts
    "pinned": {"firewall_source_addresses": ["10.9.0.0/16", "fd01::/64"],
               "ansible_facts": {"all_ipv4_addresses": ["10.0.0.77"]}},
    "one": {"firewall_source_addresses": "10.0.0.6"},
    # no facts: an IP ansible_host stands in
    "bare": {"ansible_host": "10.0.0.10"},
    "named": {"ansible_host": "gw.example.net"},
}


def test_facts_every_global_address_by_family() -> None:
    assert firewall_sources(["gw"], HOSTVARS) == {
        "ipv4": ["10.0.0.5", "192.168.7.5"],  # not 127.0.0.1, not ansible_host
        "ipv6": ["2001:db8::5", "fd00::5"],   # not fe80::1, not ::1
    }


def test_injected_facts_and_ansible_host_fallback() -> None:
    assert firewall_sources(["mon", "bare"], HOSTVARS) == {
        "ipv4": ["10.0.0.9", "10.0.0.10"], "ipv6": []}


def test_override_wins_over_the_facts_as_a_list_or_a_string() -> None:
    assert firewall_sources(["pinned", "one"], HOSTVARS) == {
        "ipv4": ["10.0.0.6", "10.9.0.0/16"], "ipv6": ["fd01::/64"]}


def test_extra_networks_merge_with_the_hosts_and_each_other() -> None:
    out = firewall_sources(["gw", "pinned"], HOSTVARS,
                           ["10.9.3.4", "10.0.0.0/30", "10.0.0.5/24", "2001:db8::/32"])
    # 10.0.0.5/24 is its network; it holds 10.0.0.5 and 10.0.0.0/30; 10.9.3.4 is in 10.9.0.0/16
    assert out == {"ipv4": ["10.0.0.0/24", "10.9.0.0/16", "192.168.7.5"],
                   "ipv6": ["2001:db8::/32", "fd00::5", "fd01::/64"]}


def test_no_hosts_no_extra_is_empty() -> None:
    assert firewall_sources([], HOSTVARS) == {"ipv4": [], "ipv6": []}
    assert firewall_sources([], HOSTVARS, ["192.0.2.7"]) == {"ipv4": ["192.0.2.7"], "ipv6": []}


def test_a_host_without_an_address_is_named() -> None:
    with pytest.raises(AnsibleFilterError, match=r"host 'named' has no address.*setup"):
        firewall_sources(["gw", "named"], HOSTVARS)
    with pytest.raises(AnsibleFilterError, match=r"host 'ghost' has no address"):
        firewall_sources(["ghost"], HOSTVARS)


@pytest.mark.parametrize(("hosts", "extra", "where"), [
    (["one"], ["10.0.0.300"], r"extra\[0\]: '10.0.0.300'"),
    (["one"], ["192.0.2.7", "controller"], r"extra\[1\]: 'controller'"),
    ([], None, None),
])
def test_a_bad_extra_entry_is_named(hosts: list[str], extra: list[str] | None,
                                    where: str | None) -> None:
    if where is None:
        assert firewall_sources(hosts, HOSTVARS, extra) == {"ipv4": [], "ipv6": []}
        return
    with pytest.raises(AnsibleFilterError, match=where):
        firewall_sources(hosts, HOSTVARS, extra)


def test_a_bad_override_is_named() -> None:
    with pytest.raises(AnsibleFilterError, match=r"host 'x', firewall_source_addresses: 'gw'"):
        firewall_sources(["x"], {"x": {"firewall_source_addresses": ["gw"]}})


@pytest.mark.parametrize(("hosts", "extra"), [("gw", None), (None, None), (["gw"], "10.0.0.1")])
def test_wrong_argument_types(hosts: object, extra: object) -> None:
    with pytest.raises(AnsibleFilterError, match=r"expects a list|must be a list"):
        firewall_sources(hosts, HOSTVARS, extra)
