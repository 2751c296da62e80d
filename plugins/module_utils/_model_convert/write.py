"""Streaming safetensors writer for model_convert, and the safe-write helpers.

Where the filesystems allow O_DIRECT (the default), a tensor whose dtype is kept is read with
direct I/O into a ring of aligned buffers and the shard is written with direct I/O
(model_convert_direct), hashed from the same buffers. Otherwise such a tensor is copied by the
kernel, ``copy_file_range(2)`` from its byte range in the source file to the output file (as GNU
cp does), and the output is hashed by reading back what was just written from the page cache,
in a helper thread. A dtype change or a non-contiguous view in a .bin goes in fixed-size chunks
(positional reads in a reader thread, dtype conversion chunk by chunk with torch, imported
lazily). Either way memory stays at a few buffers whatever the model size, and finished shards
are fsynced in a helper thread under the next shard's copy.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import queue
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from ansible_collections.instinct.vllm.plugins.module_utils._fileutil import json_bytes
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.direct import (
    ALIGN,
    BLOCK,
    DirectWriter,
    OutputFile,
    PageCache,
    buffer,
    failure,
    read_range,
)
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.io import (
    TORCH_TO_ST,
    ConvertError,
    SourceTensor,
)

CHUNK = 32 * 1024 * 1024
PREFETCH = 3
COPY_STEP = 64 * 1024 * 1024
EARLY_FLUSH = 256 * 1024 * 1024
SWITCH_INTERVAL = 0.0005  # s, see quick_gil_handover
# copy_file_range refused for this pair of files: fall back to reads and writes
_NO_KERNEL_COPY = frozenset(
    {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EPERM}
)
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class OutTensor:
    source: SourceTensor
    name: str
    dtype: str  # torch dtype name written

    @property
    def nbytes(self) -> int:
        return self.source.numel * TORCH_TO_ST[self.dtype][1]


def safetensors_header(tensors: list[OutTensor], metadata: dict[str, str]) -> bytes:
    """Header bytes (length prefix included), padded to 8 bytes like the safetensors library."""
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for t in tensors:
        header[t.name] = {
            "dtype": TORCH_TO_ST[t.dtype][0],
            "shape": list(t.source.shape),
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw


def _chunks_from_file(fd: int, tensor: SourceTensor, chunk: int) -> Iterator[bytes]:
    pos, end = tensor.offset, tensor.offset + tensor.nbytes
    while pos < end:
        data = os.pread(fd, min(chunk, end - pos), pos)
        if not data:
            raise ConvertError(f"{tensor.file}: tensor {tensor.name}: unexpected end of file")
        pos += len(data)
        yield data


def _chunks_materialised(root: Path, tensor: SourceTensor) -> Iterator[bytes]:
    """Fallback for a non-contiguous view in a .bin: materialise this one tensor only."""
    import torch

    state = torch.load(root / tensor.file, mmap=True, weights_only=True, map_location="cpu")
    value = state[tensor.name].contiguous()
    del state
    data = value.view(torch.uint8).numpy().tobytes() if value.numel() else b""
    del value
    for start in range(0, len(data), CHUNK):
        yield data[start : start + CHUNK]


def _convert_chunk(data: bytes, src_dtype: str, dst_dtype: str) -> bytes:
    import torch

    src = torch.frombuffer(bytearray(data), dtype=getattr(torch, src_dtype))
    return src.to(getattr(torch, dst_dtype)).view(torch.uint8).numpy().tobytes()


def tensor_chunks(root: Path, fds: dict[str, int], tensor: OutTensor) -> Iterator[bytes]:
    """The output bytes of one tensor, in chunks (element-aligned when converting)."""
    src = tensor.source
    itemsize = TORCH_TO_ST[src.dtype][1]
    raw = (
        _chunks_from_file(fds[src.file], src, CHUNK - CHUNK % itemsize)
        if src.offset >= 0
        else _chunks_materialised(root, src)
    )
    if tensor.dtype == src.dtype:
        yield from raw
        return
    for data in raw:
        yield _convert_chunk(data, src.dtype, tensor.dtype)


def _prefetch(
    gen: Iterator[tuple[OutTensor, bytes | memoryview]],
) -> Iterator[tuple[OutTensor, bytes | memoryview]]:
    """Run the reads in a thread, a few chunks ahead of the writer."""
    q: queue.Queue[Any] = queue.Queue(maxsize=PREFETCH)
    stop = threading.Event()
    done = object()

    def worker() -> None:
        try:
            for item in gen:
                if stop.is_set():
                    return
                q.put(item)
            q.put(done)
        except BaseException as exc:
            q.put(exc)

    thread = threading.Thread(target=worker, name="model_convert-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(0.05)


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


def _direct_chunks(
    root: Path,
    fds: dict[str, int],
    direct: dict[str, int],
    tensors: list[OutTensor],
) -> Iterator[tuple[OutTensor, bytes | memoryview]]:
    """Every tensor's output bytes; kept-dtype contiguous ones read with direct I/O.

    Views point into a ring of PREFETCH + 2 buffers: through _prefetch, at most PREFETCH views
    wait in its queue and one is being written when the reader fills the next, so a buffer is
    never refilled while a view of it is still in use.
    """
    ring = [buffer(BLOCK + 2 * ALIGN) for _slot in range(PREFETCH + 2)]
    cache = PageCache()
    turn = 0
    for tensor in tensors:
        src = tensor.source
        if src.offset < 0 or tensor.dtype != src.dtype:
            for data in tensor_chunks(root, fds, tensor):
                yield tensor, data
            continue
        pos, end = src.offset, src.offset + tensor.nbytes
        while pos < end:
            count = min(BLOCK, end - pos)
            try:
                view = read_range(fds[src.file], direct[src.file], pos, count, ring[turn], cache)
            except (ConvertError, OSError) as exc:
                raise failure(f"{src.file}: tensor {src.name}: read", exc) from exc
            turn = (turn + 1) % len(ring)
            pos += count
            yield tensor, view


@contextmanager
def quick_gil_handover(interval: float = SWITCH_INTERVAL) -> Iterator[None]:
    """Let threads hand the GIL over every `interval` s (Python's default: 5 ms) for a while.

    The copy's reader, writer and main threads each need the GIL briefly per block; while the
    tokenizer thread imports transformers (a second or two of pure Python) every such hand-over
    otherwise waits out the full switch interval. Measured on 4 GB cold, 8 runs each: median
    10.2 s with 0.5 ms against 10.95 s with 5 ms. The old interval is restored afterwards.
    """
    old = sys.getswitchinterval()
    sys.setswitchinterval(min(old, interval))
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _kernel_copyable(out: HashingWriter, tensor: OutTensor) -> bool:
    src = tensor.source
    return out.kernel_copy and src.offset >= 0 and tensor.dtype == src.dtype


def _kernel_copy(
    out: HashingWriter, fds: dict[str, int], tensor: OutTensor, count: Callable[[int], None]
) -> bool:
    """Copy a kept-dtype tensor in the kernel; False (nothing written) when the kernel refuses."""
    src = tensor.source
    try:
        for got in out.copy_from(fds[src.file], src.offset, tensor.nbytes):
            count(got)
    except OSError as exc:
        if out.kernel_copy:
            raise ConvertError(f"{src.file}: tensor {src.name}: copy failed: {exc}") from exc
        return False
    return True


def _write_buffered(
    out: HashingWriter,
    tensors: list[OutTensor],
    fds: dict[str, int],
    stream: Callable[[list[OutTensor]], None],
    count: Callable[[OutTensor, int], None],
) -> None:
    """Kept contiguous tensors by copy_file_range, runs of the others by the chunked path."""
    pending: list[OutTensor] = []
    for tensor in tensors:
        if _kernel_copyable(out, tensor):
            if pending:
                stream(pending)
                pending = []
            if _kernel_copy(out, fds, tensor, lambda n, t=tensor: count(t, n)):
                continue
        pending.append(tensor)
    if pending:
        stream(pending)


def write_shard(
    root: Path,
    path: Path,
    tensors: list[OutTensor],
    fds: dict[str, int],
    on_bytes: Callable[[int, str], None],
    syncer: Syncer,
    direct: dict[str, int] | None = None,
    paths: set[str] | None = None,
) -> dict[str, Any]:
    """Write one safetensors shard; return its size and sha256 (syncer flushes it).

    With `direct` (O_DIRECT descriptors of the source files), the shard is written with direct
    I/O when its filesystem allows; otherwise kept tensors are copied by copy_file_range.
    `paths` gets "direct" or "page cache", the way this shard went.
    """
    out: HashingWriter | DirectWriter | None = DirectWriter.create(path) if direct else None
    if out is None:
        out = HashingWriter(path, parallel=True)
    if paths is not None:
        paths.add("page cache" if out.buffered else "direct")
    written: dict[str, int] = {}

    def count(tensor: OutTensor, nbytes: int) -> None:
        written[tensor.name] = written.get(tensor.name, 0) + nbytes
        on_bytes(nbytes, tensor.name)
        syncer.wrote(out)

    def pump(chunks: Iterator[tuple[OutTensor, bytes | memoryview]]) -> None:
        for tensor, data in _prefetch(chunks):
            out.write(data)
            count(tensor, len(data))

    def stream(batch: list[OutTensor]) -> None:
        pump((t, data) for t in batch for data in tensor_chunks(root, fds, t))

    try:
        out.write(safetensors_header(tensors, {"format": "pt"}))
        if isinstance(out, DirectWriter):
            pump(_direct_chunks(root, fds, direct or {}, tensors))
        else:
            _write_buffered(out, tensors, fds, stream, count)
        for tensor in tensors:
            if written.get(tensor.name, 0) != tensor.nbytes:
                raise ConvertError(
                    f"{tensor.source.file}: tensor {tensor.source.name}: read "
                    f"{written.get(tensor.name, 0)} bytes, expected {tensor.nbytes}"
                )
        info = out.digest()
    except BaseException:
        syncer.settle()
        out.abort()
        raise
    syncer.submit(out)
    return info


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
