"""Filter instinct.vllm.vllm_unit_release: what a vLLM unit serves, read back from its
ExecStart (role rollout reads the restored unit after a rollback with it)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.filter.fingerprint import vllm_unit_release

# As role vllm_service writes it (templates/vllm.service.j2, filter systemd_argv).
UNIT = (
    "[Service]\nType=notify\n"
    "ExecStart=/usr/bin/python3 /usr/local/lib/instinct-vllm/instinct-vllm-watchdog "
    "--stall-timeout 60 --status-port 8001 -- /opt/vllm/venv/bin/vllm serve "
    "/srv/models/demo-r2 --dtype float32 --enforce-eager --host 0.0.0.0 --max-model-len 512 "
    "--port 8000 --served-model-name \"demo 100%%\"\n"
)


def test_the_release_is_read_from_exec_start() -> None:
    assert vllm_unit_release(UNIT) == {
        "model": "/srv/models/demo-r2", "served_model_name": "demo 100%",
        "url": "http://127.0.0.1:8000",
        "flags": {"dtype": "float32", "enforce-eager": True, "max-model-len": 512},
    }


@pytest.mark.parametrize("text", [None, "[Service]\nType=notify\n",
                                  "[Service]\nExecStart=/bin/true --\n"])
def test_a_unit_without_a_vllm_server_is_refused(text) -> None:
    with pytest.raises(AnsibleFilterError, match="vllm_unit_release"):
        vllm_unit_release(text)
