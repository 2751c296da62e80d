"""The real HAProxy running role gateway's haproxy.cfg on loopback, in front of a stand-in node.

The role's templates (haproxy.cfg and the four map files) are rendered by a real
ansible-playbook on localhost into a temp dir, with the listener on 127.0.0.1 at a free port and
a self-signed RSA certificate made here (the role generates an RSA one too). Only the three lines
that need root (chroot, user, group) are taken out of the rendered text; everything else is the
production configuration. HAProxy (the distribution's package, scripts/host-packages) runs it in
the foreground in front of a small Python HTTP server standing in for a vLLM node, which answers
/health and /v1/..., can hold requests open until the test releases them, and records every
request it received.

The fixtures ``gateway_node`` and ``gateway`` (one of each per test session) are registered by
tests/unit/roles/conftest.py; the helpers below are what the test files use to talk to them.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import ipaddress
import json
import os
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
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from local_play import role_play, run_local_playbook

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "gateway"
HAPROXY = shutil.which("haproxy", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"]))
NO_HAPROXY = pytest.mark.skipif(
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
AUTH_FAIL_LIMIT = 3  # gateway_auth_fail_limit of the test gateway
PLAYBOOK = role_play("""\
    - ansible.builtin.template:
        src: "{{ role }}/templates/{{ item }}.j2"
        dest: "{{ gateway_config_dir }}/{{ item }}"
        mode: "0600"
      loop: "{{ ['haproxy.cfg'] + maps }}"
""")


# --- the node: records requests, holds /v1/hold until released --------------------------------


@dataclass
class Seen:
    method: str
    path: str
    authorization: str
    body: bytes
    forwarded_for: list[str]


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
                                          self.headers.get("Authorization", ""), body,
                                          self.headers.get_all("X-Forwarded-For") or []))
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


@contextlib.contextmanager
def node_server(context: ssl.SSLContext | None = None) -> Iterator[Node]:
    """A stand-in node on a free loopback port, behind TLS when ``context`` is given."""
    state = Node()
    server = QuietServer(("127.0.0.1", 0), node_handler(state))
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
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


@pytest.fixture(scope="session")
def gateway_node() -> Iterator[Node]:
    with node_server() as state:
        yield state


# --- the gateway: the role's templates, rendered and run -----------------------------------------


@dataclass
class Gateway:
    port: int
    metrics_port: int
    cfg: str
    dir: Path
    context: ssl.SSLContext
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def alive(self) -> None:
        """Fail with HAProxy's output when it has exited."""
        assert self.proc is None or self.proc.poll() is None, (
            "haproxy exited:\n" + self.log.read_text()[-3000:])

    def runtime(self, command: str) -> str:
        """One command to the runtime API (the admin socket), its whole answer."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(TIMEOUT)
            sock.connect(str(self.dir / "admin.sock"))
            sock.sendall(command.encode() + b"\n")
            out = b""
            while chunk := sock.recv(65536):
                out += chunk
        return out.decode()

    def connect(self, source: str = "127.0.0.1") -> http.client.HTTPSConnection:
        """A connection from ``source`` (any 127.0.0.0/8 address is the loopback interface)."""
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context,
                                           timeout=TIMEOUT, source_address=(source, 0))

    def table(self) -> str:
        """`show table st_keys` from the runtime API."""
        return self.runtime("show table st_keys")

    def conn_cur(self, name: str) -> int | None:
        for line in self.table().splitlines():
            words = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
            if words.get("key") == name:
                return int(words["conn_cur"])
        return None


def self_signed(directory: Path) -> ssl.SSLContext:
    """tls.pem + tls.pem.key for 127.0.0.1 (as the role lays them out); a client context that
    trusts it."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
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


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port free now and never handed out before in this process. The kernel may
    give the same ephemeral port to two binds in a row (measured: 11 in 20000 within 6 binds),
    and the port is bound later by another process: two servers of one test must not share it.
    """
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def wait_for(check: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def render(directory: Path, node_port: int, port: int, metrics_port: int,
           backends: list[dict[str, Any]] | None = None,
           extra: dict[str, Any] | None = None) -> str:
    """The role's haproxy.cfg (and maps) for the test gateway; ``backends`` replace the one
    stand-in node, ``extra`` variables go over the test's."""
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
        "gateway_auth_fail_limit": AUTH_FAIL_LIMIT,
        "fleet_pki_resolved": {"enabled": False},  # plain HTTP (mTLS: test_gateway_mtls.py)
        "_gateway_backends": backends or [{"name": "node1", "address": "127.0.0.1",
                                           "port": node_port}],
        "ansible_python_interpreter": sys.executable,
        **(extra or {}),
    }
    run = run_local_playbook(play, variables)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    cfg = (directory / "haproxy.cfg").read_text()
    # test-only: no chroot and no user switch (they need root and a haproxy user)
    lines = cfg.splitlines()
    for line in ROOT_ONLY:
        assert f"    {line}" in lines, f"haproxy.cfg no longer has {line!r}: update this test"
    return "\n".join(x for x in lines if x.strip() not in ROOT_ONLY) + "\n"


@contextlib.contextmanager
def running_gateway(directory: Path, node_port: int,
                    backends: list[dict[str, Any]] | None = None,
                    extra: dict[str, Any] | None = None) -> Iterator[Gateway]:
    """The role's configuration rendered into ``directory``, checked with ``haproxy -c`` and
    run by the real HAProxy until the block ends (not yet waited for: see ``gateway``)."""
    assert HAPROXY is not None
    port, metrics_port = free_port(), free_port()
    cfg = render(directory, node_port, port, metrics_port, backends, extra)
    (directory / "haproxy.cfg").write_text(cfg)
    context = self_signed(directory)
    check = subprocess.run([HAPROXY, "-c", "-q", "-f", str(directory / "haproxy.cfg")],
                           capture_output=True, text=True, timeout=30, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    log = directory / "haproxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([HAPROXY, "-db", "-f", str(directory / "haproxy.cfg")],
                                stdout=out, stderr=subprocess.STDOUT)
    gw = Gateway(port, metrics_port, cfg, directory, context, log, proc)
    try:
        yield gw
    finally:
        proc.terminate()
        try:
            proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(TIMEOUT)


@pytest.fixture(scope="session")
def gateway(gateway_node: Node,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    directory = tmp_path_factory.mktemp("gateway-limits")
    with running_gateway(directory, gateway_node.port) as gw:
        def ready() -> bool:
            gw.alive()
            with contextlib.suppress(OSError):
                return request(gw, "GET", "/v1/models", "other")[0] == 200
            return False

        wait_for(ready, "the gateway to answer through node1")
        yield gw


# --- clients -------------------------------------------------------------------------------------


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


def request(gw: Gateway, method: str, path: str, key: str | None,
            body: bytes | None = None,
            conn: http.client.HTTPSConnection | None = None,
            headers: dict[str, str] | None = None,
            source: str = "127.0.0.1") -> tuple[int, dict[str, str], bytes]:
    """One request (on ``conn`` when given, else on a new connection from ``source``): status,
    headers (lower-case names), body. ``key`` is a name of KEYS, sent as a bearer token."""
    own = conn is None
    c = gw.connect(source) if conn is None else conn
    try:
        c.request(method, path, body=body, headers={**(bearer(key) if key else {}),
                                                    **(headers or {})})
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
