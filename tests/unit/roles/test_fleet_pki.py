"""Role fleet_pki on a fleet of two nodes, one gateway and one Prometheus host (all local
connection; the nodes' names and addresses set as network facts would be), real
ansible-playbook and community.crypto, checked with openssl: the chain, the usages, the names,
the client CNs and the key modes; a second run changes nothing; a certificate near its end and
one whose names changed are reissued; the site's CA replaces the fleet CA; disabled writes
nothing; bad inputs fail before any file is written."""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from local_play import run_cases, run_local_playbook

LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
NODES = {
    "pki-node1": {"fqdn": "node1.fleet.test", "hostname": "node1",
                  "all_ipv4_addresses": ["10.88.0.11"], "all_ipv6_addresses": ["fd88::11"]},
    "pki-node2": {"fqdn": "node2.fleet.test", "hostname": "node2",
                  "all_ipv4_addresses": ["10.88.0.12"], "all_ipv6_addresses": []},
}
CLIENTS = {"pki-gw": "gateway", "pki-mon": "prometheus", "controller": "controller"}
PLAYBOOK = """
- hosts: all
  gather_facts: false@SERIAL@
  tasks:
    - test_facts: {facts: "{{ test_network_facts }}"}
      when: test_network_facts is defined
    - ansible.builtin.import_role: {name: instinct.vllm.fleet_pki@ENTRY@}
    - ansible.builtin.copy:
        content: "{{ fleet_pki_resolved | to_json }}"
        dest: "@OUT@/{{ inventory_hostname }}.json"
        mode: "0600"
      delegate_to: localhost
      changed_when: false  # the test's own record: only the role's changes count
"""
FACTS_MODULE = """#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}})
module.exit_json(changed=False, ansible_facts=module.params["facts"])
"""
RECAP = re.compile(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def inventory(node1_address: str = "10.88.1.11") -> dict[str, Any]:
    nodes = {name: {**LOCAL, "test_network_facts": facts} for name, facts in NODES.items()}
    nodes["pki-node1"]["gateway_node_address"] = node1_address
    nodes["pki-node2"]["ansible_host"] = "node2.example.test"
    return {"all": {"children": {
        "vllm_nodes": {"hosts": nodes},
        "gateways": {"hosts": {"pki-gw": dict(LOCAL)}},
        "monitoring": {"hosts": {"pki-mon": dict(LOCAL)}},
    }}}  # fmt: skip


def playbook_text(out: Path, tasks_from: str = "", serial: int = 0) -> str:
    """PLAYBOOK writing its facts to ``out``, the role's entry point, batches of ``serial``."""
    return PLAYBOOK.replace("@OUT@", str(out)).replace("@ENTRY@", tasks_from).replace(
        "@SERIAL@", f"\n  serial: {serial}" if serial else "")


def play(work: Path, pki: Path, inv: dict[str, Any] | None = None, entry: str = "main",
         serial: int = 0, **variables: Any) -> dict:
    """Run the role (its entry point ``entry``) over the fleet with fleet_pki_dir ``pki``, in
    batches of ``serial`` hosts (0: all at once): the changed count per host, each host's
    fleet_pki_resolved and the run's output."""
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (work / "library").mkdir(exist_ok=True)
    (work / "library" / "test_facts.py").write_text(FACTS_MODULE)
    (work / "hosts.yml").write_text(yaml.safe_dump(inv or inventory()))
    tasks_from = "" if entry == "main" else f", tasks_from: {entry}"
    (work / "play.yml").write_text(playbook_text(out, tasks_from, serial))
    run = run_local_playbook(work / "play.yml",
                             {"instinct_vllm_tls": True, "fleet_pki_dir": str(pki), **variables},
                             inventory=str(work / "hosts.yml"), timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    recap = {m[1]: int(m[2]) for m in RECAP.finditer(run.stdout)}
    return {"changed": recap, "stdout": run.stdout,
            "facts": {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}}


def openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], check=True, capture_output=True, text=True).stdout


def text(cert: Path) -> str:
    return openssl("x509", "-in", str(cert), "-noout", "-text")


def serial(cert: Path) -> str:
    return openssl("x509", "-in", str(cert), "-noout", "-serial").strip()


def verifies(ca: Path, cert: Path, purpose: str) -> bool:
    run = subprocess.run(["openssl", "verify", "-purpose", purpose, "-CAfile", str(ca), str(cert)],
                         capture_output=True, text=True, check=False)  # fmt: skip
    return run.returncode == 0 and run.stdout.strip().endswith(": OK")


def sans(cert: Path) -> set[str]:
    block = re.search(r"Subject Alternative Name:.*?\n\s*(.+)", text(cert))
    return {s.strip() for s in block.group(1).split(",")} if block else set()


