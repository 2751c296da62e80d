"""Shell entry point for model_convert (no Ansible needed).

    <venv>/bin/python files/model-convert \\
        SRC DEST [--profile auto] [--dtype keep] [--max-shard-size 5GB] [--check] ...

(files/model-convert calls main() here). Shows a progress bar on stderr
(when stderr is a terminal, or with --progress) and prints the result as JSON on stdout.
Exit status: 0 converted or up to date, 2 bad input (message on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.convert import (
    ConvertError,
    ConvertOptions,
    convert,
)


class Bar:
    """A one-line progress bar on a stream, redrawn at most 10 times a second."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.started = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, total: int, name: str) -> None:
        now = time.monotonic()
        if now - self.last < 0.1 and done < total:
            return
        self.last = now
        frac = done / total if total else 1.0
        rate = done / 1e6 / max(now - self.started, 1e-6)
        filled = "#" * int(frac * 30)
        self.stream.write(
            f"\r[{filled:<30}] {frac * 100:5.1f}% {done / 1e9:7.2f}/{total / 1e9:.2f} GB "
            f"{rate:7.1f} MB/s {name[-40:]:<40}"
        )
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="model-convert",
        description="Convert a legacy checkpoint (.bin or safetensors) into a layout that "
        "transformers' LlamaForCausalLM and vLLM load as is (instinct.vllm.model_convert).",
    )
    p.add_argument("src", help="source checkpoint directory (never modified)")
    p.add_argument("dest", help="output directory (written atomically)")
    p.add_argument("--profile", default="auto", choices=["auto", "gptoss_llama", "none"])
    p.add_argument(
        "--key-map",
        action="append",
        default=[],
        metavar="REGEX=REPLACEMENT",
        help="ordered rename rule, before the profile's; an empty replacement drops the tensor",
    )
    p.add_argument(
        "--config-override",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="set a config.json field, value parsed as JSON (e.g. rope_theta=500000)",
    )
    p.add_argument("--dtype", default="keep", choices=["keep", "float16", "bfloat16", "float32"])
    p.add_argument("--max-shard-size", default="5GB")
    p.add_argument("--tokenizer", default="auto", choices=["auto", "convert", "copy", "skip"])
    p.add_argument("--verify", default="layout", choices=["none", "layout", "full"])
    p.add_argument("--force", action="store_true", help="convert even when dest is up to date")
    p.add_argument(
        "--no-direct-io",
        dest="direct_io",
        action="store_false",
        help="copy through the page cache (copy_file_range) instead of O_DIRECT",
    )
    p.add_argument("--check", action="store_true", help="plan and validate only, write nothing")
    p.add_argument("--progress", action="store_true", help="progress bar even without a terminal")
    return p.parse_args(argv)


def options_from_args(args: argparse.Namespace) -> ConvertOptions:
    key_map: list[dict[str, Any]] = []
    for rule in args.key_map:
        pattern, sep, replace = rule.partition("=")
        if not sep:
            raise ConvertError(f"--key-map {rule!r}: expected REGEX=REPLACEMENT")
        key_map.append({"pattern": pattern, "replace": replace or None})
    overrides: dict[str, Any] = {}
    for item in args.config_override:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConvertError(f"--config-override {item!r}: expected KEY=JSON")
        try:
            overrides[key] = json.loads(raw)
        except ValueError:
            overrides[key] = raw
    return ConvertOptions(
        src=args.src,
        dest=args.dest,
        profile=args.profile,
        key_map=key_map,
        config_overrides=overrides,
        dtype=args.dtype,
        max_shard_size=args.max_shard_size,
        tokenizer=args.tokenizer,
        verify=args.verify,
        force=args.force,
        direct_io=args.direct_io,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    show = args.progress or sys.stderr.isatty()
    try:
        result = convert(
            options_from_args(args),
            progress=Bar(sys.stderr) if show else None,
            check=args.check,
        )
    except ConvertError as exc:
        sys.stderr.write(f"model-convert: error: {exc}\n")
        return 2
    result.pop("diff", None)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0
