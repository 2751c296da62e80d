"""The weights' size from a config.json (plugin_utils/model_size.py), and preflight's model disk
check built on it (plugin_utils/preflight.py, disk:model), against published model shapes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.instinct.vllm.plugins.plugin_utils import model_size as ms
from ansible_collections.instinct.vllm.plugins.plugin_utils import preflight as pf
from ansible_collections.instinct.vllm.plugins.plugin_utils import stack_matrix as sm

ROOT = Path(__file__).resolve().parents[4]
GIB = 1024**3


def llama(**over: Any) -> dict[str, Any]:
    """Meta-Llama-3-8B's config.json shape (huggingface.co/meta-llama/Meta-Llama-3-8B)."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": 128256,
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    return config | over


# The legacy 120B checkpoint's shape (docs/model-conversion.md). Its vocabulary is not stated
# there; 32000 (a sentencepiece tokenizer.model) is taken, and the rounded figures (69 B, 138 GB)
# are the same for any vocabulary from 32000 to 40000.
LEGACY_120B = llama(
    hidden_size=8192,
    num_hidden_layers=80,
    intermediate_size=28672,
    num_attention_heads=64,
    num_key_value_heads=8,
    vocab_size=32000,
)


@pytest.mark.parametrize(
    ("config", "billions"),
    [
        (llama(), 8.03),  # Meta-Llama-3-8B: 8.03 B
        (
            llama(
                hidden_size=8192,
                num_hidden_layers=80,
                intermediate_size=28672,
                num_attention_heads=64,
            ),
            70.55,
        ),  # Meta-Llama-3-70B: 70.6 B
        (llama(tie_word_embeddings=True), 7.50),  # one embedding matrix fewer (525 M)
    ],
)
def test_parameters_of_published_shapes(config: dict[str, Any], billions: float) -> None:
    params, why = ms.dense_parameters(config)
    assert why == "" and params is not None
    assert round(params / 1e9, 2) == billions


def test_bytes_follow_the_dtype() -> None:
    params, _why = ms.dense_parameters(llama())
    assert ms.weight_bytes(llama())[0] == 2 * params
    assert ms.weight_bytes(llama(torch_dtype="float32"))[0] == 4 * params


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"num_local_experts": 128}, "a mixture of experts"),
        ({"quantization_config": {"quant_method": "mxfp4"}}, "a quantized checkpoint"),
        ({"hidden_size": None}, "config.json has no hidden_size"),
        ({"torch_dtype": "int8"}, "torch_dtype int8 is not one of"),
    ],
)
def test_what_cannot_be_derived_says_why(over: dict[str, Any], why: str) -> None:
    size, got = ms.weight_bytes(llama(**over))
    assert size is None and why in got


def test_the_legacy_120b_is_about_69b_parameters_and_138_gb() -> None:
    params, _why = ms.dense_parameters(LEGACY_120B)
    assert round(params / 1e9) == 69
    assert round(ms.weight_bytes(LEGACY_120B)[0] / 1e9) == 138


@pytest.mark.parametrize(
    "path", ["docs/model-conversion.md", "inventories/mi300x/group_vars/vllm_nodes/main.yml"]
)
def test_the_docs_state_the_size_the_shape_gives(path: str) -> None:
    text = " ".join((ROOT / path).read_text().split()).replace("# ", "")
    params = re.search(r"(?:about|~)\s?(\d+)\s?(?:billion|B) parameters", text)
    size = re.search(r"(?:about|~)\s?(\d+) GB in bf16", text)
    assert params and size, f"{path} states no parameter count and bf16 size"
    derived, _why = ms.dense_parameters(LEGACY_120B)
    assert int(params.group(1)) == round(derived / 1e9)
    assert int(size.group(1)) == round(ms.weight_bytes(LEGACY_120B)[0] / 1e9)


# ---- preflight: disk:model ---------------------------------------------------------------------


def check(free_gib: float, **settings: Any) -> dict[str, Any]:
    facts = {
        "distribution": "Ubuntu",
        "distribution_version": "24.04",
        "kernel": "6.8.0-41-generic",
        "architecture": "x86_64",
        "memtotal_mb": 2 * 1024**2,
        "mounts": [
            {"mount": "/", "size_available": 100 * GIB},
            {"mount": "/srv", "size_available": free_gib * GIB},
        ],
    }
    base = {
        "model_disk_path": "/srv/models/gpt-oss-120B",
        "model_config": LEGACY_120B,
        "model_copies": ["converted copy"],
        "secure_boot": "disabled",
    }
    result = pf.evaluate(sm.get_stack("cpu"), facts, {}, base | settings)
    (entry,) = [c for c in result["checks"] if c["name"] == "disk:model"] or [None]
    return entry or {}


def test_the_converted_copy_of_a_path_source_needs_one_model_size() -> None:
    assert check(129)["level"] == "ok"  # 137.95 GB = 128.5 GiB
    short = check(120)
    assert short["level"] == "error"
    assert "128.5 GiB needed" in short["msg"] and "1 x: converted copy" in short["msg"]
    assert "preflight_model_size_gib, preflight_model_copies" in short["msg"]


def test_a_download_and_its_converted_copy_need_twice_the_size() -> None:
    both = check(200, model_copies=["source (url)", "converted copy"])
    assert both["level"] == "error"
    assert "257.0 GiB needed" in both["msg"] and "source (url) + converted copy" in both["msg"]
    assert check(258, model_copies=["source (url)", "converted copy"])["level"] == "ok"


def test_a_size_given_replaces_the_derived_one() -> None:
    given = check(100, model_size_gib=61.0, model_config={"num_local_experts": 128})
    assert given["level"] == "ok"
    assert check(60, model_size_gib=61.0)["level"] == "error"


def test_an_underivable_config_warns_naming_the_variable() -> None:
    moe = check(10, model_config=llama(num_local_experts=128))
    assert moe["level"] == "warning"
    assert "a mixture of experts" in moe["msg"] and "preflight_model_size_gib" in moe["msg"]


def test_nothing_to_write_or_nothing_known_is_not_checked() -> None:
    assert check(1, model_copies=[]) == {}
    assert check(1, model_config={}) == {}
    assert check(1, model_disk_path="") == {}