def serials(pki: Path) -> dict[str, str]:
    return {p.stem: serial(p) for p in sorted(pki.glob("*.crt"))}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The fleet's directory after a first run (with the run's result)."""
    work = tmp_path_factory.mktemp("fleet_pki")
    pki = work / "pki"
    return pki, play(work, pki)


def copy_of(fleet_dir: Path, tmp_path: Path) -> Path:
    pki = tmp_path / "pki"
    shutil.copytree(fleet_dir, pki)
    return pki


def test_the_chain_the_usages_and_the_names(fleet: tuple[Path, dict]) -> None:
    pki = fleet[0]
    ca = pki / "ca.crt"
    assert "CA:TRUE" in text(ca)
    for node in NODES:
        cert = pki / f"{node}.crt"
        assert verifies(ca, cert, "sslserver") and verifies(ca, cert, "sslclient"), node
        assert "TLS Web Server Authentication, TLS Web Client Authentication" in text(cert)
        assert f"Subject: CN = {node}" in text(cert)
    assert sans(pki / "pki-node1.crt") == {
        "DNS:pki-node1", "DNS:node1.fleet.test", "DNS:node1", "DNS:localhost",
        "IP Address:10.88.0.11", "IP Address:FD88:0:0:0:0:0:0:11", "IP Address:127.0.0.1",
        "IP Address:0:0:0:0:0:0:0:1", "IP Address:10.88.1.11"}  # gateway_node_address
    assert {"DNS:node2.example.test", "IP Address:10.88.0.12"} <= sans(pki / "pki-node2.crt")
    for name, cn in CLIENTS.items():
        cert = pki / f"{name}.crt"
        assert verifies(ca, cert, "sslclient"), name
        assert not verifies(ca, cert, "sslserver"), f"{name}: a client certificate serves"
        assert f"Subject: CN = {cn}" in text(cert)
        assert sans(cert) == set()


def test_keys_are_private_and_certificates_are_published(fleet: tuple[Path, dict]) -> None:
    pki, result = fleet
    assert stat.S_IMODE(pki.stat().st_mode) == 0o700
    keys = sorted(p.stem for p in pki.glob("*.key"))
    assert keys == sorted(["ca", *NODES, *CLIENTS])
    for key in pki.glob("*.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key.name
        assert "ASN1 OID: prime256v1" in openssl("pkey", "-in", str(key), "-noout", "-text")
    for host in [*NODES, "pki-gw", "pki-mon"]:
        assert result["facts"][host] == {
            "enabled": True, "ca": f"{pki}/ca.crt", "cert": f"{pki}/{host}.crt",
            "key": f"{pki}/{host}.key", "client_cert": f"{pki}/controller.crt",
            "client_key": f"{pki}/controller.key"}  # fmt: skip
        assert Path(result["facts"][host]["cert"]).is_file()


def test_a_second_run_changes_nothing(fleet: tuple[Path, dict], tmp_path: Path) -> None:
    pki = copy_of(fleet[0], tmp_path)
    before = serials(pki)
    again = play(tmp_path, pki)
    assert set(again["changed"]) == {*NODES, "pki-gw", "pki-mon"}
    assert set(again["changed"].values()) == {0}, again["changed"]
    assert serials(pki) == before


def test_a_certificate_near_its_end_is_renewed(fleet: tuple[Path, dict], tmp_path: Path) -> None:
    """In batches of one host (a rollout's serial 1): each host's certificate renewed in its
    batch; the CA and the controller's certificate looked at once in the run, not per batch."""
    pki = copy_of(fleet[0], tmp_path)
    before = serials(pki)
    # 365 days remain of each host's certificate: fewer than 366
    result = play(tmp_path, pki, serial=1, fleet_pki_cert_days=400, fleet_pki_renew_days=366)
    after = serials(pki)
    assert after["ca"] == before["ca"]
    assert all(after[name] != before[name] for name in before if name != "ca"), (before, after)
    assert verifies(pki / "ca.crt", pki / "pki-node1.crt", "sslserver")
    assert verifies(pki / "ca.crt", pki / "controller.crt", "sslclient")
    out = result["stdout"]
    assert out.count("PLAY [all]") == len(NODES) + 2  # four batches
    assert ran(out, "Make the CA's key") == 1, out[-3000:]  # skipped in batches 2-4
    assert ran(out, "Sign the certificate of controller") == 1, out[-3000:]


def test_a_changed_name_reissues_that_certificate(fleet: tuple[Path, dict], tmp_path: Path) -> None:
    pki = copy_of(fleet[0], tmp_path)
    before = serials(pki)
    result = play(tmp_path, pki, inventory(node1_address="node1.lan.test"))
    after = serials(pki)
    assert after["pki-node1"] != before["pki-node1"]
    assert "DNS:node1.lan.test" in sans(pki / "pki-node1.crt")
    assert "IP Address:10.88.1.11" not in sans(pki / "pki-node1.crt")
    assert {k: v for k, v in after.items() if k != "pki-node1"} == {
        k: v for k, v in before.items() if k != "pki-node1"}
    assert result["changed"]["pki-node2"] == 0


def ran(out: str, task: str) -> int:
    """How many times the role's task ran (ok or changed; a skipped one prints its header)."""
    header = re.escape(f"TASK [instinct.vllm.fleet_pki : {task}]")
    return len(re.findall(header + r" \**\n(?:ok|changed): ", out))


def site_ca(tmp_path: Path) -> tuple[str, str]:
    key, crt = tmp_path / "site.key", tmp_path / "site.crt"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(key), "-out", str(crt), "-days", "3650", "-subj", "/CN=Site CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    return crt.read_text(), key.read_text()


def test_the_sites_ca_signs_when_given(fleet: tuple[Path, dict], tmp_path: Path) -> None:
    pki = copy_of(fleet[0], tmp_path)
    certificate, key = site_ca(tmp_path)
    play(tmp_path, pki, fleet_pki_ca_certificate=certificate, fleet_pki_ca_private_key=key)
    assert (pki / "ca.crt").read_text().strip() == certificate.strip()
    for name in [*NODES, *CLIENTS]:
        assert verifies(tmp_path / "site.crt", pki / f"{name}.crt", "sslclient"), name
        assert not verifies(fleet[0] / "ca.crt", pki / f"{name}.crt", "sslclient"), name
    assert key.strip() not in "".join(p.read_text() for p in pki.iterdir() if p.name != "ca.key")


def test_disabled_writes_nothing_and_publishes_disabled(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    result = play(tmp_path, pki, instinct_vllm_tls=False)
    assert not pki.exists()
    assert set(result["changed"].values()) == {0}
    for host in [*NODES, "pki-gw", "pki-mon"]:
        assert result["facts"][host] == {"enabled": False, "ca": "", "cert": "", "key": "",
                                         "client_cert": "", "client_key": ""}  # fmt: skip


def test_the_publish_entry_point_writes_nothing(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    result = play(tmp_path, pki, entry="publish")
    assert not pki.exists()
    assert result["facts"]["pki-gw"] == {
        "enabled": True, "ca": f"{pki}/ca.crt", "cert": f"{pki}/pki-gw.crt",
        "key": f"{pki}/pki-gw.key", "client_cert": f"{pki}/controller.crt",
        "client_key": f"{pki}/controller.key"}  # fmt: skip


BAD = {
    "certificate alone": ({"fleet_pki_ca_certificate": "PEM"}, "fleet_pki_ca_private_key is empty"),
    "key alone": ({"fleet_pki_ca_private_key": "PEM"}, "fleet_pki_ca_certificate is empty"),
    "zero lifetime": ({"fleet_pki_cert_days": 0}, "must be positive"),
    "negative renewal": ({"fleet_pki_renew_days": -1}, "must be positive"),
    "renewal as long as the lifetime": (
        {"fleet_pki_cert_days": 30, "fleet_pki_renew_days": 30}, "fleet_pki_renew_days <"),
    "certificate outlives the CA": (
        {"fleet_pki_ca_days": 300, "fleet_pki_cert_days": 365}, "< fleet_pki_ca_days"),
    "valid": ({}, ""),
}


def test_bad_inputs_fail_before_any_file(tmp_path: Path) -> None:
    play_file = tmp_path / "play.yml"
    play_file.write_text(playbook_text(tmp_path).replace(
        "    - test_facts: {facts: \"{{ test_network_facts }}\"}\n"
        "      when: test_network_facts is defined\n", ""))
    cases = {name: {**over, "instinct_vllm_tls": True, "fleet_pki_dir": str(tmp_path / f"pki{n}")}
             for n, (name, (over, _message)) in enumerate(BAD.items())}  # fmt: skip
    results = run_cases(play_file, cases)
    for n, (name, (_over, message)) in enumerate(BAD.items()):
        if not message:
            assert not results[name].failed, results[name].output
            assert (tmp_path / f"pki{n}" / "ca.crt").is_file()
            continue
        assert results[name].failed, name
        assert message in results[name].output, f"{name}: {results[name].output}"
        assert not (tmp_path / f"pki{n}").exists(), f"{name}: a file was written"
