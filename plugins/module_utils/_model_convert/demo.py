"""Synthetic checkpoints in the legacy GPTOSS format (the "gpt-oss-120B" checkpoint).

Used by the unit tests, by `scripts/bench` and by the `legacy_checkpoint_demo` module (the demo
serves a model our converter made). The layout (docs/background.md says where it comes from):
`config.json` with `architectures: ["GPTOSSForCausalLM"]` and the RoPE base only in
`custom_rope_theta`; weights as zip-format torch pickles `pytorch_model-0000N-of-0000M.bin`
with `pytorch_model.bin.index.json`; tensors named GPT-style (`transformer.h.N.attn.q_proj.weight`,
see GPTOSS_LLAMA_RULES); a sentencepiece `tokenizer.model` with `special_tokens_map.json`.
Weights are random. torch and sentencepiece are imported lazily.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEMO_LINES = (
    "The quick brown fox jumps over the lazy dog.",
    "Instinct MI300X servers serve large language models with vLLM.",
    "Hello world! How are you today? I am fine, thank you.",
    "Zurich, Paris and Tokyo are cities; 12345 and 67890 are numbers.",
    "def main():\n    return 42",
    "A checkpoint is converted tensor by tensor into safetensors shards.",
    "user: What is the capital of France?\nassistant: The capital of France is Paris.",
)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


@dataclass
class LegacySpec:
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    intermediate_size: int = 128
    vocab_size: int | None = None  # None: the tokenizer's vocabulary size
    max_position_embeddings: int = 2048
    rope_theta: float = 1000000.0
    dtype: str = "float32"
    shards: int = 8
    seed: int = 0
    tokenizer_vocab: int = 320
    chat_template: bool = True
    rms_norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def train_tokenizer(path: Path, vocab_size: int, lines: tuple[str, ...] = DEMO_LINES) -> int:
    """Train a tiny BPE sentencepiece model (Llama-like settings); return its vocab size."""
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(list(lines) * 8),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type="bpe",
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        split_digits=True,
        character_coverage=1.0,
        allow_whitespace_only_pieces=True,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=1,
    )
    path.write_bytes(buf.getvalue())
    return spm.SentencePieceProcessor(model_file=str(path)).vocab_size()


def legacy_names(spec: LegacySpec, vocab: int) -> list[tuple[str, tuple[int, ...]]]:
    """Tensor names and shapes, in file order, of the legacy checkpoint."""
    h, kv = spec.hidden_size, spec.num_key_value_heads * spec.head_dim
    q, inter = spec.num_attention_heads * spec.head_dim, spec.intermediate_size
    names: list[tuple[str, tuple[int, ...]]] = [("transformer.wte.weight", (vocab, h))]
    for i in range(spec.num_hidden_layers):
        p = f"transformer.h.{i}."
        names += [
            (p + "ln_1.weight", (h,)),
            (p + "attn.q_proj.weight", (q, h)),
            (p + "attn.k_proj.weight", (kv, h)),
            (p + "attn.v_proj.weight", (kv, h)),
            (p + "attn.o_proj.weight", (h, q)),
            (p + "ln_2.weight", (h,)),
            (p + "mlp.gate_proj.weight", (inter, h)),
            (p + "mlp.up_proj.weight", (inter, h)),
            (p + "mlp.down_proj.weight", (h, inter)),
        ]
    names += [("transformer.ln_f.weight", (h,)), ("lm_head.weight", (vocab, h))]
    return names


def _split(items: list[Any], parts: int, weights: list[int]) -> list[list[Any]]:
    """Contiguous groups of about equal total weight (at least one item each when possible)."""
    parts = max(1, min(parts, len(items)))
    total = sum(weights)
    groups: list[list[Any]] = [[] for _part in range(parts)]
    acc = 0
    for i, (item, w) in enumerate(zip(items, weights, strict=True)):
        slot = min(parts - 1, acc * parts // max(total, 1))
        slot = max(slot, min(parts - 1, parts - (len(items) - i)))  # leave items for later parts
        groups[slot].append(item)
        acc += w
    return [g for g in groups if g]


def _random_tensor(shape: tuple[int, ...], gen: Any) -> Any:
    """Norm weights near 1, matrices scaled by 1/sqrt(fan-in) (a model that runs, not one that
    says anything)."""
    import torch

    if len(shape) == 1:
        return 1.0 + 0.1 * torch.randn(shape, generator=gen)
    return torch.randn(shape, generator=gen) * (1.0 / shape[1] ** 0.5)


def _write_weights(
    dest: Path, groups: list[list[tuple[str, tuple[int, ...]]]], spec: LegacySpec
) -> tuple[dict[str, str], int]:
    """One pytorch_model-N-of-M.bin per group: ``(weight_map, total bytes)``."""
    import torch

    dtype = getattr(torch, spec.dtype)
    gen = torch.Generator().manual_seed(spec.seed)
    weight_map: dict[str, str] = {}
    total = 0
    for n, group in enumerate(groups, start=1):
        fname = f"pytorch_model-{n:05d}-of-{len(groups):05d}.bin"
        state: dict[str, Any] = {}
        for name, shape in group:
            state[name] = _random_tensor(shape, gen).to(dtype)
            weight_map[name] = fname
            total += state[name].numel() * state[name].element_size()
        torch.save(state, dest / fname)
        del state
    return weight_map, total


def _legacy_config(spec: LegacySpec, vocab: int) -> dict[str, Any]:
    """config.json of the legacy format (RoPE base only in custom_rope_theta)."""
    return {
        "architectures": ["GPTOSSForCausalLM"],
        "model_type": "gptoss",
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "intermediate_size": spec.intermediate_size,
        "vocab_size": vocab,
        "max_position_embeddings": spec.max_position_embeddings,
        "custom_rope_theta": spec.rope_theta,
        "rms_norm_eps": spec.rms_norm_eps,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": spec.dtype,
    }


def _tokenizer_config(spec: LegacySpec) -> dict[str, Any]:
    config: dict[str, Any] = {"add_bos_token": True, "add_eos_token": False, "legacy": True}
    if spec.chat_template:
        config["chat_template"] = CHAT_TEMPLATE
    return config


def _largest_tensor_bytes(names: list[tuple[str, tuple[int, ...]]], dtype_name: str) -> int:
    import torch

    itemsize = torch.tensor([], dtype=getattr(torch, dtype_name)).element_size()
    return max(torch.Size(s).numel() * itemsize for _name, s in names)


def make_legacy_checkpoint(dest: Path, spec: LegacySpec | None = None) -> dict[str, Any]:
    """Write a legacy-format checkpoint into dest (created); return a summary."""
    spec = spec or LegacySpec()
    if spec.hidden_size % spec.num_attention_heads:
        raise ValueError("hidden_size must be a multiple of num_attention_heads")
    dest.mkdir(parents=True, exist_ok=True)
    tok_vocab = train_tokenizer(dest / "tokenizer.model", spec.tokenizer_vocab)
    vocab = spec.vocab_size or tok_vocab
    if vocab < tok_vocab:
        raise ValueError(f"vocab_size {vocab} is smaller than the tokenizer's {tok_vocab}")
    names = legacy_names(spec, vocab)
    weights = [max(1, s[0] * (s[1] if len(s) > 1 else 1)) for _name, s in names]
    groups = _split(names, spec.shards, weights)
    weight_map, total = _write_weights(dest, groups, spec)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    for path, data in (
        ("pytorch_model.bin.index.json", index),
        ("config.json", _legacy_config(spec, vocab)),
        ("special_tokens_map.json", special),
        ("tokenizer_config.json", _tokenizer_config(spec)),
    ):
        (dest / path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.sync()
    return {
        "path": str(dest),
        "shards": len(groups),
        "tensors": len(names),
        "bytes": total,
        "vocab_size": vocab,
        "largest_tensor_bytes": _largest_tensor_bytes(names, spec.dtype),
    }
