"""Filters of role gateway: backends from the inventory, key hashes without the clear key."""

from __future__ import annotations

import hashlib

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.filter.gateway import (
    gateway_key_hashes,
    gateway_nodes,
)


def facts(port: object = 8000, status_port: object = 8001) -> dict:
    return {"vllm_service_resolved": {"port": port, "status_port": status_port}}


def test_nodes_use_address_then_ansible_host_then_name() -> None:
    hv = {
        "n1": {"gateway_node_address": "10.0.0.1", "ansible_host": "n1.example",
               "vllm_service_port": 7000, **facts(9000)},
        "n2": {"ansible_host": "n2.example", **facts()},
        "n3": facts(),
    }
    assert gateway_nodes(["n1", "n2", "n3"], hv) == [
        {"name": "n1", "host": "n1", "address": "10.0.0.1", "port": 9000, "agent_port": 8001},
        {"name": "n2", "host": "n2", "address": "n2.example", "port": 8000, "agent_port": 8001},
        {"name": "n3", "host": "n3", "address": "n3", "port": 8000, "agent_port": 8001},
    ]


def test_nodes_ports_are_the_published_ones() -> None:
    """The variables are not read: the fact counts vllm_service_flags_extra's port."""
    hv = {
        "n1": {**facts(9123, 9001), "vllm_service_port": 8000, "vllm_service_status_port": 9002},
        "n2": facts(8000, "9002"),
        "n3": facts(8000, 0),  # no status port: no agent check
    }
    assert [(n["port"], n["agent_port"]) for n in gateway_nodes(["n1", "n2", "n3"], hv)] == [
        (9123, 9001), (8000, 9002), (8000, 0)]


def instances(*ports: tuple[object, object]) -> dict:
    """vllm_service_resolved with one instance per (port, status_port); the top level is
    instance 0, as role vllm_service publishes it."""
    listed = [{"index": i, "name": f"vllm@{i}", "port": port, "status_port": status}
              for i, (port, status) in enumerate(ports)]
    fact = facts(*ports[0])
    fact["vllm_service_resolved"] |= {"instance_count": len(ports), "instances": listed}
    return fact


def test_a_server_per_instance_named_host_colon_index() -> None:
    hv = {"n1": {"ansible_host": "10.0.0.1", **instances((8000, 8001), (8002, 0))},
          "n2": instances((9000, 9001))}
    assert gateway_nodes(["n1", "n2"], hv) == [
        {"name": "n1:0", "host": "n1", "address": "10.0.0.1", "port": 8000, "agent_port": 8001},
        {"name": "n1:1", "host": "n1", "address": "10.0.0.1", "port": 8002, "agent_port": 0},
        # one instance: the server keeps the inventory host's name
        {"name": "n2", "host": "n2", "address": "n2", "port": 9000, "agent_port": 9001},
    ]


def test_the_instances_ports_not_the_top_level_ones() -> None:
    hv = {"n1": instances((8000, 8001), (8010, 8011))}
    hv["n1"]["vllm_service_resolved"] |= {"port": 1234, "status_port": 0}
    assert [(n["port"], n["agent_port"]) for n in gateway_nodes(["n1"], hv)] == [
        (8000, 8001), (8010, 8011)]


def test_a_bad_instance_port_names_the_host_and_the_instance() -> None:
    with pytest.raises(AnsibleFilterError, match=r"host 'n1': vllm_service_resolved\.instances"
                       r"\[1\]\.status_port must be 0 or a port"):
        gateway_nodes(["n1"], {"n1": instances((8000, 8001), (8002, 70000))})
    with pytest.raises(AnsibleFilterError, match=r"host 'n1': vllm_service_resolved\.instances"
                       r"\[0\]\.port must be a port"):
        gateway_nodes(["n1"], {"n1": instances((None, 8001), (8002, 0))})


@pytest.mark.parametrize("bad", [[], "vllm@0", [8000], {"index": 0}])
def test_instances_that_are_not_a_list_of_mappings_are_an_error(bad: object) -> None:
    hv = {"n1": facts()}
    hv["n1"]["vllm_service_resolved"]["instances"] = bad
    with pytest.raises(AnsibleFilterError, match=r"host 'n1': vllm_service_resolved\.instances "
                       "must be a non-empty list of mappings"):
        gateway_nodes(["n1"], hv)


def test_an_instance_index_that_is_not_an_integer_is_an_error() -> None:
    hv = {"n1": instances((8000, 8001), (8002, 8003))}
    hv["n1"]["vllm_service_resolved"]["instances"][1]["index"] = "1; x"
    with pytest.raises(AnsibleFilterError,
                       match=r"vllm_service_resolved\.instances\[1\]\.index must be an integer"):
        gateway_nodes(["n1"], hv)


def test_a_node_without_the_published_facts_is_an_error() -> None:
    with pytest.raises(AnsibleFilterError, match="host 'n1' has no vllm_service_resolved: "
                       "publish the node's serving facts first"):
        gateway_nodes(["n1"], {"n1": {"vllm_service_port": 8000}})


@pytest.mark.parametrize("bad", [-1, 70000, "x", True, None])
def test_nodes_refuse_a_bad_status_port(bad: object) -> None:
    with pytest.raises(AnsibleFilterError,
                       match=r"host 'n1': vllm_service_resolved\.status_port must be 0 or"):
        gateway_nodes(["n1"], {"n1": facts(8000, bad)})


@pytest.mark.parametrize("bad", [0, 70000, "x"])
def test_nodes_refuse_a_bad_port(bad: object) -> None:
    with pytest.raises(AnsibleFilterError,
                       match=r"host 'n1': vllm_service_resolved\.port must be a"):
        gateway_nodes(["n1"], {"n1": facts(bad)})


@pytest.mark.parametrize("bad", ["node 1", "n/1", "n#1"])
def test_nodes_refuse_names_haproxy_refuses(bad: str) -> None:
    with pytest.raises(AnsibleFilterError, match="valid HAProxy server name"):
        gateway_nodes([bad], {bad: {}})


def test_nodes_refuse_a_string() -> None:
    with pytest.raises(AnsibleFilterError, match="list of host names"):
        gateway_nodes("n1", {})


def test_key_hashes_hash_clear_keys_and_keep_given_hashes() -> None:
    given = "AB" * 32
    out = gateway_key_hashes([
        {"name": "a", "key": "clear-key-123456789", "rate_limit": "5", "max_concurrency": "8"},
        {"name": "b", "key_sha256": given},
    ])
    assert out == [
        {"name": "a", "sha256": hashlib.sha256(b"clear-key-123456789").hexdigest(),
         "rate_limit": 5, "max_concurrency": 8},
        {"name": "b", "sha256": given.lower(), "rate_limit": None, "max_concurrency": None},
    ]
    assert "clear-key-123456789" not in repr(out)


def test_key_hashes_name_the_entry_without_a_key() -> None:
    with pytest.raises(AnsibleFilterError, match=r"gateway_api_keys\[1\] \(b\)"):
        gateway_key_hashes([{"name": "a", "key": "x" * 20}, {"name": "b"}])


@pytest.mark.parametrize("bad", [0, -1, "two", 2.5, True, [2]])
def test_key_hashes_refuse_a_max_concurrency_that_is_not_a_positive_integer(bad: object) -> None:
    with pytest.raises(AnsibleFilterError,
                       match=r"gateway_api_keys\[0\] \(a\): max_concurrency must be a positive"):
        gateway_key_hashes([{"name": "a", "key": "x" * 20, "max_concurrency": bad}])
