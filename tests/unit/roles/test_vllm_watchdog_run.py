"""The real watchdog wrapper as a process, against a fake vLLM and a real NOTIFY_SOCKET.

* fake vLLM: an http.server in a thread serving /health, /v1/models (Bearer key checked),
  /metrics (counters the test sets) and /v1/completions (the probe);
* systemd's side: an AF_UNIX datagram socket (a path, or '@' abstract namespace) collecting
  what the wrapper sends, with WATCHDOG_USEC set so it pings every 0.1 s;
* the "vLLM" child the wrapper starts: a small Python script that records signals.

Timings are scaled down (poll 0.05 s, stall timeout 0.4 s) so the whole file runs in seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import free_port
from tls_pki import Ca

ROOT = Path(__file__).resolve().parents[3]
WRAPPER = ROOT / "roles" / "vllm_service" / "files" / "instinct-vllm-watchdog"
MODEL = "tiny-llama"
API_KEY = "sk-test-" + secrets.token_hex(8)
PING_USEC = 200_000  # WATCHDOG_USEC: the wrapper pings every 0.1 s

CHILD = r"""
import os, signal, sys, time
out = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else "wait"

def record(text):
    with open(out, "a") as fh:
        fh.write(text + "\n")

record("env NOTIFY_SOCKET=%s WATCHDOG_USEC=%s" % (
    os.environ.get("NOTIFY_SOCKET"), os.environ.get("WATCHDOG_USEC")))
record("pgid-is-own %s" % (os.getpgid(0) == os.getpid()))
record("pid %d" % os.getpid())

def on_term(signum, frame):
    record("got %s" % signal.Signals(signum).name)
    sys.exit(int(os.environ.get("CHILD_TERM_CODE", "0")))

def on_hup(signum, frame):
    record("got SIGHUP")

if mode != "default-term":
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
signal.signal(signal.SIGHUP, on_hup)
record("started")
if mode.startswith("exit="):
    time.sleep(0.2)
    sys.exit(int(mode[5:]))
if mode.startswith("kill="):
    time.sleep(0.2)
    os.kill(os.getpid(), int(mode[5:]))
while True:
    time.sleep(0.05)
"""


class FakeVllm:
    """State of the fake server; the handler reads it under a lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.health = 503
        self.models: list[str] = []
        self.stats = True  # False: like --disable-log-stats (no vllm:* series)
        self.kv_name = "vllm:kv_cache_usage_perc"
        self.generation = 0.0
        self.prompt = 0.0
        self.running = 0
        self.waiting = 0
        self.probe_mode = "ok"  # ok | hang | error
        self.auth_seen: list[tuple[str, str | None]] = []
        self.probe_bodies: list[dict[str, Any]] = []
        self.release = threading.Event()

    def set(self, **kw: Any) -> None:
        with self.lock:
            for key, value in kw.items():
                setattr(self, key, value)

    def metrics(self) -> str:
        with self.lock:
            if not self.stats:
                return "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.0\n"
            label = f'{{model_name="{MODEL}"}}'
            return (
                f"vllm:num_requests_running{label} {self.running}\n"
                f"vllm:num_requests_waiting{label} {self.waiting}\n"
                f"{self.kv_name}{label} 0.25\n"
                f"vllm:prompt_tokens_total{label} {self.prompt}\n"
                f"vllm:generation_tokens_total{label} {self.generation}\n"
            )


