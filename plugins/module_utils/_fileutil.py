# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""File helpers shared by the subsystems (standard library only): a file's sha256, JSON bytes,
an atomic copy into place."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
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


def same_file(src: Path, dest: Path, mode: int, uid: int, gid: int) -> bool:
    """Whether ``dest`` already has ``src``'s bytes, ``mode``, ``uid`` and ``gid``."""
    if not dest.is_file() or dest.is_symlink():
        return False
    info = dest.stat()
    if (info.st_mode & 0o7777, info.st_uid, info.st_gid) != (mode, uid, gid):
        return False
    return info.st_size == src.stat().st_size and src.read_bytes() == dest.read_bytes()


def place_file(src: Path, dest: Path, mode: int, uid: int, gid: int) -> None:
    """Put a copy of ``src`` at ``dest`` atomically: written to a temporary file next to
    ``dest`` with its mode and owner set before any byte, synced, then renamed over ``dest``
    (a reader sees the old file or the new one, never a part; a link at ``dest`` is replaced,
    not followed)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        os.fchmod(fd, mode)
        os.fchown(fd, uid, gid)
        with os.fdopen(fd, "wb") as out, src.open("rb") as data:
            shutil.copyfileobj(data, out, CHUNK)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
