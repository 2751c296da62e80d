"""_model_convert/direct.py: the page-cache probe and the O_DIRECT writer, on the real kernel."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert import direct as mcd
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.io import (
    ConvertError,
)


@pytest.fixture
def direct_dir(tmp_path: Path) -> Path:
    probe = mcd.open_direct(tmp_path / "probe", os.O_WRONLY | os.O_CREAT)
    if probe is None:
        pytest.skip(f"{tmp_path}: the filesystem refuses O_DIRECT")
    os.close(probe)
    return tmp_path


def test_page_cache_fraction_follows_the_cache(direct_dir: Path) -> None:
    path = direct_dir / "data"
    size = 1 << 20
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, os.urandom(size))
        os.fsync(fd)  # clean pages: DONTNEED below can drop them
        os.pread(fd, size, 0)
        cache = mcd.PageCache()
        hot = cache.fraction(fd, 0, size)
        if cache._syscall is None:
            pytest.skip("cachestat(2) is not available (Linux < 6.5)")
        assert hot == 1.0
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        assert cache.fraction(fd, 0, size) < 0.5
        assert cache.fraction(fd, 0, 0) == 0.0
    finally:
        os.close(fd)


@pytest.mark.parametrize("cached", [0.0, 1.0])
def test_read_range_returns_exactly_the_bytes_asked(
    direct_dir: Path, monkeypatch: pytest.MonkeyPatch, cached: float
) -> None:
    data = os.urandom(3 * mcd.ALIGN + 123)
    path = direct_dir / "src"
    path.write_bytes(data)
    monkeypatch.setattr(mcd.PageCache, "fraction", lambda *_a: cached)
    fd, dfd = os.open(path, os.O_RDONLY), mcd.open_direct(path, os.O_RDONLY)
    assert dfd is not None
    buf = mcd.buffer(mcd.ALIGN * 8)
    try:
        for offset, count in [(0, 10), (100, mcd.ALIGN), (mcd.ALIGN - 1, 2), (len(data) - 7, 7)]:
            view = mcd.read_range(fd, dfd, offset, count, buf, mcd.PageCache())
            assert bytes(view) == data[offset : offset + count]
            view.release()
        with pytest.raises(ConvertError, match="unexpected end of file"):
            mcd.read_range(fd, dfd, len(data) - 7, 8, buf, mcd.PageCache())
    finally:
        os.close(fd)
        os.close(dfd)


@pytest.mark.parametrize("size", [0, 1, 4096, 5 * 4096 + 17])
def test_direct_writer_writes_size_and_hash(
    direct_dir: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    monkeypatch.setattr(mcd, "BLOCK", 2 * mcd.ALIGN)  # several blocks, a padded tail
    data = os.urandom(size)
    out = mcd.DirectWriter.create(direct_dir / "out")
    assert out is not None
    for start in range(0, size, 1000):  # writes that straddle the blocks
        out.write(data[start : start + 1000])
    info = out.digest()
    out.sync_close()
    assert info == {"size": size, "sha256": hashlib.sha256(data).hexdigest()}
    assert (direct_dir / "out").read_bytes() == data


def test_direct_writer_reports_a_failed_write(
    direct_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcd, "BLOCK", mcd.ALIGN)
    out = mcd.DirectWriter.create(direct_dir / "out")
    assert out is not None

    def full(*_a: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mcd.os, "pwrite", full)
    with pytest.raises(ConvertError, match=r"out: write failed: .*No space left"):
        for _block in range(mcd.DEPTH + 2):  # the writer fails; a later buffer hand-over reports it
            out.write(b"x" * mcd.ALIGN)
        out.digest()
    out.abort()


def test_einval_from_direct_io_names_the_way_around_it(
    direct_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = mcd.DirectWriter.create(direct_dir / "out")
    assert out is not None

    def refused(*_a: object) -> int:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(mcd.os, "pwrite", refused)
    out.write(b"x" * 10)
    with pytest.raises(ConvertError, match=r"out: write failed: .* set direct_io: false"):
        out.digest()
    out.abort()
