"""The fingerprint's comparison, record format, prompt file, memory refusal and the client's
reading of vLLM's prompt_logprobs (module_utils/fingerprint.py, _fingerprint/)."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from ansible_collections.instinct.vllm.plugins.module_utils import fingerprint as F
from ansible_collections.instinct.vllm.plugins.module_utils._fingerprint import client, reference

ROOT = Path(__file__).resolve().parents[4]
TOL = F.tolerance_for("float32")


def _scored(pid: str = "p", lps: tuple[float, ...] = (-1.0, -2.0, -0.5), tops=(5, 6, 7),
            margins=(0.5, 0.5, 0.5), text: str = "abc") -> F.Scored:
    return F.Scored(id=pid, kind="completion", prompt_ids=[1, 4, 5], ref_ids=[6, 7], start=2,
                    greedy_text=text, logprobs=list(lps), top_ids=list(tops),
                    margins=list(margins))


def _fp(*scored: F.Scored) -> F.Fingerprint:
    return F.Fingerprint("test", "m", "sha", 2, 1, list(scored))


def test_identical_fingerprints_pass() -> None:
    v = F.compare(_fp(_scored()), _fp(_scored()), TOL)
    assert v.ok and v.max_abs == 0 and v.agreement == 1.0 and v.greedy_mismatches == 0


def test_small_deltas_pass_and_large_ones_fail_on_max_and_mean() -> None:
    near = _scored(lps=(-1.0, -2.0004, -0.5))
    assert F.compare(_fp(_scored()), _fp(near), TOL).ok
    far = _scored(lps=(-1.0, -2.01, -0.5))
    v = F.compare(_fp(_scored()), _fp(far), TOL)
    assert not v.ok
    assert v.max_abs == pytest.approx(0.01)
    problems = v.prompts[0].problems
    assert any("max |delta logprob|" in p for p in problems)
    assert any("mean |delta logprob|" in p for p in problems)
    assert "FAILED" in v.summary and "p:" in v.summary


def test_mean_alone_can_fail() -> None:
    tol = F.tolerance_for("float32", {"float32": {"max_abs": 1.0}})
    v = F.compare(_fp(_scored()), _fp(_scored(lps=(-1.001, -2.001, -0.501))), tol)
    assert not v.ok and v.prompts[0].problems == ["mean |delta logprob| 0.001 > 0.0002"]


def test_other_top_token_fails_agreement_unless_the_reference_ties() -> None:
    other = _scored(tops=(5, 9, 7))
    v = F.compare(_fp(_scored()), _fp(other), TOL)
    assert not v.ok and v.prompts[0].agreement == pytest.approx(2 / 3)
    tie = _scored(margins=(0.5, 0.0001, 0.5))
    assert F.compare(_fp(tie), _fp(other), TOL).ok  # a near-tie in the reference is not counted


def test_greedy_mismatch_counts_against_the_share_allowed() -> None:
    ref = _fp(_scored("a"), _scored("b"))
    got = _fp(_scored("a"), _scored("b", text="abd"))
    v = F.compare(ref, got, TOL)
    assert not v.ok and v.greedy_mismatches == 1 and "greedy continuation differs" in v.summary
    loose = F.tolerance_for("float32", {"float32": {"max_greedy_mismatch": 0.5}})
    assert F.compare(ref, got, loose).ok


def test_other_tokens_or_prompt_set_do_not_compare() -> None:
    other = replace(_scored(), ref_ids=[6, 8])
    v = F.compare(_fp(_scored()), _fp(other), TOL)
    assert not v.ok and "other tokens" in v.prompts[0].problems[0]
    with pytest.raises(ValueError, match="different prompt sets"):
        F.compare(_fp(_scored()), replace(_fp(_scored()), prompts_sha256="x"), TOL)


def test_within_leaves_out_what_needs_more_context_than_the_limit() -> None:
    # max_tokens 2, ref_ids 2: "a" needs 3 + max(2, 2 + 1) = 6 tokens, "b" 10 + 3 = 13
    fp = _fp(_scored("a"), replace(_scored("b"), prompt_ids=list(range(10))))
    kept = fp.within(12)
    assert [s.id for s in kept.scored] == ["a"]
    assert kept.left_out == [{"id": "b", "tokens": 13, "max_model_len": 12}]
    assert fp.within(13).scored == fp.scored and fp.within(None) is fp
    v = F.compare(kept, kept, TOL)
    assert v.ok and v.left_out == kept.left_out and "1 prompts left out" in v.summary
    with pytest.raises(ValueError, match="no prompt to compare: 2 prompts left out"):
        F.compare(fp.within(5), fp.within(5), TOL)


def test_tolerances_have_documented_defaults_and_overrides() -> None:
    assert set(F.DEFAULT_TOLERANCES) == {"float32", "float16", "bfloat16"}
    doc = (ROOT / "docs" / "fingerprint.md").read_text()
    for dtype, values in F.DEFAULT_TOLERANCES.items():
        row = next(line for line in doc.splitlines() if line.startswith(f"| {dtype} |"))
        for value in values.values():
            assert f"{value:g}" in row, (dtype, value)
    assert F.tolerance_for("bfloat16", {"bfloat16": {"max_abs": 1}}).max_abs == 1.0
    with pytest.raises(ValueError, match="no tolerance"):
        F.tolerance_for("fp8")


def test_fingerprint_round_trips_through_json() -> None:
    fp = _fp(_scored())
    again = F.Fingerprint.from_dict(json.loads(json.dumps(fp.as_dict())))
    assert again == fp
    with pytest.raises(ValueError, match="format"):
        F.Fingerprint.from_dict({**fp.as_dict(), "format": 99})


def test_shipped_prompts() -> None:
    data = yaml.safe_load((ROOT / "files" / "fingerprint" / "prompts.yml").read_text())
    prompts = F.parse_prompts(data)
    kinds = [p.kind for p in prompts]
    assert 24 <= len(prompts) <= 48 and kinds.count("chat") >= 6
    lengths = sorted(len(p.prompt or json.dumps(p.messages)) for p in prompts)
    assert lengths[0] < 60 and lengths[-1] > 600  # short and long
    with pytest.raises(ValueError, match="unique"):
        F.parse_prompts([data["prompts"][0], data["prompts"][0]])
    with pytest.raises(ValueError, match="a chat has"):
        F.parse_prompts([{"id": "x", "kind": "chat", "prompt": "y"}])


def test_baseline_key_depends_on_each_part() -> None:
    key = F.baseline_key("r1", "rocm-6.2.1", {"dtype": "bfloat16"})
    assert key == F.baseline_key("r1", "rocm-6.2.1", {"dtype": "bfloat16"})
    assert len({key, F.baseline_key("r2", "rocm-6.2.1", {"dtype": "bfloat16"}),
                F.baseline_key("r1", "rocm-7.2.1", {"dtype": "bfloat16"}),
                F.baseline_key("r1", "rocm-6.2.1", {"kv-cache-dtype": "fp8"})}) == 4


def test_position_reads_vllm_prompt_logprobs() -> None:
    entry = {"7": {"logprob": -3.0, "rank": 4, "decoded_token": "x"},
             "5": {"logprob": -0.1, "rank": 1, "decoded_token": "a"},
             "6": {"logprob": -0.7, "rank": 2, "decoded_token": "b"}}
    assert client.position(entry, 7) == (-3.0, 5, pytest.approx(0.6))
    assert client.position({"5": {"logprob": -0.1, "rank": 1}}, 5) == (-0.1, 5, None)
    with pytest.raises(RuntimeError, match="no entry"):
        client.position(None, 5)


def _safetensors(path: Path, shapes: dict[str, list[int]]) -> None:
    header = {n: {"dtype": "BF16", "shape": s, "data_offsets": [0, 0]} for n, s in shapes.items()}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def test_reference_refuses_a_model_larger_than_ram(tmp_path: Path) -> None:
    _safetensors(tmp_path / "model.safetensors", {"w": [1000, 1000], "b": [1000]})
    need = reference.needed_bytes(str(tmp_path))
    assert need == int(1_001_000 * 4 * reference.OVERHEAD)
    assert reference.check_fits(str(tmp_path), available=need) is None
    why = reference.check_fits(str(tmp_path), available=need // 2)
    assert why is not None and str(tmp_path) in why and "GiB" in why and "too large" in why


def test_greedy_compares_token_ids_when_both_sides_have_them() -> None:
    ref = replace(_scored(text="\ufffd\ufffd"), greedy_ids=[6, 7])
    same_ids_other_text = replace(_scored(text="))"), greedy_ids=[6, 7])
    assert F.compare(_fp(ref), _fp(same_ids_other_text), TOL).ok
    other_ids = replace(_scored(text="\ufffd\ufffd"), greedy_ids=[6, 8])
    v = F.compare(_fp(ref), _fp(other_ids), TOL)
    assert not v.ok and v.prompts[0].greedy_match is False


def test_greedy_text_with_undecodable_bytes_is_not_compared() -> None:
    ref = _scored(text="a\ufffd")
    v = F.compare(_fp(ref), _fp(_scored(text="a)")), TOL)
    assert v.ok and v.prompts[0].greedy_match is None and v.greedy_mismatches == 0
    assert not F.compare(_fp(_scored(text="ab")), _fp(_scored(text="ac")), TOL).ok


@pytest.mark.parametrize(("version", "accelerate", "expected"), [
    ("5.19.0", True, {"dtype": "float32"}),  # the cpu stack: streams by itself
    ("5.0.0", False, {"dtype": "float32"}),
    ("4.47.1", False, {"torch_dtype": "float32"}),  # vLLM 0.6.6's, no accelerate in its lock
    ("4.47.1", True, {"torch_dtype": "float32", "low_cpu_mem_usage": True}),
])
def test_from_pretrained_arguments_follow_the_installed_transformers(
        version: str, accelerate: bool, expected: dict) -> None:
    assert reference.load_kwargs(version, accelerate, "float32") == expected
