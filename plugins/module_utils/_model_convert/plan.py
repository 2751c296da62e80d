"""Planning for model_convert: profiles, key mapping, config rewrite, validation, shard layout.

Everything here works on metadata only (names, shapes, dtypes, config.json) and raises
ConvertError naming the file and tensor; nothing is written. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.io import (
    FLOAT_DTYPES,
    TORCH_TO_ST,
    ConvertError,
    SourceTensor,
)

PROFILES = ("auto", "gptoss_llama", "none")
DTYPES = ("keep", "float16", "bfloat16", "float32")
LEGACY_ARCHITECTURES = frozenset({"GPTOSSForCausalLM"})
# Architectures vLLM serves as they are from safetensors: `auto` only verifies these.
NATIVE_ARCHITECTURES = frozenset(
    {
        "GptOssForCausalLM",
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "MixtralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Phi3ForCausalLM",
        "DeepseekV3ForCausalLM",
    }
)

# (pattern, replacement or None to drop on purpose), matched with re.fullmatch, first match wins.
# The legacy GPTOSS checkpoint is Llama-shaped; two naming schemes are accepted: Hugging Face
# Llama names (kept as they are) and GPT-style `transformer.h.N.*` names.
GPTOSS_LLAMA_RULES: tuple[tuple[str, str | None], ...] = (
    (r".*\.rotary_emb\.inv_freq", None),
    (r"transformer\.wte\.weight", r"model.embed_tokens.weight"),
    (
        r"transformer\.h\.(\d+)\.attn\.(q|k|v|o)_proj\.(weight|bias)",
        r"model.layers.\1.self_attn.\2_proj.\3",
    ),
    (
        r"transformer\.h\.(\d+)\.mlp\.(gate|up|down)_proj\.(weight|bias)",
        r"model.layers.\1.mlp.\2_proj.\3",
    ),
    (r"transformer\.h\.(\d+)\.ln_1\.weight", r"model.layers.\1.input_layernorm.weight"),
    (
        r"transformer\.h\.(\d+)\.ln_2\.weight",
        r"model.layers.\1.post_attention_layernorm.weight",
    ),
    (r"transformer\.ln_f\.weight", r"model.norm.weight"),
    (r"lm_head\.weight", r"lm_head.weight"),
    (r"model\.(.+)", r"model.\1"),
)
IDENTITY_RULES: tuple[tuple[str, str | None], ...] = ((r"(.+)", r"\1"),)


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    target: str | None
    origin: str  # "key_map[3]" or "profile gptoss_llama"


@dataclass
class Plan:
    """The validated conversion: what to write, where, and how big it is."""

    profile: str
    native: bool
    mapping: list[tuple[SourceTensor, str]]  # (source, target name) in write order
    dropped: list[str]
    out_dtype: dict[str, str]  # target name -> torch dtype name written
    shards: list[list[str]] = field(default_factory=list)  # target names per shard
    config_before: dict[str, Any] = field(default_factory=dict)
    config_after: dict[str, Any] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(self.target_nbytes(src, tgt) for src, tgt in self.mapping)

    def target_nbytes(self, src: SourceTensor, target: str) -> int:
        return src.numel * TORCH_TO_ST[self.out_dtype[target]][1]

    def shard_names(self) -> list[str]:
        count = len(self.shards)
        return [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]


def compile_rules(key_map: list[dict[str, Any]] | None, profile: str) -> list[Rule]:
    """User rules first (in order), then the profile's."""
    rules: list[Rule] = []
    for i, item in enumerate(key_map or []):
        if not isinstance(item, dict) or "pattern" not in item:
            raise ConvertError(f"key_map[{i}]: expected a mapping with 'pattern' and 'replace'")
        try:
            pattern = re.compile(str(item["pattern"]))
        except re.error as exc:
            raise ConvertError(f"key_map[{i}]: bad regular expression: {exc}") from exc
        target = item.get("replace")
        rules.append(Rule(pattern, None if target is None else str(target), f"key_map[{i}]"))
    base = GPTOSS_LLAMA_RULES if profile == "gptoss_llama" else IDENTITY_RULES
    rules.extend(Rule(re.compile(p), t, f"profile {profile}") for p, t in base)
    return rules


