# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vLLM instances of one node (role vllm_service, ``vllm_service_instances``). Documented in
service_instances.yml beside this file. Usage::

    'vllm' | instinct.vllm.service_instances(2, port=8000, status_port=8100,
        state_dir='/var/lib/vllm', tensor_parallel_size=4, url_prefix='http://127.0.0.1')
    -> [{'index': 0, 'name': 'vllm@0', 'unit': 'vllm@0.service', 'port': 8000,
         'status_port': 8100, 'gpus': '0,1,2,3', 'state_dir': '/var/lib/vllm/0', ...}, ...]

One instance keeps the plain unit name, the state directory and every GPU (``gpus`` empty), so
a node that serves one engine looks as it did before instances existed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError


def _positive(value: Any, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if isinstance(value, bool) or number < 1:
        raise AnsibleFilterError(
            f"instinct.vllm.service_instances: {what} must be a positive integer (is {value!r})")
    return number


def _instance(name: str, index: int, count: int, ports: tuple[int, int], state_dir: str,
              gpus: str, url_prefix: str) -> dict[str, Any]:
    unit = name if count == 1 else f"{name}@{index}"
    port = ports[0] + index
    return {
        "index": index,
        "name": unit,
        "unit": f"{unit}.service",
        "unit_file": f"/etc/systemd/system/{unit}.service",
        "port": port,
        "status_port": ports[1] + index if ports[1] > 0 else 0,
        "url": f"{url_prefix}:{port}",
        "gpus": gpus,
        "state_dir": state_dir if count == 1 else f"{state_dir.rstrip('/')}/{index}",
    }


def service_instances(name: str, count: Any, port: Any, status_port: Any, state_dir: str,
                      tensor_parallel_size: Any = 1, url_prefix: str = "http://127.0.0.1",
                      ) -> list[dict[str, Any]]:
    """``count`` instances of service ``name``: instance i listens on ``port`` + i, answers the
    agent check on ``status_port`` + i (0: none) and sees GPUs i*TP .. i*TP+TP-1."""
    count = _positive(count, "the instance count (vllm_service_instances)")
    tp = _positive(tensor_parallel_size, "tensor-parallel-size")
    ports = (_positive(port, "the port"), int(status_port))
    out = []
    for index in range(count):
        gpus = "" if count == 1 else ",".join(str(g) for g in range(index * tp, (index + 1) * tp))
        out.append(_instance(str(name), index, count, ports, str(state_dir), gpus, url_prefix))
    return out


class FilterModule:
    """instinct.vllm service instance filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"service_instances": service_instances}
