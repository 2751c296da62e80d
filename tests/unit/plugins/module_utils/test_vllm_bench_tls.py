"""vllm_bench_sweep against a node that serves only mutual TLS: the module runs a stand-in
benchmark that sends its request with aiohttp as vLLM's does (``vllm bench serve``: one
session over ``TCPConnector(ssl=...)``; 0.6.x's benchmark_serving.py: a default session), in a
subprocess with the module's environment and PYTHONPATH. With the TLS options it presents the
client certificate; without, the node refuses it. With TLS off the environment is as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.instinct.vllm.plugins.module_utils import vllm_bench as vb
from ansible_collections.instinct.vllm.plugins.module_utils._tls_client import TlsClient
from ansible_collections.instinct.vllm.plugins.modules import vllm_bench_sweep
from tls_pki import Pki, make_pki, mtls_node

pytest.importorskip("aiohttp")

KEY = "bench-tls-key-51d0c7"

#: The benchmark's request as vLLM's client sends it; writes the result file, or exits 1.
FAKE_BENCH = """
import asyncio, json, os, sys
import aiohttp

CLI = sys.argv[1:3] == ["bench", "serve"]


def arg(name):
    return sys.argv[sys.argv.index(name) + 1]


async def ask(url):
    connector = aiohttp.TCPConnector(ssl="https://" in url) if CLI else None
    headers = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.post(url, json={"model": arg("--model")}, headers=headers) as answer:
            answer.raise_for_status()
            return await answer.json()


try:
    asyncio.run(ask(arg("--base-url") + arg("--endpoint")))
except aiohttp.ClientError as exc:
    print("request failed:", repr(exc))
    sys.exit(1)
with open(os.path.join(arg("--result-dir"), arg("--result-filename")), "w") as out:
    json.dump({"completed": 1}, out)
