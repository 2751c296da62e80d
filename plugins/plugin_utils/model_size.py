# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The size of a dense decoder's weights from its Hugging Face config.json (controller only).

Llama-shaped models (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM ...): embeddings
``vocab x hidden``; per layer the attention projections q and o (``hidden x heads x head_dim``
each), k and v (``hidden x kv_heads x head_dim`` each), the gated MLP (``3 x hidden x
intermediate``) and two norms (``hidden`` each); a final norm; the lm_head (``vocab x hidden``)
unless ``tie_word_embeddings``. Biases are left out (a few million parameters at most). A
mixture of experts (``num_local_experts``, ``num_experts``, ``n_routed_experts``) or a quantized
checkpoint (``quantization_config``) is not this shape: its size is unknown here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Bytes per parameter of config.json's ``torch_dtype``.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
SHAPE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
              "num_attention_heads")  # fmt: skip


def _int(config: Mapping[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def dense_parameters(config: Mapping[str, Any]) -> tuple[int | None, str]:
    """(parameter count, "") for a dense Llama-shaped config; (None, why not) otherwise."""
    if any(config.get(k) for k in MOE_KEYS):
        return None, "a mixture of experts"
    if config.get("quantization_config"):
        return None, "a quantized checkpoint"
    missing = [k for k in SHAPE_KEYS if _int(config, k) is None]
    if missing:
        return None, f"config.json has no {', '.join(missing)}"
    vocab, hidden, layers, inter, heads = (int(config[k]) for k in SHAPE_KEYS)
    kv_heads = _int(config, "num_key_value_heads") or heads
    head_dim = _int(config, "head_dim") or hidden // heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    layer = attention + 3 * hidden * inter + 2 * hidden
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return layers * layer + hidden + embeddings, ""


def weight_bytes(config: Mapping[str, Any]) -> tuple[int | None, str]:
    """(bytes of the weights as stored, "") or (None, why unknown)."""
    params, why = dense_parameters(config)
    if params is None:
        return None, why
    dtype = str(config.get("torch_dtype") or "")
    if dtype not in DTYPE_BYTES:
        return (
            None,
            f"config.json's torch_dtype {dtype or '(none)'} is not one of {', '.join(DTYPE_BYTES)}",
        )
    return params * DTYPE_BYTES[dtype], ""
