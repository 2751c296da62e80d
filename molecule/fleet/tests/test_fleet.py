"""fleet scenario: gateway (HAProxy) + two vLLM sandbox nodes after site.yml.

Order matters: the gateway's checks first (files, TLS, 404/401/429, idempotence), then
rolling_update.yml under a streaming client load with its default gates, verify and fingerprint
(run 1: the same weights in a new revision directory on every node, every gate passes; runs 2
and 3: fleet-node1 gets a revision with one layer's weights scaled by 1.05 and fails the gate
fingerprint, fleet-node2 - not changed yet - disagreeing with its answers; run 3 rolls it
back), the logs last (after every request and restart). Each node's last fingerprint is read
from the controller's fingerprint directory the rollouts are given (FINGERPRINTS).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx  # the HTTP client the pinned openai SDK uses
import pytest
import testinfra

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_load import Load, compare_ttft, failed, succeeded_within  # noqa: E402

GW = "fleet-gw"
NODES = ["fleet-node1", "fleet-node2"]
URL = "https://127.0.0.1:18243"
DIRECT = {"fleet-node1": "https://127.0.0.1:18201", "fleet-node2": "https://127.0.0.1:18202"}
MODEL = "gptoss-legacy-demo"
NODE_KEY = "fleet-node-key-5d2b9a71c04e8f36"
LOAD_KEY = "fleet-client-a-key-7e31c9b2d4f5"
LIMITED_KEY = "fleet-client-b-key-0a84f6d39c12"
KEYS = [NODE_KEY, LOAD_KEY, LIMITED_KEY]
CONF = "/etc/haproxy/instinct"
JOURNAL_UNITS = ["haproxy.service", "vllm.service"]
# Role fingerprint_gate's controller directory for the rollouts: baselines, nodes/<host>.json.
FINGERPRINTS = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "fleet-fingerprints"
# Role fleet_pki's directory on the controller (molecule.yml's fleet_pki_dir): the fleet CA, the
# nodes' certificates, the controller's client certificate.
PKI = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "fleet-pki"
# Role rollout's gate benchmark (the canary's) on the controller: runs/ and baseline.json.
CANARY = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "fleet-canary"
# The rollout's stop message when the gate fingerprint's last task failed (role rollout).
FAILED_AT_FINGERPRINT = re.compile(r"fleet-node1 failed its switch or gate at task "
                                   r"'(instinct\.vllm\.fingerprint_gate : )?Gate the node on its "
                                   r"fingerprint'")
# Role rollout's report of each node's staging, done while the node serves (tasks/stage.yml).
# Role rollout's staging report: the node, how long, and when it was done (UTC)
STAGED = re.compile(r"(fleet-node\d) staged in ([0-9.]+) s, serving all along "
                    r"\(done (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z\)")
R2 = "/srv/models/demo-gptoss-legacy-r2"  # run 1's revision (change-good.yml)
# FLEET_NEW_VENV=1 (`make bench-fleet`): every rollout also names a vLLM venv of its own, which
# run 1 installs on each node while it serves - a staging of minutes (the wheelhouse into a new
# venv), against which each node's time out of rotation is shown not to grow.
VENV = "/opt/vllm/venv"  # converge's (role vllm's default)
NEW_VENV = "/opt/vllm/venv-r2" if os.environ.get("FLEET_NEW_VENV") == "1" else None
CHANGE_VENV = ["-e", f"vllm_venv_path={NEW_VENV}"] if NEW_VENV else []
# Out of rotation at most the old engine's stop, the new one's start, the gates and this (the
# drain and the switch: from leaving rotation to the stop of the old engine).
SWITCH_BOUND = 15.0
# Each load worker's pause between two streamed chats during a rollout (seconds). 0.25 in
# `make test`: each worker sends 2-3 requests a second (a chat of 16 tokens takes ~0.1 s here),
# so the gateway is never a second without a request, while the nodes' CPU goes to the rollout
# and to the scenarios beside it. `make bench-fleet`: 0, back to back (the published figures).
LOAD_PAUSE = float(os.environ.get("FLEET_LOAD_PAUSE", "0.25"))
SCALED = "/srv/models/demo-gptoss-legacy-r3-scaled"  # runs 2-3 (change-bad-node1.yml)

STAT_PY = (
    "import socket,csv,json;s=socket.socket(socket.AF_UNIX);s.connect('/run/haproxy/admin.sock');"
    "s.sendall(b'show stat\\n');d=b''\n"
    "while True:\n c=s.recv(65536)\n if not c: break\n d+=c\n"
    "r=csv.DictReader(d.decode().lstrip('# ').splitlines());"
    "print(json.dumps({x['svname']:{'status':x['status'],'scur':x['scur']}"
    " for x in r if x['pxname']=='vllm'}))"
)


def sh(container: str, command: str) -> str:
    """command's stdout on the container (its whole output, final newline kept); a failed
    command raises CalledProcessError, which the gateway polls below expect during a reload."""
    result = testinfra.get_host(f"sandbox://{container}").run(command)
    if result.rc != 0:
        raise subprocess.CalledProcessError(result.rc, command, result.stdout, result.stderr)
    return result.stdout


def gateway_servers() -> dict:
    return json.loads(sh(GW, f"python3 -c {shlex.quote(STAT_PY)}"))


def main_pid(node: str) -> str:
    return sh(node, "systemctl show -P MainPID vllm.service").strip()


def started_and_ready(node: str) -> tuple[float, float]:
    """Wall-clock times (s) of the service's last start and of its READY=1."""
    out = sh(node, "systemctl show -P ExecMainStartTimestamp -P ActiveEnterTimestamp vllm.service")
    start, ready = (subprocess.run(["date", "-d", line, "+%s.%N"], check=True, capture_output=True,
                                   text=True).stdout for line in out.strip().splitlines())
    return float(start), float(ready)