"""


class Node(BaseHTTPRequestHandler):
    """vLLM's /v1/completions, asking for the key."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        ok = self.headers.get("Authorization") == f"Bearer {KEY}"
        body = json.dumps({"choices": [{"text": " Paris"}]} if ok else {"error": "key"}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def node(pki: Pki) -> Iterator[str]:
    """The URL of a node that serves only mutual TLS."""
    with mtls_node(pki, Node) as url:
        yield url


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A node venv whose `vllm bench serve` and python (for benchmark_serving.py) run
    FAKE_BENCH with this interpreter (it has aiohttp)."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "vllm").write_text(f"#!{sys.executable}\n{FAKE_BENCH}", encoding="utf-8")
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n', encoding="utf-8")
    for exe in bin_dir.iterdir():
        exe.chmod(0o755)
    (tmp_path / "benchmark_serving.py").write_text(FAKE_BENCH, encoding="utf-8")
    return tmp_path / "venv"


def tls_options(pki: Pki) -> dict[str, str]:
    return {"ca_path": str(pki.ca), "client_cert": str(pki.client_cert),
            "client_key": str(pki.client_key)}  # fmt: skip


def run_module(capsys: pytest.CaptureFixture[str], params: dict[str, Any]) -> dict[str, Any]:
    with patch_module_args(params), pytest.raises(SystemExit):
        vllm_bench_sweep.main()
    return json.loads(capsys.readouterr().out)


def sweep(venv: Path, node: str, entry: str, **more: str) -> dict[str, Any]:
    run = venv.parent
    return {
        "venv": str(venv), "entry_point": entry, "vllm_version": "0.0.0",
        "script": str(run / "benchmark_serving.py"), "shim_dir": str(run / "shim"),
        "label": "node-1", "base_url": node, "model": "demo", "tokenizer": str(run),
        "api_key": KEY, "input_len": 8, "output_len": 4, "concurrency": [1],
        "result_dir": str(run / "results"), "log": str(run / "bench.log"), **more,
    }  # fmt: skip


@pytest.mark.parametrize("entry", ["cli", "legacy"])
def test_the_benchmark_presents_the_client_certificate(
    entry: str, pki: Pki, node: str, venv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_module(capsys, sweep(venv, node, entry, **tls_options(pki)))
    assert not out.get("failed"), out["msg"] + (venv.parent / "bench.log").read_text()
    assert out["tls_shim"] and out["runs"][0]["summary"]["completed"] == 1
    assert (venv.parent / "shim" / "sitecustomize.py").is_file()


@pytest.mark.parametrize("entry", ["cli", "legacy"])
def test_without_a_client_certificate_the_node_refuses_the_benchmark(
    entry: str, pki: Pki, node: str, venv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_module(capsys, sweep(venv, node, entry, ca_path=str(pki.ca)))
    assert out["failed"] and "concurrency 1: the benchmark exited 1" in out["msg"]
    assert "request failed" in (venv.parent / "bench.log").read_text()


def test_without_tls_options_nothing_is_added(
    node: str, venv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_module(capsys, sweep(venv, node, "cli"))
    assert out["failed"] and "CERTIFICATE_VERIFY_FAILED" in (venv.parent / "bench.log").read_text()
    assert not (venv.parent / "shim" / "sitecustomize.py").exists()


def test_tls_needs_shim_dir_and_loadable_files(
    pki: Pki, node: str, venv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = sweep(venv, node, "cli", **tls_options(pki))
    out = run_module(capsys, {**params, "shim_dir": None})
    assert out["failed"] and "needs shim_dir" in out["msg"]
    out = run_module(capsys, {**params, "client_key": str(pki.stranger_key)})
    assert out["failed"] and f"client_cert {pki.client_cert}" in out["msg"]


def test_env_without_tls_is_unchanged(tmp_path: Path) -> None:
    base = {"PATH": "/usr/bin", "PYTHONPATH": "/lib"}
    expected = {
        **base,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "PYTHONUNBUFFERED": "1",
        "OPENAI_API_KEY": KEY,
    }
    assert vb.bench_env(base, KEY, None) == expected
    assert vb.bench_env(base, KEY, None, TlsClient()) == expected
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("left by an earlier run", encoding="utf-8")
    assert vb.write_shims(str(shim), datasets=False, tls=False) is None
    assert not (shim / "sitecustomize.py").exists()


def test_env_with_tls_names_the_files(pki: Pki) -> None:
    env = vb.bench_env({}, KEY, "/shim", TlsClient(**tls_options(pki)))
    assert env["PYTHONPATH"] == "/shim"
    assert env["INSTINCT_BENCH_TLS_CA"] == str(pki.ca)
    assert env["INSTINCT_BENCH_TLS_CERT"] == str(pki.client_cert)
    assert env["INSTINCT_BENCH_TLS_KEY"] == str(pki.client_key)


#: Asks the node with a default aiohttp session; then what the process's server contexts trust.
CLIENT = """
import asyncio, ssl, sys
import aiohttp

async def ask(url):
    async with aiohttp.ClientSession() as session, session.post(url, json={}) as answer:
        return answer.status

print("status", asyncio.run(ask(sys.argv[1])))
server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
print("server context trusts the CA:", any("test ca" in str(c) for c in server.get_ca_certs()))
"""


def test_the_shadowed_sitecustomize_still_runs_and_servers_are_untouched(
    pki: Pki, node: str, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text('print("shadowed sitecustomize ran")\n')
    shim = vb.write_shims(str(tmp_path / "shim"), datasets=False, tls=True)
    env = vb.bench_env({**os.environ, "PYTHONPATH": str(other)}, KEY, shim,
                       TlsClient(**tls_options(pki)))  # fmt: skip
    done = subprocess.run([sys.executable, "-c", CLIENT, f"{node}/v1/completions"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == ["shadowed sitecustomize ran", "status 401",
                     "server context trusts the CA: False"]  # fmt: skip