def map_names(
    tensors: list[SourceTensor], rules: list[Rule]
) -> tuple[list[tuple[SourceTensor, str]], list[str]]:
    """Map every source tensor exactly once; unmapped or doubly mapped tensors are errors."""
    mapping: list[tuple[SourceTensor, str]] = []
    dropped: list[str] = []
    targets: dict[str, SourceTensor] = {}
    for tensor in tensors:
        for rule in rules:
            match = rule.pattern.fullmatch(tensor.name)
            if match is None:
                continue
            if rule.target is None:
                dropped.append(tensor.name)
                break
            try:
                target = match.expand(rule.target)
            except (re.error, IndexError) as exc:
                raise ConvertError(
                    f"{rule.origin}: bad replacement for {tensor.name}: {exc}"
                ) from exc
            if target in targets:
                other = targets[target]
                raise ConvertError(
                    f"target tensor {target} is mapped twice: from {other.name} ({other.file}) "
                    f"and from {tensor.name} ({tensor.file})"
                )
            targets[target] = tensor
            mapping.append((tensor, target))
            break
        else:
            raise ConvertError(
                f"tensor {tensor.name} in {tensor.file} is not mapped by any rule "
                "(add a key_map rule; use replace: null to drop it on purpose)"
            )
    return mapping, dropped


def resolve_profile(profile: str, config: dict[str, Any], fmt: str) -> tuple[str, bool]:
    """Return (profile, native). `auto` classifies by architecture, RoPE field and weight format."""
    if profile not in PROFILES:
        raise ConvertError(f"profile {profile!r}: expected one of {', '.join(PROFILES)}")
    if profile != "auto":
        return profile, False
    archs = config.get("architectures") or []
    arch = archs[0] if archs else ""
    if arch in LEGACY_ARCHITECTURES:
        return "gptoss_llama", False
    # a native architecture in safetensors is served as is, unless its RoPE base is only in the
    # legacy field (our own output keeps custom_rope_theta next to rope_theta)
    only_custom_rope = "custom_rope_theta" in config and "rope_theta" not in config
    if arch in NATIVE_ARCHITECTURES and fmt == "safetensors" and not only_custom_rope:
        return "none", True
    if "custom_rope_theta" in config:
        return "gptoss_llama", False
    if arch == "LlamaForCausalLM":
        return "gptoss_llama", False
    if arch in NATIVE_ARCHITECTURES:
        return "none", False
    raise ConvertError(
        f"config.json: profile auto does not know architectures {archs!r}; set profile "
        "(gptoss_llama or none)"
    )


def rope_theta(config: dict[str, Any]) -> float | None:
    for key in ("custom_rope_theta", "rope_theta"):
        if isinstance(config.get(key), int | float) and not isinstance(config.get(key), bool):
            return float(config[key])
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if isinstance(params, dict) and isinstance(params.get("rope_theta"), int | float):
        return float(params["rope_theta"])
    return None


def rewrite_config(
    config: dict[str, Any], profile: str, overrides: dict[str, Any] | None
) -> dict[str, Any]:
    """The target config.json: Llama architecture and rope_theta, every other field kept."""
    out = dict(config)
    if profile == "gptoss_llama":
        theta = rope_theta(config)
        if theta is None and not (overrides and "rope_theta" in overrides):
            raise ConvertError(
                "config.json: no RoPE base (custom_rope_theta or rope_theta); set it with "
                "config_overrides: {rope_theta: ...}"
            )
        out["architectures"] = ["LlamaForCausalLM"]
        out["model_type"] = "llama"
        if theta is not None:
            out["rope_theta"] = int(theta) if float(theta).is_integer() else theta
    for key, value in (overrides or {}).items():
        out[key] = value
    return out