def node_tls() -> ssl.SSLContext:
    """The controller's side of the nodes' mTLS: the fleet CA and its client certificate."""
    context = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    context.load_cert_chain(PKI / "controller.crt", PKI / "controller.key")
    return context


def http(ca: str) -> httpx.Client:
    return httpx.Client(base_url=URL, verify=ca, timeout=60)


def openai_client(ca: str, key: str = LOAD_KEY):
    import openai

    return openai.OpenAI(base_url=URL + "/v1", api_key=key, max_retries=0, timeout=120,
                         http_client=httpx.Client(verify=ca, timeout=120))


def playbook(name: str, *args: str) -> subprocess.CompletedProcess:
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
           "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_PIPELINING": "True",
           "ANSIBLE_CONNECTION_PLUGINS": str(REPO / "molecule/shared/connection_plugins")}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory,
         str(REPO / "playbooks" / name), *args],
        capture_output=True, text=True, env=env, check=False,
    )


# ---------------------------------------------------------------------------- gateway


def test_secrets_files_modes_and_no_clear_key(host):
    gw = host.get_host(f"sandbox://{GW}")
    node_key = gw.file(f"{CONF}/node-key.map")
    assert (node_key.user, node_key.group, node_key.mode) == ("root", "haproxy", 0o640)
    tls_key = gw.file(f"{CONF}/tls.pem.key")
    assert (tls_key.user, tls_key.group, tls_key.mode) == ("root", "haproxy", 0o640)
    keys_map = sh(GW, f"cat {CONF}/api-keys.map")
    import hashlib

    assert hashlib.sha256(LOAD_KEY.encode()).hexdigest() in keys_map
    cfg = sh(GW, "cat /etc/haproxy/haproxy.cfg")
    argv = sh(GW, "ps -eo args")
    for key in KEYS:
        assert key not in keys_map and key not in cfg and key not in argv


def test_tls_and_chat_through_the_gateway(ca):
    reply = openai_client(ca).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=4)
    assert reply.choices[0].message.content is not None


@pytest.mark.parametrize("path", ["/metrics", "/health", "/tokenize", "/version"])
def test_node_internals_not_public(ca, path):
    with http(ca) as c:
        r = c.get(path, headers={"Authorization": f"Bearer {LOAD_KEY}"})
    assert r.status_code == 404


def tls12_handshake(suite: str) -> str | None:
    """The suite the deployed gateway agrees to when TLS 1.2 offers only ``suite`` (None:
    refused)."""
    import socket
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(suite + ":@SECLEVEL=0")
    with socket.create_connection(("127.0.0.1", int(URL.rsplit(":", 1)[1])), timeout=10) as raw:
        try:
            with context.wrap_socket(raw) as tls:
                return tls.cipher()[0]
        except (ssl.SSLError, ConnectionResetError):
            return None


