"""Filter instinct.vllm.vllm_flags: the effective server flags role vllm_service publishes
(vllm_service_resolved.flags) - layers merged in order, spellings normalised."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.filter.vllm_args import vllm_args, vllm_flags

MI300X = {
    "tensor-parallel-size": 8,
    "block-size": 16,
    "max-num-seqs": 256,
    "max-model-len": 32768,
    "gpu-memory-utilization": 0.9,
    "kv-cache-dtype": "auto",
    "enforce-eager": True,
}


def test_without_extra_flags_the_defaults_sorted() -> None:
    assert vllm_flags(MI300X, {}) == dict(sorted(MI300X.items()))
    assert list(vllm_flags(MI300X)) == sorted(MI300X)


@pytest.mark.parametrize("spelling", ["max_model_len", "--max-model-len", "--max_model_len",
                                      "MAX-MODEL-LEN"])
def test_an_extra_flag_replaces_the_default_whatever_its_spelling(spelling: str) -> None:
    flags = vllm_flags(MI300X, {spelling: 512})
    assert flags["max-model-len"] == 512
    assert [k for k in flags if "model" in k.replace("_", "-")] == ["max-model-len"]
    assert vllm_args(flags).count("--max-model-len") == 1


def test_the_defaults_spelled_with_underscores_are_normalised_too() -> None:
    assert vllm_flags({"max_model_len": 32768, "--enforce_eager": True}) == {
        "enforce-eager": True, "max-model-len": 32768}


@pytest.mark.parametrize("extra", [
    ["--max-model-len=512"],
    ["--max-model-len", "512"],
    ["--max_model_len", "512"],
    "--max-model-len=512",
    "--max-model-len 512",
])
def test_flag_equals_value_and_flag_space_value_are_the_same(extra: object) -> None:
    assert vllm_flags(MI300X, extra)["max-model-len"] == 512


def test_command_line_values_are_typed_as_yaml_types_them() -> None:
    flags = vllm_flags({}, "--gpu-memory-utilization=0.85 --kv-cache-dtype fp8 --enforce-eager "
                           "--hf-overrides '{\"a\": 1}' --swap-space -1")
    assert flags == {"enforce-eager": True, "gpu-memory-utilization": 0.85,
                     "hf-overrides": '{"a": 1}', "kv-cache-dtype": "fp8", "swap-space": -1}


def test_a_list_value_on_the_command_line() -> None:
    assert vllm_flags({}, ["--allowed-origins", "a", "b"]) == {"allowed-origins": ["a", "b"]}


def test_later_layers_win_and_false_turns_a_default_off() -> None:
    flags = vllm_flags(MI300X, {"enforce_eager": False}, ["--max-num-seqs=4"])
    assert flags["enforce-eager"] is False and flags["max-num-seqs"] == 4
    assert "--enforce-eager" not in vllm_args(flags)


def test_null_layers_are_empty() -> None:
    assert vllm_flags(None, None) == {}


@pytest.mark.parametrize("layer", [{"max_model_len": 1, "max-model-len": 2},
                                   "--max-model-len 1 --max_model_len=2"])
def test_two_spellings_in_one_layer_fail_naming_the_layer(layer: object) -> None:
    with pytest.raises(AnsibleFilterError, match="vllm_service_flags_extra gives the flag "
                                                 "--max-model-len twice"):
        vllm_flags({}, layer, names=["vllm_service_flags", "vllm_service_flags_extra"])


def test_repeat_flags_collect_their_values() -> None:
    assert vllm_flags({}, "--middleware a.b --middleware c.d") == {"middleware": ["a.b", "c.d"]}


@pytest.mark.parametrize(("layer", "message"), [
    ({"api_key": "x"}, "--api-key is not allowed"),
    ("--model /srv/m", "--model is not allowed"),
    (["512"], "'512' is not a flag"),
    (42, "must be a dict of flags, a list of argv words or a command-line string"),
    ({"bad flag": 1}, "invalid flag name"),
])
def test_bad_layers_fail_with_the_reason(layer: object, message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        vllm_flags({}, layer)
