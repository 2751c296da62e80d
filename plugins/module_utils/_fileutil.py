# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""File helpers shared by the subsystems (standard library only): a file's sha256, JSON bytes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

CHUNK = 1 << 20


def sha256_file(path: str | Path, chunk: int = CHUNK) -> str:
    """Hex sha256 of a file, read ``chunk`` bytes at a time."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def json_text(data: Any) -> str:
    """JSON as the collection writes it to disk: indented, UTF-8 kept, a final newline."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def json_bytes(data: Any) -> bytes:
    return json_text(data).encode("utf-8")