def _int(config: dict[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConvertError(f"config.json: {key} must be a positive integer (got {value!r})")
    return value


def expected_llama(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every tensor a LlamaForCausalLM needs, with its shape, derived from the config."""
    hidden = _int(config, "hidden_size")
    layers = _int(config, "num_hidden_layers")
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads", heads)
    inter = _int(config, "intermediate_size")
    vocab = _int(config, "vocab_size")
    head_dim = _int(config, "head_dim", hidden // heads if hidden % heads == 0 else None)
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    attn_bias = bool(config.get("attention_bias", False))
    mlp_bias = bool(config.get("mlp_bias", False))
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes[p + "self_attn.q_proj.weight"] = (heads * head_dim, hidden)
        shapes[p + "self_attn.k_proj.weight"] = (kv_heads * head_dim, hidden)
        shapes[p + "self_attn.v_proj.weight"] = (kv_heads * head_dim, hidden)
        shapes[p + "self_attn.o_proj.weight"] = (hidden, heads * head_dim)
        if attn_bias:
            shapes[p + "self_attn.q_proj.bias"] = (heads * head_dim,)
            shapes[p + "self_attn.k_proj.bias"] = (kv_heads * head_dim,)
            shapes[p + "self_attn.v_proj.bias"] = (kv_heads * head_dim,)
            shapes[p + "self_attn.o_proj.bias"] = (hidden,)
        shapes[p + "mlp.gate_proj.weight"] = (inter, hidden)
        shapes[p + "mlp.up_proj.weight"] = (inter, hidden)
        shapes[p + "mlp.down_proj.weight"] = (hidden, inter)
        if mlp_bias:
            shapes[p + "mlp.gate_proj.bias"] = (inter,)
            shapes[p + "mlp.up_proj.bias"] = (inter,)
            shapes[p + "mlp.down_proj.bias"] = (hidden,)
        shapes[p + "input_layernorm.weight"] = (hidden,)
        shapes[p + "post_attention_layernorm.weight"] = (hidden,)
    shapes["model.norm.weight"] = (hidden,)
    if not config.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


def _shape_hint(target: str, got: tuple[int, ...], config: dict[str, Any]) -> str:
    hidden = config.get("hidden_size")
    heads = config.get("num_attention_heads") or 1
    head_dim = config.get("head_dim") or (hidden // heads if isinstance(hidden, int) else None)
    if target.endswith("k_proj.weight") and head_dim and got and got[0] % head_dim == 0:
        return (
            f" (k_proj implies {got[0] // head_dim} KV heads, config num_key_value_heads = "
            f"{config.get('num_key_value_heads', heads)})"
        )
    if target == "model.embed_tokens.weight" and got:
        vocab = config.get("vocab_size")
        return f" (embeddings imply vocab_size {got[0]}, config vocab_size = {vocab})"
    return ""


def validate_llama(mapping: list[tuple[SourceTensor, str]], config: dict[str, Any]) -> None:
    """Every needed tensor present once with the right shape; nothing unexpected."""
    expected = expected_llama(config)
    got = {target: src for src, target in mapping}
    missing = [name for name in expected if name not in got]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ConvertError(
            f"missing tensor(s) for LlamaForCausalLM: {', '.join(missing[:5])}{more}"
        )
    for target, src in got.items():
        if target not in expected:
            raise ConvertError(
                f"tensor {src.name} in {src.file} maps to {target}, which LlamaForCausalLM "
                "with this config does not have (drop it with a key_map rule replace: null)"
            )
        if src.shape != expected[target]:
            raise ConvertError(
                f"tensor {src.name} in {src.file}: shape {list(src.shape)}, config.json expects "
                f"{list(expected[target])} for {target}{_shape_hint(target, src.shape, config)}"
            )


def output_dtypes(mapping: list[tuple[SourceTensor, str]], dtype: str) -> dict[str, str]:
    if dtype not in DTYPES:
        raise ConvertError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    out: dict[str, str] = {}
    for src, target in mapping:
        out[target] = src.dtype if dtype == "keep" or src.dtype not in FLOAT_DTYPES else dtype
    return out


def split_shards(plan: Plan, max_shard_size: int) -> list[list[str]]:
    """Greedy, in write order: a new shard when the next tensor would pass the limit."""
    shards: list[list[str]] = [[]]
    size = 0
    for src, target in plan.mapping:
        nbytes = plan.target_nbytes(src, target)
        if shards[-1] and size + nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(target)
        size += nbytes
    return shards


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)


def parse_size(value: str | int) -> int:
    """'5GB' -> 5*10**9, '512MiB' -> 512*2**20, 1000 -> 1000."""
    if isinstance(value, int):
        if value <= 0:
            raise ConvertError(f"max_shard_size {value}: must be positive")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ConvertError(f"max_shard_size {value!r}: expected e.g. 5GB, 500MB, 2GiB")
    number, unit, binary = match.groups()
    power = "KMGT".find(unit.upper()) + 1 if unit else 0
    base = 1024 if binary else 1000
    size = int(float(number) * base**power)
    if size <= 0:
        raise ConvertError(f"max_shard_size {value!r}: must be positive")
    return size
