"""The module instinct.vllm.fingerprint and the client behind it against a stand-in endpoint
that speaks vLLM's answers (prompt_logprobs per position, /tokenize, return_token_ids): what it
sends, what it reads, the baseline verdict and a shifted endpoint failing it. The real vLLM is
in tests/unit/test_fingerprint_vllm.py."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.instinct.vllm.plugins.modules import fingerprint
from fingerprint_endpoint import KEY, Handler, stand_in

ROOT = Path(__file__).resolve().parents[4]
PROMPTS = yaml.safe_load((ROOT / "files" / "fingerprint" / "prompts.yml").read_text())["prompts"]


@pytest.fixture
def served() -> Iterator[tuple[str, type[Handler]]]:
    """The stand-in endpoint's URL and its handler class (`seen`, `shift`)."""
    with stand_in() as running:
        yield running


@pytest.fixture
def endpoint(served: tuple[str, type[Handler]]) -> str:
    return served[0]


def run(capsys: pytest.CaptureFixture[str], base_url: str, **args: object) -> dict[str, Any]:
    params = {"base_url": base_url, "api_key": KEY, "model": "demo", "prompts": PROMPTS,
              "dtype": "float32", "_ansible_check_mode": True, **args}
    with patch_module_args(params), pytest.raises(SystemExit):
        fingerprint.main()
    return json.loads(capsys.readouterr().out)


def test_without_a_reference_it_records_then_a_baseline_passes(served, capsys):
    endpoint, handler = served
    first = run(capsys, endpoint)
    assert first["ok"] and first["verdicts"] == {} and not first.get("failed")
    fp = first["fingerprint"]
    assert len(fp["scored"]) == len(PROMPTS)
    assert all(s["ref_ids"] == [3, 3] and s["greedy_ids"] == [3, 3] for s in fp["scored"])
    chats = [b for p, b in handler.seen if p == "/v1/chat/completions"]
    assert len(chats) == sum(p["kind"] == "chat" for p in PROMPTS)
    assert all(b["temperature"] == 0.0 and b["return_token_ids"] for b in chats)
    forced = [b for p, b in handler.seen if p == "/v1/completions" and b["max_tokens"] == 1]
    assert forced and all(b["prompt_logprobs"] == 2 for b in forced)
    again = run(capsys, endpoint, baseline=fp)
    assert again["ok"] and again["verdicts"]["baseline"]["max_abs"] == 0.0


def test_a_shifted_endpoint_fails_the_baseline(served, capsys):
    endpoint, handler = served
    fp = run(capsys, endpoint)["fingerprint"]
    handler.shift = 0.01
    result = run(capsys, endpoint, baseline=fp)
    assert result["failed"] and not result["ok"]
    verdict = result["verdicts"]["baseline"]
    assert verdict["max_abs"] == pytest.approx(0.01)
    assert "FAILED" in result["msg"] and "max |delta logprob|" in result["msg"]
    tolerances = {"float32": {"max_abs": 0.1, "mean_abs": 0.1}}
    loose = run(capsys, endpoint, baseline=fp, tolerances=tolerances)
    assert loose["ok"]


def test_prompts_longer_than_the_servers_context_are_left_out_on_both_sides(capsys):
    """The stand-in refuses (HTTP 400) what does not fit its max_model_len, as vLLM does."""
    with stand_in() as (wide, _wide), stand_in(max_model_len=50) as (narrow, _narrow):
        fp = run(capsys, narrow)["fingerprint"]
        kept, gone = {s["id"] for s in fp["scored"]}, {x["id"] for x in fp["left_out"]}
        assert kept and gone and not kept & gone and kept | gone == {p["id"] for p in PROMPTS}
        assert all(x["tokens"] > 50 and x["max_model_len"] == 50 for x in fp["left_out"])
        baseline = run(capsys, wide)["fingerprint"]
        assert len(baseline["scored"]) == len(PROMPTS) and baseline["left_out"] == []
        judged = run(capsys, narrow, baseline=baseline)
    assert judged["ok"], judged["msg"]
    assert {x["id"] for x in judged["verdicts"]["baseline"]["left_out"]} == gone
    said = f"{len(gone)} prompts left out, longer than the server's max_model_len 50"
    assert said in judged["msg"]


