"""model_convert: conversion of synthetic legacy checkpoints, checked with transformers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

# torch has no wheel for every Python the stacks name here (docs/development.md, make pythons)
torch = pytest.importorskip("torch", reason="needs torch, which is not installed for this Python")

import ckpt_factory as cf  # noqa: E402 (ckpt_factory imports torch)
from ansible_collections.instinct.vllm.plugins.module_utils._fileutil import sha256_file  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert import convert as mc  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert import shard as mcs  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert import writers as mcw  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.convert import (  # noqa: E402
    MANIFEST,
    ConvertError,
    ConvertOptions,
    convert,
)

COLLECTIONS = Path(__file__).resolve().parents[4] / ".collections"
SAMPLES = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "  two  spaces, tabs\tand a newline\nhere",
    "Zürich naïve café 12345 — unseen 字 🤖",
    "",
]


@pytest.fixture(scope="session")
def legacy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("legacy") / "gpt-oss-120B-legacy"
    cf.build(root)
    return root


@pytest.fixture(scope="session")
def converted(legacy: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    dest = tmp_path_factory.mktemp("out") / "llama"
    result = convert(ConvertOptions(str(legacy), str(dest)))
    return dest, result


def _opts(src: Path, dest: Path, **kw: object) -> ConvertOptions:
    return ConvertOptions(str(src), str(dest), **kw)  # type: ignore[arg-type]


# --- the converted model is right ----------------------------------------------------------


def test_logits_match_reference_llama(legacy: Path, converted: tuple[Path, dict]) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    dest, result = converted
    assert result["changed"] is True
    assert result["profile"] == "gptoss_llama"
    model = LlamaForCausalLM.from_pretrained(dest, dtype=torch.float32).eval()
    spec = cf.TEST_SPEC
    ref_cfg = LlamaConfig(
        vocab_size=json.loads((legacy / "config.json").read_text())["vocab_size"],
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        rms_norm_eps=spec.rms_norm_eps,
        rope_theta=spec.rope_theta,
        tie_word_embeddings=False,
    )
    ref = LlamaForCausalLM(ref_cfg).eval()
    state = {cf.hf_name(k): v for k, v in cf.load_all(legacy).items()}
    missing, unexpected = ref.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m for m in missing)
    ids = torch.randint(0, ref_cfg.vocab_size, (2, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, want = model(ids).logits, ref(ids).logits
    assert (got - want).abs().max().item() <= 1e-5
    # rope_theta really reached the model: a wrong base changes long-position logits
    theta = 1.0 / model.model.rotary_emb.inv_freq[1].item() ** (spec.head_dim / 2)
    assert abs(theta - spec.rope_theta) / spec.rope_theta < 1e-3


def test_config_rewritten_rest_preserved(legacy: Path, converted: tuple[Path, dict]) -> None:
    dest, _report = converted
    before = json.loads((legacy / "config.json").read_text())
    after = json.loads((dest / "config.json").read_text())
    assert after["architectures"] == ["LlamaForCausalLM"]
    assert after["model_type"] == "llama"
    assert after["rope_theta"] == before["custom_rope_theta"]
    for key, value in before.items():
        if key not in ("architectures", "model_type"):
            assert after[key] == value, key
    gen = json.loads((dest / "generation_config.json").read_text())
    assert gen["bos_token_id"] == 1 and gen["eos_token_id"] == 2


def test_tokenizer_json_encodes_like_sentencepiece(converted: tuple[Path, dict]) -> None:
    import sentencepiece as spm
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    dest, _report = converted
    sp = spm.SentencePieceProcessor(model_file=str(dest / "tokenizer.model"))
    fast = Tokenizer.from_file(str(dest / "tokenizer.json"))
    for text in SAMPLES:
        assert fast.encode(text, add_special_tokens=False).ids == sp.encode(text), text
    auto = AutoTokenizer.from_pretrained(dest)
    assert auto("Hello world!")["input_ids"] == [sp.bos_id(), *sp.encode("Hello world!")]
    assert auto.decode(sp.encode(SAMPLES[1])) == SAMPLES[1]
    assert auto.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    specials = json.loads((dest / "special_tokens_map.json").read_text())
    assert specials["eos_token"] == "</s>"


def test_index_manifest_and_hashes(legacy: Path, converted: tuple[Path, dict]) -> None:
    from safetensors import safe_open

    dest, result = converted
    index = json.loads((dest / "model.safetensors.index.json").read_text())
    names = set()
    for shard in set(index["weight_map"].values()):
        with safe_open(str(dest / shard), "pt") as fh:
            names |= set(fh.keys())
    assert names == set(index["weight_map"])
    assert len(names) == result["tensors"] == len(cf.load_all(legacy))
    manifest = json.loads((dest / MANIFEST).read_text())
    assert manifest["tool"] == "instinct.vllm.model_convert"
    assert manifest["options"]["max_shard_size"] == 5 * 10**9
    for rel, info in manifest["files"].items():
        assert sha256_file(dest / rel) == info["sha256"], rel
    assert set(result["files"]) == {p.name for p in dest.iterdir()}


def test_src_untouched(legacy: Path, converted: tuple[Path, dict]) -> None:
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in legacy.iterdir()}
    convert(_opts(legacy, converted[0].parent / "again"))
    after = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in legacy.iterdir()}
    assert before == after


# --- idempotence, check mode, safety -------------------------------------------------------


def test_rerun_is_unchanged_without_rehashing(
    legacy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "out"
    assert convert(_opts(legacy, dest))["changed"]
    snapshot = cf.tree_bytes(dest)

    def no_hash(path: Path) -> str:
        raise AssertionError(f"rehashed {path}")

    monkeypatch.setattr(mc, "sha256_file", no_hash)
    monkeypatch.setattr(mcw.HashingWriter, "write", no_hash)
    monkeypatch.setattr(mcw.HashingWriter, "copy_from", no_hash)
    again = convert(_opts(legacy, dest))
    assert again["changed"] is False
    monkeypatch.undo()
    assert cf.tree_bytes(dest) == snapshot
    assert convert(_opts(legacy, dest, verify="full"))["changed"] is False
    assert convert(_opts(legacy, dest, dtype="float16"))["changed"] is True
    assert convert(_opts(legacy, dest, force=True))["changed"] is True
    assert cf.tree_bytes(dest) == snapshot


def test_check_mode_writes_nothing(legacy: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    result = convert(_opts(legacy, dest), check=True)
    assert result["changed"] is True
    assert '"LlamaForCausalLM"' in result["diff"]["after"]
    assert '"GPTOSSForCausalLM"' in result["diff"]["before"]
    assert list(tmp_path.iterdir()) == []


def _edit_missing(src: Path) -> str:
    cf.edit_shard(
        src, "transformer.h.1.ln_2.weight", lambda s: s.pop("transformer.h.1.ln_2.weight")
    )
    return "model.layers.1.post_attention_layernorm.weight"


def _edit_extra(src: Path) -> str:
    cf.edit_shard(
        src,
        "transformer.ln_f.weight",
        lambda s: s.update({"transformer.h.0.attn.bonus": torch.ones(3)}),
    )
    return "transformer.h.0.attn.bonus"


def _edit_shape(src: Path) -> str:
    name = "transformer.h.0.attn.k_proj.weight"
    cf.edit_shard(src, name, lambda s: s.update({name: torch.zeros(64, 64)}))
    return "k_proj implies 2 KV heads"


def _edit_truncate(src: Path) -> str:
    shard = sorted(src.glob("pytorch_model-*.bin"))[3]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    return shard.name


def _edit_garbage(src: Path) -> str:
    shard = sorted(src.glob("pytorch_model-*.bin"))[5]
    shard.write_bytes(b"this is not a torch checkpoint" * 10)
    return shard.name


def _edit_no_rope(src: Path) -> str:
    cfg = json.loads((src / "config.json").read_text())
    del cfg["custom_rope_theta"]
    cfg["architectures"] = ["GPTOSSForCausalLM"]
    (src / "config.json").write_text(json.dumps(cfg))
    return "RoPE base"


def _edit_missing_file(src: Path) -> str:
    sorted(src.glob("pytorch_model-*.bin"))[2].unlink()
    return "missing"


@pytest.mark.parametrize(
    "edit",
    [
        _edit_missing,
        _edit_extra,
        _edit_shape,
        _edit_truncate,
        _edit_garbage,
        _edit_no_rope,
        _edit_missing_file,
    ],
)
@pytest.mark.parametrize("dest_exists", [False, True])
def test_bad_input_fails_clearly_dest_intact(
    legacy: Path, tmp_path: Path, edit: object, dest_exists: bool
) -> None:
    src = cf.clone(legacy, tmp_path / "src")
    dest = tmp_path / "dest"
    if dest_exists:
        convert(_opts(src, dest))
    before = cf.tree_bytes(dest) if dest_exists else None
    needle = edit(src)  # type: ignore[operator]
    with pytest.raises(ConvertError) as err:
        convert(_opts(src, dest))
    assert needle in str(err.value)
    if dest_exists:
        assert cf.tree_bytes(dest) == before
    else:
        assert not dest.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".dest.partial")) == []


def test_unreadable_source(tmp_path: Path) -> None:
    with pytest.raises(ConvertError, match=r"config\.json"):
        convert(_opts(tmp_path / "nope", tmp_path / "dest"))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "config.json").write_text("{not json")
    with pytest.raises(ConvertError, match="cannot read JSON"):
        convert(_opts(tmp_path / "src", tmp_path / "dest"))
    assert not (tmp_path / "dest").exists()


def test_foreign_dest_not_replaced_without_force(legacy: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "precious.txt").write_text("keep me")
    with pytest.raises(ConvertError, match="not written by model_convert"):
        convert(_opts(legacy, dest))
    assert (dest / "precious.txt").read_text() == "keep me"
    assert convert(_opts(legacy, dest, force=True))["changed"] is True
    assert not (dest / "precious.txt").exists()


def test_dest_inside_src_refused(legacy: Path) -> None:
    with pytest.raises(ConvertError, match="outside src"):
        convert(_opts(legacy, legacy / "out"))


def test_free_disk_checked(legacy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mc.shutil, "disk_usage", lambda _p: SimpleNamespace(free=1000))
    with pytest.raises(ConvertError, match=r"need .* GB, free 0.00 GB"):
        convert(_opts(legacy, tmp_path / "dest"))
    assert not (tmp_path / "dest").exists()


def test_failed_shard_fsync_is_an_error_naming_the_shard(
    legacy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards are flushed in a helper thread; its failure still stops the conversion."""
    real_fsync = mcw.os.fsync
    flushed: list[str] = []

    def fsync(fd: int) -> None:
        name = Path(f"/proc/self/fd/{fd}").readlink().name
        flushed.append(name)
        if name == "model-00002-of-00012.safetensors":
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(mcw.os, "fsync", fsync)
    dest = tmp_path / "dest"
    with pytest.raises(ConvertError, match=r"model-00002-of-00012.safetensors: fsync failed"):
        convert(_opts(legacy, dest, max_shard_size="40KB"))
    assert not dest.exists()
    assert "model-00003-of-00012.safetensors" in flushed  # the next shard was written meanwhile