def test_tls12_forward_secret_aead_only():
    """The deployed gateway (role gateway's configuration, its generated RSA certificate)."""
    assert tls12_handshake("ECDHE-RSA-AES128-GCM-SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    for suite in ("AES128-GCM-SHA256", "ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES256-SHA384"):
        assert tls12_handshake(suite) is None, suite  # static RSA, CBC


def test_dot_segments_do_not_leave_v1(ca):
    """httpx would resolve the dot segments itself: the request line is sent as written."""
    import socket
    import ssl

    context = ssl.create_default_context(cafile=ca)
    context.check_hostname = False
    host, port = "127.0.0.1", int(URL.rsplit(":", 1)[1])
    head = (f"GET /v1/%2e%2e/metrics HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {LOAD_KEY}"
            "\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((host, port), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(head)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 404"), answer[:300]
    assert b"vllm:" not in answer  # no node metrics


@pytest.mark.parametrize("auth", [None, "Bearer wrong-key-0000000000000000", f"Bearer {NODE_KEY}",
                                  f"Basic {LOAD_KEY}"])
def test_401_without_or_with_a_wrong_key(ca, auth):
    headers = {"Authorization": auth} if auth else {}
    with http(ca) as c:
        r = c.get("/v1/models", headers=headers)
    assert r.status_code == 401, r.text
    assert r.headers.get("www-authenticate") == "Bearer"


def test_429_past_the_key_rate_limit(ca):
    with http(ca) as c:
        codes = [c.get("/v1/models", headers={"Authorization": f"Bearer {LIMITED_KEY}"}).status_code
                 for _request in range(8)]
        other = c.get("/v1/models", headers={"Authorization": f"Bearer {LOAD_KEY}"}).status_code
    assert codes[:5] == [200] * 5 and set(codes[5:]) == {429}, codes
    assert other == 200  # the limit is per key


def test_gateway_playbook_is_idempotent():
    run = playbook("gateway.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    recap = run.stdout[run.stdout.rindex("PLAY RECAP"):]
    assert "changed=0" in recap.split(GW, 1)[1].splitlines()[0], recap


def runtime_api(command: str) -> str:
    """One command to the gateway's runtime API (root socket, inside the container)."""
    script = ("import socket,sys;s=socket.socket(socket.AF_UNIX);"
              "s.connect('/run/haproxy/admin.sock');"
              "s.sendall(sys.argv[1].encode()+b'\\n');print(s.recv(65536).decode())")
    return subprocess.run(["podman", "exec", GW, "python3", "-c", script, command], check=True,
                          capture_output=True, text=True).stdout.strip()


def wait_status(server: str, status: str, timeout: float = 60) -> str:
    """The server's status at the gateway once it is `status` (or the last one seen)."""
    deadline, seen = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        try:
            seen = gateway_servers()[server]["status"]
        except (subprocess.CalledProcessError, ValueError, KeyError):
            seen = "(no answer: reloading)"
        if seen == status:
            break
        time.sleep(1)
    return seen


# Every node has an agent check (the watchdog's status port), and HAProxy names a drained
# server with an agent check "DRAIN (agent)" whoever drained it (SRV_STATS_STATE_DRAIN_AGENT in
# its stats code); without an agent check it would read "DRAIN".
DRAINED = "DRAIN (agent)"


def test_drain_and_maint_survive_a_reload_and_a_restart(figures, results):
    """A node drained or held out stays so when the gateway reloads (a changed configuration,
    by the role's handler) or restarts: the unit saves the states, HAProxy reads them back.
    The node is put back in rotation and the configuration restored whatever fails."""
    node = "fleet-node2"
    assert wait_status(node, "UP") == "UP"
    try:
        runtime_api(f"set server vllm/{node} state drain")
        assert wait_status(node, DRAINED, 10) == DRAINED
        pid = sh(GW, "systemctl show -P MainPID haproxy.service").strip()
        changed = playbook("gateway.yml", "-e", "gateway_health_rise=3")  # a real config change
        assert changed.returncode == 0, changed.stdout[-3000:]
        assert "Reload HAProxy]" in changed.stdout  # the role's handler ran
        assert "rise 3" in sh(GW, "cat /etc/haproxy/haproxy.cfg")
        assert sh(GW, "systemctl show -P MainPID haproxy.service").strip() == pid  # a reload
        assert "saved to /var/lib/haproxy/server-state" in sh(
            GW, "journalctl --no-pager -u haproxy.service -n 50")
        after_reload = wait_status(node, DRAINED, 20)
        assert after_reload == DRAINED  # without the saved states: UP
        assert wait_status("fleet-node1", "UP", 20) == "UP"
        runtime_api(f"set server vllm/{node} state maint")
        sh(GW, "systemctl restart haproxy.service")
        after_restart = wait_status(node, "MAINT", 20)
        assert after_restart == "MAINT"
    finally:
        runtime_api(f"set server vllm/{node} state ready")
        restored = playbook("gateway.yml")  # back to the scenario's configuration
    assert restored.returncode == 0, restored.stdout[-3000:]
    assert wait_status(node, "UP") == "UP"
    figures.append(f"gateway: {node} drained, reload (config change) -> {after_reload}; "
                   f"held out, restart -> {after_restart}")
    results["state_over_reload"] = {"drained_then_reload": after_reload,
                                    "maint_then_restart": after_restart}


def test_both_nodes_in_rotation():
    servers = gateway_servers()
    assert {n: servers[n]["status"] for n in NODES} == dict.fromkeys(NODES, "UP")


# ---------------------------------------------------------------------------- rolling update


class GatewayWatch:
    """Polls the gateway's server states (show stat) in a thread while a rollout runs: each
    node's (time, status) whenever its status changes, wall-clock seconds."""

    def __init__(self, period: float = 0.5) -> None:
        import threading

        self.changes: dict[str, list[tuple[float, str]]] = {n: [] for n in NODES}
        self._period, self._stop = period, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        try:
            servers = gateway_servers()
        except (subprocess.CalledProcessError, ValueError):
            servers = {}
        now = time.time()
        for node in NODES:
            status = servers.get(node, {}).get("status")
            seen = self.changes[node]
            if status and (not seen or seen[-1][1] != status):
                seen.append((now, status))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self._period)

    def start(self) -> GatewayWatch:
        self._thread.start()
        return self

    def stop(self) -> dict[str, list[tuple[float, str]]]:
        """Stop polling, then look once more: the rollout's last step puts its last node back UP
        moments before it returns, which a poll under way may not have seen."""
        self._stop.set()
        self._thread.join(timeout=30)
        self._sample()
        return self.changes

    def out_of_rotation(self, node: str) -> tuple[float, float]:
        """(left, back): when the gateway first took the node out of rotation, and when it was in
        again after that. In rotation is any UP state: "UP 1/2" (one failed check, going down)
        still gets requests; DRAIN, MAINT and DOWN do not."""
        seen = self.changes[node]
        left = next(t for t, status in seen if not in_rotation(status))
        back = next(t for t, status in seen if in_rotation(status) and t > left)
        return left, back


def in_rotation(status: str) -> bool:
    """A server status of HAProxy's show stat that still receives requests ("UP", "UP 1/2")."""
    return status.startswith("UP")


CONNECT_PY = (
    "import socket,sys\ns=socket.socket();s.settimeout(3)\n"
    "try:\n s.connect((sys.argv[1],int(sys.argv[2])));print('open')\n"
    "except ConnectionRefusedError:\n print('refused')\n"
    "except OSError:\n print('timeout')\n"
)


def container_address(name: str) -> str:
    return subprocess.run(
        ["podman", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
         name], check=True, capture_output=True, text=True).stdout.strip()


def connect_from(container: str, address: str, port: int) -> str:
    return subprocess.run(["podman", "exec", "-i", container, "python3", "-c", CONNECT_PY,
                           address, str(port)], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.mark.parametrize("port", [8000, 8001])
def test_a_node_answers_the_gateway_and_not_another_node(port):
    """Role firewall (docs/gateway.md, "Who can reach a node"): vLLM's port and the watchdog's
    status port take connections from the gateway; fleet-node2 is neither a gateway nor a
    monitoring host, so its attempt is dropped (times out)."""
    node1 = container_address("fleet-node1")
    assert connect_from(GW, node1, port) == "open"
    assert connect_from("fleet-node2", node1, port) == "timeout"


def test_the_controller_is_an_allowed_source_and_the_table_is_the_roles():
    """firewall_allow_extra holds the bridge's host address: the published port answers the
    controller (the gates, the direct baseline). The role's table is the only one it adds, with
    the drop rule's counter past 0 after the test above."""
    assert httpx.get(DIRECT["fleet-node1"] + "/health", verify=node_tls(),
                     timeout=10).status_code == 200
    listed = sh("fleet-node1", "nft list table inet instinct_vllm")
    assert "elements = { 8000, 8001 }" in listed
    dropped = re.search(r"counter packets (\d+) bytes \d+ drop", listed)
    assert dropped and int(dropped.group(1)) > 0, listed
    assert "flush ruleset" not in sh("fleet-node1", "cat /etc/nftables.d/instinct-vllm.nft")


# Run inside the gateway's container with its Python: /v1/models on a node's vLLM port, as
# HAProxy reaches it (the node's address, the certificate checked against it), without a client
# certificate, and with the gateway's with and without the node key (read from stdin).
MTLS_PY = """
import json, socket, ssl, sys
address, conf, key = sys.argv[1], sys.argv[2], sys.stdin.read().strip()


def ask(certificate, authorization):
    context = ssl.create_default_context(cafile=conf + "/fleet-ca.crt")
    if certificate:
        context.load_cert_chain(conf + "/fleet-client.pem", conf + "/fleet-client.pem.key")
    head = "GET /v1/models HTTP/1.1\\r\\nHost: node\\r\\nConnection: close\\r\\n"
    if authorization:
        head += "Authorization: Bearer " + key + "\\r\\n"
    try:
        with socket.create_connection((address, 8000), timeout=10) as raw, \\
                context.wrap_socket(raw, server_hostname=address) as tls:
            tls.sendall((head + "\\r\\n").encode())
            answer = b""
            while chunk := tls.recv(65536):
                answer += chunk
    except (ssl.SSLError, OSError) as error:
        return "no answer: " + type(error).__name__ + ": " + str(error)[:160]
    return answer.split(b"\\r\\n", 1)[0].decode() or "no answer: closed"


print(json.dumps({"no certificate": ask(False, True), "no key": ask(True, False),
                  "certificate and key": ask(True, True)}))
"""


def test_a_node_wants_the_gateway_certificate_and_the_node_key(figures):
    """From the gateway's host: without a client certificate the node's TLS handshake fails (no
    HTTP answer); with the gateway's, /v1 still wants the node key (401), and with it answers."""
    answers = json.loads(subprocess.run(
        ["podman", "exec", "-i", GW, "python3", "-c", MTLS_PY,
         container_address("fleet-node1"), CONF],
        input=NODE_KEY, check=True, capture_output=True, text=True).stdout)
    figures.append(f"mTLS at fleet-node1 from the gateway's host: {answers}")
    assert answers["no certificate"].startswith("no answer: "), answers
    assert answers["no key"].startswith("HTTP/1.1 401"), answers
    assert answers["certificate and key"].startswith("HTTP/1.1 200"), answers


def test_node_certificate_files_and_unit():
    """The node's key is the service user's alone; the unit names the files, never a key."""
    stat = sh("fleet-node1", "stat -c '%U:%G %a' /etc/vllm-tls /etc/vllm-tls/node.key")
    assert stat.split() == ["root:vllm", "750", "vllm:vllm", "600"], stat
    unit = sh("fleet-node1", "cat /etc/systemd/system/vllm.service")
    assert "--ssl-cert-reqs 2" in unit and "--ssl-keyfile /etc/vllm-tls/node.key" in unit
    assert "PRIVATE KEY" not in unit


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def prometheus_targets(config: Path, data: Path, timeout: float = 60) -> dict[str, dict]:
    """Prometheus (Debian's, on the controller) scraping with ``config`` until every target was
    scraped once: each job's target as /api/v1/targets gives it."""
    import yaml

    jobs = {job["job_name"] for job in yaml.safe_load(config.read_text())["scrape_configs"]}
    port = free_port()
    server = subprocess.Popen(
        [shutil.which("prometheus") or "prometheus", f"--config.file={config}",
         f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, seen = time.monotonic() + timeout, {}
    try:
        while time.monotonic() < deadline and set(seen) != jobs:
            time.sleep(1)
            try:
                active = httpx.get(f"http://127.0.0.1:{port}/api/v1/targets",
                                   timeout=5).json()["data"]["activeTargets"]
            except (httpx.HTTPError, ValueError, KeyError):
                continue
            seen = {t["labels"]["job"]: t for t in active if t["health"] != "unknown"}
    finally:
        server.terminate()
        server.wait(timeout=30)
    return seen


def test_prometheus_scrapes_a_node_over_mtls(tmp_path, figures):
    """A real Prometheus scrapes fleet-node1's /metrics with a fleet certificate (the shape of
    role monitoring's tls_config); without one the node refuses the scrape."""
    import yaml

    target = {"targets": [DIRECT["fleet-node1"].removeprefix("https://")]}
    tls = {"ca_file": str(PKI / "ca.crt"), "cert_file": str(PKI / "controller.crt"),
           "key_file": str(PKI / "controller.key")}
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "2s", "scrape_timeout": "2s"},
        "scrape_configs": [
            {"job_name": "mtls", "scheme": "https", "tls_config": tls,
             "static_configs": [target]},
            {"job_name": "no-certificate", "scheme": "https",
             "tls_config": {"ca_file": tls["ca_file"]}, "static_configs": [target]},
        ]}))
    seen = prometheus_targets(config, tmp_path / "data")
    figures.append("Prometheus at fleet-node1: " + "; ".join(
        f"{job} {t['health']} {t['lastError'][:100]!r}" for job, t in sorted(seen.items())))
    assert seen["mtls"]["health"] == "up", seen["mtls"]
    assert seen["no-certificate"]["health"] == "down", seen["no-certificate"]