def test_an_endpoint_no_prompt_fits_fails_with_the_reason(capsys):
    with stand_in(max_model_len=20) as (url, handler):
        result = run(capsys, url)
    assert result["failed"] and "no prompt fits the endpoint" in result["msg"]
    assert [p for p, _b in handler.seen if p != "/tokenize"] == []


def test_refused_reference_and_unknown_dtype_fail_with_the_reason(endpoint, capsys, tmp_path):
    result = run(capsys, endpoint, dtype="fp8")
    assert result["failed"] and "no tolerance" in result["msg"]
    result = run(capsys, endpoint, reference_model_path=str(tmp_path))
    assert result["failed"] and "no *.safetensors" in result["msg"]


def _too_large(path: Path) -> Path:
    """A checkpoint whose safetensors header declares 10^13 parameters (no data)."""
    path.mkdir(parents=True, exist_ok=True)
    raw = json.dumps({"w": {"dtype": "BF16", "shape": [10**7, 10**6], "data_offsets": [0, 0]}})
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw.encode())
    return path


def test_a_refused_reference_says_so_apart_from_other_failures(endpoint, capsys, tmp_path):
    result = run(capsys, endpoint, reference_model_path=str(_too_large(tmp_path / "big")))
    assert result["failed"] and result["refused"] is True
    assert "too large" in result["msg"] and "GiB" in result["msg"]
    other = run(capsys, endpoint, reference_model_path=str(tmp_path / "empty"))
    assert other["failed"] and other["refused"] is False


def test_an_unexpected_error_of_the_reference_fails_with_its_reason(endpoint, capsys, tmp_path,
                                                                    monkeypatch):
    """transformers 4.47 raises ImportError when asked to stream without accelerate: a failure
    whose msg names it (role fingerprint_gate publishes msg), not a module traceback."""
    def no_accelerate(*_args: object, **_kwargs: object) -> None:
        raise ImportError("Using `low_cpu_mem_usage=True` requires Accelerate")

    monkeypatch.setattr(fingerprint, "references", no_accelerate)
    result = run(capsys, endpoint, reference_model_path=str(tmp_path))
    assert result["failed"] and result["refused"] is False
    assert result["msg"] == "ImportError: Using `low_cpu_mem_usage=True` requires Accelerate"


def test_reference_only_takes_the_reference_once_and_asks_no_endpoint(served, capsys, tmp_path,
                                                                      monkeypatch):
    """The rollout's staging: the transformers reference into the cache while the node still
    serves; the gate after the switch reads it. No endpoint is asked (base_url is empty)."""
    from ansible_collections.instinct.vllm.plugins.module_utils import fingerprint as fpu

    endpoint, handler = served
    scored = fpu.Fingerprint.from_dict(run(capsys, endpoint)["fingerprint"]).scored
    asked, computed = len(handler.seen), []
    monkeypatch.setattr(fpu, "check_fits", lambda _path: "")
    monkeypatch.setattr(fpu, "compute", lambda *args: computed.append(args) or scored)
    model, cache = tmp_path / "model", tmp_path / "cache" / "reference.json"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"x")
    args = {"reference_only": True, "reference_model_path": str(model),
            "reference_cache": str(cache), "_ansible_check_mode": False}
    first = run(capsys, "", **args)
    assert first["changed"] and cache.exists() and len(computed) == 1, first
    assert "verdicts" not in first and "taken" in first["msg"]
    again = run(capsys, "", **args)
    assert not again["changed"] and len(computed) == 1 and "cache" in again["msg"]
    assert len(handler.seen) == asked
    gate = run(capsys, endpoint, reference_model_path=str(model), reference_cache=str(cache))
    assert gate["ok"] and gate["verdicts"]["transformers"]["max_abs"] == 0.0
    assert len(computed) == 1 and len(handler.seen) > asked


def test_reference_only_needs_the_model_and_the_cache(capsys, tmp_path):
    result = run(capsys, "", reference_only=True, reference_model_path=str(tmp_path))
    assert result["failed"] and "reference_cache" in result["msg"]