_KILL_SCRIPT = """
import os, signal, sys
sys.path.insert(0, {colls!r})
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.convert import (
    ConvertOptions, convert)
def progress(done, total, name):
    if done > total // 3:
        os.kill(os.getpid(), signal.SIGKILL)
convert(ConvertOptions({src!r}, {dest!r}, max_shard_size="40KB"), progress=progress)
"""


@pytest.mark.parametrize("dest_exists", [False, True])
def test_sigkill_mid_run_then_rerun(legacy: Path, tmp_path: Path, dest_exists: bool) -> None:
    reference = tmp_path / "reference"
    convert(_opts(legacy, reference, max_shard_size="40KB"))
    dest = tmp_path / "dest"
    if dest_exists:
        convert(_opts(legacy, dest, dtype="float16"))
    before = cf.tree_bytes(dest) if dest_exists else None
    script = _KILL_SCRIPT.format(colls=str(COLLECTIONS), src=str(legacy), dest=str(dest))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=120, check=False
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert (tmp_path / ".dest.partial").exists()  # killed half way
    if dest_exists:
        assert cf.tree_bytes(dest) == before
    else:
        assert not dest.exists()
    assert convert(_opts(legacy, dest, max_shard_size="40KB"))["changed"] is True
    assert cf.tree_bytes(dest) == cf.tree_bytes(reference)
    assert not (tmp_path / ".dest.partial").exists()


