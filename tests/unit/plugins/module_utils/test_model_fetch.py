"""Downloads with progress and redacted errors (module_utils/model_fetch.py) and the polling
filters (plugins/filter/progress.py)."""

from __future__ import annotations

import hashlib
import io
import json
import urllib.error
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.instinct.vllm.plugins.filter import progress as pg
from ansible_collections.instinct.vllm.plugins.module_utils import model_fetch as mf

# --- redaction ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "gone", "kept"),
    [
        (
            "GET https://alice:s3cr3t-pw@models.example.com/a/b.tar failed",
            ["alice", "s3cr3t-pw"],
            ["https://***@models.example.com/a/b.tar failed"],
        ),
        (
            "https://models.example.com/b.tar?token=abc123XYZ&part=2",
            ["abc123XYZ"],
            ["?token=***&part=2"],
        ),
        (
            "https://bucket.s3.amazonaws.com/m.tar?X-Amz-Credential=AKIAEXAMPLE%2F2026&"
            "X-Amz-Signature=deadbeefcafe&X-Amz-Expires=3600",
            ["AKIAEXAMPLE", "deadbeefcafe"],
            ["X-Amz-Credential=***&", "X-Amz-Signature=***&X-Amz-Expires=3600"],
        ),
        ("https://h/x?access_token=t0k3nvalue#frag", ["t0k3nvalue"], ["access_token=***#frag"]),
        (
            "Request failed; headers: {'Authorization': 'Bearer eyJhbGciOiJIUzI1NiJ9.payload'}",
            ["eyJhbGciOiJIUzI1NiJ9", "payload"],
            ["'Authorization': '***'"],
        ),
        (
            "sent Authorization: Basic YWxpY2U6czNjcjN0 and Cookie: session=abcdef123",
            ["YWxpY2U6czNjcjN0", "abcdef123"],
            ["Authorization: ***", "Cookie: ***"],
        ),
        ("401 for token hf_AbCdEfGhIjKlMnOpQrStUv", ["AbCdEfGhIjKlMnOpQrStUv"], ["hf_***"]),
        ("x-api-key=0123456789abcdef ok", ["0123456789abcdef"], ["x-api-key=*** ok"]),
        ("Bearer abcdefghijkl was refused", ["abcdefghijkl"], ["Bearer *** was refused"]),
    ],
)
def test_redact(text: str, gone: list[str], kept: list[str]) -> None:
    out = mf.redact(text)
    for secret in gone:
        assert secret not in out, out
    for part in kept:
        assert part in out, out


def test_redact_keeps_what_says_why() -> None:
    text = "HTTP 404 Not Found from https://models.example.com/gpt-oss-120B.tar?part=1"
    assert mf.redact(text) == text


def test_redact_explicit_secrets_longest_first() -> None:
    out = mf.redact("token abcd and abcdef and xy", ["abcd", "abcdef", "xy"])
    assert out == "token *** and *** and xy"  # "xy" is too short to be treated as a secret


def test_url_and_header_secrets() -> None:
    url = "https://bob:pw1234@h.example/x.tar?sig=s1g5ecret&part=2&api_key=k3yk3y"
    assert sorted(mf.url_secrets(url)) == sorted(["bob", "pw1234", "s1g5ecret", "k3yk3y"])
    assert mf.url_secrets("https://h.example/x.tar?part=2") == []
    assert mf.header_secrets({"Authorization": "Bearer abc.def"}) == ["Bearer abc.def", "abc.def"]


def test_http_error_says_why_without_the_token() -> None:
    body = io.BytesIO(b'{"error": "token expired", "token": "t0ps3cret-value"}')
    exc = urllib.error.HTTPError(
        "https://u:p4ss@h.example/m.tar?token=t0ps3cret-value", 401, "Unauthorized", Message(), body
    )
    msg = mf.redact(mf.describe_error(exc), ["t0ps3cret-value"])
    assert msg.startswith("HTTP 401 Unauthorized: ") and "token expired" in msg
    assert "t0ps3cret-value" not in msg


