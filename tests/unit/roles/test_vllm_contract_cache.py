"""Role vllm's contract check keeps a passed result under the key of its inputs.

The probe (roles/vllm/tasks/contract.yml) runs here against a stand-in `vllm` package, so the
test sees what the cache does without importing the real vLLM: a passed check is kept and read
back for the same inputs; a failed one is never kept; a changed model file, argument or
installed distribution is checked again; check mode reads but never writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
TASK = "Load the model with vLLM's tokenizer and model-config code"
STAND_IN = '''
import os
CALLS = os.environ["CONTRACT_CALLS"]

class EngineArgs:
    def __init__(self, **kw):
        self.kw = kw
    def create_model_config(self):
        open(CALLS, "a").write("probe\\n")
        if os.environ.get("CONTRACT_FAIL"):
            raise ValueError("unknown architecture")
        hf = type("HF", (), {"architectures": ["LlamaForCausalLM"]})()
        return type("Cfg", (), {"hf_config": hf, "max_model_len": self.kw.get("max_model_len", 64),
                                "dtype": "torch.float32"})()
'''


def probe() -> str:
    tasks = yaml.safe_load((ROOT / "roles/vllm/tasks/contract.yml").read_text())
    return next(t for t in tasks if t.get("name") == TASK)["vars"]["_vllm_contract_probe"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    pkg = tmp_path / "site" / "vllm"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "tokenizers").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "engine" / "arg_utils.py").write_text(STAND_IN)
    (pkg / "tokenizers" / "__init__.py").write_text(
        "def get_tokenizer(name, trust_remote_code=False):\n    return list(range(256))\n")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    return dict(os.environ, PYTHONPATH=str(tmp_path / "site"),
                CONTRACT_CALLS=str(tmp_path / "calls"))


def run(env: dict[str, str], tmp_path: Path, **over: object) -> dict:
    args = {"model": str(tmp_path / "model"), "tokenizer": str(tmp_path / "model"),
            "trust_remote_code": False, "max_model_len": 64, "dtype": "float32",
            "cache_dir": str(tmp_path / "kept"), "record": True, **over}
    out = subprocess.run([sys.executable, "-c", probe(), json.dumps(args)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def probes(tmp_path: Path) -> int:
    calls = tmp_path / "calls"
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def test_a_passed_check_is_read_back_for_the_same_inputs(env, tmp_path) -> None:
    first = run(env, tmp_path)
    assert first["step"] == "done" and "cached" not in first
    second = run(env, tmp_path)
    assert second == dict(first, cached=True)
    assert probes(tmp_path) == 1


def test_a_failed_check_is_never_kept(env, tmp_path) -> None:
    env["CONTRACT_FAIL"] = "1"
    assert run(env, tmp_path)["step"] == "ModelConfig"
    assert run(env, tmp_path)["step"] == "ModelConfig"
    assert probes(tmp_path) == 2


def test_changed_inputs_are_checked_again(env, tmp_path) -> None:
    run(env, tmp_path)
    run(env, tmp_path, max_model_len=32)
    (tmp_path / "model" / "config.json").write_text('{"architectures": ["GptOssForCausalLM"]}')
    run(env, tmp_path)
    assert probes(tmp_path) == 3


def test_check_mode_reads_but_never_writes(env, tmp_path) -> None:
    run(env, tmp_path, record=False)
    assert not (tmp_path / "kept").exists()
    run(env, tmp_path)
    assert run(env, tmp_path, record=False).get("cached") is True


def test_a_hub_id_is_never_kept(env, tmp_path) -> None:
    run(env, tmp_path, model="org/model", tokenizer="org/model")
    run(env, tmp_path, model="org/model", tokenizer="org/model")
    assert probes(tmp_path) == 2
