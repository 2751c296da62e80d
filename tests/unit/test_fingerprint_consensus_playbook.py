"""The gate fingerprint's consensus through a real ansible-playbook, as role rollout runs it: a
play that publishes every node's serving facts (as the rollout's first play does), then a
play with serial 1 over three local nodes that marks each node as changed (as the rollout's
main.yml does) and includes role rollout's gates/fingerprint.yml. Each node's unit (its running
release) names a stand-in endpoint (tests/unit/fingerprint_endpoint.py); the peers are the nodes
the play has not reached yet, scored on their own host (delegate_to). node-a is the changed node
whose answers moved: it fails naming consensus against node-b (the one peer it asks:
instinct_vllm_fingerprint_consensus_peers 1), records no baseline.
node-b agrees with node-c; node-c, the last, has no peer left: consensus skipped, said so.
playbooks/verify.yml -e vllm_verify_fingerprint=true runs the same gate with no consensus.
Each runs twice: over plain HTTP, and with mTLS on (instinct_vllm_tls), where every stand-in
wants a client certificate of the fleet CA and each node, asking its own endpoint or scoring as a
peer, shows its own certificate (vllm_service_resolved.tls, from vllm_service_tls_dir)."""

from __future__ import annotations

import json
import shutil
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml
from fingerprint_endpoint import KEY, stand_in
from local_play import ROOT, run_local_playbook
from tls_pki import Pki, make_pki

UNIT = ("[Service]\nExecStart=/usr/bin/python3 /w --status-port 0 -- {venv}/bin/vllm serve "
        "/srv/models/demo-{rev} --dtype float32 --host 127.0.0.1 --port {port} "
        "--served-model-name demo{tls}\n")
# With mTLS, the flags role vllm_service adds (its _vllm_service_tls_flags)
TLS_FLAGS = " --ssl-certfile {d}/node.crt --ssl-keyfile {d}/node.key --ssl-ca-certs {d}/ca.crt " \
            "--ssl-cert-reqs 2"
PLAY = """
- name: Publish every node's serving facts (the rollout's first play does, through role rollout)
  hosts: all
  gather_facts: false
  roles:
    - role: instinct.vllm.vllm_service_facts

- name: A rollout's gate fingerprint, one node at a time
  hosts: all
  gather_facts: false
  serial: 1
  tasks:
    - name: Mark the node as changed by this rollout (as role rollout's main.yml)
      ansible.builtin.set_fact:
        _rollout_touched: true
    - name: Gate the node, as the rollout's block does (its rescue says why it failed)
      block:
        - name: The gate
          ansible.builtin.include_role:
            name: instinct.vllm.rollout
            tasks_from: gates/fingerprint.yml
      rescue:
        - name: Say why
          ansible.builtin.debug:
            msg: "GATE FAILED {{ inventory_hostname }}: {{ ansible_failed_result.msg }}"
"""


def _node(tmp: Path, name: str, url: str, rev: str, pki: Pki | None) -> dict[str, Any]:
    venv = tmp / name / "venv"
    (venv / "lib" / "python3.11" / "site-packages" / "vllm-0.6.6.dist-info").mkdir(parents=True)
    unit = tmp / name / "vllm.service"
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    tls = tmp / name / "tls"
    unit.write_text(UNIT.format(venv=venv, rev=rev, port=port,
                                tls=TLS_FLAGS.format(d=tls) if pki is not None else ""))
    node = {"instinct_vllm_fingerprint_base_url": url,
            "instinct_vllm_fingerprint_unit_file": str(unit),
            "instinct_vllm_fingerprint_baseline_key": f"key-{name}"}
    if pki is not None:  # the node's files where role vllm_service puts them (the unit's flags)
        tls.mkdir()
        for src, dest in ((pki.ca, "ca.crt"), (pki.server_cert, "node.crt"),
                          (pki.server_key, "node.key")):
            shutil.copyfile(src, tls / dest)
        node["vllm_service_tls_dir"] = str(tls)
    return node


def _controller_pki(tmp: Path, pki: Pki) -> dict[str, Any]:
    """The controller's side of mTLS: the CA and its client certificate in fleet_pki_dir (where
    role fleet_pki keeps them), which the gates asking a node from the controller show."""
    directory = tmp / "fleet-pki"
    directory.mkdir()
    for src, dest in ((pki.ca, "ca.crt"), (pki.client_cert, "controller.crt"),
                      (pki.client_key, "controller.key")):
        shutil.copyfile(src, directory / dest)
    return {"instinct_vllm_tls": True, "fleet_pki_dir": str(directory)}


def _inventory(tmp: Path, hosts: dict[str, dict[str, Any]], pki: Pki | None) -> str:
    common = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "instinct_vllm_stack": "cpu",
        "vllm_venv_path": str(Path(sys.executable).parent.parent),
        "vllm_service_served_model_name": "demo", "vllm_service_api_key": KEY,
        "vllm_service_flags": {"dtype": "float32"},
        "instinct_vllm_fingerprint_baseline_dir": str(tmp / "baselines"),
        "instinct_vllm_fingerprint_references": ["baseline", "consensus"],
        # the rollout's nodes: the consensus asks those of them not changed yet
        "instinct_vllm_hosts": "all",
        **(_controller_pki(tmp, pki) if pki is not None else {}),
    }
    path = tmp / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": common}}))
    return str(path)


