"""Streaming safetensors shards for model_convert.

Where the filesystems allow O_DIRECT (the default), a tensor whose dtype is kept is read with
direct I/O into a ring of aligned buffers and the shard is written with direct I/O
(direct.py), hashed from the same buffers. Otherwise such a tensor is copied by the
kernel, ``copy_file_range(2)`` from its byte range in the source file to the output file (as GNU
cp does), and the output is hashed by reading back what was just written from the page cache,
in a helper thread (writers.py). A dtype change or a non-contiguous view in a .bin goes in
fixed-size chunks (positional reads in a reader thread, dtype conversion chunk by chunk with
torch, imported lazily). Either way memory stays at a few buffers whatever the model size, and
finished shards are fsynced in a helper thread under the next shard's copy (writers.Syncer).
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.direct import (
    ALIGN,
    BLOCK,
    DirectWriter,
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
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.writers import (
    CHUNK,
    HashingWriter,
    Syncer,
)

PREFETCH = 3
SWITCH_INTERVAL = 0.0005  # s, see quick_gil_handover
Progress = Callable[[int, int, str], None]
Counter = Callable[["OutTensor", int], None]
Chunks = Iterator[tuple["OutTensor", "bytes | memoryview"]]  # quoted: pylint's py-version


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


def _prefetch(gen: Chunks) -> Chunks:
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


def _direct_chunks(
    root: Path,
    fds: dict[str, int],
    direct: dict[str, int],
    tensors: list[OutTensor],
) -> Chunks:
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


@dataclass(frozen=True)
class ShardWritten:
    """What :func:`write_shard` wrote: the manifest entry and the way the bytes went."""

    info: dict[str, Any]  # {size, sha256}
    io: str  # "direct" or "page cache"


def _open_shard(path: Path, direct: dict[str, int] | None) -> HashingWriter | DirectWriter:
    """A direct-I/O writer when asked and the filesystem allows, else a page-cache one."""
    out = DirectWriter.create(path) if direct else None
    return out if out is not None else HashingWriter(path, parallel=True)


def _write_tensors(
    out: HashingWriter | DirectWriter,
    root: Path,
    fds: dict[str, int],
    direct: dict[str, int] | None,
    tensors: list[OutTensor],
    count: Counter,
) -> None:
    """Every tensor's bytes into out, after its header."""

    def pump(chunks: Chunks) -> None:
        for tensor, data in _prefetch(chunks):
            out.write(data)
            count(tensor, len(data))

    def stream(batch: list[OutTensor]) -> None:
        pump((t, data) for t in batch for data in tensor_chunks(root, fds, t))

    if isinstance(out, DirectWriter):
        pump(_direct_chunks(root, fds, direct or {}, tensors))
    else:
        _write_buffered(out, tensors, fds, stream, count)


def _check_written(tensors: list[OutTensor], written: dict[str, int]) -> None:
    for tensor in tensors:
        if written.get(tensor.name, 0) != tensor.nbytes:
            raise ConvertError(
                f"{tensor.source.file}: tensor {tensor.source.name}: read "
                f"{written.get(tensor.name, 0)} bytes, expected {tensor.nbytes}"
            )


def write_shard(
    root: Path,
    path: Path,
    tensors: list[OutTensor],
    fds: dict[str, int],
    on_bytes: Callable[[int, str], None],
    syncer: Syncer,
    direct: dict[str, int] | None = None,
) -> ShardWritten:
    """Write one safetensors shard; return its size, sha256 and I/O path (syncer flushes it).

    With `direct` (O_DIRECT descriptors of the source files), the shard is written with direct
    I/O when its filesystem allows; otherwise kept tensors are copied by copy_file_range.
    """
    out = _open_shard(path, direct)
    written: dict[str, int] = {}

    def count(tensor: OutTensor, nbytes: int) -> None:
        written[tensor.name] = written.get(tensor.name, 0) + nbytes
        on_bytes(nbytes, tensor.name)
        syncer.wrote(out)

    try:
        out.write(safetensors_header(tensors, {"format": "pt"}))
        _write_tensors(out, root, fds, direct, tensors, count)
        _check_written(tensors, written)
        info = out.digest()
    except BaseException:
        syncer.settle()
        out.abort()
        raise
    syncer.submit(out)
    return ShardWritten(info, "page cache" if out.buffered else "direct")
