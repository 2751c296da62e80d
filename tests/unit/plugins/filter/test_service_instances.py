"""Filter service_instances: the vLLM instances of one node, each with its own unit, ports,
GPUs and state directory."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.filter.service_instances import service_instances


def test_one_instance_is_the_plain_service() -> None:
    (only,) = service_instances("vllm", 1, 8000, 8001, "/var/lib/vllm", 8)
    assert only == {
        "index": 0, "name": "vllm", "unit": "vllm.service",
        "unit_file": "/etc/systemd/system/vllm.service", "port": 8000, "status_port": 8001,
        "url": "http://127.0.0.1:8000", "gpus": "", "state_dir": "/var/lib/vllm",
    }


def test_eight_engines_of_one_gpu_each() -> None:
    got = service_instances("vllm", 8, 8000, 8100, "/var/lib/vllm/", 1, "https://10.0.0.5")
    assert [i["unit"] for i in got] == [f"vllm@{n}.service" for n in range(8)]
    assert [i["port"] for i in got] == list(range(8000, 8008))
    assert [i["status_port"] for i in got] == list(range(8100, 8108))
    assert [i["gpus"] for i in got] == [str(n) for n in range(8)]
    assert got[7]["state_dir"] == "/var/lib/vllm/7"
    assert got[7]["url"] == "https://10.0.0.5:8007"


def test_gpus_follow_the_tensor_parallel_size() -> None:
    got = service_instances("llm", 2, 9000, 0, "/srv/llm", 4)
    assert [i["gpus"] for i in got] == ["0,1,2,3", "4,5,6,7"]
    assert [i["status_port"] for i in got] == [0, 0]  # no agent check stays none
    assert got[1]["unit_file"] == "/etc/systemd/system/llm@1.service"


@pytest.mark.parametrize(("args", "what"), [
    ((0, 8000, 8001, "/v", 1), "vllm_service_instances"),
    (("two", 8000, 8001, "/v", 1), "vllm_service_instances"),
    ((True, 8000, 8001, "/v", 1), "vllm_service_instances"),
    ((2, 8000, 8001, "/v", 0), "tensor-parallel-size"),
])
def test_bad_counts_are_named(args: tuple, what: str) -> None:
    with pytest.raises(AnsibleFilterError, match=what):
        service_instances("vllm", *args)
