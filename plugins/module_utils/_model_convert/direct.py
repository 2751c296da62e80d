"""Direct I/O for model_convert: weights go disk -> a few aligned buffers -> disk.

A copy through the page cache (cp, copy_file_range, read/write) makes the kernel allocate and
fill a page-cache page for every byte read and every byte written: for a checkpoint the size of
the host's RAM that is most of the copy's CPU time, and it evicts everything else the host had
cached. With O_DIRECT the bytes move by DMA into a few reused, page-aligned buffers; the CPU does
one memcpy (tensor offsets in the .bin and in the safetensors file are aligned differently) and
the sha256 the manifest needs, in a writer thread, while the next reads are under way.

A range the page cache already holds (a checkpoint just downloaded often is) is read from there
instead: `cachestat(2)` (Linux 6.5) says how much of a range is cached, without reading it. Where
it is missing, ranges are read directly.

Used when both the source files and the output directory accept O_DIRECT (tmpfs does not, for
one); otherwise shard.py's copy_file_range path runs.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import mmap
import os
import queue
import threading
from pathlib import Path
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.io import (
    ConvertError,
)

ALIGN = 4096  # offsets, lengths and buffer addresses: a multiple of any disk's logical block
BLOCK = 4 * 1024 * 1024  # measured: 4 MiB lets other reads (the tokenizer's imports) through
DEPTH = 4  # buffers on each side (reads in flight ahead of the writer, writes behind it)
CACHED_ENOUGH = 0.9  # read a range from the page cache when this much of it is there
_SYS_CACHESTAT = 451  # the same number on every Linux architecture (added in 6.5)


def open_direct(path: Path, flags: int, mode: int = 0o644) -> int | None:
    """A file descriptor opened with O_DIRECT, or None when the filesystem refuses it."""
    if not hasattr(os, "O_DIRECT"):
        return None
    try:
        return os.open(path, flags | os.O_DIRECT, mode)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return None
        raise


def failure(what: str, exc: BaseException) -> ConvertError:
    """The error for a failed direct read or write; EINVAL gets the way around it."""
    hint = ""
    if isinstance(exc, OSError) and exc.errno == errno.EINVAL:
        hint = " (this filesystem or disk does not take direct I/O here: set direct_io: false)"
    return ConvertError(f"{what} failed: {exc}{hint}")


def buffer(size: int) -> mmap.mmap:
    """An anonymous mapping: page-aligned, as O_DIRECT wants."""
    return mmap.mmap(-1, size)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _CacheStat(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in ("cache", "dirty", "writeback", "evicted", "recently_evicted")
    ]


class PageCache:
    """How much of a file range the page cache holds (cachestat); 0.0 where it cannot tell."""

    def __init__(self) -> None:
        self._syscall: Any = None
        try:
            self._syscall = ctypes.CDLL(None, use_errno=True).syscall
        except (OSError, AttributeError):
            self._syscall = None

    def fraction(self, fd: int, offset: int, count: int) -> float:
        if self._syscall is None or count <= 0:
            return 0.0
        rng, stat = _Range(offset, count), _CacheStat()
        if self._syscall(_SYS_CACHESTAT, fd, ctypes.byref(rng), ctypes.byref(stat), 0) != 0:
            self._syscall = None  # ENOSYS (kernel < 6.5) or refused: stop asking
            return 0.0
        pages = -(-(offset + count) // mmap.PAGESIZE) - offset // mmap.PAGESIZE
        return stat.cache / pages


def read_range(
    fd: int, direct_fd: int, offset: int, count: int, buf: mmap.mmap, cache: PageCache
) -> memoryview:
    """`count` bytes at `offset` into buf (len >= count + 2 * ALIGN); a view of exactly those."""
    view = memoryview(buf)
    if cache.fraction(fd, offset, count) >= CACHED_ENOUGH:
        got = os.preadv(fd, [view[:count]], offset)
        if got == count:
            return view[:count]
    start = offset - offset % ALIGN
    end = -(-(offset + count) // ALIGN) * ALIGN
    got = os.preadv(direct_fd, [view[: end - start]], start)
    if got < offset + count - start:
        raise ConvertError(f"unexpected end of file at byte {start + got}")
    return view[offset - start : offset - start + count]


class OutputFile:
    """A file written once: its size and sha256 so far; `digest`, then `sync_close` or `abort`.

    Subclasses write (`write`) and wait for their helper threads in `_settle`.
    """

    buffered = True  # bytes wait in the page cache (Syncer may flush them early)

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self.size = 0
        self.sha = hashlib.sha256()

    def _settle(self) -> None:
        """Wait for whatever is still being written or hashed."""

    def digest(self) -> dict[str, Any]:
        """The size and sha256 of the file, once everything is written and hashed."""
        self._settle()
        return {"size": self.size, "sha256": self.sha.hexdigest()}

    def sync_close(self) -> None:
        try:
            os.fsync(self.fd)
        finally:
            os.close(self.fd)

    def abort(self) -> None:
        try:
            self._settle()
        finally:
            os.close(self.fd)


class DirectWriter(OutputFile):
    """A file written once with O_DIRECT from DEPTH aligned buffers; sha256 in the writer thread."""

    buffered = False  # nothing waits in the page cache: no early flushes needed

    def __init__(self, path: Path, fd: int) -> None:
        super().__init__(path, fd)
        self._free: queue.Queue[mmap.mmap] = queue.Queue()
        for _slot in range(DEPTH):
            self._free.put(buffer(BLOCK))
        self._full: queue.Queue[tuple[mmap.mmap, int, int] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="model_convert-writer", daemon=True)
        self._thread.start()
        self._buf = self._take()
        self._fill = 0
        self._pos = 0  # file offset of the current buffer's first byte
        self._done = False

    @classmethod
    def create(cls, path: Path) -> DirectWriter | None:
        fd = open_direct(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        return None if fd is None else cls(path, fd)

    def _take(self) -> mmap.mmap:
        buf = self._free.get()
        if self._error is not None:
            raise failure(f"{self.path}: write", self._error) from self._error
        return buf

    def _run(self) -> None:
        while (item := self._full.get()) is not None:
            buf, count, pos = item
            try:
                if self._error is None:
                    self._write_block(buf, count, pos)
            except BaseException as exc:  # reported to the caller by _take / digest
                self._error = exc
            finally:
                self._free.put(buf)

    def _write_block(self, buf: mmap.mmap, count: int, pos: int) -> None:
        view = memoryview(buf)
        try:
            self.sha.update(view[:count])
            size = -(-count // ALIGN) * ALIGN  # the last block is padded; digest truncates
            done = 0
            while done < size:
                done += os.pwrite(self.fd, view[done:size], pos + done)
        finally:
            view.release()

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            take = min(BLOCK - self._fill, len(view))
            self._buf[self._fill : self._fill + take] = view[:take]
            self._fill += take
            self.size += take
            view = view[take:]
            if self._fill == BLOCK:
                self._full.put((self._buf, BLOCK, self._pos))
                self._pos += BLOCK
                self._fill = 0
                self._buf = self._take()

    def _settle(self) -> None:
        """Hand over the last, partial buffer and wait for the writer thread."""
        if self._done:
            return
        self._done = True
        if self._fill:
            self._full.put((self._buf, self._fill, self._pos))
        self._full.put(None)
        self._thread.join()

    def digest(self) -> dict[str, Any]:
        info = super().digest()
        if self._error is not None:
            raise failure(f"{self.path}: write", self._error) from self._error
        os.ftruncate(self.fd, self.size)  # the last block was written padded
        return info
