"""Helpers for the model_convert tests: build, edit and load synthetic legacy checkpoints.

The reference mapping here is written out by hand (independently of the converter's rules), so
a wrong rule in the converter makes the logits test fail.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.demo import (
    LegacySpec,
    make_legacy_checkpoint,
)

# Small but real: head_dim 32 (vLLM CPU needs >= 32), GQA 2:1, 8 shards.
TEST_SPEC = LegacySpec(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=96,
    dtype="float32",
    shards=8,
    seed=1234,
    tokenizer_vocab=320,
)

_LAYER = {
    "ln_1.weight": "input_layernorm.weight",
    "attn.q_proj.weight": "self_attn.q_proj.weight",
    "attn.k_proj.weight": "self_attn.k_proj.weight",
    "attn.v_proj.weight": "self_attn.v_proj.weight",
    "attn.o_proj.weight": "self_attn.o_proj.weight",
    "ln_2.weight": "post_attention_layernorm.weight",
    "mlp.gate_proj.weight": "mlp.gate_proj.weight",
    "mlp.up_proj.weight": "mlp.up_proj.weight",
    "mlp.down_proj.weight": "mlp.down_proj.weight",
}


def build(dest: Path, spec: LegacySpec = TEST_SPEC) -> dict[str, Any]:
    return make_legacy_checkpoint(dest, spec)


def clone(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def hf_name(legacy: str) -> str:
    """The Hugging Face Llama name of a legacy tensor name (written out independently)."""
    fixed = {
        "transformer.wte.weight": "model.embed_tokens.weight",
        "transformer.ln_f.weight": "model.norm.weight",
        "lm_head.weight": "lm_head.weight",
    }
    if legacy in fixed:
        return fixed[legacy]
    _model, _layers, layer, rest = legacy.split(".", 3)
    return f"model.layers.{layer}.{_LAYER[rest]}"


def load_all(src: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a legacy checkpoint (tiny), under its legacy name."""
    out: dict[str, torch.Tensor] = {}
    for shard in sorted(src.glob("pytorch_model-*.bin")):
        out.update(torch.load(shard, weights_only=True))
    return out


def edit_shard(src: Path, tensor: str, fn: Any) -> Path:
    """Apply fn(state) to the shard holding `tensor`, rewrite it and the index."""
    index_path = src / "pytorch_model.bin.index.json"
    index = json.loads(index_path.read_text())
    shard = index["weight_map"][tensor]
    state = torch.load(src / shard, weights_only=True)
    fn(state)
    torch.save(state, src / shard)
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != shard}
    index["weight_map"].update(dict.fromkeys(state, shard))
    index_path.write_text(json.dumps(index))
    return src / shard


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }
