"""Hung-node ejection: the real HAProxy with role gateway's haproxy.cfg in front of two stand-in
nodes, each run by the real watchdog wrapper (roles/vllm_service/files/instinct-vllm-watchdog)
with its status port on, on loopback.

A stand-in node is what the wrapper starts as "vLLM": an HTTP server (its API server: /health,
/v1/models, /metrics, the probe /v1/completions, and /v1/chat/completions for the clients)
with a child process standing in for its engine, in the session the wrapper gives it. Its
behaviour is switched by the test on a control path only the test uses.

Checked (docs/gateway.md, "Hung nodes"): the rendered configuration passes ``haproxy -c``;
SIGSTOP of a node's engine (its /health stays 200) takes it out of rotation within 5 s, by
the agent check alone, and SIGCONT puts it back; a failing probe takes it out; a saturated
node (its /health and probe time out while tokens flow) stays in; a request that a node closes
without a response byte is answered by the other node, and a request both nodes close is tried
1 + gateway_retries times in all. The measured times are printed (pytest -s).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from gateway_harness import (
    NO_HAPROXY,
    TIMEOUT,
    Gateway,
    free_port,
    request,
    running_gateway,
    wait_for,
)

pytestmark = NO_HAPROXY

ROOT = Path(__file__).resolve().parents[3]
WRAPPER = ROOT / "roles" / "vllm_service" / "files" / "instinct-vllm-watchdog"
GATEWAY_DEFAULTS = yaml.safe_load((ROOT / "roles/gateway/defaults/main.yml").read_text())
RETRIES = GATEWAY_DEFAULTS["gateway_retries"]
MODEL = "standin"
NODES = ("node-a", "node-b")
BOUND = 5.0  # seconds: the bound from a hang to "out of rotation"
# Watchdog timings scaled down (the role's: poll 5 s, /health timeout 10 s, probe every 30 s
# with 30 s timeout); the /proc listing keeps its default (0.5 s) and the gateway its agent
# interval (gateway_agent_interval, 1 s), so the ejection time measured is the product's.
WATCHDOG_OPTIONS = ["--poll-interval", "0.2", "--health-timeout", "0.5", "--stall-timeout", "3",
                    "--probe-interval", "0.5", "--probe-timeout", "0.5"]
SLOW = 1.0  # seconds a saturated stand-in takes for /health and the probe (> their timeouts)

STANDIN = r'''
import json, os, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, name, pidfile = int(sys.argv[1]), sys.argv[2], sys.argv[3]
engine = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"])
with open(pidfile, "w") as fh:
    fh.write(str(engine.pid))
state = {"mode": "normal", "seen": {}, "t0": time.monotonic()}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, code, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def note(self):
        with lock:
            state["seen"][self.path] = state["seen"].get(self.path, 0) + 1
            return state["mode"]

    def do_GET(self):
        mode = self.note()
        if self.path.startswith("/control/"):
            if self.path.startswith("/control/mode/"):
                with lock:
                    state["mode"] = self.path.rsplit("/", 1)[1]
            with lock:
                return self.send(200, json.dumps({"mode": state["mode"], "seen": state["seen"]}))
        if self.path == "/health":
            if mode == "saturated":
                time.sleep(SLOW)
            return self.send(200, "")
        if self.path == "/v1/models":
            return self.send(200, json.dumps({"object": "list", "data": [{"id": "standin"}],
                                              "node": name}))
        if self.path == "/metrics":
            busy = mode in ("busy", "saturated")
            tokens = int(100 * (time.monotonic() - state["t0"])) if busy else 0
            return self.send(200, "vllm:num_requests_running %d\n"
                                  "vllm:num_requests_waiting %d\n"
                                  "vllm:generation_tokens_total %d\n"
                                  "vllm:prompt_tokens_total 0\n" % (256 if busy else 0,
                                                                    40 if busy else 0, tokens),
                             "text/plain")
        self.send(404, "{}")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        mode = self.note()
        if self.path == "/v1/completions":  # the watchdog's probe
            if mode == "saturated":
                time.sleep(SLOW)
            if mode == "probe-error":
                return self.send(500, '{"error": "engine dead"}')
            return self.send(200, json.dumps({"choices": [{"text": "!"}]}))
        if mode == "close":  # the request read, then the connection closed: no response byte
            self.close_connection = True
            return
        self.send(200, json.dumps({"node": name}))


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # clients that leave early: the watchdog's timeouts, HAProxy's checks


SLOW = float(os.environ["STANDIN_SLOW"])
Server(("127.0.0.1", port), Handler).serve_forever()
'''


@dataclass
class StandIn:
    """One node: the wrapper process, its stand-in vLLM and the stand-in's engine."""

    name: str
    port: int
    status_port: int
    proc: subprocess.Popen[bytes]
    pidfile: Path
    stderr: Path

    def engine(self) -> int:
        wait_for(lambda: self.pidfile.exists() and self.pidfile.read_text() != "",
                 f"{self.name}'s engine")
        return int(self.pidfile.read_text())

    def control(self, path: str) -> dict:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            conn.request("GET", "/control/" + path)
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def mode(self, mode: str) -> None:
        assert self.control("mode/" + mode)["mode"] == mode

    def seen(self, path: str) -> int:
        return int(self.control("state")["seen"].get(path, 0))

    def health_direct(self) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            conn.request("GET", "/health")
            return conn.getresponse().status
        finally:
            conn.close()

    def agent(self) -> str:
        """What HAProxy's agent check reads from this node's watchdog."""
        with socket.create_connection(("127.0.0.1", self.status_port), timeout=TIMEOUT) as sock:
            data = b""
            while chunk := sock.recv(100):
                data += chunk
        return data.decode()


def start_node(tmp: Path, name: str) -> StandIn:
    script = tmp / "standin.py"
    script.write_text(STANDIN)
    port, status_port = free_port(), free_port()
    pidfile, stderr = tmp / f"{name}.engine.pid", tmp / f"{name}.stderr"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("INSTINCT_WATCHDOG_") and k not in ("NOTIFY_SOCKET",
                                                                   "WATCHDOG_USEC")}
    env["STANDIN_SLOW"] = str(SLOW)
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(WRAPPER), "--base-url", f"http://127.0.0.1:{port}",
             "--served-model-name", MODEL, *WATCHDOG_OPTIONS,
             "--status-port", str(status_port), "--status-host", "127.0.0.1",
             "--status-allow", "127.0.0.0/8",
             "--", sys.executable, str(script), str(port), name, str(pidfile)],
            env=env, stderr=err)  # fmt: skip
    return StandIn(name, port, status_port, proc, pidfile, stderr)


def stop_node(node: StandIn) -> None:
    with contextlib.suppress(OSError, ValueError):
        os.kill(node.engine(), signal.SIGCONT)
    node.proc.terminate()
    try:
        node.proc.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        node.proc.kill()
        node.proc.wait(TIMEOUT)
    with contextlib.suppress(OSError, ValueError, AssertionError):
        os.kill(node.engine(), signal.SIGKILL)  # the wrapper's SIGTERM went to the group


@dataclass
class Fleet:
    gw: Gateway
    nodes: dict[str, StandIn]

    def status(self, name: str) -> str:
        """The server's status column of `show stat` (UP, DOWN, ...); "" before HAProxy
        listens on its admin socket."""
        self.gw.alive()
        try:
            stat = self.gw.runtime("show stat")
        except OSError:
            return ""
        for line in stat.splitlines():
            fields = line.split(",")
            if len(fields) > 17 and fields[0] == "vllm" and fields[1] == name:
                return fields[17]
        raise AssertionError(f"no server {name} in show stat")

    def until(self, name: str, status: str, timeout: float = 3 * BOUND) -> float:
        """Seconds until the server's status is ``status`` (polled every 20 ms). DOWN counts
        whatever put it there ("DOWN (agent)": the agent check did)."""
        def reached() -> bool:
            seen = self.status(name)
            return seen.split(" ", 1)[0] == status if status == "DOWN" else seen == status

        start = time.monotonic()
        wait_for(reached, f"{name} {status} at the gateway", timeout)
        return time.monotonic() - start

    def both_up(self) -> None:
        for name in NODES:
            self.nodes[name].mode("normal")
        for name in NODES:
            self.until(name, "UP")

    def answer(self, path: str = "/v1/chat/completions") -> tuple[int, str]:
        body = json.dumps({"model": MODEL, "messages": []}).encode()
        status, _headers, data = request(self.gw, "POST", path, "other", body=body)
        return status, (json.loads(data).get("node", "") if status == 200 else "")


def wait_up(fleet: Fleet, node: StandIn) -> None:
    """Until the gateway has the node UP; else (at once if its wrapper exited) fail with what
    the node did."""
    def up() -> bool:
        if node.proc.poll() is not None:
            raise AssertionError(f"{node.name}'s wrapper exited")
        return fleet.status(node.name) == "UP"

    try:
        wait_for(up, f"{node.name} UP", 4 * TIMEOUT)
    except AssertionError as error:
        log = node.stderr.read_text(errors="replace").splitlines()[-15:]
        raise AssertionError(
            f"{error}: gateway {fleet.status(node.name)!r}, wrapper exit {node.proc.poll()}, "
            "wrapper log:\n" + "\n".join(log)
        ) from None


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("gateway-ejection")
    nodes = {name: start_node(tmp, name) for name in NODES}
    try:
        backends = [{"name": n.name, "address": "127.0.0.1", "port": n.port,
                     "agent_port": n.status_port} for n in nodes.values()]
        with running_gateway(tmp, nodes["node-a"].port, backends) as gw:
            found = Fleet(gw, nodes)
            for node in nodes.values():
                wait_up(found, node)
            yield found
    finally:
        for node in nodes.values():
            stop_node(node)


def test_the_configuration_has_the_agent_check_and_bounded_retries(fleet: Fleet) -> None:
    """Rendered from the role's template with two nodes and checked by haproxy -c (fixture)."""
    lines = [line.strip() for line in fleet.gw.cfg.splitlines()]
    for node in fleet.nodes.values():
        assert (f"server {node.name} 127.0.0.1:{node.port} agent-check agent-port "
                f"{node.status_port}") in lines
    assert f"retries {RETRIES}" in lines and "option redispatch 1" in lines
    assert "retry-on conn-failure empty-response" in lines
    assert all(fleet.nodes[name].agent() == "up\n" for name in NODES)


def test_a_stopped_engine_is_out_within_5_s_and_back_after_sigcont(fleet: Fleet) -> None:
    fleet.both_up()
    node = fleet.nodes["node-a"]
    engine = node.engine()
    os.kill(engine, signal.SIGSTOP)
    try:
        down = fleet.until("node-a", "DOWN")
        print(f"\nSIGSTOP of node-a's engine -> DOWN at the gateway in {down:.2f} s")
        assert down < BOUND
        assert fleet.status("node-a") == "DOWN (agent)"  # the agent check, not GET /health
        assert node.agent() == "down #stopped\n"
        assert node.health_direct() == 200  # vLLM's own /health would have kept it in
        answers = [fleet.answer() for _request in range(4)]
        assert answers == [(200, "node-b")] * 4
    finally:
        os.kill(engine, signal.SIGCONT)
    up = fleet.until("node-a", "UP")
    print(f"SIGCONT -> UP in {up:.2f} s")
    assert {fleet.answer()[1] for _request in range(6)} == {"node-a", "node-b"}


def test_a_failing_probe_takes_the_node_out(fleet: Fleet) -> None:
    fleet.both_up()
    node = fleet.nodes["node-b"]
    node.mode("probe-error")
    down = fleet.until("node-b", "DOWN")
    print(f"\nprobe answering 500 -> DOWN in {down:.2f} s")
    assert down < BOUND
    assert fleet.status("node-b") == "DOWN (agent)"
    assert node.agent() == "down #unhealthy\n"
    node.mode("normal")
    fleet.until("node-b", "UP")


def test_a_saturated_node_stays_in_rotation(fleet: Fleet) -> None:
    """/health and the probe take longer than their timeouts while the token counters move:
    the watchdog's excuse for a saturated engine holds for the gateway too."""
    fleet.both_up()
    node = fleet.nodes["node-a"]
    logged = len(node.stderr.read_text())
    # a load builds up: requests running and tokens flowing, then answers slow down
    before = node.seen("/metrics")
    node.mode("busy")
    wait_for(lambda: node.seen("/metrics") >= before + 2, "two busy /metrics polls", BOUND)
    before = node.seen("/health")
    node.mode("saturated")
    # at least three /health requests seen after the switch: the watchdog has already timed
    # out on two, and its probes time out too
    wait_for(lambda: node.seen("/health") >= before + 3, "three slow /health polls", 4 * BOUND)
    statuses = []
    deadline = time.monotonic() + 3.0  # three agent checks
    while time.monotonic() < deadline:
        statuses.append(fleet.status("node-a"))
        time.sleep(0.05)
    log = node.stderr.read_text()[logged:]
    assert set(statuses) == {"UP"}, (statuses, log[-2000:])
    assert node.agent() == "up\n"
    assert "watchdog pings paused" not in log  # the same verdict: no restart either
    assert node.seen("/v1/completions") >= 1  # the probe is slow too
    node.mode("normal")


def test_a_request_closed_without_a_response_byte_is_answered_by_the_other_node(
    fleet: Fleet,
) -> None:
    fleet.both_up()
    a, b = fleet.nodes["node-a"], fleet.nodes["node-b"]
    a.mode("close")
    try:
        path = "/v1/chat/completions?case=one-closes"
        answers = [fleet.answer(path) for _request in range(6)]
        assert answers == [(200, "node-b")] * 6
        assert a.seen(path) >= 1  # node-a had some of them first, and closed
        assert fleet.status("node-a") == "UP"  # no check saw anything wrong
        # both close: the request is sent 1 + gateway_retries times in all, then 502
        b.mode("close")
        path = "/v1/chat/completions?case=both-close"
        status, _node = fleet.answer(path)
        assert status == 502
        assert a.seen(path) + b.seen(path) == 1 + RETRIES
    finally:
        a.mode("normal")
        b.mode("normal")
