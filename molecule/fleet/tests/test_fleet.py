"""fleet scenario: gateway (HAProxy) + two vLLM sandbox nodes after site.yml.

Order matters: the gateway's checks first (files, TLS, 404/401/429, idempotence), then
rolling_update.yml under a streaming client load (run 1: a good change on every node; run 2:
fleet-node1 fails its gate), the logs last (after every request and restart).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx  # the HTTP client the pinned openai SDK uses
import pytest

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_load import Load, failed, succeeded_within  # noqa: E402

GW = "fleet-gw"
NODES = ["fleet-node1", "fleet-node2"]
URL = "https://127.0.0.1:18243"
MODEL = "gptoss-legacy-demo"
NODE_KEY = "fleet-node-key-5d2b9a71c04e8f36"
LOAD_KEY = "fleet-client-a-key-7e31c9b2d4f5"
LIMITED_KEY = "fleet-client-b-key-0a84f6d39c12"
KEYS = [NODE_KEY, LOAD_KEY, LIMITED_KEY]
CONF = "/etc/haproxy/instinct"
JOURNAL_UNITS = ["haproxy.service", "vllm.service"]

STAT_PY = (
    "import socket,csv,json;s=socket.socket(socket.AF_UNIX);s.connect('/run/haproxy/admin.sock');"
    "s.sendall(b'show stat\\n');d=b''\n"
    "while True:\n c=s.recv(65536)\n if not c: break\n d+=c\n"
    "r=csv.DictReader(d.decode().lstrip('# ').splitlines());"
    "print(json.dumps({x['svname']:{'status':x['status'],'scur':x['scur']}"
    " for x in r if x['pxname']=='vllm'}))"
)


def sh(container: str, command: str) -> str:
    return subprocess.run(["podman", "exec", container, "sh", "-c", command], check=True,
                          capture_output=True, text=True).stdout


def gateway_servers() -> dict:
    import json

    out = subprocess.run(["podman", "exec", "-i", GW, "python3", "-c", STAT_PY], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main_pid(node: str) -> str:
    return sh(node, "systemctl show -P MainPID vllm.service").strip()


def started_and_ready(node: str) -> tuple[float, float]:
    """Wall-clock times (s) of the service's last start and of its READY=1."""
    out = sh(node, "systemctl show -P ExecMainStartTimestamp -P ActiveEnterTimestamp vllm.service")
    start, ready = (subprocess.run(["date", "-d", line, "+%s.%N"], check=True, capture_output=True,
                                   text=True).stdout for line in out.strip().splitlines())
    return float(start), float(ready)


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The gateway's self-signed certificate, trusted as its own CA."""
    path = tmp_path_factory.mktemp("fleet") / "gateway.pem"
    path.write_text(sh(GW, f"cat {CONF}/tls.pem"))
    return str(path)


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
           "ANSIBLE_PIPELINING": "True"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory,
         str(REPO / "playbooks" / name), *args],
        capture_output=True, text=True, env=env, check=False,
    )


# ---------------------------------------------------------------------------- gateway


def test_secrets_files_modes_and_no_clear_key(host):
    gw = host.get_host(f"podman://{GW}")
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


def test_both_nodes_in_rotation():
    servers = gateway_servers()
    assert {n: servers[n]["status"] for n in NODES} == dict.fromkeys(NODES, "UP")


# ---------------------------------------------------------------------------- rolling update


def rollout(ca: str, change: str, *extra: str) -> tuple[subprocess.CompletedProcess, list, float]:
    load = Load(lambda: openai_client(ca), MODEL, workers=2, max_tokens=16).start()
    time.sleep(3)
    t0 = time.monotonic()
    run = playbook("rolling_update.yml", "-e", f"@{SCENARIO / 'vars' / change}", *extra)
    seconds = time.monotonic() - t0
    time.sleep(3)
    return run, load.stop(), seconds


def test_rolling_update_loses_no_request(ca, figures):
    before = {n: main_pid(n) for n in NODES}
    run, outcomes, seconds = rollout(ca, "change-good.yml")
    bad = failed(outcomes)
    figures.append(f"run 1 (good change, both nodes): rolling_update.yml rc={run.returncode} "
                   f"in {seconds:.0f} s; client requests {len(outcomes)}, failed {len(bad)}")
    assert run.returncode == 0, run.stdout[-5000:]
    assert not bad, [o.error for o in bad[:5]]
    after = {n: main_pid(n) for n in NODES}
    assert all(after[n] != before[n] for n in NODES), (before, after)
    for node in NODES:
        start, ready = started_and_ready(node)
        during = succeeded_within(outcomes, start, ready)
        figures.append(f"  {node}: restarted {ready - start:.0f} s, {len(during)} requests "
                       "succeeded meanwhile")
        assert during, f"no request succeeded while {node} restarted"
        unit = sh(node, "cat /etc/systemd/system/vllm.service")
        assert "--max-num-seqs 4" in unit and "demo-gptoss-legacy-r2" in unit
    servers = gateway_servers()
    assert {n: servers[n]["status"] for n in NODES} == dict.fromkeys(NODES, "UP")


def test_failed_gate_stops_the_rollout_and_holds_the_node_out(ca, figures):
    before = {n: main_pid(n) for n in NODES}
    run, outcomes, seconds = rollout(ca, "change-bad-node1.yml")
    bad = failed(outcomes)
    figures.append(f"run 2 (fleet-node1 fails its gate): rolling_update.yml rc={run.returncode} "
                   f"in {seconds:.0f} s; client requests {len(outcomes)}, failed {len(bad)}")
    assert run.returncode != 0, run.stdout[-3000:]
    assert "fleet-node1 failed its update or gate" in run.stdout
    assert not bad, [o.error for o in bad[:5]]
    servers = gateway_servers()
    assert servers["fleet-node1"]["status"] == "MAINT"
    assert servers["fleet-node2"]["status"] == "UP"
    assert main_pid("fleet-node2") == before["fleet-node2"]
    assert "fleet-node2" not in run.stdout  # the rollout never reached it
    # The other node serves alone.
    assert openai_client(ca).models.list().data[0].id == MODEL


def test_rollback_restores_the_last_good_release(ca, figures):
    """The same failing change with instinct_vllm_rollback: fleet-node1 goes back to what its
    last passed gate saved (run 1's unit), is gated again and put back; the run still fails."""
    good = sh("fleet-node1", "cat /var/lib/instinct-vllm/release/last-good.service")
    assert "--max-model-len 512" in good and "demo-gptoss-legacy-r2" in good
    run, outcomes, seconds = rollout(ca, "change-bad-node1.yml",
                                     "-e", "instinct_vllm_rollback=true")
    bad = failed(outcomes)
    figures.append(f"run 3 (same failure, instinct_vllm_rollback=true): rc={run.returncode} "
                   f"in {seconds:.0f} s; client requests {len(outcomes)}, failed {len(bad)}")
    assert run.returncode != 0, run.stdout[-3000:]
    assert "Rolled back to its last good release" in run.stdout
    assert not bad, [o.error for o in bad[:5]]
    assert sh("fleet-node1", "cat /etc/systemd/system/vllm.service") == good
    assert gateway_servers()["fleet-node1"]["status"] == "UP"
    assert "fleet-node2" not in run.stdout


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
