"""Acceptance's check fingerprint and playbooks/fingerprint.yml through a real ansible-playbook
against stand-in vLLM endpoints (tests/unit/fingerprint_endpoint.py), one run each for several
nodes: the node whose answers match the fleet baseline passes; the node whose answers moved
fails acceptance naming check fingerprint (its report written first); a model too large for
the node's RAM fails it, naming how to judge against the baseline alone; a first node with no
baseline judges nothing and records its fingerprint as the baseline. The fingerprint runs as
root (become), through role fingerprint_gate: the same role makes playbooks/fingerprint.yml
fail the moved node. The real vLLM cases are the serving scenario's and tests/integration's."""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.instinct.vllm.plugins.module_utils import fingerprint as F
from fingerprint_endpoint import KEY, stand_in
from local_play import ROOT, run_local_playbook
from test_acceptance_playbook import RECORD_BECOME, login_user

PROMPTS = yaml.safe_load((ROOT / "files" / "fingerprint" / "prompts.yml").read_text())["prompts"]


@pytest.fixture(scope="module")
def endpoints() -> Iterator[dict[str, str]]:
    """A stand-in endpoint and one whose log-probabilities are all 0.01 higher."""
    with stand_in() as (good, _good_handler), stand_in(shift=0.01) as (moved, _moved_handler):
        yield {"good": good, "moved": moved}


def _too_large(path: Path) -> str:
    """A checkpoint whose safetensors header declares 10^13 parameters (no data)."""
    path.mkdir(parents=True)
    raw = json.dumps({"w": {"dtype": "F32", "shape": [10**7, 10**6], "data_offsets": [0, 0]}})
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw.encode())
    return str(path)


def _baseline(directory: Path, key: str, url: str) -> None:
    """The fleet baseline of `key`: the stand-in's own fingerprint, as the gate records it."""
    directory.mkdir(parents=True, exist_ok=True)
    fp = F.endpoint_fingerprint(F.Endpoint(url, KEY, "demo", 30), F.parse_prompts(PROMPTS))
    (directory / f"{key}.json").write_text(json.dumps(fp.as_dict()))


def _play(tmp: Path, playbook: str, hosts: dict[str, dict[str, Any]],
          flags: list[str]) -> tuple[Any, list[str]]:
    """`playbook` on local `hosts` (inventory host vars), become through the recorder."""
    user, group = login_user()
    (tmp / "become").mkdir(exist_ok=True)
    (tmp / "become" / "record.py").write_text(RECORD_BECOME)
    log = tmp / "become.log"
    common = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "ansible_become_method": "record", "instinct_vllm_stack": "cpu",
        "vllm_venv_path": str(Path(sys.executable).parent.parent), "vllm_service_user": user,
        "vllm_service_supplementary_groups": [group], "vllm_service_served_model_name": "demo",
        "vllm_service_api_key": KEY, "vllm_service_flags": {"dtype": "float32"},
        "instinct_vllm_fingerprint_baseline_dir": str(tmp / "baselines"),
        "instinct_vllm_fingerprint_cache_dir": str(tmp / "references"),
        "instinct_vllm_fingerprint_references": ["baseline"],
        "instinct_vllm_fingerprint_baseline_key": "fleet",
        "acceptance_report_dir": str(tmp / "reports"),
    }
    inventory = tmp / f"{Path(playbook).stem}-hosts.yml"
    inventory.write_text(yaml.safe_dump(
        {"all": {"hosts": hosts, "vars": common}}, default_flow_style=False))
    env = {"ANSIBLE_BECOME_PLUGINS": str(tmp / "become"), "ANSIBLE_BECOME_ALLOW_SAME_USER": "1",
           "RECORD_BECOME_LOG": str(log)}
    run = run_local_playbook(ROOT / "playbooks" / playbook, {"instinct_vllm_hosts": "all"},
                             inventory=str(inventory), flags=flags, timeout=600, env=env)
    return run, (log.read_text().split() if log.exists() else [])


