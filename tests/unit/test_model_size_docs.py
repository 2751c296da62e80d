"""The legacy "gpt-oss-120B" checkpoint's size, wherever the documentation and the MI300X
inventory state it, follows from its documented shape (docs/model-conversion.md): a Llama
layer has q and o (hidden x hidden), k and v (hidden x KV heads x head size), three MLP
matrices (hidden x intermediate) and two norms."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "galaxy.yml").is_file())
CONVERSION = ROOT / "docs" / "model-conversion.md"
INVENTORY = ROOT / "inventories" / "mi300x" / "group_vars" / "vllm_nodes" / "main.yml"
MODEL_README = ROOT / "roles" / "model" / "README.md"
# embeddings and an untied lm_head add 2 x vocab x hidden: at most ~2 B for vocabularies up to
# 128k, so the whole model lies between the layers alone and the layers plus 2.2 B
EMBEDDINGS_MAX = 2.2e9


def shape() -> dict[str, int]:
    text = " ".join(CONVERSION.read_text(encoding="utf-8").split())
    match = re.search(
        r"hidden (\d+), (\d+) layers, (\d+) heads, (\d+) KV heads, intermediate (\d+)", text
    )
    assert match, "docs/model-conversion.md states the shape"
    hidden, layers, heads, kv_heads, intermediate = map(int, match.groups())
    return {
        "hidden": hidden,
        "layers": layers,
        "kv": kv_heads * hidden // heads,
        "intermediate": intermediate,
    }


def layer_parameters() -> float:
    s = shape()
    h = s["hidden"]
    per_layer = 2 * h * h + 2 * h * s["kv"] + 3 * h * s["intermediate"] + 2 * h
    return float(per_layer * s["layers"])


def test_the_shape_is_about_69_billion_parameters():
    assert 68.4e9 < layer_parameters() < 68.5e9
    text = " ".join(CONVERSION.read_text(encoding="utf-8").split())
    assert "about 69 billion parameters" in text


def bf16_gb_range() -> tuple[float, float]:
    low = layer_parameters()
    return 2 * low / 1e9, 2 * (low + EMBEDDINGS_MAX) / 1e9


def test_every_stated_bf16_size_matches_the_shape():
    low, high = bf16_gb_range()
    stated = {
        CONVERSION: re.findall(r"about (\d+) GB in bf16", CONVERSION.read_text(encoding="utf-8")),
        INVENTORY: re.findall(r"~(\d+) GB in bf16", INVENTORY.read_text(encoding="utf-8")),
    }
    for path, sizes in stated.items():
        assert sizes, f"{path} states the size in bf16"
        for size in sizes:
            assert low <= float(size) <= high, (
                f"{path}: {size} GB, the shape says {low:.0f}-{high:.0f}"
            )


def test_no_page_states_another_checkpoint_size():
    low, high = bf16_gb_range()
    for path in (CONVERSION, MODEL_README):
        for size in re.findall(
            r"(\d+(?:\.\d+)?) GB (?:checkpoint|safetensors file|of RAM)", path.read_text()
        ):
            assert low <= float(size) <= high, f"{path}: {size} GB"
        for total in re.findall(r"GB of (\d+(?:\.\d+)?) GB", path.read_text()):
            assert low <= float(total) <= high, f"{path}: progress example of {total} GB"
