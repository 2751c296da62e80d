"""Tokenizer files for model_convert.

sentencepiece cannot write a tokenizer.json; transformers' sentencepiece converter
(`transformers.convert_slow_tokenizer.SpmConverter.build_tokenizer_from_spm_proto`, which follows
the model's own normalizer settings) builds a `tokenizers.Tokenizer` from the `tokenizer.model`
protobuf. transformers, tokenizers and protobuf are imported lazily.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils._fileutil import json_bytes
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


# Enum values of sentencepiece_model.proto (TrainerSpec.ModelType, ModelProto.SentencePiece.Type)
SPM_UNIGRAM = 1
SPM_BPE = 2
SPM_PIECE_CONTROL = 3
_SPM_MODEL_TYPES = (SPM_UNIGRAM, SPM_BPE)
_CONFIG_DROPPED = ("tokenizer_file", "auto_map")


@dataclass(frozen=True)
class Specials:
    """The special tokens' texts (None when neither the old files nor the model name one)."""

    bos: str | None
    eos: str | None
    unk: str | None
    pad: str | None


def _load_proto(model_path: Path) -> Any:
    from transformers.convert_slow_tokenizer import import_protobuf

    proto = import_protobuf().ModelProto()
    try:
        proto.ParseFromString(model_path.read_bytes())
    except Exception as exc:
        raise ConvertError(f"{model_path}: not a sentencepiece model: {exc}") from exc
    model_type = proto.trainer_spec.model_type
    if model_type not in _SPM_MODEL_TYPES:
        raise ConvertError(f"{model_path}: sentencepiece model type {model_type} not supported")
    return proto


def _vocab(proto: Any) -> Any:
    """BPE: {piece: id}; unigram: [(piece, score)] (what SpmConverter expects for each)."""
    if proto.trainer_spec.model_type == SPM_BPE:
        return {piece.piece: i for i, piece in enumerate(proto.pieces)}
    return [(piece.piece, piece.score) for piece in proto.pieces]


def _specials(proto: Any, special_map: dict[str, Any], old_config: dict[str, Any]) -> Specials:
    """Each special from special_tokens_map.json, else tokenizer_config.json, else the model."""
    pieces = [p.piece for p in proto.pieces]
    spec = proto.trainer_spec

    def special(key: str, spec_id: int) -> str | None:
        text = _token_text(special_map.get(key)) or _token_text(old_config.get(key))
        if text is None and 0 <= spec_id < len(pieces):
            text = pieces[spec_id]
        return text

    return Specials(
        bos=special("bos_token", spec.bos_id),
        eos=special("eos_token", spec.eos_id),
        unk=special("unk_token", spec.unk_id),
        pad=special("pad_token", spec.pad_id),
    )


def _add_special_tokens(tokenizer: Any, proto: Any, vocab: Any, specials: Specials) -> None:
    """Control pieces and the named specials become special added tokens."""
    from tokenizers import AddedToken

    pieces = [p.piece for p in proto.pieces]
    texts = [p.piece for p in proto.pieces if p.type == SPM_PIECE_CONTROL]
    for text in (specials.unk, specials.bos, specials.eos, specials.pad):
        if text and text not in texts:
            texts.append(text)
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in texts if t in vocab or t in pieces]
    )


def _set_post_processor(tokenizer: Any, head: list[str], tail: list[str]) -> None:
    """BOS/EOS around each sequence, as the old tokenizer added them."""
    from tokenizers import processors

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


def _tokenizer_config(
    old_config: dict[str, Any],
    specials: Specials,
    add_bos: bool,
    add_eos: bool,
    max_length: int | None,
) -> dict[str, Any]:
    config = {k: v for k, v in old_config.items() if k not in _CONFIG_DROPPED}
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
    named = {"bos_token": specials.bos, "eos_token": specials.eos}
    named.update({"unk_token": specials.unk, "pad_token": specials.pad})
    config.update({key: text for key, text in named.items() if text})
    if max_length and "model_max_length" not in config:
        config["model_max_length"] = max_length
    return config


def _special_tokens_map(special_map: dict[str, Any], specials: Specials) -> dict[str, Any]:
    out = dict(special_map)
    named = (("bos_token", specials.bos), ("eos_token", specials.eos), ("unk_token", specials.unk))
    for key, text in named:
        if text and key not in out:
            out[key] = text
    return out


def _spm_tokenizer(converter: Any, model_path: Path, proto: Any, vocab: Any) -> Any:
    """A ``tokenizers.Tokenizer`` from the sentencepiece proto with transformers' converter.

    transformers 5 builds it from the proto (``build_tokenizer_from_spm_proto``); 4.x (vLLM
    0.6.6's lock: 4.47.1) only from a slow tokenizer, of which its ``SpmConverter`` reads
    ``vocab_file`` (and ``add_prefix_space`` when present), so a stand-in with that one
    attribute is enough. Byte fallback follows the model's trainer spec in both."""
    build_from_proto = getattr(converter, "build_tokenizer_from_spm_proto", None)
    if build_from_proto is not None:
        return build_from_proto(proto, vocab)

    class _SlowTokenizer:
        vocab_file = str(model_path)

    class _Converter(converter):  # type: ignore[misc, valid-type]
        handle_byte_fallback = bool(proto.trainer_spec.byte_fallback)

    return _Converter(_SlowTokenizer()).converted()


def build(src: Path, max_length: int | None) -> dict[str, bytes]:
    """{name: bytes} for tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
    from transformers.convert_slow_tokenizer import SpmConverter

    model_path = src / "tokenizer.model"
    proto = _load_proto(model_path)
    vocab = _vocab(proto)
    tokenizer = _spm_tokenizer(SpmConverter, model_path, proto, vocab)
    if tokenizer is None:
        raise ConvertError(f"{model_path}: transformers could not convert this sentencepiece model")
    special_map = _load_json(src / "special_tokens_map.json")
    old_config = _load_json(src / "tokenizer_config.json")
    specials = _specials(proto, special_map, old_config)
    _add_special_tokens(tokenizer, proto, vocab, specials)
    add_bos = bool(old_config.get("add_bos_token", True))
    add_eos = bool(old_config.get("add_eos_token", False))
    head = [specials.bos] if add_bos and specials.bos else []
    tail = [specials.eos] if add_eos and specials.eos else []
    if head or tail:
        _set_post_processor(tokenizer, head, tail)
    config = _tokenizer_config(old_config, specials, add_bos, add_eos, max_length)
    return {
        "tokenizer.json": tokenizer.to_str(pretty=True).encode("utf-8") + b"\n",
        "tokenizer_config.json": json_bytes(config),
        "special_tokens_map.json": json_bytes(_special_tokens_map(special_map, specials)),
    }
