"""Output files of model_convert: hashed as they are written, flushed to disk in a helper thread.

:class:`HashingWriter` writes a file once through the page cache and computes its sha256 on the
way (``copy_from`` appends a byte range of another file with ``copy_file_range(2)`` and hashes it
by reading it back); :class:`Syncer` runs the fdatasync/fsync of finished shards under the next
shard's copy. ``write_bytes``, ``write_json`` and ``copy_file`` write the small files.
"""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self

from ansible_collections.instinct.vllm.plugins.module_utils._fileutil import json_bytes
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.direct import OutputFile
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.io import ConvertError

CHUNK = 32 * 1024 * 1024
COPY_STEP = 64 * 1024 * 1024
EARLY_FLUSH = 256 * 1024 * 1024
# copy_file_range refused for this pair of files: fall back to reads and writes
_NO_KERNEL_COPY = frozenset(
    {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EPERM}
)


class HashingWriter(OutputFile):
    """A file written once through the page cache, sha256 computed on the way.

    With `parallel`, hashing runs in a helper thread, one step behind the writes (hashlib, os.write,
    os.pread and copy_file_range all release the GIL), so it costs no wall time on a disk-bound
    copy. Bytes the kernel copied (`copy_from`) are hashed by reading them back from the output
    file, which the page cache still holds.
    """

    def __init__(self, path: Path, parallel: bool = False) -> None:
        super().__init__(path, os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))
        self.kernel_copy = True
        self._pool = ThreadPoolExecutor(1, "model_convert-sha") if parallel else None
        self._pending: Future[None] | None = None

    def _hash(self, job: Callable[[], None]) -> None:
        if self._pool is None:
            job()
            return
        if self._pending is not None:
            self._pending.result()
        self._pending = self._pool.submit(job)

    def _hash_written(self, start: int, count: int) -> None:
        """Hash bytes already in the output file through a read-only mapping (no copy)."""
        base = start - start % mmap.ALLOCATIONGRANULARITY
        with mmap.mmap(self.fd, start + count - base, prot=mmap.PROT_READ, offset=base) as mapped:
            view = memoryview(mapped)
            try:
                self.sha.update(view[start - base :])
            finally:
                view.release()

    def write(self, data: bytes | memoryview) -> None:
        self._hash(lambda: self.sha.update(data))
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]
        self.size += len(data)

    def copy_from(self, src_fd: int, offset: int, count: int) -> Iterator[int]:
        """Append `count` bytes of src_fd from `offset` with copy_file_range; yield each step.

        Raises OSError with an errno in _NO_KERNEL_COPY before copying anything when the kernel
        refuses this pair of files (kernel_copy is then False); the caller falls back.
        """
        pos, end = offset, offset + count
        while pos < end:
            try:
                got = os.copy_file_range(src_fd, self.fd, min(COPY_STEP, end - pos), pos)
            except OSError as exc:
                if exc.errno in _NO_KERNEL_COPY and pos == offset:
                    self.kernel_copy = False
                raise
            if got == 0:
                return
            start = self.size
            self._hash(lambda start=start, got=got: self._hash_written(start, got))
            self.size += got
            pos += got
            yield got

    def _settle(self) -> None:
        """Wait for the hashing to catch up."""
        if self._pending is not None:
            self._pending.result()
            self._pending = None
        if self._pool is not None:
            self._pool.shutdown()

    def close(self) -> dict[str, Any]:
        info = self.digest()
        self.sync_close()
        return info


class Syncer:
    """Flush shards to disk in a helper thread, so the copy never waits for the disk's writes.

    While a shard is written, every `EARLY_FLUSH` bytes the helper runs fdatasync on it (the copy
    goes on meanwhile), so the writes go to disk under the reads instead of all at the end; a
    finished shard is fsynced and closed there too, under the next shard's copy. `wait` (or
    leaving the with block) waits for every flush; a failed fsync is a ConvertError naming the
    file (an early flush's failure shows again in that final fsync).
    """

    def __init__(self, early: int = EARLY_FLUSH) -> None:
        self._pool = ThreadPoolExecutor(1, "model_convert-fsync")
        self._jobs: list[tuple[Path, Future[None]]] = []
        self._early = early
        self._early_job: Future[None] | None = None
        self._flushed = 0  # bytes of the current shard handed to an early flush

    def __enter__(self) -> Self:
        return self

    def wrote(self, out: OutputFile) -> None:
        """After each step of a shard: start an early flush when one is due (never blocks)."""
        if not out.buffered or out.size - self._flushed < self._early:
            return
        if self._early_job is not None and not self._early_job.done():
            return
        self._flushed = out.size
        self._early_job = self._pool.submit(os.fdatasync, out.fd)

    def settle(self) -> None:
        """Wait for a pending early flush (before its file is closed by someone else)."""
        if self._early_job is not None:
            self._early_job.exception()
            self._early_job = None

    def submit(self, out: OutputFile) -> None:
        self._early_job = None
        self._flushed = 0
        self._jobs.append((out.path, self._pool.submit(out.sync_close)))

    def wait(self) -> None:
        jobs, self._jobs = self._jobs, []
        for path, job in jobs:
            try:
                job.result()
            except OSError as exc:
                raise ConvertError(f"{path}: fsync failed: {exc}") from exc

    def __exit__(self, exc_type: object, *_exc: object) -> None:
        try:
            if exc_type is None:
                self.wait()
        finally:
            self._pool.shutdown()  # waits for the flushes (and their closes) in any case


def write_bytes(path: Path, data: bytes) -> dict[str, Any]:
    out = HashingWriter(path)
    out.write(data)
    return out.close()


def write_json(path: Path, data: Any) -> dict[str, Any]:
    return write_bytes(path, json_bytes(data))


def copy_file(src: Path, dst: Path) -> dict[str, Any]:
    out = HashingWriter(dst)
    with src.open("rb") as fh:
        while data := fh.read(CHUNK):
            out.write(data)
    return out.close()
