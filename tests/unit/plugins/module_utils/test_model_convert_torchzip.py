"""_model_convert/torchzip.py: .bin tensor descriptors without torch agree with torch.load's."""

from __future__ import annotations

import collections
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# torch has no wheel for every Python the stacks name here (docs/development.md, make pythons)
torch = pytest.importorskip("torch", reason="needs torch, which is not installed for this Python")

import ckpt_factory as cf  # noqa: E402 (ckpt_factory imports torch)
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert import io, torchzip  # noqa: E402
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.io import (  # noqa: E402
    ConvertError,
)

COLLECTIONS = Path(__file__).resolve().parents[4] / ".collections"


def _state() -> dict[str, object]:
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    shared = torch.arange(40, dtype=torch.bfloat16)
    return collections.OrderedDict(
        {
            "bf16": torch.randn(4, 8).to(torch.bfloat16),
            "f16": torch.randn(3, 5).half(),
            "f64": torch.randn(2, 2).double(),
            "i64": torch.arange(7),
            "bool": torch.tensor([True, False, True]),
            "u8": torch.arange(9, dtype=torch.uint8),
            "fp8": torch.randn(4, 4).to(torch.float8_e4m3fn),  # _rebuild_tensor_v3
            "param": torch.nn.Parameter(torch.randn(3, 3)),  # _rebuild_parameter
            "row_view": base[2:4],  # contiguous, storage offset 16
            "transposed": base.t(),  # not contiguous
            "shared_a": shared[:20],
            "shared_b": shared[20:].view(4, 5),
            "scalar": torch.tensor(3.5),
            "empty": torch.zeros(0, 4),
        }
    )


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mixed")
    torch.save(_state(), root / "pytorch_model.bin")
    return root


def test_reader_agrees_with_torch_load(mixed: Path) -> None:
    path = mixed / "pytorch_model.bin"
    fast = io._bin_tensors_zip(mixed, path.name)
    slow = io._bin_tensors_torch(mixed, path.name)
    assert fast == slow
    by_name = {t.name: t for t in fast}
    assert by_name["transposed"].offset == -1
    assert by_name["row_view"].nbytes == 2 * 8 * 4
    assert by_name["fp8"].dtype == "float8_e4m3fn"
    assert by_name["shared_b"].offset == by_name["shared_a"].offset + 20 * 2


def test_offsets_point_at_the_tensor_bytes(mixed: Path) -> None:
    data = (mixed / "pytorch_model.bin").read_bytes()
    state = _state()
    loaded = torch.load(mixed / "pytorch_model.bin", weights_only=True)
    assert loaded.keys() == state.keys()
    for t in io.bin_tensors(mixed, "pytorch_model.bin"):
        if t.offset < 0:
            continue
        expected = loaded[t.name].contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        assert data[t.offset : t.offset + t.nbytes] == expected, t.name


def test_legacy_checkpoint_read_without_importing_torch(tmp_path: Path) -> None:
    src = tmp_path / "legacy"
    cf.build(src)
    code = (
        "import sys, json\n"
        f"sys.path.insert(0, {str(COLLECTIONS)!r})\n"
        "from pathlib import Path\n"
        "from ansible_collections.instinct.vllm.plugins.module_utils._model_convert import io\n"
        f"layout = io.discover(Path({str(src)!r}))\n"
        "tensors = io.list_tensors(layout)\n"
        "print(json.dumps([len(tensors), 'torch' in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, imported = out.stdout.strip().strip("[]").split(", ")
    assert imported == "false"
    assert int(count) == len(io.list_tensors(io.discover(src)))


def _rewrite_pickle(path: Path, obj: object) -> None:
    """Replace data.pkl of a torch zip with another pickle (members kept)."""
    with zipfile.ZipFile(path) as archive:
        items = [(i, archive.read(i.filename)) for i in archive.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for info, data in items:
            if info.filename.endswith("data.pkl"):
                data = pickle.dumps(obj, protocol=2)
            archive.writestr(info, data)


class Smuggled:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("ran",))


@pytest.mark.parametrize(
    ("obj", "needle", "fallback"),
    [
        ({"w": Smuggled()}, r"pickle global .*\.print", "cannot load torch checkpoint"),
        ({"w": collections.Counter()}, "collections.Counter", "entry w is not a tensor"),
    ],
)
def test_unknown_pickle_globals_are_refused(
    tmp_path: Path, obj: object, needle: str, fallback: str
) -> None:
    path = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.ones(2)}, path)
    _rewrite_pickle(path, obj)
    with pytest.raises(torchzip.Unsupported, match=needle):
        torchzip.read(path, frozenset(io.TORCH_TO_ST))
    # the caller then asks torch.load (weights_only), which refuses too: the error names the file
    with pytest.raises(ConvertError, match=rf"pytorch_model\.bin: {fallback}"):
        io.bin_tensors(tmp_path, "pytorch_model.bin")


def test_pre_zip_checkpoint_is_refused_by_both_readers(tmp_path: Path) -> None:
    path = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.ones(2, 3)}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(torchzip.Unsupported, match="not a zip"):
        torchzip.read(path, frozenset(io.TORCH_TO_ST))
    with pytest.raises(ConvertError, match=r"pytorch_model\.bin: cannot load torch checkpoint"):
        io.bin_tensors(tmp_path, "pytorch_model.bin")


def test_storage_shorter_than_tensor_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.ones(4)}, path)
    with zipfile.ZipFile(path) as archive:
        items = [(i, archive.read(i.filename)) for i in archive.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for info, data in items:
            archive.writestr(info, data[:8] if "/data/" in info.filename else data)
    with pytest.raises(ConvertError, match="tensor w: data beyond end of file"):
        io._bin_tensors_zip(tmp_path, path.name)