def make_handler(state: FakeVllm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            return

        def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            header = self.headers.get("Authorization")
            with state.lock:
                state.auth_seen.append((self.path, header))
            return header == f"Bearer {API_KEY}"

        def do_GET(self) -> None:
            if self.path == "/health":
                with state.lock:
                    code = state.health
                self._send(code, "")
            elif self.path == "/v1/models":
                if not self._authorized():
                    self._send(401, '{"error": "Unauthorized"}')
                    return
                with state.lock:
                    data = [{"id": m, "object": "model"} for m in state.models]
                self._send(200, json.dumps({"object": "list", "data": data}))
            elif self.path == "/metrics":
                self._send(200, state.metrics(), "text/plain; version=0.0.4")
            else:
                self._send(404, "")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/v1/completions":
                self._send(404, "")
                return
            if not self._authorized():
                self._send(401, '{"error": "Unauthorized"}')
                return
            with state.lock:
                state.probe_bodies.append(body)
                mode = state.probe_mode
            if mode == "hang":
                state.release.wait(5)
            if mode == "error":
                self._send(500, '{"error": "engine dead"}')
                return
            self._send(200, json.dumps({"choices": [{"text": "!", "index": 0}]}))

    return Handler


class Notifications:
    """The systemd side of NOTIFY_SOCKET: collects (time, field) pairs."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.items: list[tuple[float, str]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        self.sock.settimeout(0.05)
        while not self.done.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            now = time.monotonic()
            with self.lock:
                self.items.extend((now, field) for field in data.decode().split("\n"))

    def fields(self, since: float = 0.0) -> list[str]:
        with self.lock:
            return [f for t, f in self.items if t >= since]

    def first(self, field: str) -> float | None:
        with self.lock:
            return next((t for t, f in self.items if f == field), None)

    def wait_for(self, pred: Callable[[str], bool], timeout: float, since: float = 0.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for t, f in self.items:
                    if t >= since and pred(f):
                        return t
            time.sleep(0.01)
        raise AssertionError(f"no matching notification within {timeout}s: {self.fields(since)}")

    def count(self, field: str, since: float) -> int:
        return sum(1 for f in self.fields(since) if f == field)


@pytest.fixture
def fake() -> Iterator[tuple[FakeVllm, str]]:
    state = FakeVllm()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def tls_fake(tmp_path: Path) -> Iterator[tuple[FakeVllm, str, list[str]]]:
    """The fake vLLM serving TLS and requiring a client certificate of its CA, like vLLM with
    --ssl-certfile/--ssl-keyfile/--ssl-ca-certs/--ssl-cert-reqs 2; yields those vLLM flags."""
    ca = Ca(tmp_path, "ca")
    crt, key = ca.issue("node")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    context.load_verify_locations(cafile=ca.path)
    context.verify_mode = ssl.CERT_REQUIRED
    state = FakeVllm()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    flags = ["--ssl-certfile", str(crt), "--ssl-keyfile", str(key), "--ssl-ca-certs",
             str(ca.path), "--ssl-cert-reqs", "2"]  # fmt: skip
    try:
        yield state, f"https://127.0.0.1:{server.server_address[1]}", flags
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def notify(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Notifications, str]]:
    """systemd's notify socket: '@' abstract namespace, or a path (indirect param "path")."""
    kind = getattr(request, "param", "abstract")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if kind == "path":
        path = str(tmp_path / "notify.sock")
        if len(path) > 100:  # sun_path limit
            path = f"/tmp/wd-{os.getpid()}-{secrets.token_hex(4)}.sock"
        sock.bind(path)
        env_value = path
    else:
        name = f"instinct-wd-test-{os.getpid()}-{secrets.token_hex(4)}"
        sock.bind("\0" + name)
        env_value = "@" + name
    notes = Notifications(sock)
    try:
        yield notes, env_value
    finally:
        notes.done.set()
        sock.close()
        notes.thread.join(2)
        if kind == "path":
            with_path = Path(env_value)
            if with_path.exists():
                with_path.unlink()


class Wrapper:
    """The wrapper process with its child script and captured stderr."""

    def __init__(
        self,
        tmp_path: Path,
        base_url: str,
        notify_socket: str,
        options: list[str] | None = None,
        mode: str = "wait",
        child_env: dict[str, str] | None = None,
        child_args: list[str] | None = None,
    ) -> None:
        self.child_log = tmp_path / "child.log"
        self.stderr_path = tmp_path / "wrapper.stderr"
        script = tmp_path / "fake_vllm_child.py"
        script.write_text(CHILD)
        argv = [
            sys.executable, str(WRAPPER),
            "--base-url", base_url, "--served-model-name", MODEL,
            "--poll-interval", "0.05", "--health-timeout", "0.5", "--stall-timeout", "0.4",
            *(options or []),
            "--", sys.executable, str(script), str(self.child_log), mode, *(child_args or []),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("INSTINCT_WATCHDOG_")}
        env.pop("JOURNAL_STREAM", None)
        env["NOTIFY_SOCKET"] = notify_socket
        env["WATCHDOG_USEC"] = str(PING_USEC)
        env["VLLM_API_KEY"] = API_KEY
        env.update(child_env or {})
        self.stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(argv, env=env, stderr=self.stderr)

    def child_lines(self) -> list[str]:
        return self.child_log.read_text().splitlines() if self.child_log.exists() else []

    def wait_child(self, line: str, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if line in self.child_lines():
                return
            time.sleep(0.01)
        raise AssertionError(f"child never logged {line!r}: {self.child_lines()}")

    def finish(self, timeout: float = 10.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.stderr.close()

    def log(self) -> str:
        if not self.stderr.closed:
            self.stderr.flush()
        return self.stderr_path.read_text()


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[Wrapper]]:
    """Wrappers a test started; afterwards none of them, nor their children, is left."""
    procs: list[Wrapper] = []
    yield procs
    for w in procs:
        if w.proc.poll() is None:
            w.proc.terminate()
            try:
                w.proc.wait(5)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
        for line in w.child_lines():
            if line.startswith("pid "):  # the child runs in its own process group
                with contextlib.suppress(OSError):
                    os.killpg(int(line.split()[1]), signal.SIGKILL)
        if not w.stderr.closed:
            w.stderr.close()


def test_ready_then_watchdog_follows_progress(
    fake: tuple[FakeVllm, str],
    notify: tuple[Notifications, str],
    tmp_path: Path,
    started: list[Wrapper],
) -> None:
    state, url = fake
    notes, address = notify
    w = Wrapper(tmp_path, url, address)
    started.append(w)
    w.wait_child("started")

    # loading: /health 503, then 200 with another model listed -> no READY, no pings
    notes.wait_for(lambda f: f.startswith("STATUS=loading: /health HTTP 503"), 3)
    state.set(health=200, models=["some-other-model"])
    notes.wait_for(lambda f: "listed: some-other-model" in f, 3)
    time.sleep(0.3)
    assert "READY=1" not in notes.fields()
    assert "WATCHDOG=1" not in notes.fields()

    # the served model appears -> READY=1, after it and not before
    listed_at = time.monotonic()
    state.set(models=[MODEL, "alias"])
    ready_at = notes.wait_for(lambda f: f == "READY=1", 3)
    assert ready_at >= listed_at
    assert notes.first("WATCHDOG=1") is None or notes.first("WATCHDOG=1") >= ready_at
    with state.lock:
        models_auth = {h for p, h in state.auth_seen if p == "/v1/models"}
    assert models_auth == {f"Bearer {API_KEY}"}

    # serving, idle: pings every ~0.1 s; an idle engine with frozen counters is no stall
    notes.wait_for(lambda f: f.startswith("STATUS=serving tiny-llama: running 0"), 3)
    t0 = time.monotonic()
    time.sleep(0.8)  # twice the stall timeout
    assert notes.count("WATCHDOG=1", t0) >= 4

    # requests running, counters frozen -> stalled after 0.4 s, pings stop
    state.set(running=2, waiting=1)
    stalled_at = notes.wait_for(lambda f: f.startswith("STATUS=stalled: no token progress"), 3)
    time.sleep(0.15)  # let a ping that was already due go out
    t1 = time.monotonic()
    time.sleep(0.6)
    assert notes.count("WATCHDOG=1", t1) == 0, notes.fields(stalled_at)

    # tokens flow again -> pings resume
    stop = threading.Event()

    def generate() -> None:
        while not stop.is_set():
            with state.lock:
                state.generation += 7
            time.sleep(0.03)

    gen = threading.Thread(target=generate, daemon=True)
    gen.start()
    try:
        resumed = notes.wait_for(lambda f: f == "WATCHDOG=1", 2, since=time.monotonic())
        time.sleep(0.8)  # well past the stall timeout, still progressing
        assert notes.count("WATCHDOG=1", resumed) >= 4
        serving = "STATUS=serving tiny-llama: running 2, waiting 1, KV cache 25.0%"
        assert serving in notes.fields(t1)
    finally:
        stop.set()
        gen.join(2)

    # /health fails -> pings stop; back to 200 -> they resume
    state.set(health=500, running=0)
    notes.wait_for(lambda f: f.startswith("STATUS=unhealthy: /health: HTTP 500"), 3)
    time.sleep(0.15)
    t2 = time.monotonic()
    time.sleep(0.5)
    assert notes.count("WATCHDOG=1", t2) == 0
    state.set(health=200)
    notes.wait_for(lambda f: f == "WATCHDOG=1", 2, since=time.monotonic())

    # SIGTERM: forwarded to vLLM, STOPPING=1, clean exit 0 when vLLM stops cleanly
    w.proc.send_signal(signal.SIGTERM)
    assert w.finish() == 0
    assert "got SIGTERM" in w.child_lines()
    assert "STOPPING=1" in notes.fields()
    assert notes.fields().count("STATUS=stopping") == 1
    log = w.log()
    assert "ready" in log and "watchdog pings paused" in log
    assert API_KEY not in log
    lines = w.child_lines()
    assert "env NOTIFY_SOCKET=None WATCHDOG_USEC=None" in lines  # not leaked to vLLM
    assert "pgid-is-own True" in lines  # vLLM runs in its own process group


def test_ready_waits_for_the_warm_up_completion(
    fake: tuple[FakeVllm, str],
    notify: tuple[Notifications, str],
    tmp_path: Path,
    started: list[Wrapper],
) -> None:
    """READY only once a first completion with logprobs and prompt logprobs answered: what an
    engine compiles on first use (vLLM V1's sampler) happens before the node takes traffic."""
    state, url = fake
    notes, address = notify
    state.set(health=200, models=[MODEL], probe_mode="hang")  # the warm-up waits for release
    w = Wrapper(tmp_path, url, address)
    started.append(w)
    notes.wait_for(lambda f: f == f"STATUS=loading: /health 200, '{MODEL}' listed, warming up", 5)
    time.sleep(0.5)  # ten polls: the warm-up still in flight
    assert "READY=1" not in notes.fields()
    released_at = time.monotonic()
    state.release.set()
    assert notes.wait_for(lambda f: f == "READY=1", 6) >= released_at
    with state.lock:
        warm_up = state.probe_bodies[0]
    assert (warm_up["max_tokens"], warm_up["logprobs"], warm_up["prompt_logprobs"]) == (1, 1, 1)


def test_ready_and_pings_over_tls_with_the_node_certificate(
    tls_fake: tuple[FakeVllm, str, list[str]],
    notify: tuple[Notifications, str],
    tmp_path: Path,
    started: list[Wrapper],
) -> None:
    """vLLM serves TLS and requires a client certificate: the wrapper takes vLLM's own
    certificate, key and CA from its argv, gets READY (/health, /v1/models), pings (/metrics)
    and probes over TLS."""
    state, url, flags = tls_fake
    notes, address = notify
    state.set(health=200, models=[MODEL])
    w = Wrapper(tmp_path, url, address, options=["--probe-interval", "0.1"], child_args=flags)
    started.append(w)
    notes.wait_for(lambda f: f == "READY=1", 5)
    t0 = time.monotonic()
    time.sleep(0.5)
    assert notes.count("WATCHDOG=1", t0) >= 2
    with state.lock:
        assert state.probe_bodies, "no probe reached the TLS server"
    w.proc.send_signal(signal.SIGTERM)
    assert w.finish() == 0
    assert f"at {url} (TLS, CA {tmp_path / 'ca.crt'}, client certificate" in w.log()


def test_probe_failure_stops_pings(
    fake: tuple[FakeVllm, str],
    notify: tuple[Notifications, str],
    tmp_path: Path,
    started: list[Wrapper],
) -> None:
    state, url = fake
    notes, address = notify
    state.set(health=200, models=[MODEL])
    w = Wrapper(
        tmp_path, url, address,
        ["--probe-interval", "0.2", "--probe-timeout", "0.3"],
    )  # fmt: skip
    started.append(w)
    notes.wait_for(lambda f: f == "READY=1", 3)
    notes.wait_for(lambda f: f == "WATCHDOG=1", 2)
    state.set(probe_mode="hang")
    notes.wait_for(lambda f: f.startswith("STATUS=unhealthy: probe: timed out"), 3)
    time.sleep(0.15)
    t1 = time.monotonic()
    time.sleep(0.5)
    assert notes.count("WATCHDOG=1", t1) == 0
    state.set(probe_mode="ok")
    state.release.set()
    notes.wait_for(lambda f: f == "WATCHDOG=1", 3, since=time.monotonic())
    state.set(probe_mode="error")
    notes.wait_for(lambda f: f.startswith("STATUS=unhealthy: probe: HTTP 500"), 3)
    with state.lock:
        bodies = list(state.probe_bodies)
        probe_auth = {h for p, h in state.auth_seen if p == "/v1/completions"}
    assert bodies and all(b["max_tokens"] == 1 and b["model"] == MODEL for b in bodies)
    assert probe_auth == {f"Bearer {API_KEY}"}
    w.proc.send_signal(signal.SIGINT)
    assert w.finish() == 0
    assert "got SIGINT" in w.child_lines()
    assert API_KEY not in w.log()


def test_without_stats_ready_and_pings_on_health(
    fake: tuple[FakeVllm, str],
    notify: tuple[Notifications, str],
    tmp_path: Path,
    started: list[Wrapper],
) -> None:
    state, url = fake
    notes, address = notify
    state.set(health=200, models=[MODEL], stats=False, running=3)
    w = Wrapper(tmp_path, url, address)
    started.append(w)
    ready = notes.wait_for(lambda f: f == "READY=1", 3)
    notes.wait_for(lambda f: "no token counters: stall detection off" in f, 3)
    time.sleep(0.8)
    assert notes.count("WATCHDOG=1", ready) >= 5
    w.proc.send_signal(signal.SIGTERM)
    assert w.finish() == 0
    assert "--disable-log-stats" in w.log()


def test_stopped_child_stops_the_pings_while_health_stays_200(
    fake: tuple[FakeVllm, str],
    notify: tuple[Notifications, str],
    tmp_path: Path,
    started: list[Wrapper],
) -> None:
    """SIGSTOP of vLLM (vLLM 0.6.x's /health stays 200 then): seen in /proc, pings stop."""
    state, url = fake
    notes, address = notify
    state.set(health=200, models=[MODEL], stats=False, running=3)
    w = Wrapper(tmp_path, url, address)
    started.append(w)
    notes.wait_for(lambda f: f == "READY=1", 3)
    w.wait_child("started")
    child = _children(w.proc.pid)[0]
    os.kill(child, signal.SIGSTOP)
    try:
        notes.wait_for(lambda f: f"vLLM process(es) {child} stopped (SIGSTOP?)" in f, 3)
        t1 = time.monotonic()
        time.sleep(0.5)
        assert notes.count("WATCHDOG=1", t1) == 0
    finally:
        os.kill(child, signal.SIGCONT)
    notes.wait_for(lambda f: f == "WATCHDOG=1", 3, since=time.monotonic())
    w.proc.send_signal(signal.SIGTERM)
    assert w.finish() == 0


def agent(port: int, source: str = "127.0.0.1") -> str:
    """What HAProxy's agent check reads: connect, read to the end (the wrapper closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=2,
                                  source_address=(source, 0)) as sock:
        data = b""
        while chunk := sock.recv(100):
            data += chunk
    return data.decode()


def wait_agent(port: int, answer: str, timeout: float = 5.0) -> None:
    """Wait until the status port answers ``answer``."""
    start = time.monotonic()
    seen = ""
    while time.monotonic() - start < timeout:
        with contextlib.suppress(OSError):
            seen = agent(port)
        if seen == answer:
            return
        time.sleep(0.02)
    raise AssertionError(f"the status port never answered {answer!r} (last {seen!r})")


def test_status_port_answers_the_agent_check(
    fake: tuple[FakeVllm, str],
    notify: tuple[Notifications, str],
    tmp_path: Path,
    started: list[Wrapper],
) -> None:
    """loading -> up -> stopped (SIGSTOP of vLLM, seen in /proc) -> up (SIGCONT) -> unhealthy
    (/health 500); a source outside --status-allow gets nothing."""
    state, url = fake
    notes, address = notify
    port = free_port()
    w = Wrapper(tmp_path, url, address, ["--status-port", str(port), "--status-host",
                                         "127.0.0.1", "--status-allow", "127.0.0.1/32"])
    started.append(w)
    wait_agent(port, "down #loading\n")
    state.set(health=200, models=[MODEL])
    notes.wait_for(lambda f: f == "READY=1", 3)
    wait_agent(port, "up\n")
    assert agent(port, source="127.0.0.2") == ""  # not allowed: closed without an answer
    assert "127.0.0.2 is not in --status-allow" in w.log()
    w.wait_child("started")
    child = _children(w.proc.pid)[0]
    os.kill(child, signal.SIGSTOP)
    try:  # how soon is a figure of the fleet scenario (docs/benchmarks.md), not asserted here
        wait_agent(port, "down #stopped\n", 10)
    finally:
        os.kill(child, signal.SIGCONT)
    wait_agent(port, "up\n", 3)
    state.set(health=500)
    wait_agent(port, "down #unhealthy\n", 3)
    w.proc.send_signal(signal.SIGTERM)
    assert w.finish() == 0
    assert f"agent status on 127.0.0.1:{port} (127.0.0.1/32)" in w.log()


@pytest.mark.parametrize("notify", ["path"], indirect=True)
def test_old_metric_names(
    fake: tuple[FakeVllm, str],
    notify: tuple[Notifications, str],
    tmp_path: Path,
    started: list[Wrapper],
) -> None:
    state, url = fake
    notes, address = notify
    state.set(health=200, models=[MODEL], kv_name="vllm:gpu_cache_usage_perc", running=1)
    w = Wrapper(tmp_path, url, address)
    started.append(w)
    notes.wait_for(lambda f: f == "READY=1", 3)
    notes.wait_for(lambda f: "KV cache 25.0%" in f, 3)
    notes.wait_for(lambda f: f.startswith("STATUS=stalled"), 3)
    w.proc.send_signal(signal.SIGTERM)
    assert w.finish() == 0


@pytest.mark.parametrize(
    ("mode", "env", "action", "expected"),
    [
        ("exit=3", {}, None, 3),  # vLLM exits by itself: its code
        ("exit=0", {}, None, 70),  # by itself with 0 (API server after engine death): failure
        ("kill=9", {}, None, 137),  # killed by a signal: 128 + n
        ("default-term", {}, "term-child", 143),  # SIGTERM not from a stop request: failure
        ("default-term", {}, "term-wrapper", 0),  # requested stop, vLLM dies by the signal
        ("wait", {"CHILD_TERM_CODE": "5"}, "term-wrapper", 5),  # requested, vLLM fails: its code
        ("wait", {"CHILD_TERM_CODE": "0"}, "term-wrapper", 0),  # requested, vLLM exits 0: stopped
    ],
)
def test_exit_code_propagation(
    tmp_path: Path,
    started: list[Wrapper],
    mode: str,
    env: dict[str, str],
    action: str | None,
    expected: int,
) -> None:
    # nothing listens on this port: the wrapper stays "loading" the whole time
    w = Wrapper(tmp_path, "http://127.0.0.1:9", "", mode=mode, child_env=env)
    started.append(w)
    w.wait_child("started")
    if action == "term-child":
        pid = next(p for p in _children(w.proc.pid))
        os.kill(pid, signal.SIGTERM)
    elif action == "term-wrapper":
        w.proc.send_signal(signal.SIGTERM)
    assert w.finish() == expected
    assert f"exiting {expected}" in w.log()


def test_sighup_is_forwarded_and_service_continues(
    tmp_path: Path, started: list[Wrapper]
) -> None:
    w = Wrapper(tmp_path, "http://127.0.0.1:9", "")
    started.append(w)
    w.wait_child("started")
    w.proc.send_signal(signal.SIGHUP)
    w.wait_child("got SIGHUP")
    assert w.proc.poll() is None
    w.proc.send_signal(signal.SIGTERM)
    assert w.finish() == 0


def test_sigabrt_kills_vllm_group(tmp_path: Path, started: list[Wrapper]) -> None:
    """systemd's watchdog signal: vLLM (even stopped) is SIGKILLed, the wrapper aborts."""
    w = Wrapper(tmp_path, "http://127.0.0.1:9", "")
    started.append(w)
    w.wait_child("started")
    child = _children(w.proc.pid)[0]
    os.kill(child, signal.SIGSTOP)  # a hung engine ignores SIGTERM; SIGKILL still works
    try:
        w.proc.send_signal(signal.SIGABRT)
        assert w.finish() == -signal.SIGABRT
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(child)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
    assert "killing vLLM" in w.log()
    assert "got SIGTERM" not in w.child_lines()


def test_missing_program_and_usage(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(WRAPPER), "--served-model-name", "m", "--", str(tmp_path / "nope")],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    assert run.returncode == 127
    assert "cannot start vLLM" in run.stderr
    run = subprocess.run(
        [sys.executable, str(WRAPPER), "--served-model-name", "m"],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    assert run.returncode == 2
    assert "usage" in run.stderr


def _alive(pid: int) -> bool:
    """Running or stopped (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _children(pid: int) -> list[int]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        except OSError:
            text = ""
        if text.split():
            return [int(p) for p in text.split()]
        time.sleep(0.01)
    raise AssertionError("the wrapper has no child")
