"""Two vLLM engines on one node (vllm_service_instances: 2), as site.yml left them.

Each instance is its own unit with its own port, agent-check port, GPUs, state directory and
watchdog. The one-instance unit prepare.yml left running is retired. An engine stopped
(SIGSTOP) is restarted by its own watchdog alone: the other instance keeps its process and
answers every request meanwhile. A release switched one instance at a time restarts only the
instance switched; the other restarts when switched later. rolling_update.yml rolls the
instances one by one through the gateway (rocm7-twin-gw) without failing a client's request.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import testinfra

NODE = "rocm7-twin-node"
KEY = "twin-scenario-key-4b7e90c1d2a8"
MODEL = "gpt-oss-tiny"
INSTANCES = [  # unit, published port on this machine, vLLM's port, agent-check port
    ("vllm@0.service", 18400, 8000, 8100),
    ("vllm@1.service", 18401, 8001, 8101),
]
# Bounds for a loaded shared 2-core machine, not performance claims: the wrapper sees the
# stopped process within two polls, then WatchdogSec (20 s), then RestartSec (2 s).
RESTART_WITHIN = 240.0
SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
GATEWAY_PORT = 18444  # rocm7-twin-gw's TLS listener, published on this machine
GATEWAY_KEY = "twin-client-key-93c5e1a07b64"
# The gateway's self-signed certificate: its TLS is the fleet scenario's subject, not this one's.
UNVERIFIED = ssl._create_unverified_context()
PENDING = "/etc/vllm/staged/pending"  # role vllm_service's marks of instances pending a restart
SERVING_WITHIN = 600.0


@pytest.fixture(scope="module")
def host() -> Any:
    return testinfra.get_host(f"sandbox://{NODE}")


def prop(host: Any, unit: str, name: str) -> str:
    return host.check_output(f"systemctl show -p {name} --value {unit}").strip()


def complete(port: int, timeout: float = 60, key: str = KEY, scheme: str = "http") -> int:
    """HTTP status of one short completion on the instance (or the gateway) published at
    ``port`` (0: none)."""
    body = json.dumps({"model": MODEL, "prompt": "hello", "max_tokens": 2}).encode()
    request = urllib.request.Request(
        f"{scheme}://127.0.0.1:{port}/v1/completions", body,
        {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=UNVERIFIED) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def test_each_instance_is_its_own_unit_with_its_own_port_gpus_and_state(host: Any) -> None:
    for index, (unit, published, port, status_port) in enumerate(INSTANCES):
        assert prop(host, unit, "ActiveState") == "active", unit
        assert prop(host, unit, "UnitFileState") == "enabled", unit
        assert prop(host, unit, "WorkingDirectory") == f"/var/lib/vllm/{index}"
        environment = prop(host, unit, "Environment").split()
        assert f"CUDA_VISIBLE_DEVICES={index}" in environment  # tensor-parallel-size 1
        assert f"HOME=/var/lib/vllm/{index}" in environment
        argv = prop(host, unit, "ExecStart")
        assert f"--port {port} " in argv and f"--status-port {status_port} " in argv
        assert host.socket(f"tcp://0.0.0.0:{status_port}").is_listening
        assert complete(published) == 200, unit


def test_the_one_instance_unit_is_retired(host: Any) -> None:
    """prepare.yml left vllm.service (the one-instance layout) enabled and running."""
    assert not host.file("/etc/systemd/system/vllm.service").exists
    assert prop(host, "vllm.service", "ActiveState") == "inactive"
    assert host.run("pgrep -fx '/bin/sleep 86399'").rc == 1  # its process is gone


def stop_engine(host: Any, unit: str) -> tuple[str, str, int]:
    """SIGSTOP the unit's engine (the wrapper's oldest child): (wrapper pid, engine pid,
    restarts before)."""
    main_pid = prop(host, unit, "MainPID")
    engine = host.check_output(f"pgrep -P {main_pid} -o").strip()
    assert engine, f"no engine under {unit}'s wrapper"
    restarts = int(prop(host, unit, "NRestarts"))
    host.check_output(f"kill -STOP {engine}")
    return main_pid, engine, restarts


def wait(check: Any, timeout: float, step: float = 1) -> bool:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return True
        time.sleep(step)
    return False


@pytest.mark.parametrize(("stopped", "serving"), [(1, 0), (0, 1)])
def test_a_stopped_engine_is_restarted_alone_the_other_keeps_serving(
        host: Any, stopped: int, serving: int) -> None:
    unit, published = INSTANCES[stopped][:2]
    other, other_published = INSTANCES[serving][:2]
    other_pid, other_restarts = prop(host, other, "MainPID"), prop(host, other, "NRestarts")
    since = int(host.check_output("date +%s"))
    main_pid, engine, restarts = stop_engine(host, unit)
    answers: list[int] = []
    try:
        restarted = wait(lambda: (answers.append(complete(other_published))
                                  or int(prop(host, unit, "NRestarts")) != restarts),
                         RESTART_WITHIN)
    finally:
        host.run(f"kill -CONT {engine}")
    assert restarted, f"{unit} was not restarted ({prop(host, unit, 'ActiveState')})"
    journal = host.check_output(f"journalctl --no-pager -o cat -u {unit} --since @{since}")
    assert "atchdog timeout" in journal
    assert f"vLLM process(es) {engine} stopped (SIGSTOP?)" in journal
    assert wait(lambda: complete(published) == 200, SERVING_WITHIN, 5), f"{unit} not serving"
    assert prop(host, unit, "MainPID") != main_pid
    # the other instance: same process, no restart, every answer a 200 meanwhile
    assert (prop(host, other, "MainPID"), prop(host, other, "NRestarts")) == (
        other_pid, other_restarts)
    assert answers and set(answers) == {200}, answers
    other_journal = host.check_output(
        f"journalctl --no-pager -o cat -u {other} --since @{since}")
    assert "atchdog timeout" not in other_journal


def playbook(path: Path, variables: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"),
         "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(path), "-e", json.dumps(variables)],
        capture_output=True, text=True, timeout=1800, check=False)


def switch(instances: list[int], restart_sec: int) -> subprocess.CompletedProcess[str]:
    """switch.yml (role vllm_service) with a release that changes every instance's unit
    (RestartSec), switching only ``instances``."""
    return playbook(SCENARIO / "switch.yml", {"vllm_service_switch_instances": instances,
                                              "vllm_service_restart_sec": restart_sec})


def monotonic(host: Any, unit: str, name: str) -> int:
    """A unit's timestamp property in microseconds of the node's monotonic clock."""
    return int(prop(host, unit, f"{name}TimestampMonotonic"))


class GatewayLoad:
    """Clients looping over short completions through the gateway until stopped."""

    def __init__(self, workers: int = 2, pause: float = 0.25) -> None:
        self.answers: list[int] = []
        self._stop = threading.Event()
        self._pause = pause
        self._threads = [threading.Thread(target=self._work, daemon=True)
                         for _worker in range(workers)]

    def _work(self) -> None:
        while not self._stop.is_set():
            self.answers.append(complete(GATEWAY_PORT, key=GATEWAY_KEY, scheme="https"))
            self._stop.wait(self._pause)

    def __enter__(self) -> GatewayLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)


def test_a_release_switched_one_instance_at_a_time(host: Any) -> None:
    """The release reaches every unit file, but only the instance switched restarts; the other
    stays marked pending on the node and restarts when a later run switches it: here the
    rolling update below."""
    first, second = (unit for unit, *_rest in INSTANCES)
    pids = {unit: prop(host, unit, "MainPID") for unit in (first, second)}
    run = switch([1], 9)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert prop(host, second, "MainPID") != pids[second]
    assert prop(host, first, "MainPID") == pids[first]
    for unit in (first, second):
        assert "RestartSec=9" in host.file(f"/etc/systemd/system/{unit}").content_string
    assert host.file(f"{PENDING}/{first}").exists and not host.file(f"{PENDING}/{second}").exists


def test_a_rolling_update_rolls_the_instances_one_by_one_without_a_failed_request(
        host: Any) -> None:
    """rolling_update.yml with instinct_vllm_rollout_instances one_by_one and a release that
    changes both units: instance 0 is drained, switched and gated while instance 1 serves, then
    instance 1 is drained and switched while instance 0 serves. The node is the gateway's only
    node, so a moment with both instances out of rotation would fail a client's request."""
    first, second = (unit for unit, *_rest in INSTANCES)
    pids = {unit: prop(host, unit, "MainPID") for unit in (first, second)}
    with GatewayLoad() as load:
        time.sleep(3)
        run = playbook(REPO / "playbooks" / "rolling_update.yml",
                       {"vllm_service_restart_sec": 8, "instinct_vllm_canary_gates": ["verify"]})
        time.sleep(3)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert load.answers and set(load.answers) == {200}, sorted(set(load.answers))
    for unit in (first, second):
        assert prop(host, unit, "MainPID") != pids[unit], unit
        assert "RestartSec=8" in host.file(f"/etc/systemd/system/{unit}").content_string
        assert not host.file(f"{PENDING}/{unit}").exists
    # instance 1 began to stop only once instance 0 served the release again
    assert monotonic(host, first, "ActiveEnter") < monotonic(host, second, "ActiveExit")
    assert "Drain the instance at the gateway: vllm@1.service" in run.stdout
    assert complete(INSTANCES[0][1]) == 200 and complete(INSTANCES[1][1]) == 200