@pytest.fixture(scope="module", params=["http", "mtls"])
def rolled(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[Any, Path, str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp(f"consensus-{request.param}")
    pki = make_pki(tmp) if request.param == "mtls" else None
    with ExitStack() as endpoints:
        moved, b, c = (endpoints.enter_context(stand_in(shift=shift, pki=pki))[0]
                       for shift in (0.01, 0.0, 0.0))
        hosts = {"node-a": {**_node(tmp, "node-a", moved, "r2", pki),
                            "instinct_vllm_fingerprint_consensus_peers": 1},
                 "node-b": _node(tmp, "node-b", b, "r1", pki),
                 "node-c": _node(tmp, "node-c", c, "r1", pki)}
        inventory = _inventory(tmp, hosts, pki)
        (tmp / "rollout.yml").write_text(PLAY)
        run = run_local_playbook(tmp / "rollout.yml", {}, inventory=inventory, timeout=600)
        records = {n: json.loads((tmp / "baselines" / "nodes" / f"{n}.json").read_text())
                   for n in hosts}  # before verify.yml writes node-b's again
        variables = {"instinct_vllm_hosts": "node-b", "vllm_verify_fingerprint": True,
                     "vllm_verify_checks": []}
        verify = run_local_playbook(ROOT / "playbooks" / "verify.yml", variables,
                                    inventory=inventory, timeout=600)
    return run, tmp, verify.stdout + verify.stderr, records


def test_the_changed_node_whose_answers_moved_fails_naming_consensus(rolled) -> None:
    run, tmp, _verify, records = rolled
    record = records["node-a"]
    assert not record["ok"] and record["verdicts"]["consensus"]["ok"] is False
    assert record["consensus"]["status"] == "failed"
    assert list(record["consensus"]["peers"]) == ["node-b"]  # the first of node-b, node-c
    assert record["consensus"]["summary"].startswith("disagrees with node-b (against node-b")
    assert record["consensus"]["peers"]["node-b"]["claims"]["model"] == "/srv/models/demo-r1"
    assert record["meta"]["claims"]["model"] == "/srv/models/demo-r2"
    assert not (tmp / "baselines" / "key-node-a.json").exists()  # a verdict failed: no baseline
    out = " ".join(run.stdout.split())
    assert "GATE FAILED node-a: fingerprint of node-a differs from its reference:" in out
    assert "consensus: disagrees with node-b (against node-b: 0/32 prompts" in out


def test_an_unchanged_peer_agrees_and_the_last_node_has_none_left(rolled) -> None:
    _run, tmp, _verify, records = rolled
    b = records["node-b"]
    assert b["ok"] and b["consensus"]["status"] == "ok"
    assert list(b["consensus"]["peers"]) == ["node-c"]
    assert b["verdicts"]["consensus"]["max_abs"] == 0.0
    assert (tmp / "baselines" / "key-node-b.json").exists()  # every verdict passed
    c = records["node-c"]
    assert c["ok"] and c["consensus"]["status"] == "skipped" and "consensus" not in c["verdicts"]
    assert c["consensus"]["summary"] == ("skipped: no node is left unchanged to agree with "
                                         "(outside a rollout, or its last batch)")
    assert (tmp / "baselines" / "key-node-c.json").exists()  # a skipped consensus is no verdict


def test_verify_runs_the_fingerprint_on_request_without_consensus(rolled) -> None:
    _run, tmp, verify, _records = rolled
    out = " ".join(verify.split())
    assert "node-b: baseline: 32/32 prompts within tolerance" in out, verify[-3000:]
    assert "consensus: skipped: no node is left unchanged" in out
    after = json.loads((tmp / "baselines" / "nodes" / "node-b.json").read_text())
    assert after["ok"] and after["consensus"]["status"] == "skipped"  # the last fingerprint


def test_a_peers_unit_is_the_one_the_peer_publishes(tmp_path) -> None:
    """The consensus reads each peer's own unit: its host variable
    instinct_vllm_fingerprint_unit_file when the inventory sets one, else the unit file role
    vllm_service published on the peer (vllm_service_resolved, here an inventory stand-in for
    the fact) - never this node's."""
    tasks = ROOT / "roles" / "fingerprint_gate" / "tasks"
    task = yaml.safe_load((tasks / "consensus.yml").read_text())[0]
    expression = task["instinct.vllm.fingerprint"]["unit_file"]
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {
        # this node's own unit (role fingerprint_gate's default for it)
        "node": {**local, "vllm_service_resolved": {"unit_file": "/node/vllm.service"},
                 "instinct_vllm_fingerprint_unit_file": "/node/vllm.service"},
        "peer-published": {**local,
                           "vllm_service_resolved": {"unit_file": "/peer/vllm-b.service"}},
        "peer-hostvar": {**local, "vllm_service_resolved": {"unit_file": "/peer/vllm.service"},
                         "instinct_vllm_fingerprint_unit_file": "/srv/peer/vllm.service"},
    }  # fmt: skip
    out = tmp_path / "units.json"
    play = [{"hosts": "node", "gather_facts": False, "tasks": [{
        "ansible.builtin.copy": {"dest": str(out), "mode": "0600", "content": (
            "{{ dict(_peers | zip(_peers | map('extract', _units))) | to_json }}")},
        "vars": {"_peers": ["peer-published", "peer-hostvar"],
                 "_units": {p: expression.replace("_fingerprint_gate_peer", f"'{p}'")
                            for p in ("peer-published", "peer-hostvar")}},
    }]}]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    run = run_local_playbook(tmp_path / "play.yml", {}, inventory=str(tmp_path / "hosts.yml"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert json.loads(out.read_text()) == {"peer-published": "/peer/vllm-b.service",
                                           "peer-hostvar": "/srv/peer/vllm.service"}
