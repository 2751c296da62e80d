"""instinct.vllm.scrape_targets: Prometheus static_configs from inventory hosts."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.filter.monitoring import scrape_targets

HOSTVARS = {
    "a": {"ansible_host": "10.0.0.1", "vllm_service_port": 8001},
    "b": {"ansible_host": "10.0.0.2", "monitoring_scrape_address": "127.0.0.1"},
    "c": {},
    "v6": {"ansible_host": "fd00::5"},
    "bad": {"vllm_service_port": "eighty"},
}


def test_address_port_and_node_label() -> None:
    assert scrape_targets(["a", "b", "c"], HOSTVARS, "vllm_service_port", 8000) == [
        {"targets": ["10.0.0.1:8001"], "labels": {"node": "a"}},
        {"targets": ["127.0.0.1:8000"], "labels": {"node": "b"}},  # monitoring_scrape_address wins
        {"targets": ["c:8000"], "labels": {"node": "c"}},  # no ansible_host: the inventory name
    ]


def test_ipv6_is_bracketed_and_no_port_var_uses_the_default() -> None:
    assert scrape_targets(["v6", "a"], HOSTVARS, "", 9100) == [
        {"targets": ["[fd00::5]:9100"], "labels": {"node": "v6"}},
        {"targets": ["10.0.0.1:9100"], "labels": {"node": "a"}},
    ]


def test_host_missing_from_hostvars_and_empty_list() -> None:
    assert scrape_targets(["ghost"], HOSTVARS, "", 5000) == [
        {"targets": ["ghost:5000"], "labels": {"node": "ghost"}}
    ]
    assert scrape_targets([], HOSTVARS, "", 5000) == []


def test_bad_port_names_host_and_variable() -> None:
    with pytest.raises(AnsibleFilterError, match=r"host bad: vllm_service_port .*'eighty'"):
        scrape_targets(["bad"], HOSTVARS, "vllm_service_port", 8000)
    with pytest.raises(AnsibleFilterError, match="default_port"):
        scrape_targets(["c"], HOSTVARS, "", 70000)


def test_a_string_is_not_a_host_list() -> None:
    with pytest.raises(AnsibleFilterError, match="list of host names"):
        scrape_targets("a", HOSTVARS, "", 1)


def test_a_dotted_port_var_reads_into_a_fact() -> None:
    hostvars = {"n1": {"vllm_service_resolved": {"port": 9001}},
                "n2": {"vllm_service_resolved": {}},
                "n3": {"vllm_service_resolved": "not a dict"}}
    assert scrape_targets(["n1"], hostvars, "vllm_service_resolved.port") == [
        {"targets": ["n1:9001"], "labels": {"node": "n1"}}]
    for host in ("n2", "n3", "ghost"):  # no such fact: no port, and the error names the path
        with pytest.raises(AnsibleFilterError, match=rf"host {host}: vllm_service_resolved\.port"):
            scrape_targets([host], hostvars, "vllm_service_resolved.port")


def resolved(*ports: object) -> dict:
    """vllm_service_resolved with one instance per port; the top level is instance 0."""
    names = ["vllm"] if len(ports) == 1 else [f"vllm@{i}" for i in range(len(ports))]
    return {"vllm_service_resolved": {
        "port": ports[0], "status_port": 0, "instance_count": len(ports),
        "instances": [{"index": i, "name": name, "port": port}
                      for i, (name, port) in enumerate(zip(names, ports, strict=True))]}}


def test_a_target_per_instance_of_a_node_that_runs_several() -> None:
    hostvars = {"n1": {"ansible_host": "10.0.0.1", **resolved(8000, 8001)},
                "n2": resolved(9000),
                "n3": {"vllm_service_resolved": {"port": 8000}}}  # an older fact: no instances
    assert scrape_targets(["n1", "n2", "n3"], hostvars, "vllm_service_resolved.port") == [
        {"targets": ["10.0.0.1:8000"], "labels": {"node": "n1", "vllm_instance": "vllm@0"}},
        {"targets": ["10.0.0.1:8001"], "labels": {"node": "n1", "vllm_instance": "vllm@1"}},
        # one instance: labelled as before instances existed
        {"targets": ["n2:9000"], "labels": {"node": "n2"}},
        {"targets": ["n3:8000"], "labels": {"node": "n3"}},
    ]


def test_the_instances_ports_not_the_top_level_one() -> None:
    hostvars = {"n1": resolved(8000, 8001), "n2": resolved(9000)}
    for host in hostvars:
        hostvars[host]["vllm_service_resolved"]["port"] = 1234
    assert [c["targets"] for c in scrape_targets(["n1", "n2"], hostvars,
                                                 "vllm_service_resolved.port")] == [
        ["n1:8000"], ["n1:8001"], ["n2:9000"]]


def test_a_bad_instance_port_names_the_host_and_the_instance() -> None:
    hostvars = {"n1": resolved(8000, "x")}
    with pytest.raises(AnsibleFilterError,
                       match=r"host n1: vllm_service_resolved\.instances\[1\]\.port must be a "
                             r"port 1-65535 \(is 'x'\)"):
        scrape_targets(["n1"], hostvars, "vllm_service_resolved.port")


@pytest.mark.parametrize("bad", [[], "vllm@0", [8000]])
def test_instances_that_are_not_a_list_of_mappings_are_an_error(bad: object) -> None:
    hostvars = {"n1": {"vllm_service_resolved": {"port": 8000, "instances": bad}}}
    with pytest.raises(AnsibleFilterError, match=r"host n1: vllm_service_resolved\.instances "
                       "must be a non-empty list of mappings"):
        scrape_targets(["n1"], hostvars, "vllm_service_resolved.port")


def test_instances_are_read_only_beside_a_dotted_port_var() -> None:
    """A plain variable, or a fact without instances, is one target as before."""
    hostvars = {"n1": {"vllm_service_port": 8005, **resolved(8000, 8001)},
                "gw": {"gateway_resolved": {"metrics_port": 8405}}}
    assert scrape_targets(["n1"], hostvars, "vllm_service_port") == [
        {"targets": ["n1:8005"], "labels": {"node": "n1"}}]
    assert scrape_targets(["n1"], hostvars, "", 9100) == [
        {"targets": ["n1:9100"], "labels": {"node": "n1"}}]
    assert scrape_targets(["gw"], hostvars, "gateway_resolved.metrics_port") == [
        {"targets": ["gw:8405"], "labels": {"node": "gw"}}]
