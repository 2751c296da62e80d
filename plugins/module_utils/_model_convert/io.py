"""Source checkpoint readers for model_convert: tensor metadata and byte ranges, never the data.

Importing this file needs only the standard library, and so does reading the usual checkpoints.

A `.bin` shard (zip-format torch pickle) is read by torchzip.py: its pickle is loaded
with an allow-list of the few torch callables a state dict uses (nothing is imported or called
besides) and each storage's byte offset comes from the zip directory, so no tensor data is read
or mapped and torch is not imported. Anything else (an old non-zip checkpoint, an unknown pickle
global) goes to ``torch.load(path, mmap=True, weights_only=True, map_location="meta")``, whose
storages carry their offset in the file (``_checkpoint_offset``). The converter then copies each
tensor's bytes from the file, tensor by tensor; the process never holds more than a few I/O
buffers.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils._model_convert import torchzip

# torch dtype name -> (safetensors dtype, itemsize)
TORCH_TO_ST: dict[str, tuple[str, int]] = {
    "float64": ("F64", 8),
    "float32": ("F32", 4),
    "float16": ("F16", 2),
    "bfloat16": ("BF16", 2),
    "int64": ("I64", 8),
    "int32": ("I32", 4),
    "int16": ("I16", 2),
    "int8": ("I8", 1),
    "uint8": ("U8", 1),
    "bool": ("BOOL", 1),
    "float8_e4m3fn": ("F8_E4M3", 1),
    "float8_e5m2": ("F8_E5M2", 1),
}
ST_TO_TORCH: dict[str, str] = {st: name for name, (st, _size) in TORCH_TO_ST.items()}
ST_ITEMSIZE: dict[str, int] = {st: size for _name, (st, size) in TORCH_TO_ST.items()}
FLOAT_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16"})

BIN_INDEX = "pytorch_model.bin.index.json"
ST_INDEX = "model.safetensors.index.json"
_BIN_SHARD = re.compile(r"^pytorch_model(-\d+-of-\d+)?\.bin$")
_ST_SHARD = re.compile(r"^model(-\d+-of-\d+)?\.safetensors$")
_MAX_ST_HEADER = 100 * 1024 * 1024


class ConvertError(Exception):
    """A conversion problem the user must fix; the message names the file and tensor."""


@dataclass(frozen=True)
class SourceTensor:
    """One tensor of the source checkpoint, described without its data."""

    name: str
    file: str  # path relative to the source directory
    dtype: str  # torch dtype name, e.g. "bfloat16"
    shape: tuple[int, ...]
    offset: int  # absolute byte offset of the first element in `file` (-1: not contiguous)
    nbytes: int

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class SourceLayout:
    """What the source directory holds."""

    root: Path
    fmt: str  # "bin" or "safetensors"
    files: tuple[str, ...]  # weight files, relative, in reading order
    index: str | None  # index file name, if any


def discover(src: Path) -> SourceLayout:
    """Find the weight files of a checkpoint directory (index first, then shard names)."""
    if not src.is_dir():
        raise ConvertError(f"src {src}: not a directory (or not readable)")
    for index_name, fmt in ((ST_INDEX, "safetensors"), (BIN_INDEX, "bin")):
        index_path = src / index_name
        if index_path.exists():
            weight_map = _read_index(index_path)
            files = tuple(dict.fromkeys(sorted(set(weight_map.values()))))
            for rel in files:
                if not (src / rel).is_file():
                    raise ConvertError(f"{index_path}: lists {rel}, which is missing from {src}")
            return SourceLayout(src, fmt, files, index_name)
    names = sorted(p.name for p in src.iterdir() if p.is_file())
    st = [n for n in names if _ST_SHARD.match(n)]
    if st:
        return SourceLayout(src, "safetensors", tuple(st), None)
    binf = [n for n in names if _BIN_SHARD.match(n)]
    if binf:
        return SourceLayout(src, "bin", tuple(binf), None)
    raise ConvertError(
        f"src {src}: no weights found (expected {ST_INDEX}, {BIN_INDEX}, model*.safetensors "
        "or pytorch_model*.bin)"
    )


def _read_index(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConvertError(f"{path}: cannot read index: {exc}") from exc
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ConvertError(f"{path}: no 'weight_map' object")
    return {str(k): str(v) for k, v in weight_map.items()}


def read_index_map(layout: SourceLayout) -> dict[str, str] | None:
    """The index's tensor -> file map, or None without an index."""
    if layout.index is None:
        return None
    return _read_index(layout.root / layout.index)