def rollout(ca: str, change: str, *extra: str,
            watch: GatewayWatch | None = None) -> tuple[subprocess.CompletedProcess, list, float]:
    load = Load(lambda: openai_client(ca), MODEL, workers=2, max_tokens=16,
                pause=LOAD_PAUSE).start()
    time.sleep(3)
    if watch:
        watch.start()
    t0 = time.monotonic()
    run = playbook("rolling_update.yml", "-e", f"@{SCENARIO / 'vars' / change}",
                   "-e", f"instinct_vllm_fingerprint_baseline_dir={FINGERPRINTS}",
                   "-e", f"instinct_vllm_canary_benchmark_dir={CANARY}", *CHANGE_VENV, *extra)
    seconds = time.monotonic() - t0
    if watch:
        watch.stop()
    time.sleep(3)
    return run, load.stop(), seconds


def last_fingerprint(node: str) -> dict:
    """The node's last fingerprint as role fingerprint_gate keeps it on the controller."""
    import json

    return json.loads((FINGERPRINTS / "nodes" / f"{node}.json").read_text())


def scaled_revision() -> str:
    """Run 1's checkpoint on fleet-node1 with layer 1's weights x 1.05 in a revision directory of
    its own (molecule/shared/scale_layer.py on the node's Python): what change-bad-node1.yml
    serves there."""
    script = (REPO / "molecule" / "shared" / "scale_layer.py").read_text()
    sh("fleet-node1", f"rm -rf {SCALED}")
    out = subprocess.run(["podman", "exec", "fleet-node1", "python3", "-c", script, R2, SCALED,
                          "model.layers.1.", "1.05"], check=True, capture_output=True,
                         text=True).stdout
    assert int(out.split()[0]) >= 9, out  # 2 norms, 4 attention and 3 MLP projections
    return out.strip()


