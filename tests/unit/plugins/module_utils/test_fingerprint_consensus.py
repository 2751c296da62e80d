"""Consensus (module_utils/_fingerprint/consensus.py and the module's consensus_probe /
consensus_of): what a unit claims, when a peer is eligible, and a changed node's probe scored by
stand-in peers (tests/unit/fingerprint_endpoint.py) - the same answers pass, moved ones fail, a
peer claiming other answers is skipped with the reason. The real vLLM is tests/integration's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.instinct.vllm.plugins.module_utils import fingerprint as F
from ansible_collections.instinct.vllm.plugins.modules import fingerprint as module
from fingerprint_endpoint import KEY, stand_in

ROOT = Path(__file__).resolve().parents[4]
PROMPTS = yaml.safe_load((ROOT / "files" / "fingerprint" / "prompts.yml").read_text())["prompts"]
NUMERICS = module.NUMERICS
# The unit role vllm_service writes (templates/vllm.service.j2, filter systemd_argv).
UNIT = """[Service]
Type=notify
Environment="VLLM_CPU_KVCACHE_SPACE=1"
ExecStart=/usr/bin/python3 /usr/local/lib/instinct-vllm/instinct-vllm-watchdog --stall-timeout 60 \
--status-port 8001 -- {venv}/bin/vllm serve {model} --distributed-executor-backend uni {flags}\
--host {host} --max-model-len 512 --max-num-seqs 8 --port {port} --served-model-name {name}
"""


def unit(tmp: Path, port: int, *, name: str = "gptoss-legacy-demo", host: str = "0.0.0.0",
         flags: str = "--dtype float32 --enforce-eager ", torch: str = "2.5.1+cpu",
         model: str = "/srv/models/demo-r1", label: str = "node") -> str:
    """A unit file and the venv it names (dist-info directories only)."""
    venv = tmp / label / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    for dist in ("vllm-0.6.6.post1", f"torch-{torch}", "transformers-4.47.1", "openai-1.0.0"):
        (site / f"{dist}.dist-info").mkdir(parents=True, exist_ok=True)
    path = tmp / label / "vllm.service"
    path.write_text(UNIT.format(venv=venv, model=model, flags=flags, host=host, port=port,
                                name=name).replace("\\\n", ""))
    return str(path)


def test_unit_claims_read_the_running_release(tmp_path: Path) -> None:
    claims = F.read_claims(unit(tmp_path, 8000), NUMERICS)
    assert claims.served_model_name == "gptoss-legacy-demo"
    assert claims.model == "/srv/models/demo-r1"
    assert claims.url == "http://127.0.0.1:8000"  # listens on every address: loopback
    assert claims.flags == {"dtype": "float32", "enforce-eager": True}  # numerics only
    assert claims.packages == {"torch": "2.5.1+cpu", "transformers": "4.47.1",
                               "vllm": "0.6.6.post1"}


def test_unit_claims_of_the_api_server_launcher_and_quoted_words() -> None:
    text = ('ExecStart=/w -- /v/bin/python -m vllm.entrypoints.openai.api_server --model '
            '"/srv/models/a b" --host 10.0.0.5 --port 9000 --hf-overrides "{\\"x\\":1}" '
            '--kv-cache-dtype fp8\n')
    claims = F.unit_claims(text, NUMERICS, packages=False)
    assert claims.model == "/srv/models/a b" and claims.served_model_name == "/srv/models/a b"
    assert claims.url == "http://10.0.0.5:9000" and claims.flags == {"kv-cache-dtype": "fp8"}
    with pytest.raises(ValueError, match="neither"):
        F.unit_claims("ExecStart=/usr/bin/sleep 5\n", NUMERICS)


def _claims(**over: Any) -> dict[str, Any]:
    base = {"served_model_name": "m", "model": "/a", "url": "u", "flags": {"dtype": "float32"},
            "packages": {"vllm": "0.6.6"}}
    return {**base, **over}


def test_a_peer_is_eligible_only_with_the_same_name_flags_and_stack() -> None:
    assert F.ineligible(_claims(), _claims(model="/b", url="v")) == ""  # another directory: ok
    assert "served model name" in F.ineligible(_claims(), _claims(served_model_name="n"))
    assert F.ineligible(_claims(), _claims(flags={"dtype": "float32", "kv-cache-dtype": "fp8"})) \
        == "numerics flags differ: kv-cache-dtype (unset) vs fp8"
    assert F.ineligible(_claims(), _claims(packages={"vllm": "0.7.0"})) \
        == "stack differs: vllm 0.6.6 vs 0.7.0"


def run_module(capsys: pytest.CaptureFixture[str], **args: object) -> dict[str, Any]:
    params = {"api_key": KEY, "prompts": PROMPTS, "dtype": "float32",
              "_ansible_check_mode": True, **args}
    with patch_module_args(params), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def _probe(capsys, tmp_path: Path, url: str) -> dict[str, Any]:
    node = run_module(capsys, unit_file=unit(tmp_path, _port(url), model="/srv/models/demo-r2"),
                      consensus_probe=True)
    assert node["ok"] and node["probe"]["meta"]["claims"]["model"] == "/srv/models/demo-r2"
    return node["probe"]


def test_the_same_answers_from_an_unchanged_peer_pass(capsys, tmp_path: Path) -> None:
    with stand_in() as (node_url, _node), stand_in() as (peer_url, peer):
        probe = _probe(capsys, tmp_path, node_url)
        result = run_module(capsys, consensus_of=probe,
                            unit_file=unit(tmp_path, _port(peer_url), label="peer"))
    assert result["ok"] and not result.get("failed")
    consensus = result["consensus"]
    assert consensus["status"] == "ok" and consensus["verdict"]["max_abs"] == 0.0
    assert consensus["claims"]["model"] == "/srv/models/demo-r1"
    forced = [b for p, b in peer.seen if p == "/v1/completions" and b["max_tokens"] == 1]
    assert forced and forced[0]["prompt"][0] == probe["scored"][0]["prompt_ids"] + [3, 3]
    assert all(b["model"] == "gptoss-legacy-demo" for _p, b in peer.seen)  # its unit's name


def test_moved_answers_fail_the_consensus(capsys, tmp_path: Path) -> None:
    with stand_in() as (node_url, _node), stand_in(shift=0.01) as (peer_url, _peer):
        probe = _probe(capsys, tmp_path, node_url)
        result = run_module(capsys, consensus_of=probe,
                            unit_file=unit(tmp_path, _port(peer_url), label="peer"))
    assert not result["ok"] and not result.get("failed")  # the caller judges
    assert result["consensus"]["status"] == "failed"
    assert result["consensus"]["verdict"]["max_abs"] == pytest.approx(0.01)
    assert "FAILED" in result["msg"]


def test_a_peer_with_a_shorter_context_scores_the_prompts_that_fit_it(capsys, tmp_path):
    with stand_in() as (node_url, _node), stand_in(max_model_len=50) as (peer_url, _peer):
        probe = _probe(capsys, tmp_path, node_url)
        result = run_module(capsys, consensus_of=probe,
                            unit_file=unit(tmp_path, _port(peer_url), label="peer"))
    verdict = result["consensus"]["verdict"]
    assert result["ok"] and result["consensus"]["status"] == "ok", result["msg"]
    assert verdict["left_out"] and len(verdict["prompts"]) + len(verdict["left_out"]) == len(
        probe["scored"])


def test_a_peer_no_prompt_fits_is_skipped_with_the_reason(capsys, tmp_path):
    with stand_in() as (node_url, _node), stand_in(max_model_len=20) as (peer_url, peer):
        probe = _probe(capsys, tmp_path, node_url)
        result = run_module(capsys, consensus_of=probe,
                            unit_file=unit(tmp_path, _port(peer_url), label="peer"))
    assert result["ok"] and result["consensus"]["status"] == "skipped"
    assert "no prompt fits the peer" in result["consensus"]["reason"]
    assert peer.seen == []


@pytest.mark.parametrize(("peer_unit", "reason"), [
    ({"name": "other"}, "served model name"),
    ({"flags": "--dtype bfloat16 --enforce-eager "}, "numerics flags differ: dtype"),
    ({"torch": "2.6.0+cpu"}, "stack differs: torch 2.5.1+cpu vs 2.6.0+cpu"),
])
def test_a_peer_claiming_other_answers_is_skipped_unasked(capsys, tmp_path, peer_unit, reason):
    with stand_in() as (node_url, _node), stand_in() as (peer_url, peer):
        probe = _probe(capsys, tmp_path, node_url)
        result = run_module(capsys, consensus_of=probe,
                            unit_file=unit(tmp_path, _port(peer_url), label="peer", **peer_unit))
    assert result["ok"] and result["consensus"]["status"] == "skipped"
    assert reason in result["consensus"]["reason"] and result["consensus"]["verdict"] is None
    assert peer.seen == []


def test_the_probe_scores_the_nodes_own_greedy_tokens_when_a_reference_had_others(
        capsys, tmp_path: Path) -> None:
    """With a reference (here a baseline whose continuation is [4, 4]) the fingerprint scored
    the reference's tokens; the probe teacher-forces the node's greedy ones ([3, 3])."""
    with stand_in() as (url, handler):
        fp = F.endpoint_fingerprint(F.Endpoint(url, KEY, "demo", 30), F.parse_prompts(PROMPTS))
        other = fp.as_dict()
        for s in other["scored"]:
            s["ref_ids"] = [4, 4]
        result = run_module(capsys, baseline=other, consensus_probe=True,
                            unit_file=unit(tmp_path, _port(url)))
    assert all(s["ref_ids"] == [4, 4] for s in result["fingerprint"]["scored"])
    assert all(s["ref_ids"] == [3, 3] and len(s["logprobs"]) == len(s["top_ids"])
               for s in result["probe"]["scored"])
    assert handler.seen


def test_consensus_needs_the_unit(capsys) -> None:
    result = run_module(capsys, base_url="http://127.0.0.1:9/v1", model="m", consensus_probe=True)
    assert result["failed"] and "unit_file" in result["msg"]
    result = run_module(capsys, consensus_of={"format": 1})
    assert result["failed"] and "unit_file" in result["msg"]
