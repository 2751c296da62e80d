"""module_utils/_fileutil.py: the helpers model_convert and vllm_build share."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ansible_collections.instinct.vllm.plugins.module_utils._fileutil import (
    json_bytes,
    json_text,
    sha256_file,
)

# sha256 of the empty string and of b"abc" (FIPS 180-2 test vectors)
EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_sha256_file_known_vectors(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "abc").write_bytes(b"abc")
    assert sha256_file(tmp_path / "empty") == EMPTY
    assert sha256_file(str(tmp_path / "abc")) == ABC


def test_sha256_file_across_chunks(tmp_path: Path) -> None:
    data = bytes(range(256)) * 41  # 10496 bytes: not a multiple of the chunk
    path = tmp_path / "blob"
    path.write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    assert sha256_file(path, chunk=1000) == expected
    assert sha256_file(path) == expected


def test_json_text_indented_utf8_with_newline() -> None:
    text = json_text({"name": "Zürich", "n": [1, 2]})
    assert text == '{\n  "name": "Zürich",\n  "n": [\n    1,\n    2\n  ]\n}\n'
    assert json_bytes({"name": "Zürich"}) == '{\n  "name": "Zürich"\n}\n'.encode()