# --- other source formats and options ------------------------------------------------------


def _hf_checkpoint(legacy: Path, converted: Path, dest: Path, shards: int) -> Path:
    """A GPTOSS checkpoint whose weights are safetensors (HF names), in `shards` files."""
    from safetensors.torch import save_file

    cf.clone(legacy, dest)
    for shard in dest.glob("pytorch_model*"):
        shard.unlink()
    state = {cf.hf_name(k): v for k, v in cf.load_all(legacy).items()}
    names = sorted(state)
    if shards == 1:
        save_file(state, str(dest / "model.safetensors"), metadata={"format": "pt"})
        return dest
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: state[n] for n in part}, str(dest / fname), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, fname))
    (dest / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return dest


@pytest.mark.parametrize("shards", [1, 3])
def test_safetensors_sources(
    legacy: Path, converted: tuple[Path, dict], tmp_path: Path, shards: int
) -> None:
    from safetensors.torch import load_file

    src = _hf_checkpoint(legacy, converted[0], tmp_path / "src", shards)
    result = convert(_opts(src, tmp_path / "dest"))
    assert result["src_format"] == "safetensors" and result["profile"] == "gptoss_llama"
    want = load_file(str(converted[0] / "model-00001-of-00001.safetensors"))
    got = load_file(str(tmp_path / "dest" / "model-00001-of-00001.safetensors"))
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)