def test_html_error_page_becomes_its_text() -> None:
    page = (
        b'<!DOCTYPE HTML><html lang="en"><head><title>Error response</title></head>'
        b"<body><h1>Error response</h1><p>Message: File not found.</p></body></html>"
    )
    exc = urllib.error.HTTPError("http://h/x", 404, "File not found", Message(), io.BytesIO(page))
    assert mf.describe_error(exc) == (
        "HTTP 404 File not found: Error response Message: File not found."
    )


# --- download ----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        self.t += 0.5
        return self.t


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_download_checks_the_checksum_and_reports_progress(tmp_path: Path) -> None:
    data = b"x" * (mf.CHUNK * 2 + 123)
    dest, prog_path = tmp_path / "m.tar", tmp_path / "m.progress.json"
    progress = mf.ProgressFile(str(prog_path), "download", "m", interval=0.0, clock=Clock())
    result = mf.download(lambda: (io.BytesIO(data), len(data)), str(dest), sha256(data), progress)
    assert result["changed"] and result["bytes"] == len(data) and dest.read_bytes() == data
    written = json.loads(prog_path.read_text())
    assert written["done"] == written["total"] == len(data) and written["phase"] == "download"
    assert written["updated"] > written["started"]
    again = mf.download(lambda: pytest.fail("fetched again"), str(dest), sha256(data), progress)
    assert not again["changed"]


def test_wrong_checksum_or_short_body_leaves_no_file(tmp_path: Path) -> None:
    dest = tmp_path / "m.tar"
    progress = mf.ProgressFile(None, "download", "m")
    with pytest.raises(mf.FetchError, match="checksum mismatch: expected sha256:"):
        mf.download(lambda: (io.BytesIO(b"abc"), 3), str(dest), sha256(b"abd"), progress)
    with pytest.raises(mf.FetchError, match="ended after 3 of 10 bytes"):
        mf.download(lambda: (io.BytesIO(b"abc"), 10), str(dest), sha256(b"abc"), progress)
    assert list(tmp_path.iterdir()) == []


def test_download_failure_is_redacted(tmp_path: Path) -> None:
    def opener() -> Any:
        raise urllib.error.URLError("cannot reach https://u:pw9876@h.example/x?token=zz99zz99")

    with pytest.raises(mf.FetchError) as err:
        mf.download(opener, str(tmp_path / "x"), sha256(b""), mf.ProgressFile(None, "d", "x"))
    assert "pw9876" not in str(err.value) and "zz99zz99" not in str(err.value)
    assert str(err.value) == "URLError: cannot reach https://***@h.example/x?token=***"


@pytest.mark.parametrize("checksum", ["md5:abc", "sha256:xyz", "sha256", ""])
def test_bad_checksum_is_named(checksum: str) -> None:
    with pytest.raises(mf.FetchError, match="checksum must be"):
        mf.parse_checksum(checksum)


def test_progress_file_is_throttled_and_survives_an_unwritable_path(tmp_path: Path) -> None:
    clock = iter([0.0, 0.2, 0.5, 1.3, 1.4])
    path = tmp_path / "p.json"
    progress = mf.ProgressFile(str(path), "convert", "x", interval=1.0, clock=lambda: next(clock))
    progress.update(1, 10)  # t=0.2: first write
    assert json.loads(path.read_text())["done"] == 1
    progress.update(2, 10)  # t=0.5: too soon
    assert json.loads(path.read_text())["done"] == 1
    progress.update(3, 10)  # t=1.3
    assert json.loads(path.read_text())["done"] == 3
    progress.update(4, 10, force=True)  # t=1.4, forced
    assert json.loads(path.read_text())["done"] == 4
    broken = mf.ProgressFile(str(tmp_path / "no" / "dir" / "p.json"), "d", "x", interval=0)
    broken.update(1, 2)
    assert "not written" in broken.error and broken.path is None