def record(results: dict, name: str, run: subprocess.CompletedProcess, outcomes: list,
           seconds: float, **extra: object) -> dict:
    """One rollout's figures for the figures JSON (scripts/fleet-bench report)."""
    results[name] = {"nodes": len(NODES), "serial": 1, "rc": run.returncode,
                     "seconds": round(seconds, 1), "requests": len(outcomes),
                     "failed": len(failed(outcomes)), "client_workers": 2,
                     "client_pause_s": LOAD_PAUSE, **extra}
    return results[name]


def out_of_rotation(node: str, watch: GatewayWatch, run: subprocess.CompletedProcess,
                    start: float, ready: float, figures: list, recorded: dict) -> None:
    """The node left rotation only for its switch: its staging (role rollout's report) was done
    before the gateway drained it, while it served; then the engine's restart and the gates."""
    staged = {m[1]: (float(m[2]), datetime.datetime.fromisoformat(m[3] + "+00:00").timestamp())
              for m in STAGED.finditer(" ".join(run.stdout.split()))}
    assert node in staged, f"no staging report for {node}: {run.stdout[-3000:]}"
    staging_s, staged_at = staged[node]
    left, back = watch.out_of_rotation(node)
    stopping = stop_begun(node, left, start)
    out, engine, gates = back - left, ready - start, back - ready
    stop = max(0.0, start - stopping)
    figures.append(f"  {node}: staged {staging_s:.0f} s in rotation; out of rotation "
                   f"{out:.0f} s (drain and switch {stopping - left:.0f} s, the old engine's "
                   f"stop {stop:.0f} s, engine start {engine:.0f} s, gates and back "
                   f"UP {gates:.0f} s); "
                   f"gateway states {[state for _when, state in watch.changes[node]]}")
    recorded["restarts"][node].update(staging_s=round(staging_s, 1),
                                      out_of_rotation_s=round(out, 1),
                                      old_engine_stop_s=round(stop, 1))
    assert staged_at < left < start < ready < back, (node, staged_at, left, start, ready, back)
    assert stopping - left <= SWITCH_BOUND, (node, stopping - left,
                                             switch_journal(node, left, start))


