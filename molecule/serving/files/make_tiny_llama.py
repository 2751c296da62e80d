"""Build a tiny random Llama (float32, head_dim 32, BPE tokenizer with a chat template).

Fallback demo model for the serving scenario and `scripts/demo` when role model is absent.
Usage: python make_tiny_llama.py OUT_DIR   (controller venv: torch, transformers, tokenizers)
Deterministic (fixed seed); ~2 MB; a few seconds.
"""

from __future__ import annotations

import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "vLLM serves large language models with paged attention.",
    "AMD Instinct MI300X accelerators have 192 GB of HBM3 memory each.",
    "Hello, world! Say hello. How are you today? I am fine, thank you.",
    "systemd restarts the service when the watchdog stops hearing from it.",
]


def main(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXT * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id, torch_dtype="float32", tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_llama.py OUT_DIR")
    main(Path(sys.argv[1]))
