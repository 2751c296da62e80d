"""Role gateway: the real HAProxy with the role's haproxy.cfg bounds what one key can do.

The role's templates (haproxy.cfg and the four map files) are rendered by a real
ansible-playbook on localhost into a temp dir, with the listener on 127.0.0.1 at a free port and
a self-signed certificate made here. Only the three lines that need root (chroot, user, group)
are taken out of the rendered text; everything else is the production configuration.
HAProxy (the distribution's package, scripts/host-packages) runs it in the foreground in front
of a small Python HTTP server standing in for a vLLM node, which answers /health and /v1/...,
can hold requests open until the test releases them, and records every request it received.

Checked: a body over gateway_max_body_bytes gets 413 (JSON) and never reaches the node, a body
at the limit does; a chunked body or a POST without Content-Length gets 411; a key limited to 2
requests in flight gets 429 for a third while another key still gets 200, and 200 again once the
two are done, also over keep-alive connections that stay open (idle ones count for nothing);
401, 404 and the request-rate 429 are unchanged.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import http.client
import ipaddress
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from local_play import run_local_playbook

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "gateway"
HAPROXY = shutil.which("haproxy", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"]))
pytestmark = pytest.mark.skipif(
    HAPROXY is None, reason="haproxy is not installed (scripts/host-packages installs it)"
)

MAX_BODY = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["gateway_max_body_bytes"]
NODE_KEY = "node-key-" + "0" * 24
KEYS = {  # name -> clear key
    "limited": "limited-client-key-0001",
    "other": "other-client-key-000002",
    "rated": "rated-client-key-000003",
}
API_KEYS = [
    {"name": "limited", "key": KEYS["limited"], "rate_limit": 100000, "max_concurrency": 2},
    {"name": "other", "key": KEYS["other"], "rate_limit": 100000},
    {"name": "rated", "key": KEYS["rated"], "rate_limit": 3},
]
MAPS = ["api-keys.map", "rate-limits.map", "concurrency-limits.map", "node-key.map"]
ROOT_ONLY = ["chroot /var/lib/haproxy", "user haproxy", "group haproxy"]
TIMEOUT = 10.0  # every client socket, join and wait of this file is bounded by it
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  connection: local
  vars_files:
    - "{{ role }}/defaults/main.yml"
    - "{{ role }}/vars/main.yml"
  tasks:
    - ansible.builtin.template:
        src: "{{ role }}/templates/{{ item }}.j2"
        dest: "{{ gateway_config_dir }}/{{ item }}"
        mode: "0600"
      loop: "{{ ['haproxy.cfg'] + maps }}"
"""


# --- the node: records requests, holds /v1/hold until released --------------------------------


@dataclass
class Seen:
    method: str
    path: str
    authorization: str
    body: bytes


@dataclass
class Node:
    """What the fake node saw, and the gate that holds /v1/hold requests."""

    port: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    seen: list[Seen] = field(default_factory=list)
    held: int = 0
    release: threading.Event = field(default_factory=threading.Event)

    def paths(self) -> list[str]:
        with self.lock:
            return [s.path for s in self.seen]

    def requests(self, path: str) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.path == path]

    def held_now(self) -> int:
        with self.lock:
            return self.held


def node_handler(node: Node) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.answer(b"")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.answer(self.rfile.read(length))

        def answer(self, body: bytes) -> None:
            if self.path != "/health":
                with node.lock:
                    node.seen.append(Seen(self.command, self.path,
                                          self.headers.get("Authorization", ""), body))
            if self.path.startswith("/v1/hold"):
                with node.lock:
                    node.held += 1
                try:
                    node.release.wait(TIMEOUT)
                finally:
                    with node.lock:
                        node.held -= 1
            data = json.dumps({"object": "list", "received": len(body)}).encode()
            # one write: headers and body together
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(data), data))

    return Handler


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # HAProxy's health checks close their connection as soon as they have the status


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    state = Node()
    server = QuietServer(("127.0.0.1", 0), node_handler(state))
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT)


# --- the gateway: the role's templates, rendered and run -----------------------------------------


