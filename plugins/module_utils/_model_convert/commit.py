"""Putting a conversion in place: a lock beside dest, a partial dir, an atomic swap.

The output is written into ``.<dest>.partial`` beside dest (:func:`partial_dir`) under an
exclusive flock (:class:`DirLock`); :func:`commit` fsyncs it and renames it over dest (the old
dest moved aside to ``.<dest>.old`` first, then removed); :func:`clean_stale` removes what an
interrupted run left.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Self

from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.io import ConvertError


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def partial_dir(dest: Path) -> Path:
    return dest.parent / f".{dest.name}.partial"


def clean_stale(dest: Path) -> None:
    """Remove what an interrupted run left beside dest (partial output, replaced output)."""
    for suffix in (".partial", ".old"):
        stale = dest.parent / f".{dest.name}{suffix}"
        if stale.exists():
            shutil.rmtree(stale)


def commit(tmp: Path, dest: Path) -> None:
    """Atomically put tmp in place of dest (the old dest, if any, is moved aside then removed)."""
    fsync_dir(tmp)
    old = dest.parent / f".{dest.name}.old"
    if dest.exists():
        os.rename(dest, old)
    os.rename(tmp, dest)
    fsync_dir(dest.parent)
    if old.exists():
        shutil.rmtree(old)


class DirLock:
    """An exclusive flock beside dest, so two conversions never share a temp dir."""

    def __init__(self, dest: Path) -> None:
        self.path = dest.parent / f".{dest.name}.lock"
        self.fd = -1

    def __enter__(self) -> Self:
        import fcntl

        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self.fd)
            raise ConvertError(f"{self.path}: another conversion to this dest is running") from exc
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