def switch_window(node: str, left: float, start: float, options: str) -> str:
    """The node's journal (journalctl ``-o <options>``) from leaving rotation to the new
    engine's start, two seconds wider each side (whole-second timestamps)."""
    return sh(node, f"journalctl --no-pager -o {options} --since @{int(left) - 2} "
                    f"--until @{int(start) + 2}")


def stop_begun(node: str, left: float, start: float) -> float:
    """When systemd began stopping the old engine (the unit's journal), the last time before
    the new engine's start (`start` has whole seconds: systemd's timestamp)."""
    out = switch_window(node, left, start, "short-unix -u vllm.service")
    times = [float(line.split()[0]) for line in out.splitlines()
             if "Stopping vllm.service" in line and float(line.split()[0]) < start + 1]
    assert times, (node, "no stop of vllm.service before the new engine's start", out[-3000:])
    return times[-1]


def switch_journal(node: str, left: float, start: float) -> str:
    """The node's journal from leaving rotation to the new engine's start, without the request
    lines: what the drain, the switch and the old engine's stop did meanwhile."""
    out = switch_window(node, left, start, "short-iso")
    noise = ('"POST /v1', '"GET /health', '"GET /metrics', "detokeniz", "loggers.py")
    return "\n".join(line for line in out.splitlines() if not any(n in line for n in noise))[-6000:]


# The certificates' life in days that run 1 renews them with (the default is 365).
CERT_DAYS = 1000


def node_certificate(node: str) -> str:
    return sh(node, "cat /etc/vllm-tls/node.crt")


def renewed_certificates(before: dict[str, str], fleet_ca: str, figures: list) -> None:
    """Each node serves a new certificate of the same CA, for CERT_DAYS, as the controller keeps
    it: rotated by the rollout while the client load ran."""
    import datetime as dt

    from cryptography import x509

    assert (PKI / "ca.crt").read_text() == fleet_ca  # the CA stays
    for node in NODES:
        served = node_certificate(node)
        assert served != before[node], f"{node}: its certificate was not renewed"
        assert served == (PKI / f"{node}.crt").read_text()
        cert = x509.load_pem_x509_certificate(served.encode())
        days = (cert.not_valid_after_utc - dt.datetime.now(dt.UTC)).days
        figures.append(f"  {node}: certificate renewed, serial {cert.serial_number:x}, "
                       f"{days} days left")
        assert days >= CERT_DAYS - 2, (node, days)


def test_rolling_update_loses_no_request(ca, figures, results):
    import shutil

    shutil.rmtree(FINGERPRINTS, ignore_errors=True)  # no baseline of an earlier run
    shutil.rmtree(CANARY, ignore_errors=True)
    before = {n: main_pid(n) for n in NODES}
    certs = {n: node_certificate(n) for n in NODES}
    fleet_ca = (PKI / "ca.crt").read_text()
    watch = GatewayWatch()
    # Certificates renewed on the way: a longer life and a renewal window wider than what is
    # left of the current ones (role fleet_pki reissues each node's in its staging).
    run, outcomes, seconds = rollout(ca, "change-good.yml", "-e",
                                     f"fleet_pki_cert_days={CERT_DAYS}", "-e",
                                     "fleet_pki_renew_days=400", watch=watch)
    bad = failed(outcomes)
    figures.append(f"run 1 (good change, both nodes): rolling_update.yml rc={run.returncode} "
                   f"in {seconds:.0f} s; client requests {len(outcomes)}, failed {len(bad)}")
    recorded = record(results, "rollout_good", run, outcomes, seconds, restarts={},
                      change=("a flag, a vLLM venv and a model revision" if NEW_VENV else
                              "a flag and a model revision") + " on every node (node 1 the canary)")
    assert run.returncode == 0, run.stdout[-5000:]
    assert not bad, [o.error for o in bad[:5]]
    after = {n: main_pid(n) for n in NODES}
    assert all(after[n] != before[n] for n in NODES), (before, after)
    for node in NODES:
        start, ready = started_and_ready(node)
        during = succeeded_within(outcomes, start, ready)
        figures.append(f"  {node}: restarted {ready - start:.0f} s, {len(during)} requests "
                       f"succeeded meanwhile, MainPID {before[node]} -> {after[node]}")
        recorded["restarts"][node] = {"engine_down_s": round(ready - start, 1),
                                      "succeeded_meanwhile": len(during),
                                      "main_pid": [before[node], after[node]]}
        assert during, f"no request succeeded while {node} restarted"
        out_of_rotation(node, watch, run, start, ready, figures, recorded)
        unit = sh(node, "cat /etc/systemd/system/vllm.service")
        assert "--max-num-seqs 4" in unit and "demo-gptoss-legacy-r2" in unit
        if NEW_VENV:  # the new venv serves; the last good release's stays for a rollback
            assert f" -- {NEW_VENV}/bin/vllm serve " in unit, unit
            sh(node, f"test -x {VENV}/bin/python")
    renewed_certificates(certs, fleet_ca, figures)
    # The canary (fleet-node1) rolled first, with the gate benchmark: its run, the first, has
    # no baseline and became it; fleet-node2 rolled after it without that gate.
    canary_runs = sorted((CANARY / "runs").glob("*/summary.json"))
    baseline = json.loads((CANARY / "baseline.json").read_text())
    figures.append(f"  canary fleet-node1: gate benchmark {len(canary_runs)} run(s); baseline "
                   f"{canary_figures(baseline['targets']['fleet-node1'])}")
    assert len(canary_runs) == 1 and baseline["nodes"] == ["fleet-node1"], baseline["nodes"]
    assert run.stdout.index("PLAY [Roll the canary with every gate]") < run.stdout.index(
        "PLAY [Roll the other vLLM nodes")
    servers = gateway_servers()
    assert {n: servers[n]["status"] for n in NODES} == dict.fromkeys(NODES, "UP")
    # The gate fingerprint passed on both: the same weights in a new directory.
    first, second = last_fingerprint("fleet-node1"), last_fingerprint("fleet-node2")
    figures.append(f"  gate fingerprint: fleet-node1 {first['consensus']['summary'][:160]}; "
                   f"fleet-node2 {second['msg'][:160]}")
    assert first["ok"] and first["consensus"]["status"] == "ok", first["msg"]
    assert list(first["consensus"]["peers"]) == ["fleet-node2"]  # not changed yet
    assert first["consensus"]["peers"]["fleet-node2"]["claims"]["model"] == \
        "/srv/models/demo-gptoss-legacy"  # converge's revision, the same weights
    assert first["meta"]["revision"] == R2 and not first["baseline_found"]
    assert second["ok"] and second["baseline_found"], second["msg"]  # fleet-node1's baseline
    assert second["verdicts"]["baseline"]["ok"] and second["consensus"]["status"] == "skipped"
    # The transformers reference of the new revision was taken while each node still served
    # (the staging): the gate read it from the node's cache (0 s there).
    for node, verdict in (("fleet-node1", first), ("fleet-node2", second)):
        assert verdict["verdicts"]["transformers"]["ok"], (node, verdict["msg"])
        assert verdict["reference_seconds"] == 0, (node, verdict["reference_seconds"])
    # The nodes serve max-model-len 512: the prompts longer than that are left out, as vLLM's
    # /v1/models says, and the verdict lists them.
    left_out = second["verdicts"]["baseline"]["left_out"]
    figures.append(f"  left out at max-model-len 512: {[x['id'] for x in left_out]}")
    assert left_out and {x["max_model_len"] for x in left_out} == {512}, left_out