@dataclass
class Gateway:
    port: int
    metrics_port: int
    cfg: str
    dir: Path
    context: ssl.SSLContext
    log: Path

    def connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context,
                                           timeout=TIMEOUT)

    def table(self) -> str:
        """`show table st_keys` from the runtime API."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(TIMEOUT)
            sock.connect(str(self.dir / "admin.sock"))
            sock.sendall(b"show table st_keys\n")
            out = b""
            while chunk := sock.recv(65536):
                out += chunk
        return out.decode()

    def conn_cur(self, name: str) -> int | None:
        for line in self.table().splitlines():
            words = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
            if words.get("key") == name:
                return int(words["conn_cur"])
        return None


def self_signed(directory: Path) -> ssl.SSLContext:
    """tls.pem + tls.pem.key for 127.0.0.1 (as the role lays them out); a client context that
    trusts it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (directory / "tls.pem").write_bytes(pem)
    (directory / "tls.pem.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))  # fmt: skip
    return ssl.create_default_context(cadata=pem.decode())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(check: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def render(directory: Path, node_port: int, port: int, metrics_port: int) -> str:
    play = directory / "play.yml"
    play.write_text(PLAYBOOK)
    variables = {
        "role": str(ROLE),
        "maps": MAPS,
        "gateway_config_dir": str(directory),
        "gateway_bind_address": "127.0.0.1",
        "gateway_port": port,
        "gateway_metrics_port": metrics_port,
        "gateway_admin_socket": str(directory / "admin.sock"),
        "gateway_server_state_file": str(directory / "server-state"),
        "gateway_api_keys": API_KEYS,
        "gateway_node_api_key": NODE_KEY,
        "gateway_health_interval": "500ms",
        "_gateway_backends": [{"name": "node1", "address": "127.0.0.1", "port": node_port}],
        "ansible_python_interpreter": sys.executable,
    }
    run = run_local_playbook(play, variables)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    cfg = (directory / "haproxy.cfg").read_text()
    # test-only: no chroot and no user switch (they need root and a haproxy user)
    lines = cfg.splitlines()
    for line in ROOT_ONLY:
        assert f"    {line}" in lines, f"haproxy.cfg no longer has {line!r}: update this test"
    return "\n".join(x for x in lines if x.strip() not in ROOT_ONLY) + "\n"


@pytest.fixture(scope="module")
def gateway(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    assert HAPROXY is not None
    directory = tmp_path_factory.mktemp("gateway-limits")
    port, metrics_port = free_port(), free_port()
    cfg = render(directory, node.port, port, metrics_port)
    (directory / "haproxy.cfg").write_text(cfg)
    context = self_signed(directory)
    check = subprocess.run([HAPROXY, "-c", "-q", "-f", str(directory / "haproxy.cfg")],
                           capture_output=True, text=True, timeout=30, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    log = directory / "haproxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([HAPROXY, "-db", "-f", str(directory / "haproxy.cfg")],
                                stdout=out, stderr=subprocess.STDOUT)
    gw = Gateway(port, metrics_port, cfg, directory, context, log)
    try:
        def ready() -> bool:
            assert proc.poll() is None, "haproxy exited:\n" + log.read_text()[-3000:]
            with contextlib.suppress(OSError):
                return request(gw, "GET", "/v1/models", "other")[0] == 200
            return False

        wait_for(ready, "the gateway to answer through node1")
        yield gw
    finally:
        proc.terminate()
        try:
            proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(TIMEOUT)


# --- clients -------------------------------------------------------------------------------------


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


def request(gw: Gateway, method: str, path: str, key: str | None,
            body: bytes | None = None,
            conn: http.client.HTTPSConnection | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request (on ``conn`` when given, else on a new connection): status, headers
    (lower-case names), body."""
    own = conn is None
    c = gw.connect() if conn is None else conn
    try:
        c.request(method, path, body=body, headers=bearer(key) if key else {})
        response = c.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        if own:
            c.close()


def raw_exchange(gw: Gateway, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send ``head`` then ``body`` as they are; the answer's status and body. A write that fails
    because the gateway answered early and closed is not an error: the answer is read anyway,
    as curl and httpx (the OpenAI SDK's HTTP library) do."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=TIMEOUT) as plain, \
            gw.context.wrap_socket(plain, server_hostname="127.0.0.1") as sock:
        with contextlib.suppress(OSError):  # ssl.SSLError is an OSError
            sock.sendall(head)
            view = memoryview(body)
            for start in range(0, len(body), 1 << 16):
                sock.sendall(view[start:start + (1 << 16)])
        data = b""
        with contextlib.suppress(OSError):
            while not complete(data) and (chunk := sock.recv(65536)):
                data += chunk
    status_line = data.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1.1 ") and complete(data), data[:300]
    return int(status_line.split()[1]), data.split(b"\r\n\r\n", 1)[1]


def complete(data: bytes) -> bool:
    """Whether ``data`` holds a whole response with a Content-Length (the gateway's own)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _colon, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def post_head(path: str, key: str, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {KEYS[key]}",
             "Content-Type: application/json", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def openai_error(body: bytes) -> dict[str, str]:
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type"}, error
    return error


# --- request bodies ------------------------------------------------------------------------------


def test_the_default_limit_is_4_mib() -> None:
    assert MAX_BODY == 4 * 1024 * 1024


def test_a_body_over_the_limit_gets_413_and_never_reaches_a_node(gateway: Gateway,
                                                                 node: Node) -> None:
    path = "/v1/chat/completions?case=over"
    status, body = raw_exchange(gateway, post_head(path, "other",
                                                   f"Content-Length: {MAX_BODY + 1}"),
                                b"x" * (MAX_BODY + 1))
    assert status == 413
    error = openai_error(body)
    assert error["type"] == "invalid_request_error"
    assert str(MAX_BODY) in error["message"]
    assert path not in node.paths()


def test_a_large_announced_body_gets_413_before_it_is_sent(gateway: Gateway, node: Node) -> None:
    # curl waits for "100 Continue" first: the 413 comes instead, no body byte is sent
    path = "/v1/completions?case=expect"
    status, body = raw_exchange(gateway, post_head(path, "other", "Content-Length: 1000000000",
                                                   "Expect: 100-continue"))
    assert status == 413 and openai_error(body)["type"] == "invalid_request_error"
    assert path not in node.paths()


def test_a_body_at_the_limit_reaches_the_node_whole(gateway: Gateway, node: Node) -> None:
    path = "/v1/chat/completions?case=at-limit"
    payload = os.urandom(MAX_BODY // 2).hex().encode()
    assert len(payload) == MAX_BODY
    status, _headers, body = request(gateway, "POST", path, "other", body=payload)
    assert status == 200 and json.loads(body)["received"] == MAX_BODY
    seen = node.requests(path)
    assert len(seen) == 1
    assert hashlib.sha256(seen[0].body).digest() == hashlib.sha256(payload).digest()
    assert seen[0].authorization == f"Bearer {NODE_KEY}"  # the client's key never reaches it


@pytest.mark.parametrize(
    ("case", "headers", "body"),
    [
        ("chunked", ["Transfer-Encoding: chunked"], b"5\r\nhello\r\n0\r\n\r\n"),
        # HAProxy drops Content-Length when Transfer-Encoding is there too (RFC 9112 6.3)
        ("chunked-and-length", ["Content-Length: 5", "Transfer-Encoding: chunked"],
         b"5\r\nhello\r\n0\r\n\r\n"),
        ("no-length", [], b""),
    ],
)
def test_a_body_without_content_length_gets_411(gateway: Gateway, node: Node, case: str,
                                                headers: list[str], body: bytes) -> None:
    path = f"/v1/completions?case={case}"
    status, answer = raw_exchange(gateway, post_head(path, "other", *headers), body)
    assert status == 411
    error = openai_error(answer)
    assert error["type"] == "invalid_request_error" and "Content-Length" in error["message"]
    assert path not in node.paths()


def test_requests_without_a_body_are_not_affected(gateway: Gateway) -> None:
    assert request(gateway, "GET", "/v1/models", "other")[0] == 200


# --- requests in flight per key ------------------------------------------------------------------


def test_the_concurrency_map_has_each_keys_limit_or_the_default(gateway: Gateway) -> None:
    entries = [line.split() for line in (gateway.dir / "concurrency-limits.map").read_text()
               .splitlines() if line and not line.startswith("#")]
    assert entries == [["limited", "2"], ["other", "64"], ["rated", "64"]]


class Held:
    """A /v1/hold request on its own thread (and its given connection), answered on release."""

    def __init__(self, gw: Gateway, conn: http.client.HTTPSConnection) -> None:
        self.result: tuple[int, dict[str, str], bytes] | None = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = request(gw, "GET", "/v1/hold", "limited", conn=conn)
            except BaseException as exc:  # reported by status()
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def status(self) -> int:
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive(), "a held request did not finish"
        assert self.error is None and self.result is not None, self.error
        return self.result[0]


def test_a_third_request_in_flight_gets_429_and_others_are_served(gateway: Gateway,
                                                                  node: Node) -> None:
    # two keep-alive connections of the limited key, used once and left open (idle)
    a, b = gateway.connect(), gateway.connect()
    try:
        for conn in (a, b):
            assert request(gateway, "GET", "/v1/models", "limited", conn=conn)[0] == 200
        sockets = (a.sock, b.sock)
        assert gateway.conn_cur("limited") == 0  # two idle connections open: nothing in flight

        node.release.clear()
        held = [Held(gateway, a), Held(gateway, b)]
        try:
            wait_for(lambda: node.held_now() == 2, "two held requests at the node")
            assert gateway.conn_cur("limited") == 2
            status, headers, body = request(gateway, "GET", "/v1/models", "limited")
            assert status == 429 and headers["retry-after"] == "1"
            assert openai_error(body) == {"message": "too many concurrent requests",
                                          "type": "rate_limit"}
            # another key is not held back by this one's limit
            assert request(gateway, "GET", "/v1/models", "other")[0] == 200
        finally:
            node.release.set()
        assert [h.status() for h in held] == [200, 200]

        wait_for(lambda: gateway.conn_cur("limited") == 0, "the limited key's counter to drop")
        # the same keep-alive connections, still open, are served again
        for conn in (a, b):
            assert request(gateway, "GET", "/v1/models", "limited", conn=conn)[0] == 200
        assert (a.sock, b.sock) == sockets

        # idle keep-alive connections do not count: with a and b open, two more fit
        node.release.clear()
        more = [Held(gateway, gateway.connect()), Held(gateway, gateway.connect())]
        try:
            wait_for(lambda: node.held_now() == 2, "two more held requests at the node")
            assert gateway.conn_cur("limited") == 2
        finally:
            node.release.set()
        assert [h.status() for h in more] == [200, 200]
        assert request(gateway, "GET", "/v1/models", "limited", conn=a)[0] == 200
    finally:
        node.release.set()
        a.close()
        b.close()


def test_a_key_at_its_limit_back_to_back_is_never_refused(gateway: Gateway) -> None:
    # 2 clients of a key limited to 2, each sending its next request as soon as it has the
    # answer, on its keep-alive connection: the counter drops with each response, never late
    statuses: list[int] = []
    lock = threading.Lock()

    def client() -> None:
        conn = gateway.connect()
        try:
            for _request in range(300):
                status = request(gateway, "GET", "/v1/models", "limited", conn=conn)[0]
                with lock:
                    statuses.append(status)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _client in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert len(statuses) == 600 and set(statuses) == {200}


# --- what was there before -----------------------------------------------------------------------


def test_unknown_keys_get_401_and_other_paths_404(gateway: Gateway) -> None:
    status, headers, body = request(gateway, "GET", "/v1/models", None)
    assert status == 401 and headers["www-authenticate"] == "Bearer"
    assert openai_error(body)["type"] == "authentication_error"
    assert request(gateway, "GET", "/metrics", "other")[0] == 404


def test_the_request_rate_limit_still_gives_429(gateway: Gateway) -> None:
    statuses = [request(gateway, "GET", "/v1/models", "rated") for _request in range(4)]
    assert [s[0] for s in statuses] == [200, 200, 200, 429]
    assert statuses[3][1]["retry-after"] == "60"
    assert openai_error(statuses[3][2])["message"] == "rate limit exceeded"


# --- the metrics listener: HAProxy's own Prometheus exporter ------------------------------------


def metrics(gw: Gateway, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.metrics_port, timeout=TIMEOUT)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_metrics_listener_serves_haproxys_exporter(gateway: Gateway) -> None:
    """What role monitoring scrapes (job gateway): plain HTTP /metrics on gateway_metrics_port,
    with the backend's servers and their state; no key; any other path 404."""
    status, text = metrics(gateway, "/metrics")
    assert status == 200, text[:500]
    assert re.search(r'^haproxy_server_status\{proxy="vllm",server="node1",state="UP"\} 1$',
                     text, re.M), text[:2000]
    assert "haproxy_process_" in text
    assert not [k for k in [*KEYS.values(), NODE_KEY] if k in text]
    assert metrics(gateway, "/v1/models")[0] == 404
    assert metrics(gateway, "/")[0] == 404
