"""The independent reference: transformers on CPU, from the checkpoint the endpoint serves.

The same greedy continuation (argmax, key-value cache, stop at EOS) and the teacher-forced
log-probabilities of it, computed in float32 whatever the checkpoint's dtype. torch and
transformers are imported only when a reference is computed (they are in the node's vLLM
venv), so this file imports with the standard library alone.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from .record import Prompt, Scored, scored_start

OVERHEAD = 1.3  # activations, allocator slack, the interpreter and torch itself
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def _safetensors_params(path: Path) -> tuple[int, int]:
    """(parameters, bytes as stored) from one safetensors header, without reading the data."""
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    params = stored = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        n = 1
        for d in t["shape"]:
            n *= int(d)
        params += n
        stored += n * DTYPE_BYTES.get(t["dtype"], 4)
    return params, stored


def needed_bytes(model_path: str) -> int:
    """Bytes the float32 reference needs: 4 per parameter (safetensors headers), or, for other
    checkpoint files, their size counted as 16-bit weights, plus OVERHEAD."""
    root = Path(model_path)
    shards = sorted(root.glob("*.safetensors"))
    if shards:
        params = sum(_safetensors_params(p)[0] for p in shards)
        return int(params * 4 * OVERHEAD)
    files = [p for p in root.glob("*") if p.suffix in (".bin", ".pt", ".pth")]
    if not files:
        raise ValueError(f"{model_path}: no *.safetensors or *.bin weights")
    return int(sum(p.stat().st_size for p in files) * 2 * OVERHEAD)


def available_bytes(meminfo: str = "/proc/meminfo") -> int:
    """MemAvailable of this host."""
    for line in Path(meminfo).read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{meminfo}: no MemAvailable")


def check_fits(model_path: str, available: int | None = None) -> str | None:
    """None when the reference fits this host's available RAM, else why it is refused."""
    need = needed_bytes(model_path)
    have = available_bytes() if available is None else available
    if need <= have:
        return None
    gib = 1024 ** 3
    return (f"the transformers reference of {model_path} needs about {need / gib:.1f} GiB of RAM "
            f"(float32 on CPU) and this host has {have / gib:.1f} GiB available: too large; "
            "compare against a recorded reference or the fleet baseline instead")


def _import_torch() -> None:
    """Import torch (with torch._dynamo) and transformers with the interpreter's own sys.intern.

    Inside a module, ansible-core has replaced sys.intern by a callable object; torch._dynamo,
    when first imported, registers polyfills for builtins and refuses that object ("substitute_in_
    graph expects a function"). Once imported, it never looks again."""
    patched = sys.intern
    original = getattr(type(patched), "unpatched_implementation", None)
    if original is not None:
        sys.intern = original
    try:
        import transformers  # noqa: F401

        with contextlib.suppress(ImportError):
            import torch._dynamo  # noqa: F401
    finally:
        sys.intern = patched


def _load(model_path: str) -> tuple[Any, Any]:
    _import_torch()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "0")) or torch.get_num_threads())
    tok = AutoTokenizer.from_pretrained(model_path)
    accelerate = importlib.util.find_spec("accelerate") is not None
    model = AutoModelForCausalLM.from_pretrained(
        model_path, **load_kwargs(transformers.__version__, accelerate, torch.float32))
    model.eval()
    return tok, model


def load_kwargs(transformers_version: str, accelerate: bool, dtype: Any) -> dict[str, Any]:
    """from_pretrained's arguments for `dtype` weights streamed into place, as the installed
    transformers names them. transformers 5 takes `dtype` and streams the shards by itself;
    4.x (vLLM 0.6.6's 4.47) takes `torch_dtype`, and streams with low_cpu_mem_usage=True only
    when accelerate is installed (it raises without it)."""
    if int(transformers_version.split(".", 1)[0]) >= 5:
        return {"dtype": dtype}
    return {"torch_dtype": dtype, **({"low_cpu_mem_usage": True} if accelerate else {})}


def _prompt_ids(tok: Any, prompt: Prompt) -> list[int]:
    if prompt.kind == "completion":
        return list(tok(prompt.prompt)["input_ids"])
    ids = tok.apply_chat_template(prompt.messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def _greedy(model: Any, ids: list[int], max_tokens: int, eos: set[int]) -> list[int]:
    import torch

    out: list[int] = []
    past = None
    step = torch.tensor([ids])
    for _step in range(max_tokens):
        res = model(input_ids=step, past_key_values=past, use_cache=True)
        past = res.past_key_values
        nxt = int(res.logits[0, -1].argmax())
        out.append(nxt)
        if nxt in eos:
            break
        step = torch.tensor([[nxt]])
    return out


def _forced(model: Any, ids: list[int],
            start: int) -> tuple[list[float], list[int], list[float | None]]:
    import torch

    logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, start - 1:-1]
    lp = torch.log_softmax(logits.float(), dim=-1)
    top2 = lp.topk(2, dim=-1)
    target = torch.tensor(ids[start:])
    chosen = lp.gather(1, target[:, None])[:, 0]
    margins = (top2.values[:, 0] - top2.values[:, 1]).tolist()
    return chosen.tolist(), top2.indices[:, 0].tolist(), margins


def compute(model_path: str, prompts: list[Prompt], max_tokens: int, window: int) -> list[Scored]:
    """Every prompt scored by transformers on CPU (call check_fits first)."""
    import torch

    tok, model = _load(model_path)
    eos = {int(t) for t in _as_list(model.generation_config.eos_token_id)}
    if tok.eos_token_id is not None:
        eos.add(int(tok.eos_token_id))
    out: list[Scored] = []
    with torch.inference_mode():
        for p in prompts:
            ids = _prompt_ids(tok, p)
            cont = _greedy(model, ids, max_tokens, eos)
            start = scored_start(len(ids), window)
            lp, top, margins = _forced(model, ids + cont, start)
            text = tok.decode(cont, skip_special_tokens=True)
            out.append(Scored(p.id, p.kind, ids, cont, text, start, lp, top, list(margins),
                              list(cont)))
    return out


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def checkpoint_id(model_path: str) -> str:
    """Identity of a checkpoint's files (name, size, mtime) without reading them: a cached
    reference is reused only for the same files."""
    import hashlib

    root = Path(model_path)
    rows = sorted(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
                  for p in root.iterdir() if p.is_file())
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]