@pytest.fixture(scope="module")
def accepted(endpoints: dict[str, str],
             tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, list[str], Path]:
    tmp = tmp_path_factory.mktemp("acceptance-fingerprint")
    _baseline(tmp / "baselines", "fleet", endpoints["good"])
    hosts = {
        "node-ok": {"instinct_vllm_fingerprint_base_url": endpoints["good"]},
        "node-moved": {"instinct_vllm_fingerprint_base_url": endpoints["moved"]},
        "node-big": {"instinct_vllm_fingerprint_base_url": endpoints["good"],
                     "instinct_vllm_fingerprint_references": ["transformers", "baseline"],
                     "instinct_vllm_fingerprint_model_path": _too_large(tmp / "big")},
        "node-first": {"instinct_vllm_fingerprint_base_url": endpoints["good"],
                       "instinct_vllm_fingerprint_baseline_key": "new"},
    }
    run, became = _play(tmp, "acceptance.yml", hosts, ["--tags", "fingerprint"])
    return run, became, tmp


def _check(tmp: Path, node: str) -> dict[str, Any]:
    report = json.loads((tmp / "reports" / f"{node}.json").read_text())
    assert list(report["checks"]) == ["fingerprint"], report["summary"]  # --tags fingerprint
    return report


def test_the_node_matching_the_baseline_passes(accepted) -> None:
    run, _became, tmp = accepted
    report = _check(tmp, "node-ok")
    check = report["checks"]["fingerprint"]
    assert report["status"] == "ok" and check["status"] == "ok", check["reason"]
    assert check["reason"].startswith("baseline: 32/32 prompts within tolerance")
    assert check["detail"]["judged"] == ["baseline"] and check["detail"]["baseline_found"]
    assert "node-ok: fingerprint=ok" in " ".join(run.stdout.split())


def test_the_node_whose_answers_moved_fails_acceptance_naming_fingerprint(accepted) -> None:
    run, _became, tmp = accepted
    report = _check(tmp, "node-moved")
    assert report["status"] == "failed"
    assert report["failures"][0].startswith("fingerprint: baseline: 0/32 prompts within")
    verdict = report["checks"]["fingerprint"]["detail"]["verdicts"]["baseline"]
    assert verdict["max_abs"] == pytest.approx(0.01) and len(verdict["failed_prompts"]) == 32
    assert run.returncode != 0
    assert "acceptance failed on node-moved: fingerprint: baseline:" in " ".join(run.stdout.split())


def test_a_model_too_large_for_the_ram_fails_naming_the_baseline_only_way(accepted) -> None:
    _run, _became, tmp = accepted
    report = _check(tmp, "node-big")
    check = report["checks"]["fingerprint"]
    assert report["status"] == "failed" and check["status"] == "failed"
    assert check["reason"].startswith("not judged against transformers: the transformers "
                                      f"reference of {tmp / 'big'} needs about")
    assert check["reason"].endswith("set instinct_vllm_fingerprint_references: [baseline]")


def test_a_first_node_judges_nothing_and_becomes_the_baseline(accepted) -> None:
    _run, _became, tmp = accepted
    report = _check(tmp, "node-first")
    check = report["checks"]["fingerprint"]
    assert report["status"] == "skipped" and check["status"] == "skipped"
    assert "no fleet baseline for key new yet: this node's fingerprint is now that" in check[
        "reason"]
    recorded = json.loads((tmp / "baselines" / "new.json").read_text())
    assert recorded["meta"]["node"] == "node-first"


def test_the_fingerprint_ran_as_root_once_per_node(accepted) -> None:
    _run, became, _tmp = accepted
    assert became == ["root"] * 4


def test_the_fingerprint_playbook_gates_with_the_same_role(endpoints, tmp_path) -> None:
    _baseline(tmp_path / "baselines", "fleet", endpoints["good"])
    hosts = {"node-ok": {"instinct_vllm_fingerprint_base_url": endpoints["good"]},
             "node-moved": {"instinct_vllm_fingerprint_base_url": endpoints["moved"]}}
    run, _became = _play(tmp_path, "fingerprint.yml", hosts, [])
    out = " ".join(run.stdout.split())
    assert run.returncode != 0
    assert "fingerprint of node-moved differs from its reference: baseline: 0/32" in out
    assert "node-ok: baseline: 32/32 prompts within tolerance" in out
