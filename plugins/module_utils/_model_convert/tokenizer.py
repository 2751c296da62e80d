"""Tokenizer files for model_convert.

sentencepiece cannot write a tokenizer.json; transformers' sentencepiece converter
(`transformers.convert_slow_tokenizer.SpmConverter.build_tokenizer_from_spm_proto`, which follows
the model's own normalizer settings) builds a `tokenizers.Tokenizer` from the `tokenizer.model`
protobuf. transformers, tokenizers and protobuf are imported lazily.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.io import (
    ConvertError,
)

TOKENIZER_MODES = ("auto", "convert", "copy", "skip")
COPY_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)


def _load_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConvertError(f"{path}: cannot read JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConvertError(f"{path}: expected a JSON object")
    return data


def resolve_mode(mode: str, src: Path) -> str:
    if mode not in TOKENIZER_MODES:
        raise ConvertError(f"tokenizer {mode!r}: expected one of {', '.join(TOKENIZER_MODES)}")
    if mode != "auto":
        if mode == "convert" and not (src / "tokenizer.model").is_file():
            raise ConvertError(f"tokenizer convert: {src / 'tokenizer.model'} is missing")
        return mode
    if (src / "tokenizer.json").is_file():
        return "copy"
    if (src / "tokenizer.model").is_file():
        return "convert"
    return "skip"


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def build(src: Path, max_length: int | None) -> dict[str, bytes]:
    """{name: bytes} for tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
    from tokenizers import AddedToken, processors
    from transformers.convert_slow_tokenizer import (
        SpmConverter,
        import_protobuf,
    )

    model_path = src / "tokenizer.model"
    proto = import_protobuf().ModelProto()
    try:
        proto.ParseFromString(model_path.read_bytes())
    except Exception as exc:
        raise ConvertError(f"{model_path}: not a sentencepiece model: {exc}") from exc
    spec = proto.trainer_spec
    if spec.model_type not in (1, 2):
        raise ConvertError(
            f"{model_path}: sentencepiece model type {spec.model_type} not supported"
        )
    vocab: Any
    if spec.model_type == 2:
        vocab = {piece.piece: i for i, piece in enumerate(proto.pieces)}
    else:
        vocab = [(piece.piece, piece.score) for piece in proto.pieces]
    tokenizer = SpmConverter.build_tokenizer_from_spm_proto(proto, vocab)
    if tokenizer is None:
        raise ConvertError(f"{model_path}: transformers could not convert this sentencepiece model")

    special_map = _load_json(src / "special_tokens_map.json")
    old_config = _load_json(src / "tokenizer_config.json")
    pieces = [p.piece for p in proto.pieces]

    def special(key: str, spec_id: int) -> str | None:
        text = _token_text(special_map.get(key)) or _token_text(old_config.get(key))
        if text is None and 0 <= spec_id < len(pieces):
            text = pieces[spec_id]
        return text

    bos = special("bos_token", spec.bos_id)
    eos = special("eos_token", spec.eos_id)
    unk = special("unk_token", spec.unk_id)
    pad = special("pad_token", spec.pad_id)
    # control pieces (type 3) and the named specials are special added tokens
    specials = [p.piece for p in proto.pieces if p.type == 3]
    for text in (unk, bos, eos, pad):
        if text and text not in specials:
            specials.append(text)
    tokenizer.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t in specials
            if t in vocab or t in pieces
        ]
    )
    add_bos = bool(old_config.get("add_bos_token", True))
    add_eos = bool(old_config.get("add_eos_token", False))
    head = [bos] if add_bos and bos else []
    tail = [eos] if add_eos and eos else []
    if head or tail:

        def side(seq: str) -> list[str]:
            return (
                [f"{t}:{seq}" for t in head]
                + [f"${'A' if seq == '0' else 'B'}:{seq}"]
                + [f"{t}:{seq}" for t in tail]
            )

        tokenizer.post_processor = processors.TemplateProcessing(
            single=" ".join(side("0")),
            pair=" ".join(side("0") + side("1")),
            special_tokens=[(t, tokenizer.token_to_id(t)) for t in dict.fromkeys(head + tail)],
        )

    config: dict[str, Any] = {
        key: value for key, value in old_config.items() if key not in ("tokenizer_file", "auto_map")
    }
    config.update(
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "add_bos_token": add_bos,
            "add_eos_token": add_eos,
            "clean_up_tokenization_spaces": bool(
                old_config.get("clean_up_tokenization_spaces", False)
            ),
        }
    )
    for key, text in (
        ("bos_token", bos),
        ("eos_token", eos),
        ("unk_token", unk),
        ("pad_token", pad),
    ):
        if text:
            config[key] = text
    if max_length and "model_max_length" not in config:
        config["model_max_length"] = max_length
    special_out = dict(special_map)
    for key, text in (("bos_token", bos), ("eos_token", eos), ("unk_token", unk)):
        if text and key not in special_out:
            special_out[key] = text

    def dump(data: Any) -> bytes:
        return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")

    return {
        "tokenizer.json": tokenizer.to_str(pretty=True).encode("utf-8") + b"\n",
        "tokenizer_config.json": dump(config),
        "special_tokens_map.json": dump(special_out),
    }
