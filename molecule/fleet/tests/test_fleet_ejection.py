"""fleet scenario: a hung node leaves the gateway's rotation (docs/gateway.md, "Hung nodes").

Under the streaming load of fleet_load.py, one node's engine is SIGSTOPped: vLLM's /health
stays 200, the node's watchdog answers "down #stopped" to the gateway's agent check, and the
gateway marks the node DOWN, read from its runtime API, within 5 s. Failed client requests
are at most the streams that were on that node when it went DOWN (they got their response
started there, so the gateway cannot replay them); none fails after. Then SIGCONT, and the
node is back UP before the test ends, so whatever runs next finds both nodes.

Runs after test_fleet.py (pytest takes the files in name order); starts by waiting for both
nodes UP. No fixed sleeps but the few seconds of load after DOWN that the last check needs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_load import Load, failed
from test_fleet import (
    DIRECT,
    GW,
    MODEL,
    gateway_servers,
    main_pid,
    node_tls,
    openai_client,
    sh,
    wait_status,
)

NODE = "fleet-node2"
BOUND = 5.0  # seconds from the SIGSTOP to DOWN at the gateway (the bound)
AFTER = 5.0  # seconds of load after DOWN: every request then must succeed

# Runs in the gateway container: waits for "go" on stdin, then polls the runtime API every
# 50 ms until the server is DOWN; prints the seconds since "go", its status and its streams.
WATCH_PY = r"""
import json, socket, sys, time
server = sys.argv[1]
def stat():
    s = socket.socket(socket.AF_UNIX); s.connect("/run/haproxy/admin.sock")
    s.sendall(b"show stat\n"); data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk: break
        data += chunk
    for line in data.decode().splitlines():
        f = line.split(",")
        if len(f) > 17 and f[0] == "vllm" and f[1] == server:
            return f[17], int(f[4] or 0)
    return "", 0
sys.stdin.readline()
start = time.monotonic()
while time.monotonic() - start < 60:
    status, scur = stat()
    if status.startswith("DOWN"):
        break
    time.sleep(0.05)
print(json.dumps({"after": time.monotonic() - start, "status": status, "scur": scur}))
"""


def engine_of(node: str) -> tuple[str, str]:
    """(pid, comm) of the node's engine: current vLLM's EngineCore process in vLLM's session
    (the wrapper starts vLLM as the leader of a new session), else vLLM's main process."""
    server = sh(node, f"pgrep -P {main_pid(node)} -o").strip()
    for line in sh(node, f"ps -o pid=,comm= -s {server}").splitlines():
        pid, comm = [*line.split(maxsplit=1), ""][:2]
        if comm.strip().startswith("VLLM::EngineCor"):
            return pid, comm.strip()
    return server, "vLLM main process"


def health_direct(node: str) -> int:
    import httpx2 as httpx

    try:
        return httpx.get(DIRECT[node] + "/health", verify=node_tls(), timeout=3).status_code
    except httpx.HTTPError:
        return 0


def test_a_stopped_engine_leaves_the_rotation_within_5_s(ca, figures, results):
    other = next(n for n in DIRECT if n != NODE)
    assert wait_status(NODE, "UP") == "UP" and wait_status(other, "UP") == "UP"
    restarts = sh(NODE, "systemctl show -P NRestarts vllm.service").strip()
    pid, what = engine_of(NODE)
    load = Load(lambda: openai_client(ca), MODEL, workers=4, max_tokens=16).start()
    stopped = False
    try:
        deadline = time.monotonic() + 60
        while int(gateway_servers()[NODE]["scur"]) == 0:  # a stream on the node
            assert time.monotonic() < deadline, "no stream reached the node"
        watch = subprocess.Popen(["podman", "exec", "-i", GW, "python3", "-c", WATCH_PY, NODE],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert watch.stdin is not None
        watch.stdin.write("go\n")
        watch.stdin.flush()  # the clock starts before the kill (an upper bound)
        sh(NODE, f"kill -STOP {pid}")
        stopped = True
        out, _err = watch.communicate(timeout=90)
        down_wall = time.time()
        seen = json.loads(out)
        health = health_direct(NODE)
        end = time.monotonic() + AFTER
        while time.monotonic() < end:  # load on the other node only
            time.sleep(0.2)
    finally:
        if stopped:
            sh(NODE, f"kill -CONT {pid}")
        back = time.monotonic()
        up = wait_status(NODE, "UP", 120)
        up_after = time.monotonic() - back
        outcomes = load.stop()
    bad = failed(outcomes)
    bad_after = [o for o in bad if o.start > down_wall]
    figures.append(
        f"ejection: SIGSTOP of {NODE}'s {what} (pid {pid}) -> {seen['status']} at the gateway "
        f"in {seen['after']:.2f} s (its /health: {health}); {seen['scur']} stream(s) on it then; "
        f"client requests {len(outcomes)}, failed {len(bad)} ({len(bad_after)} started after "
        f"DOWN); SIGCONT -> {up} in {up_after:.1f} s")
    results["ejection"] = {
        "node": NODE, "stopped": what, "down_after_s": round(seen["after"], 2),
        "status": seen["status"], "streams_on_node_at_down": seen["scur"],
        "health_while_stopped": health, "requests": len(outcomes), "failed": len(bad),
        "failed_after_down": len(bad_after), "up_after_sigcont_s": round(up_after, 1),
    }
    assert seen["status"].startswith("DOWN") and seen["after"] < BOUND, seen
    if what != "vLLM main process":  # the engine alone: /health 200, the agent did it
        assert health == 200 and seen["status"] == "DOWN (agent)", (health, seen)
    assert len(bad) <= seen["scur"], [o.error for o in bad[:5]]
    assert not bad_after, [o.error for o in bad_after[:5]]
    assert up == "UP"
    assert gateway_servers()[other]["status"] == "UP"
    # back within WatchdogSec: systemd never restarted it
    assert sh(NODE, "systemctl show -P NRestarts vllm.service").strip() == restarts
