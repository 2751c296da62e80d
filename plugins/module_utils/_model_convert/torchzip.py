"""Tensor descriptors of a zip-format torch checkpoint, read without importing torch.

`torch.save` (since torch 1.6) writes a zip archive: ``<prefix>/data.pkl`` is a pickle of the
state dict in which every tensor is a call of ``torch._utils._rebuild_tensor_v2`` (or ``_v3`` for
the newer dtypes) on a storage given by a persistent id, and every storage is an uncompressed zip
member ``<prefix>/data/<key>``. This reader unpickles ``data.pkl`` with an allow-list of exactly
those callables (nothing else can be called: stricter than ``weights_only=True``) and finds each
member's byte offset in the zip, so the converter knows where every tensor's bytes are without
importing torch (seconds of start-up and a few hundred MB of RAM) or touching the data.

Anything it does not know (an older non-zip checkpoint, another callable, a compressed member,
a big-endian record) raises `Unsupported`; the caller then uses ``torch.load`` instead.
"""

from __future__ import annotations

import collections
import pickle
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# legacy typed storage classes (torch/storage.py _dtype_to_storage_type_map) -> dtype name
_STORAGE_DTYPES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # zip local file header (30 bytes)


class Unsupported(Exception):
    """A checkpoint construct this reader does not handle (use torch.load)."""


@dataclass(frozen=True)
class _DType:
    name: str


@dataclass(frozen=True)
class _StorageType:
    dtype: str | None  # None: UntypedStorage (the tensor carries its dtype, _rebuild_tensor_v3)


@dataclass(frozen=True)
class Storage:
    key: str
    dtype: str | None


@dataclass(frozen=True)
class LazyTensor:
    """What the pickle says of one tensor: its storage, where in it, and its geometry."""

    storage: Storage
    storage_offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str


def _tensor(storage: Any, offset: Any, size: Any, stride: Any, dtype: str | None) -> LazyTensor:
    if not isinstance(storage, Storage) or dtype is None:
        raise Unsupported("tensor without a typed storage")
    return LazyTensor(storage, int(offset), tuple(map(int, size)), tuple(map(int, stride)), dtype)


def _rebuild_tensor_v2(
    storage: Any, offset: Any, size: Any, stride: Any, *_rest: Any
) -> LazyTensor:
    return _tensor(storage, offset, size, stride, getattr(storage, "dtype", None))


def _rebuild_tensor_v3(
    storage: Any,
    offset: Any,
    size: Any,
    stride: Any,
    _requires_grad: Any,
    _hooks: Any,
    dtype: Any,
    *_rest: Any,
) -> LazyTensor:
    return _tensor(storage, offset, size, stride, getattr(dtype, "name", None))


def _rebuild_parameter(data: Any, *_rest: Any) -> Any:
    return data


_CALLABLES = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any, dtypes: frozenset[str]) -> None:
        super().__init__(file)
        self._dtypes = dtypes

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _CALLABLES:
            return _CALLABLES[(module, name)]
        if module in ("torch", "torch.storage") and name == "UntypedStorage":
            return _StorageType(None)
        if module == "torch":
            if name in _STORAGE_DTYPES:
                return _StorageType(_STORAGE_DTYPES[name])
            if name in self._dtypes:
                return _DType(name)
        raise Unsupported(f"pickle global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise Unsupported(f"persistent id {pid!r}")
        storage_type = pid[1]
        if not isinstance(storage_type, _StorageType):
            raise Unsupported(f"storage type {storage_type!r}")
        return Storage(str(pid[2]), storage_type.dtype)


def _data_offset(fh: Any, info: zipfile.ZipInfo) -> int:
    """Absolute offset of a stored member's first byte (after its local header)."""
    fh.seek(info.header_offset)
    fields = _LOCAL_HEADER.unpack(fh.read(_LOCAL_HEADER.size))
    if fields[0] != b"PK\x03\x04":
        raise Unsupported(f"bad local header for {info.filename}")
    return info.header_offset + _LOCAL_HEADER.size + fields[10] + fields[11]


@dataclass(frozen=True)
class Member:
    offset: int  # absolute offset of the storage's first byte in the file
    size: int  # storage bytes


def read(path: Path, dtypes: frozenset[str]) -> tuple[Any, dict[str, Member]]:
    """(unpickled object with LazyTensor leaves, {storage key: Member}) of one checkpoint.

    `dtypes`: the torch dtype names a `_rebuild_tensor_v3` call may name. Raises Unsupported
    for anything but a little-endian zip-format checkpoint with stored (uncompressed) members.
    """
    if not zipfile.is_zipfile(path):
        raise Unsupported("not a zip-format torch checkpoint")
    with path.open("rb") as fh, zipfile.ZipFile(fh) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("data.pkl")]
        if len(pickles) != 1:
            raise Unsupported(f"{len(pickles)} data.pkl records")
        prefix = pickles[0][: -len("data.pkl")]
        names = set(archive.namelist())
        if f"{prefix}byteorder" in names and archive.read(f"{prefix}byteorder") != b"little":
            raise Unsupported("big-endian checkpoint")
        with archive.open(pickles[0]) as pkl:
            obj = _Unpickler(pkl, dtypes).load()
        members: dict[str, Member] = {}
        for info in archive.infolist():
            if not info.filename.startswith(f"{prefix}data/"):
                continue
            if info.compress_type != zipfile.ZIP_STORED:
                raise Unsupported(f"compressed member {info.filename}")
            key = info.filename[len(f"{prefix}data/") :]
            members[key] = Member(_data_offset(fh, info), info.file_size)
    return obj, members