def test_failed_gate_stops_the_rollout_and_holds_the_node_out(ca, figures, results):
    figures.append(f"run 2's revision on fleet-node1: {scaled_revision()}")
    before = {n: main_pid(n) for n in NODES}
    # fleet-node1 is the canary: held out, not rolled back (the canary's default is tried by
    # run 3)
    run, outcomes, seconds = rollout(ca, "change-bad-node1.yml",
                                     "-e", "instinct_vllm_canary_rollback=false")
    bad = failed(outcomes)
    figures.append(f"run 2 (canary fleet-node1 fails its gate, no rollback): rolling_update.yml "
                   f"rc={run.returncode} in {seconds:.0f} s; client requests {len(outcomes)}, "
                   f"failed {len(bad)}")
    record(results, "rollout_gate_fails", run, outcomes, seconds)
    assert run.returncode != 0, run.stdout[-3000:]
    out = " ".join(run.stdout.split())
    # The gate that failed is fingerprint (verify passed: vLLM serves the scaled revision), and
    # its verdict names the consensus of fleet-node2, not changed yet.
    assert FAILED_AT_FINGERPRINT.search(out), run.stdout[-5000:]
    assert "consensus: disagrees with fleet-node2" in out
    assert ("held out of rotation (maint) at the gateway; set "
            "instinct_vllm_canary_rollback=true to restore") in out
    verdict = last_fingerprint("fleet-node1")
    figures.append(f"  gate fingerprint: fleet-node1 {verdict['consensus']['summary'][:200]}")
    assert not verdict["ok"] and verdict["meta"]["revision"] == SCALED
    assert verdict["consensus"]["status"] == "failed"
    assert verdict["consensus"]["peer"] == "fleet-node2"
    assert not verdict["verdicts"]["consensus"]["ok"]
    assert verdict["verdicts"]["consensus"]["max_abs"] > 0.001  # float32's tolerance
    assert not (FINGERPRINTS / f"{verdict['baseline_key']}.json").exists()  # no baseline of it
    assert not bad, [o.error for o in bad[:5]]
    servers = gateway_servers()
    figures.append(f"  at the gateway after run 2: fleet-node1 {servers['fleet-node1']['status']}"
                   f", fleet-node2 {servers['fleet-node2']['status']} (MainPID "
                   f"{before['fleet-node2']} -> {main_pid('fleet-node2')})")
    assert servers["fleet-node1"]["status"] == "MAINT"
    assert servers["fleet-node2"]["status"] == "UP"
    assert main_pid("fleet-node2") == before["fleet-node2"]
    # The rollout never reached it: after the canary's split, it only scored fleet-node1's
    # answers there (a task shown as "fleet-node1 -> fleet-node2"); the rest's play never ran.
    assert "[fleet-node2]" not in canary_play(run)
    assert "PLAY [Roll the other vLLM nodes" not in run.stdout
    # The other node serves alone.
    assert openai_client(ca).models.list().data[0].id == MODEL


def canary_figures(by_concurrency: dict) -> str:
    """A gate benchmark's output tok/s and TTFT p50 (ms) by concurrency, for the figures."""
    tput = {c: round(m.get("output_throughput") or 0, 1) for c, m in by_concurrency.items()}
    ttft = {c: round(m.get("p50_ttft_ms") or 0, 1) for c, m in by_concurrency.items()}
    return f"output tok/s {tput}, TTFT p50 ms {ttft}"