def read_safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """Return (header dict, data start offset) of a safetensors file, checking it fits the file."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise ConvertError(f"{path}: truncated safetensors file (no header length)")
            (hlen,) = struct.unpack("<Q", raw)
            if hlen > _MAX_ST_HEADER or 8 + hlen > size:
                raise ConvertError(
                    f"{path}: corrupt or truncated safetensors header ({hlen} bytes)"
                )
            header = json.loads(fh.read(hlen))
    except OSError as exc:
        raise ConvertError(f"{path}: cannot read: {exc}") from exc
    except ValueError as exc:
        raise ConvertError(f"{path}: safetensors header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise ConvertError(f"{path}: safetensors header is not an object")
    return header, 8 + hlen


def safetensors_tensors(root: Path, rel: str) -> list[SourceTensor]:
    """Tensor descriptors of one safetensors file, each range checked against the file size."""
    path = root / rel
    header, start = read_safetensors_header(path)
    size = path.stat().st_size
    out: list[SourceTensor] = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            st_dtype = info["dtype"]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConvertError(f"{path}: tensor {name}: malformed header entry") from exc
        if st_dtype not in ST_TO_TORCH:
            raise ConvertError(f"{path}: tensor {name}: unsupported dtype {st_dtype}")
        tensor = SourceTensor(name, rel, ST_TO_TORCH[st_dtype], shape, start + begin, end - begin)
        if tensor.numel * ST_ITEMSIZE[st_dtype] != tensor.nbytes:
            raise ConvertError(f"{path}: tensor {name}: byte size does not match shape {shape}")
        if start + end > size:
            raise ConvertError(f"{path}: tensor {name}: data beyond end of file (truncated?)")
        out.append(tensor)
    out.sort(key=lambda t: t.offset)
    return out


def _is_contiguous(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    expected = 1
    for dim, st in zip(reversed(shape), reversed(stride), strict=True):
        if dim != 1 and st != expected:
            return False
        expected *= dim
    return True


def _state_dict(path: Path, state: Any) -> dict[Any, Any]:
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise ConvertError(f"{path}: not a state dict (got {type(state).__name__})")
    return state


def _bin_tensor(
    path: Path,
    rel: str,
    name: str,
    dtype: str,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    where: tuple[int, int, int] | None,
) -> SourceTensor:
    """One .bin tensor; where = (storage's file offset, element offset in it, storage bytes)."""
    if dtype not in TORCH_TO_ST:
        raise ConvertError(f"{path}: tensor {name}: unsupported dtype {dtype}")
    itemsize = TORCH_TO_ST[dtype][1]
    nbytes = itemsize
    for dim in shape:
        nbytes *= dim
    offset = -1
    if where is not None and _is_contiguous(shape, stride):
        base, element, storage_bytes = where
        start = element * itemsize
        if start + nbytes > storage_bytes or base + storage_bytes > path.stat().st_size:
            raise ConvertError(f"{path}: tensor {name}: data beyond end of file (truncated?)")
        offset = base + start
    return SourceTensor(str(name), rel, dtype, shape, offset, nbytes)


def _bin_tensors_zip(root: Path, rel: str) -> list[SourceTensor]:
    """Without torch: the allow-listed unpickler of torchzip.py."""
    path = root / rel
    state, members = torchzip.read(path, frozenset(TORCH_TO_ST))
    out: list[SourceTensor] = []
    for name, tensor in _state_dict(path, state).items():
        if not isinstance(tensor, torchzip.LazyTensor):
            raise ConvertError(f"{path}: entry {name} is not a tensor")
        member = members.get(tensor.storage.key)
        if member is None:
            raise ConvertError(
                f"{path}: tensor {name}: storage {tensor.storage.key} is not in the archive"
            )
        where = (member.offset, tensor.storage_offset, member.size)
        out.append(_bin_tensor(path, rel, name, tensor.dtype, tensor.shape, tensor.stride, where))
    return out


def _bin_tensors_torch(root: Path, rel: str) -> list[SourceTensor]:
    """With torch.load on the meta device (storages carry their offset in the file)."""
    import torch

    path = root / rel
    try:
        state = torch.load(path, mmap=True, weights_only=True, map_location="meta")
    except Exception as exc:
        raise ConvertError(f"{path}: cannot load torch checkpoint: {exc}") from exc
    out: list[SourceTensor] = []
    for name, tensor in _state_dict(path, state).items():
        if not isinstance(tensor, torch.Tensor):
            raise ConvertError(f"{path}: entry {name} is not a tensor")
        storage = tensor.untyped_storage()
        base = getattr(storage, "_checkpoint_offset", None)
        where = None if base is None else (int(base), tensor.storage_offset(), storage.nbytes())
        dtype = str(tensor.dtype).removeprefix("torch.")
        shape = tuple(int(d) for d in tensor.shape)
        out.append(_bin_tensor(path, rel, name, dtype, shape, tuple(tensor.stride()), where))
    del state
    return out


def bin_tensors(root: Path, rel: str) -> list[SourceTensor]:
    """Tensor descriptors of one zip-format torch pickle (no tensor data is read).

    Read without torch when the checkpoint is the usual zip format (fast, little memory);
    anything else goes to torch.load.
    """
    try:
        return _bin_tensors_zip(root, rel)
    except torchzip.Unsupported:
        return _bin_tensors_torch(root, rel)


def list_tensors(layout: SourceLayout) -> list[SourceTensor]:
    """All tensors of the checkpoint, file by file, checking the index against the files."""
    reader = safetensors_tensors if layout.fmt == "safetensors" else bin_tensors
    tensors: list[SourceTensor] = []
    seen: dict[str, str] = {}
    for rel in layout.files:
        for tensor in reader(layout.root, rel):
            if tensor.name in seen:
                raise ConvertError(
                    f"tensor {tensor.name} appears twice: in {seen[tensor.name]} and in {rel}"
                )
            seen[tensor.name] = rel
            tensors.append(tensor)
    index = read_index_map(layout)
    if index is not None:
        for name, rel in index.items():
            if seen.get(name) != rel:
                where = seen.get(name, "no file")
                raise ConvertError(f"{layout.index}: maps {name} to {rel}, but it is in {where}")
        for name, rel in seen.items():
            if name not in index:
                raise ConvertError(f"{layout.index}: does not list tensor {name} (in {rel})")
    return tensors


def fingerprint_files(root: Path) -> list[dict[str, Any]]:
    """Names, sizes and mtimes of every regular file under root (cheap: no hashing)."""
    entries: list[dict[str, Any]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fname in sorted(filenames):
            full = Path(dirpath) / fname
            st = full.stat()
            entries.append(
                {
                    "path": str(full.relative_to(root)),
                    "size": st.st_size,
                    "mtime_ns": st.st_mtime_ns,
                }
            )
    return entries
