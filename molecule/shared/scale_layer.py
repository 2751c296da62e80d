"""Copy a float32 safetensors checkpoint with one layer's weights scaled: the wrong model the
fingerprint must catch (docs/fingerprint.md). Standard library only, so it runs on a sandbox
node's system Python as well as on the controller:

    python3 scale_layer.py SRC DEST PREFIX FACTOR      e.g. ... model.layers.1. 1.05

Used by tests/integration/test_fingerprint_vllm.py (imported) and the serving scenario's
acceptance test (its source sent to the node)."""

from __future__ import annotations

import array
import json
import shutil
import struct
import sys
from pathlib import Path


def scale_layer(src: Path, dest: Path, prefix: str, factor: float) -> int:
    """Copy `src` to `dest`, multiplying every tensor whose name starts with `prefix` by
    `factor`; the number of tensors scaled."""
    shutil.copytree(src, dest)
    scaled = 0
    for shard in sorted(dest.glob("*.safetensors")):
        raw = bytearray(shard.read_bytes())
        size = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + size])
        for name, t in header.items():
            if not name.startswith(prefix):
                continue
            if t["dtype"] != "F32":
                raise ValueError(f"{shard.name}: {name} is {t['dtype']}, not F32")
            lo, hi = (8 + size + o for o in t["data_offsets"])
            values = array.array("f", bytes(raw[lo:hi]))
            raw[lo:hi] = array.array("f", (v * factor for v in values)).tobytes()
            scaled += 1
        shard.write_bytes(bytes(raw))
    return scaled


def main(argv: list[str]) -> int:
    src, dest, prefix, factor = argv
    scaled = scale_layer(Path(src), Path(dest), prefix, float(factor))
    print(f"{scaled} tensors under {prefix} scaled by {factor} in {dest}")
    return 0 if scaled else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