def canary_play(run: subprocess.CompletedProcess) -> str:
    """The rollout's output from the canary's play on (the split before it names every node)."""
    return run.stdout.split("PLAY [Roll the canary with every gate]", 1)[1]


def test_rollback_restores_the_last_good_release(ca, figures, results):
    """The same failing change with the canary's default (instinct_vllm_canary_rollback):
    fleet-node1 goes back to what its last passed gate saved (run 1's unit), is gated again -
    the benchmark against its run 1 included - and put back; the run still fails."""
    good = sh("fleet-node1", "cat /var/lib/instinct-vllm/release/last-good.service")
    assert "--max-model-len 512" in good and "demo-gptoss-legacy-r2" in good
    assert SCALED not in good
    run, outcomes, seconds = rollout(ca, "change-bad-node1.yml")
    bad = failed(outcomes)
    figures.append(f"run 3 (same failure, the canary rolled back by default): rc={run.returncode} "
                   f"in {seconds:.0f} s; client requests {len(outcomes)}, failed {len(bad)}")
    record(results, "rollout_rollback", run, outcomes, seconds)
    assert run.returncode != 0, run.stdout[-3000:]
    assert "Rolled back to its last good release" in run.stdout
    assert "=true to restore" not in run.stdout  # no advice to do what was done
    assert not bad, [o.error for o in bad[:5]]
    assert FAILED_AT_FINGERPRINT.search(" ".join(run.stdout.split())), run.stdout[-5000:]
    assert sh("fleet-node1", "cat /etc/systemd/system/vllm.service") == good
    assert gateway_servers()["fleet-node1"]["status"] == "UP"
    assert "[fleet-node2]" not in canary_play(run)
    assert "PLAY [Roll the other vLLM nodes" not in run.stdout
    # The gate benchmark judged the rolled-back canary against its run 1: a second run, passed.
    runs = sorted((CANARY / "runs").glob("*/summary.json"))
    regate = json.loads(runs[-1].read_text())["targets"]["fleet-node1"] if runs else {}
    figures.append(f"  canary's gate benchmark runs after run 3: {len(runs)}; the last "
                   f"{canary_figures(regate)}")
    assert len(runs) == 2, runs  # run 1's and the re-gate's (run 3's failed at fingerprint first)
    # Gated again on run 1's revision: the baseline fleet-node1 recorded then, and fleet-node2.
    verdict = last_fingerprint("fleet-node1")
    assert verdict["ok"] and verdict["meta"]["revision"] == R2, verdict["msg"]
    assert verdict["baseline_found"] and verdict["verdicts"]["baseline"]["ok"]
    assert verdict["consensus"]["status"] == "ok" and verdict["consensus"]["peer"] == "fleet-node2"


# ---------------------------------------------------------------------------- benchmark


def direct_client(node: str):
    import openai

    return openai.OpenAI(base_url=DIRECT[node] + "/v1", api_key=NODE_KEY, max_retries=0,
                         timeout=300, http_client=httpx.Client(timeout=300, verify=node_tls()))


def test_gateway_ttft_overhead_side_by_side(ca, figures, results):
    """The figure of docs/benchmarks.md: TTFT at concurrency 16 through the gateway and straight
    to the same node, in alternating rounds. fleet-node1 is held out meanwhile, so the gateway
    sends everything to fleet-node2, the direct side's node. Measured, not asserted (only
    that no request failed)."""
    node, other = "fleet-node2", "fleet-node1"
    runtime_api(f"set server vllm/{other} state maint")
    try:
        measured = compare_ttft(
            {"gateway": lambda: openai_client(ca), "direct": lambda: direct_client(node)},
            MODEL, concurrency=16, max_tokens=16,
            seconds=float(os.environ.get("FLEET_TTFT_SECONDS", "5")),
            rounds=int(os.environ.get("FLEET_TTFT_ROUNDS", "2")))
    finally:
        runtime_api(f"set server vllm/{other} state ready")
    measured["node"] = node
    results["ttft_c16"] = measured
    g, d = measured["gateway"], measured["direct"]
    figures.append(f"TTFT p50 at concurrency 16: gateway {g['ttft_p50_ms']} ms ({g['requests']} "
                   f"requests, {g['failed']} failed), direct {d['ttft_p50_ms']} ms "
                   f"({d['requests']}, {d['failed']} failed); "
                   f"overhead {measured['overhead_p50_ms']} ms")
    assert g["failed"] == 0 and d["failed"] == 0, measured
    assert g["ttft_p50_ms"] is not None and d["ttft_p50_ms"] is not None, measured
    assert wait_status(other, "UP") == "UP"


# ---------------------------------------------------------------------------- logs last


def test_no_key_in_any_log():
    gw_journal = sh(GW, "journalctl --no-pager -u haproxy.service")
    assert "key=load-client" in gw_journal  # the access log is there, with the key's name
    logs = {GW: gw_journal + sh(GW, "ps -eo args")}
    for node in NODES:
        logs[node] = sh(node, "journalctl --no-pager") + sh(node, "ps -eo args")
    for where, text in logs.items():
        for key in KEYS:
            assert key not in text, f"{key[:12]}... in the logs of {where}"
