"""Two vLLM engines on one node (vllm_service_instances: 2), as site.yml left them.

Each instance is its own unit with its own port, agent-check port, GPUs, state directory and
watchdog. The one-instance unit prepare.yml left running is retired. An engine stopped
(SIGSTOP) is restarted by its own watchdog alone: the other instance keeps its process and
answers every request meanwhile. A release switched one instance at a time (as role rollout's
one_by_one does) restarts only the instance switched; the other restarts when switched later.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
# stopped process within two polls, then WatchdogSec (30 s), then RestartSec (10 s).
RESTART_WITHIN = 240.0
SCENARIO = Path(__file__).resolve().parents[1]
PENDING = "/etc/vllm/staged/pending"  # role vllm_service's marks of instances pending a restart
SERVING_WITHIN = 600.0


@pytest.fixture(scope="module")
def host() -> Any:
    return testinfra.get_host(f"sandbox://{NODE}")


def prop(host: Any, unit: str, name: str) -> str:
    return host.check_output(f"systemctl show -p {name} --value {unit}").strip()


def complete(port: int, timeout: float = 60) -> int:
    """HTTP status of one short completion on the instance published at ``port`` (0: none)."""
    body = json.dumps({"model": MODEL, "prompt": "hello", "max_tokens": 2}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions", body,
        {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
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


def switch(instances: list[int], restart_sec: int) -> subprocess.CompletedProcess[str]:
    """switch.yml (role vllm_service) with a release that changes every instance's unit
    (RestartSec), switching only ``instances``."""
    variables = {"vllm_service_switch_instances": instances,
                 "vllm_service_restart_sec": restart_sec}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"),
         "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(SCENARIO / "switch.yml"),
         "-e", json.dumps(variables)],
        capture_output=True, text=True, timeout=900, check=False)


def test_a_release_switched_one_instance_at_a_time(host: Any) -> None:
    """The release reaches every unit file, but only the instance switched restarts; the other
    stays marked pending on the node and restarts when a later run switches it."""
    first, second = (unit for unit, *_rest in INSTANCES)
    pids = {unit: prop(host, unit, "MainPID") for unit in (first, second)}
    run = switch([1], 9)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert prop(host, second, "MainPID") != pids[second]
    assert prop(host, first, "MainPID") == pids[first]
    for unit in (first, second):
        assert "RestartSec=9" in host.file(f"/etc/systemd/system/{unit}").content_string
    assert host.file(f"{PENDING}/{first}").exists and not host.file(f"{PENDING}/{second}").exists
    second_pid = prop(host, second, "MainPID")
    run = switch([0], 9)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert prop(host, first, "MainPID") != pids[first]
    assert prop(host, second, "MainPID") == second_pid
    assert not host.file(f"{PENDING}/{first}").exists
    assert complete(INSTANCES[0][1]) == 200 and complete(INSTANCES[1][1]) == 200