def test_single_bin_without_index(
    legacy: Path, converted: tuple[Path, dict], tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    src = cf.clone(legacy, tmp_path / "src")
    for shard in src.glob("pytorch_model*"):
        shard.unlink()
    torch.save(cf.load_all(legacy), src / "pytorch_model.bin")
    convert(_opts(src, tmp_path / "dest"))
    want = load_file(str(converted[0] / "model-00001-of-00001.safetensors"))
    got = load_file(str(tmp_path / "dest" / "model-00001-of-00001.safetensors"))
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_auto_recognises_native_checkpoint(
    legacy: Path, converted: tuple[Path, dict], tmp_path: Path
) -> None:
    src = _hf_checkpoint(legacy, converted[0], tmp_path / "src", 2)
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("custom_rope_theta")
    cfg.update(architectures=["GptOssForCausalLM"], model_type="gpt_oss", rope_theta=150000)
    (src / "config.json").write_text(json.dumps(cfg))
    result = convert(_opts(src, tmp_path / "dest"))
    assert result["native"] is True and result["changed"] is False
    assert result["model_dir"] == str(src.resolve())
    assert not (tmp_path / "dest").exists()
    # a broken native layout is reported
    index = json.loads((src / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors"
    index["weight_map"]["ghost.weight"] = "model-00001-of-00002.safetensors"
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConvertError, match=r"model\.safetensors\.index\.json"):
        convert(_opts(src, tmp_path / "dest"))


def test_converted_output_is_native_and_reconversion_idempotent(
    converted: tuple[Path, dict], tmp_path: Path
) -> None:
    out = converted[0]
    result = convert(_opts(out, tmp_path / "native"))
    assert result["native"] is True and result["model_dir"] == str(out.resolve())
    again = tmp_path / "again"
    assert convert(_opts(out, again, profile="gptoss_llama"))["changed"] is True
    assert convert(_opts(out, again, profile="gptoss_llama"))["changed"] is False


def test_key_map_overrides_and_drops(legacy: Path, tmp_path: Path) -> None:
    src = cf.clone(legacy, tmp_path / "src")

    def rename(state: dict) -> None:
        state["decoder.final_norm"] = state.pop("transformer.ln_f.weight")
        state["transformer.h.0.attn.rotary_emb.inv_freq"] = torch.ones(16)
        state["transformer.h.0.attn._extra_state"] = torch.ones(1)

    cf.edit_shard(src, "transformer.ln_f.weight", rename)
    with pytest.raises(ConvertError, match=r"decoder\.final_norm"):
        convert(_opts(src, tmp_path / "dest"))
    key_map = [
        {"pattern": r"decoder\.final_norm", "replace": "model.norm.weight"},
        {"pattern": r".*\._extra_state", "replace": None},
    ]
    result = convert(_opts(src, tmp_path / "dest", key_map=key_map))
    assert sorted(result["dropped"]) == [
        "transformer.h.0.attn._extra_state",
        "transformer.h.0.attn.rotary_emb.inv_freq",
    ]
    # a rule mapping two tensors onto one name is refused
    bad = [{"pattern": r"transformer\.h\.\d+\.ln_1\.weight", "replace": "model.norm.weight"}]
    with pytest.raises(ConvertError, match="mapped twice"):
        convert(_opts(src, tmp_path / "dest2", key_map=key_map + bad))


def test_dtype_and_shards(legacy: Path, tmp_path: Path) -> None:
    from transformers import LlamaForCausalLM

    dest = tmp_path / "dest"
    result = convert(_opts(legacy, dest, dtype="bfloat16", max_shard_size="50KB"))
    assert result["shards"] > 3
    index = json.loads((dest / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) == result["shards"]
    for shard in shards:
        assert (dest / shard).stat().st_size <= 50_000 + 4096 or len(
            [n for n, s in index["weight_map"].items() if s == shard]
        ) == 1
    model = LlamaForCausalLM.from_pretrained(dest, dtype=torch.bfloat16)
    original = cf.load_all(legacy)["transformer.wte.weight"]
    assert torch.equal(model.model.embed_tokens.weight, original.to(torch.bfloat16))


def test_non_contiguous_tensor_in_bin(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    torch.save({"t": base.t(), "s": base[1:3]}, src / "pytorch_model.bin")
    (src / "config.json").write_text(json.dumps({"architectures": ["Custom"]}))
    convert(_opts(src, tmp_path / "dest", profile="none", tokenizer="skip"))
    from safetensors.torch import load_file

    got = load_file(str(tmp_path / "dest" / "model-00001-of-00001.safetensors"))
    assert torch.equal(got["t"], base.t().contiguous()) and torch.equal(got["s"], base[1:3])


def _mixed_checkpoint(src: Path) -> dict[str, torch.Tensor]:
    """Kept-dtype contiguous tensors around a non-contiguous view: kernel copy and chunked path."""
    src.mkdir()
    base = torch.arange(4096, dtype=torch.float32).reshape(64, 64)
    state = {"a": base[:8].clone(), "t": base.t(), "b": base[8:16].clone(), "c": base[1:3]}
    torch.save(state, src / "pytorch_model.bin")
    (src / "config.json").write_text(json.dumps({"architectures": ["Custom"]}))
    return state


@pytest.mark.parametrize("kernel", ["direct", "copy_file_range", "refused"])
def test_direct_kernel_copy_and_fallback_give_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    import errno
    import hashlib

    state = _mixed_checkpoint(tmp_path / "src")
    real = mcw.os.copy_file_range
    calls: list[int] = []
    reads: list[int] = []
    real_read = mcs.read_range

    def copy_file_range(src_fd: int, dst_fd: int, count: int, offset_src: int) -> int:
        calls.append(count)
        if kernel == "refused":
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(src_fd, dst_fd, count, offset_src)

    def read_range(*args: object) -> memoryview:
        reads.append(1)
        return real_read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(mcw.os, "copy_file_range", copy_file_range)
    monkeypatch.setattr(mcs, "read_range", read_range)
    dest = tmp_path / "dest"
    opts = _opts(tmp_path / "src", dest, profile="none", tokenizer="skip")
    opts.direct_io = kernel == "direct"
    assert convert(opts)["io"] == ("direct" if kernel == "direct" else "page cache")
    shard = dest / "model-00001-of-00001.safetensors"
    from safetensors.torch import load_file

    got = load_file(str(shard))
    assert all(torch.equal(got[name], value.contiguous()) for name, value in state.items())
    if kernel == "direct":  # a, b, c read directly, t (not contiguous) by the chunked path
        assert (len(reads), calls) == (3, [])
    else:  # the kernel was asked once per kept contiguous tensor; once refused, never again
        assert (reads, len(calls)) == ([], 3 if kernel == "copy_file_range" else 1)
    manifest = json.loads((dest / MANIFEST).read_text())
    assert manifest["files"][shard.name]["sha256"] == hashlib.sha256(shard.read_bytes()).hexdigest()


@pytest.mark.parametrize("cached", [0.0, 1.0])
def test_direct_io_in_small_blocks_matches_the_buffered_path(
    legacy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: float
) -> None:
    """Tiny blocks: tensors span many blocks, the read ring wraps many times, odd tails."""
    from ansible_collections.instinct.vllm.plugins.module_utils._model_convert import direct as mcd

    reference = tmp_path / "buffered"
    opts = _opts(legacy, reference, max_shard_size="40KB")
    opts.direct_io = False
    convert(opts)
    monkeypatch.setattr(mcd, "BLOCK", 3 * 4096)
    monkeypatch.setattr(mcs, "BLOCK", 5 * 4096 + 512)  # read blocks not a multiple of ALIGN
    monkeypatch.setattr(mcd.PageCache, "fraction", lambda *_a: cached)
    writers: list[Path] = []
    real_create = mcd.DirectWriter.create.__func__  # type: ignore[attr-defined]

    def create(cls: type, path: Path) -> object:
        writers.append(path)
        return real_create(cls, path)

    monkeypatch.setattr(mcd.DirectWriter, "create", classmethod(create))
    dest = tmp_path / "direct"
    result = convert(_opts(legacy, dest, max_shard_size="40KB"))
    assert len(writers) == result["shards"] > 1
    assert cf.tree_bytes(dest) == cf.tree_bytes(reference)


def test_direct_io_refused_by_the_filesystem_falls_back(
    legacy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    real_open = mc.os.open

    def no_direct(path: object, flags: int, *args: object) -> int:
        if flags & mc.os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(mc.os, "open", no_direct)  # the same os module everywhere
    reference = tmp_path / "reference"
    opts = _opts(legacy, reference)
    opts.direct_io = False
    convert(opts)
    dest = tmp_path / "dest"
    result = convert(_opts(legacy, dest))
    assert (result["changed"], result["io"]) == (True, "page cache")
    assert cf.tree_bytes(dest) == cf.tree_bytes(reference)


def test_cli_progress_and_errors(legacy: Path, tmp_path: Path) -> None:
    cli = Path(__file__).resolve().parents[4] / "files" / "model-convert"
    proc = subprocess.run(
        [sys.executable, str(cli), str(legacy), str(tmp_path / "dest"), "--progress"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["changed"] is True
    assert "100.0%" in proc.stderr
    proc = subprocess.run(
        [sys.executable, str(cli), str(tmp_path / "missing"), str(tmp_path / "d2")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and "config.json: missing" in proc.stderr


def test_cli_options_mirror_the_module() -> None:
    from ansible_collections.instinct.vllm.plugins.module_utils._model_convert import cli

    opts = cli.options_from_args(cli.parse_args(["s", "d", "--no-direct-io", "--force"]))
    assert (opts.direct_io, opts.force) == (False, True)
    assert cli.options_from_args(cli.parse_args(["s", "d"])).direct_io is True


def test_parse_size() -> None:
    from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.plan import (
        parse_size,
    )

    assert parse_size("5GB") == 5 * 10**9
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size(1000) == 1000
    with pytest.raises(ConvertError, match="max_shard_size"):
        parse_size("lots")


def test_gil_handover_interval_is_restored(
    legacy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[float] = []
    real = mc._write_all

    def spy(*args: object) -> object:
        seen.append(sys.getswitchinterval())
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(mc, "_write_all", spy)
    before = sys.getswitchinterval()
    convert(_opts(legacy, tmp_path / "dest"))
    assert seen == [min(before, mcs.SWITCH_INTERVAL)]
    assert sys.getswitchinterval() == before


def test_transformers_4_converter_gets_a_slow_tokenizer_stand_in(tmp_path: Path) -> None:
    """transformers 4.x (vLLM 0.6.6's lock, 4.47.1) has no build_tokenizer_from_spm_proto: its
    SpmConverter is built from a slow tokenizer and reads only vocab_file. (The real 4.47.1
    path runs in molecule/vllm-source, role model in the 0.6.6 venv.)"""
    from types import SimpleNamespace

    from ansible_collections.instinct.vllm.plugins.module_utils._model_convert import (
        tokenizer as tk,
    )

    seen: dict = {}

    class Converter4:  # the shape of transformers 4.47's SpmConverter
        handle_byte_fallback = False

        def __init__(self, original_tokenizer: object) -> None:
            seen["vocab_file"] = original_tokenizer.vocab_file
            seen["byte_fallback"] = self.handle_byte_fallback

        def converted(self) -> str:
            return "tokenizer"

    proto = SimpleNamespace(trainer_spec=SimpleNamespace(byte_fallback=True))
    model = tmp_path / "tokenizer.model"
    assert tk._spm_tokenizer(Converter4, model, proto, {}) == "tokenizer"
    assert seen == {"vocab_file": str(model), "byte_fallback": True}

    class Converter5:
        @staticmethod
        def build_tokenizer_from_spm_proto(proto: object, vocab: object) -> tuple:
            return proto, vocab

    assert tk._spm_tokenizer(Converter5, model, proto, {"a": 0}) == (proto, {"a": 0})