def test_hf_snapshot_measures_the_tree_and_marks_it(tmp_path: Path) -> None:
    dest = tmp_path / "snap"
    dest.mkdir()

    def snapshot() -> None:
        (dest / "model.safetensors").write_bytes(b"w" * 5000)
        (dest / "config.json").write_text("{}")

    path = tmp_path / "p.json"
    progress = mf.ProgressFile(str(path), "download", "o/r", interval=0.0)
    result = mf.hf_snapshot(snapshot, str(dest), "o/r@main", 5002, progress, poll=0.01)
    assert result["changed"] and result["bytes"] == 5002
    assert json.loads(path.read_text())["done"] == 5002
    again = mf.hf_snapshot(lambda: pytest.fail("again"), str(dest), "o/r@main", 1, progress)
    assert not again["changed"]


def test_hf_snapshot_failure_is_redacted(tmp_path: Path) -> None:
    def snapshot() -> None:
        raise RuntimeError(
            "401 Client Error for url https://huggingface.co/x (token hf_abcdefghijklmnop)"
        )

    with pytest.raises(mf.FetchError) as err:
        mf.hf_snapshot(snapshot, str(tmp_path), "o/r@main", None, mf.ProgressFile(None, "d", "x"))
    assert "abcdefghijklmnop" not in str(err.value) and "401 Client Error" in str(err.value)
    assert not (tmp_path / ".instinct-hf-snapshot").exists()


# --- the polling filters ------------------------------------------------------------------------

GB = 10**9


@pytest.mark.parametrize(
    ("progress", "now", "expected"),
    [
        (
            {"done": 12.4 * GB, "total": 62 * GB, "started": 1000.0, "updated": 1030.0},
            1031.0,
            "dl: 12.40 GB of 62.00 GB (20%), 413.3 MB/s, about 2 min 00 s left, 31 s elapsed",
        ),
        (
            {"done": 3 * 10**6, "total": None, "started": 0.0, "updated": 2.0},
            2.0,
            "dl: 3.0 MB, 1.5 MB/s, 2 s elapsed",
        ),
        (
            {"done": 240 * GB, "total": 240 * GB, "started": 0.0, "updated": 3600.0},
            3600.0,
            "dl: 240.00 GB of 240.00 GB (100%), 66.7 MB/s, 1 h 00 min elapsed",
        ),
        (
            {"done": 1 * GB, "total": 100 * GB, "started": 0.0, "updated": 10.0},
            200.0,
            "dl: 1.00 GB of 100.00 GB (1%), 100.0 MB/s, about 16 min 30 s left, 3 min 20 s "
            "elapsed, no progress for 3 min 10 s",
        ),
        (
            {"done": 0, "total": 10 * GB, "started": 5.0, "updated": 5.0},
            6.0,
            "dl: 0 B of 10.00 GB (0%), 1 s elapsed",
        ),
        ({}, 1.0, "dl: started, no progress reported yet"),
        (None, 1.0, "dl: started, no progress reported yet"),
    ],
)
def test_progress_message(progress: Any, now: float, expected: str) -> None:
    assert pg.progress_message(progress, "dl", now) == expected


def test_progress_message_uses_the_files_label() -> None:
    msg = pg.progress_message(
        {"label": "gpt-oss-120B", "done": 1, "started": 0, "updated": 1}, "", 1
    )
    assert msg.startswith("gpt-oss-120B: 1 B")


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0 s"), (59.4, "59 s"), (61, "1 min 01 s"), (7500, "2 h 05 min")]
)
def test_human_duration(seconds: float, text: str) -> None:
    assert pg.human_duration(seconds) == text


def test_redact_filter() -> None:
    assert pg.redact("https://a:b1234@h/x", ["nothing"]) == "https://***@h/x"
    assert pg.redact("token abcdef", ["abcdef"]) == "token ***"
    with pytest.raises(Exception, match="secrets must be a list"):
        pg.redact("x", "abcdef")
