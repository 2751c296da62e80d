"""Legacy checkpoint -> Hugging Face conversion (public facade of `_model_convert`).

The modules model_convert and legacy_checkpoint_demo and the files/model-convert CLI import
from here. Inside `_model_convert/`: convert.py (the pipeline), plan.py (what to write), io.py
and torchzip.py (reading), direct.py (O_DIRECT), shard.py (safetensors shards), writers.py
(hashed output files, flushes), commit.py (lock, partial dir, swap into place), tokenizer.py,
demo.py (the legacy demo checkpoint), cli.py (the command line).
"""

from __future__ import annotations

from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.cli import main
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.convert import (
    ConvertError,
    ConvertOptions,
    convert,
)
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.demo import (
    LegacySpec,
    make_legacy_checkpoint,
)

__all__ = [
    "ConvertError",
    "ConvertOptions",
    "LegacySpec",
    "convert",
    "main",
    "make_legacy_checkpoint",
]
