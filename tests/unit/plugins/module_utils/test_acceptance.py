"""module_utils/acceptance (playbooks/acceptance.yml): the probes run for real in a Python
interpreter (the controller's, with its CPU torch), amd-smi health against the amdsmi stub that
replays the MI300X recordings, the serve check against a stand-in OpenAI server."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.filter.acceptance import acceptance_report
from ansible_collections.instinct.vllm.plugins.module_utils import acceptance as acc
from ansible_collections.instinct.vllm.plugins.module_utils._acceptance import attention, probes
from ansible_collections.instinct.vllm.plugins.module_utils._acceptance.serve import (
    _wait_ready,
    free_port,
)

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "galaxy.yml").is_file())
FIXTURES = ROOT / "tests" / "unit" / "fixtures"
STUB = ROOT / "tests" / "aptrepo" / "stubs" / "amd_smi"
FAKE_VLLM = FIXTURES / "acceptance" / "fake_vllm"
FAKE_FLASH_ATTN = FIXTURES / "acceptance" / "fake_flash_attn"
KEY = "unit-test-key-4b1d9e"


def runner(argv: list[str], stdin: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.run(
        argv, input=stdin, env={**os.environ, **env}, capture_output=True, text=True, check=False
    )
    return proc.returncode, proc.stdout, proc.stderr


def node(device: str = "rocm", **env: str) -> acc.NodeSpec:
    return acc.NodeSpec(device=device, python=sys.executable, stack="rocm-6.2.1", env=env)


def stub_env(mode: str = "mi300x") -> dict[str, str]:
    return {
        "PYTHONPATH": str(STUB),
        "INSTINCT_STUB_AMDSMI_RECORDINGS": str(FIXTURES / "instinct"),
        "INSTINCT_STUB_AMDSMI_MODE": mode,
    }


# ------------------------------------------------------------------------------ gpu_matmul


def test_matmul_on_a_cpu_stack_is_skipped_with_the_reason():
    result = acc.gpu_matmul(acc.NodeSpec("cpu", sys.executable, "cpu"), runner)
    assert result.status == "skipped"
    assert result.reason == "stack 'cpu' has no GPU (device cpu)"


@pytest.fixture(scope="module")
def cpu_matmul() -> dict:
    """The real matmul probe, once, in this interpreter on torch's CPU device."""
    pytest.importorskip("torch")
    args = {"size": 256, "device": "cpu"}
    return acc.run_probe(runner, sys.executable, probes.MATMUL, args, {})


def test_matmul_probe_checks_the_result_against_the_cpu_reference(cpu_matmul: dict):
    result = acc.judge_matmul(cpu_matmul, 1e-3, device="cpu")
    assert result.status == "ok", result.reason
    (gpu,) = result.detail["gpus"]
    assert 0 < gpu["rel_error"] < 1e-5 and gpu["ok"]
    strict = acc.judge_matmul(cpu_matmul, 1e-12, device="cpu")
    assert strict.status == "failed"
    assert "GPU 0: relative error" in strict.reason and "above 1e-12" in strict.reason


def test_matmul_on_device_cuda_needs_a_rocm_torch(cpu_matmul: dict):
    # what the probe reports where torch is not a ROCm build (as the controller's CPU torch)
    out = {"torch": cpu_matmul["torch"], "hip": None, "error": "torch.cuda.is_available() is False"}
    result = acc.judge_matmul(out, 1e-3)
    assert result.status == "failed"
    assert "is not a ROCm build (torch.version.hip unset)" in result.reason
    assert "torch.cuda.is_available() is False" in result.reason
    wrong_count = acc.judge_matmul({**cpu_matmul, "hip": "6.2"}, 1e-3, expected_gpus=8)
    assert "torch sees 1 GPUs, expected 8" in wrong_count.reason


def test_a_probe_that_dies_is_an_error_with_its_output():
    def crash(argv: list[str], stdin: str, env: dict[str, str]) -> tuple[int, str, str]:
        return 1, "", "Traceback (most recent call last):\nImportError: libamdhip64.so.6"

    result = acc.gpu_matmul(node(), crash)
    assert result.status == "error"
    assert result.reason.endswith(
        "exited 1 without a result: Traceback (most recent call last):"
        "\nImportError: libamdhip64.so.6"
    )
    missing = acc.gpu_matmul(acc.NodeSpec("rocm", "/nonexistent/python"), runner)
    assert missing.status == "error"
    assert missing.reason == "no venv interpreter at /nonexistent/python (role vllm installs it)"


# ---------------------------------------------------------------------------- gpu_health


def test_health_through_the_amdsmi_stub_reads_the_recorded_node():
    result = acc.gpu_health(node(**stub_env()), runner, acc.Thresholds())
    detail = result.detail
    assert detail["gpu_count"] == 8 and detail["xgmi"] == "xgmi"
    gpu0 = detail["gpus"][0]
    assert gpu0["bdf"] == "0000:1b:00.0" and gpu0["name"] == "AMD Instinct MI300X"
    assert gpu0["temperature"] == {"hotspot": 42, "vram": 41}  # amd-smi monitor, GPU 0
    # no ECC count was ever recorded: the stub says so, and the gate does not pass it
    assert result.status == "failed"
    assert "ECC counts unreadable" in result.reason and "no recording" in result.reason


def test_health_with_no_gpu_and_without_the_binding():
    empty = acc.gpu_health(node(**stub_env("no-gpu")), runner, acc.Thresholds())
    assert empty.status == "failed" and empty.reason == "amdsmi lists no GPU"
    missing = acc.gpu_health(node(PYTHONPATH=str(FIXTURES)), runner, acc.Thresholds())
    assert missing.status == "failed"
    assert missing.reason.startswith("the amdsmi Python binding is not in this venv")


def test_health_nonroot_names_the_permission_error():
    result = acc.gpu_health(node(**stub_env("nonroot")), runner, acc.Thresholds())
    assert result.status == "failed"
    gpu0 = result.detail["gpus"][0]
    assert "AMDSMI_STATUS_NO_PERM" in gpu0["name"]["error"]


def readings(**gpu0: object) -> dict:
    gpu = {
        "index": 0,
        "bdf": "0000:1b:00.0",
        "temperature": {"hotspot": 50, "vram": 45},
        "ecc": {"correctable_count": 0, "uncorrectable_count": 0, "deferred_count": 0},
    }
    other = {**gpu, "index": 1, "bdf": "0000:3d:00.0"}
    gpu.update(gpu0)
    return {"gpus": [gpu, other], "links": [{"src": 0, "dst": 1, "hops": 1, "type": "XGMI"}]}


def test_health_thresholds():
    limits = acc.Thresholds(max_hotspot_c=90, max_ecc_correctable=5)
    assert acc.evaluate(readings(), limits)[:2] == (True, "2 GPUs within thresholds, XGMI xgmi")
    hot = acc.evaluate(readings(temperature={"hotspot": 91, "vram": 45}), limits)
    assert hot[:2] == (False, "GPU 0 (0000:1b:00.0): hotspot temperature 91 C above 90 C")
    ecc = {"correctable_count": 6, "uncorrectable_count": 1}
    ok, reason = acc.evaluate(readings(ecc=ecc), limits)[:2]
    assert not ok and "ECC uncorrectable_count 1 above 0" in reason
    assert "ECC correctable_count 6 above 5" in reason
    counted = acc.evaluate(readings(), acc.Thresholds(expected_gpus=8))
    assert counted[1] == "amdsmi lists 2 GPUs, expected 8"


def test_xgmi_links():
    pcie = readings()
    pcie["links"][0]["type"] = "PCIEXPRESS"
    ok, reason, detail = acc.evaluate(pcie, acc.Thresholds())
    assert (
        not ok and reason == "not an XGMI link: GPU 0-1: PCIEXPRESS" and detail["xgmi"] == "absent"
    )
    assert acc.evaluate(pcie, acc.Thresholds(xgmi_required=False))[0]
    single = readings()
    single["gpus"], single["links"] = single["gpus"][:1], []
    assert acc.evaluate(single, acc.Thresholds())[2]["xgmi"] == "n/a"


# ------------------------------------------------------------------------- vllm_platform


def fake_vllm(platform: str, flash_attn: bool = False) -> dict[str, str]:
    path = [str(FAKE_VLLM), *([str(FAKE_FLASH_ATTN)] if flash_attn else [])]
    return {"PYTHONPATH": os.pathsep.join(path), "FAKE_VLLM_PLATFORM": platform}


def test_platform_reports_the_attention_backend_for_the_model(tmp_path: Path):
    config = {"hidden_size": 128, "num_attention_heads": 4, "torch_dtype": "float32"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    record = tmp_path / "selector.json"
    env = {**fake_vllm("CPU"), "FAKE_VLLM_RECORD": str(record)}
    result = acc.vllm_platform(node("cpu", **env), runner, str(tmp_path))
    assert result.status == "ok", result.reason
    assert result.detail["platform"] == "cpu"
    # on CPU the implementation is the backend vLLM selects
    assert result.detail["attention_backend"] == result.detail["attention_impl"] == "TORCH_SDPA"
    assert "use_triton_flash_attn" not in result.detail  # a ROCm-only reading
    # vLLM 0.6.6's selector signature got head size 32 from the model, its dtype, block 16
    assert json.loads(record.read_text()) == [32, "torch.float32", "auto", 16, False]


def test_platform_not_the_stacks_device_fails_naming_amdsmi():
    result = acc.vllm_platform(node("rocm", **fake_vllm("UNSPECIFIED")), runner)
    assert result.status == "failed"
    assert "resolved platform 'unspecified'" in result.reason
    assert "the stack expects 'rocm'" in result.reason and "amdsmi" in result.reason


# ------------------------------------------------------------ vllm_platform: attention


@pytest.fixture
def systemctl_present(monkeypatch: pytest.MonkeyPatch) -> None:
    """unit_environment asks systemctl only where there is one; these runners answer for it."""
    monkeypatch.setattr(attention.shutil, "which", lambda name: f"/usr/bin/{name}")


def no_unit(argv: list[str], stdin: str, env: dict[str, str]) -> tuple[int, str, str]:
    """systemctl show for a service that is not installed; any other command runs."""
    if argv[0] == "systemctl":
        return 0, "LoadState=not-found\nEnvironment=\n", ""
    return runner(argv, stdin, env)


def with_unit(environment: str):
    """systemctl show for an installed unit whose Environment= is ``environment`` (as
    systemd prints it: words quoted as a shell would); any other command runs."""

    def run(argv: list[str], stdin: str, env: dict[str, str]) -> tuple[int, str, str]:
        if argv[0] == "systemctl":
            assert argv[1:3] == ["show", "vllm.service"]
            return 0, f"LoadState=loaded\nEnvironment={environment}\n", ""
        return runner(argv, stdin, env)

    return run


@pytest.mark.parametrize(
    ("triton", "flash_attn", "expected", "impl", "status"),
    [
        (None, False, "default", "triton", "ok"),  # vLLM 0.6.6's default
        ("1", True, "default", "triton", "ok"),
        ("0", True, "ck", "ck", "ok"),
        ("false", True, "ck", "ck", "ok"),
        ("0", False, "default", "naive", "ok"),  # not asked for: reported, accepted
        (None, True, "ck", "triton", "failed"),  # CK installed, the variable forgotten
        ("yes", True, "ck", "ck", "ok"),  # vLLM reads only "true"/"1" as true
        ("0", False, "ck", "naive", "failed"),  # CK expected, flash_attn missing
    ],
)
@pytest.mark.usefixtures("systemctl_present")
def test_platform_reports_the_rocm_attention_implementation(
    triton: str | None, flash_attn: bool, expected: str, impl: str, status: str
):
    env = fake_vllm("ROCM", flash_attn)
    if triton is not None:
        env["VLLM_USE_TRITON_FLASH_ATTN"] = triton
    result = acc.vllm_platform(
        node("rocm", **env), no_unit, expected_attention=expected, service="vllm"
    )
    assert result.status == status, result.reason
    assert result.detail["attention_backend"] == "ROCM_FLASH"
    assert result.detail["attention_impl"] == impl
    assert result.detail["attention_env_from"] == "the inventory"
    if status == "ok":
        assert result.reason.endswith(f"attention backend ROCM_FLASH, attention_impl {impl}")


@pytest.mark.usefixtures("systemctl_present")
def test_the_attention_environment_goes_under_the_services():
    """Before the first unit: role vllm's attention environment, the user's over it."""
    ck = {"VLLM_USE_TRITON_FLASH_ATTN": "0"}
    env = fake_vllm("ROCM", flash_attn=True)
    result = acc.vllm_platform(
        node("rocm", **env), no_unit, expected_attention="ck", attention_env=ck, service="vllm"
    )
    assert result.status == "ok", result.reason
    assert result.detail["attention_impl"] == "ck"
    forced = node("rocm", **env, VLLM_USE_TRITON_FLASH_ATTN="1")
    result = acc.vllm_platform(forced, no_unit, expected_attention="ck", attention_env=ck)
    assert result.status == "failed"
    assert result.detail["attention_impl"] == "triton"


@pytest.mark.usefixtures("systemctl_present")
def test_a_broken_flash_attn_is_named():
    env = {**fake_vllm("ROCM", flash_attn=True), "VLLM_USE_TRITON_FLASH_ATTN": "0"}
    env["FAKE_FLASH_ATTN_BROKEN"] = "1"
    result = acc.vllm_platform(node("rocm", **env), no_unit, expected_attention="ck")
    assert result.status == "failed"
    assert "flash_attn does not import (ImportError: flash_attn_2_cuda.so" in result.reason


@pytest.mark.usefixtures("systemctl_present")
def test_the_installed_units_attention_variables_win():
    # the inventory asks for CK, the unit on the node was rendered without the variable
    env = {**fake_vllm("ROCM", flash_attn=True), "VLLM_USE_TRITON_FLASH_ATTN": "0"}
    stale = with_unit('HOME=/var/lib/vllm "ODD=a b" HF_HUB_OFFLINE=1')
    result = acc.vllm_platform(node("rocm", **env), stale, expected_attention="ck", service="vllm")
    assert result.status == "failed"
    assert result.detail["attention_impl"] == "triton"
    assert result.detail["attention_env_from"] == "vllm.service"
    assert "VLLM_USE_TRITON_FLASH_ATTN is unset (vLLM's default is true)" in result.reason
    current = with_unit('HOME=/var/lib/vllm "ODD=a b" VLLM_USE_TRITON_FLASH_ATTN=0')
    env.pop("VLLM_USE_TRITON_FLASH_ATTN")
    result = acc.vllm_platform(
        node("rocm", **env), current, expected_attention="ck", service="vllm"
    )
    assert result.status == "ok", result.reason
    assert result.detail["attention_impl"] == "ck"


@pytest.mark.usefixtures("systemctl_present")
def test_unit_environment_as_systemd_prints_it():
    run = with_unit('A=1 "B=two words" "C=say \\"hi\\"" VLLM_USE_TRITON_FLASH_ATTN=0')
    assert attention.unit_environment(run, "vllm") == {
        "A": "1",
        "B": "two words",
        "C": 'say "hi"',
        "VLLM_USE_TRITON_FLASH_ATTN": "0",
    }
    assert attention.unit_environment(no_unit, "vllm") is None
    assert attention.unit_environment(lambda *a: (1, "", "Failed to connect to bus"), "x") is None
    assert attention.unit_environment(with_unit('A="unclosed'), "vllm") is None


def test_no_systemctl_no_unit(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(attention.shutil, "which", lambda name: None)
    assert attention.unit_environment(with_unit("VLLM_USE_TRITON_FLASH_ATTN=0"), "vllm") is None


def test_probe_environment_takes_only_the_units_attention_variables():
    env = {"VLLM_USE_TRITON_FLASH_ATTN": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    unit = {"HOME": "/var/lib/vllm", "VLLM_ATTENTION_BACKEND": "ROCM_FLASH"}
    assert attention.probe_environment(env, None) == env
    # HOME and caches stay the prober's own (it must not write into the service's cache)
    assert attention.probe_environment(env, unit) == {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_ATTENTION_BACKEND": "ROCM_FLASH",
    }


def probe_out(platform: str = "rocm", backend: str = "ROCM_FLASH", **more: object) -> dict:
    return {"platform": platform, "attention_backend": backend, "env": {}, **more}


@pytest.mark.parametrize(
    ("out", "expected", "impl", "problem"),
    [
        # vLLM 0.6's ROCm backend: vLLM's own reading of the variable, then flash_attn
        (probe_out(use_triton_flash_attn=True, flash_attn_error=""), "default", "triton", ""),
        (probe_out(use_triton_flash_attn=False, flash_attn_error=""), "default", "ck", ""),
        (probe_out(use_triton_flash_attn=False, flash_attn_error="E"), "default", "naive", ""),
        (probe_out(use_triton_flash_attn=False, flash_attn_error=""), "ck", "ck", ""),
        (probe_out(use_triton_flash_attn=True, flash_attn_error=""), "ck", "triton", "Triton"),
        (probe_out(use_triton_flash_attn=False, flash_attn_error="E"), "ck", "naive", "(E)"),
        (probe_out(use_triton_flash_attn=False), "ck", "naive", "(not checked)"),
        # no such switch in this vLLM, another ROCm backend, or not ROCm: the backend's name
        (probe_out(use_triton_flash_attn=None, flash_attn_error=""), "default", "ROCM_FLASH", ""),
        (probe_out("rocm", "TRITON_ATTN", use_triton_flash_attn=True), "ck", "TRITON_ATTN", "TRI"),
        (probe_out("cpu", "TORCH_SDPA"), "default", "TORCH_SDPA", ""),
        (probe_out("cpu", "TORCH_SDPA"), "ck", "TORCH_SDPA", "vLLM selects TORCH_SDPA"),
        (probe_out(backend=None), "default", "unknown", ""),
    ],
)
def test_judge_attention_every_branch(out: dict, expected: str, impl: str, problem: str):
    got_impl, got_problem = acc.judge_attention(out, expected)
    assert got_impl == impl
    assert (problem in got_problem) if problem else got_problem == ""


def test_judge_attention_names_the_variable_value():
    out = probe_out(use_triton_flash_attn=True, flash_attn_error="", env={})
    assert "VLLM_USE_TRITON_FLASH_ATTN is unset" in acc.judge_attention(out, "ck")[1]
    out["env"] = {"VLLM_USE_TRITON_FLASH_ATTN": "TRUE"}
    problem = acc.judge_attention(out, "ck")[1]
    assert "VLLM_USE_TRITON_FLASH_ATTN is 'TRUE', it must be 0" in problem
    assert "vllm_source_ck_flash_attention" in problem


def test_model_shape_defaults_and_head_dim(tmp_path: Path):
    assert acc.model_shape("", "auto") == {"head_size": 128, "num_heads": None, "dtype": "float16"}
    (tmp_path / "config.json").write_text(
        json.dumps({"head_dim": 64, "num_attention_heads": 8, "hidden_size": 4096})
    )
    assert acc.model_shape(str(tmp_path), "bfloat16")["head_size"] == 64


# ---------------------------------------------------------------------------------- serve


def _spec(**kwargs: object) -> acc.ServeSpec:
    """A ServeSpec with the serving facts the module passes (unit, URL, the venv's python)."""
    facts = {"service": "vllm", "base_url": "http://127.0.0.1:8000", "python": sys.executable}
    return acc.ServeSpec(**{**facts, **kwargs})  # type: ignore[arg-type]


def test_serve_spec_has_no_default_for_the_serving_facts():
    """The unit, URL and python come from the caller (role vllm_service's published facts):
    a default here would restate them."""
    defaulted = {
        f.name
        for f in dataclasses.fields(acc.ServeSpec)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }
    assert not defaulted & {"service", "base_url", "python"}
    with pytest.raises(TypeError):
        acc.ServeSpec()  # type: ignore[call-arg]


SUBSTATE = {"active": "running", "failed": "failed", "inactive": "dead"}


def service(state: str, load: str = "loaded", result: str = "success"):
    """A runner that answers `systemctl show` for a unit in `state`."""

    def run(argv: list[str], stdin: str, env: dict[str, str]) -> tuple[int, str, str]:
        assert argv[:2] == ["systemctl", "show"]
        out = f"LoadState={load}\nActiveState={state}\nSubState={SUBSTATE[state]}\n"
        return 0, out + f"Result={result}\n", ""

    return run


def never(argv: list[str], stdin: str, env: dict[str, str]) -> tuple[int, str, str]:
    raise AssertionError(f"ran {argv}")


@pytest.fixture
def server(tmp_path: Path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(FAKE_VLLM), "VLLM_API_KEY": KEY}
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/m",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        "demo",
    ]
    proc = subprocess.Popen(argv, env=env)
    spec = acc.ServeSpec(
        service="vllm", base_url=f"http://127.0.0.1:{port}", python=sys.executable,
        api_key=KEY, model="demo",
    )
    assert _wait_ready(proc, spec.base_url, 30) == ""
    yield spec
    proc.terminate()
    proc.wait(10)


def test_serve_through_the_running_service(server: acc.ServeSpec):
    result = acc.serve_check(server, service("active"))
    assert result.status == "ok", result.reason
    assert result.detail["mode"] == "service"
    assert result.detail["completion_tokens"] == 8 and result.detail["text"] == " Paris"
    assert KEY not in json.dumps(result.as_dict())


def test_serve_with_a_wrong_key_or_model_fails(server: acc.ServeSpec):
    server.api_key = "wrong"
    assert acc.serve_check(server, service("active")).reason.startswith(
        "GET /v1/models answered 401"
    )
    server.api_key, server.model = KEY, "other"
    reason = acc.serve_check(server, service("active")).reason
    assert reason == "model 'other' is not served (served: ['demo'])"


def test_a_failed_service_fails_the_check():
    result = acc.serve_check(_spec(), service("failed", result="exit-code"))
    assert result.status == "failed"
    assert result.reason == "vllm.service failed (result exit-code; journalctl -u vllm says why)"
    assert result.detail["unit"]["result"] == "exit-code"


def test_no_service_starts_a_temporary_server_with_the_key_in_its_environment(tmp_path: Path):
    record = tmp_path / "record.json"
    spec = _spec(
        model_path=str(tmp_path),
        model="demo",
        startup_timeout=30,
        server_env={"PYTHONPATH": str(FAKE_VLLM), "FAKE_VLLM_RECORD": str(record)},
        server_args=["--dtype", "float32"],
    )
    no_unit = service("inactive", load="not-found")
    result = acc.serve_check(spec, no_unit)
    assert result.status == "ok", result.detail
    assert result.detail["mode"] == "temporary" and result.detail["service"] == "inactive"
    assert result.detail["why"] == "no unit vllm.service on the node"
    seen = json.loads(record.read_text())
    assert seen["key_from_env"] and "--dtype" in seen["argv"]
    assert not any("VLLM_API_KEY" in a for a in seen["argv"])
    assert acc.serve_check(spec, no_unit, check_mode=True).status == "skipped"


def test_a_stopped_unit_is_not_replaced_by_a_temporary_server(tmp_path: Path):
    record = tmp_path / "record.json"
    spec = _spec(
        model_path=str(tmp_path),
        startup_timeout=30,
        server_env={"PYTHONPATH": str(FAKE_VLLM), "FAKE_VLLM_RECORD": str(record)},
    )
    result = acc.serve_check(spec, service("inactive"))
    assert result.status == "failed" and result.detail["mode"] == "service"
    assert result.reason.startswith("vllm.service is inactive (dead), not serving: start it")
    assert not record.exists()


def test_a_temporary_server_that_dies_fails_with_its_log(tmp_path: Path):
    spec = _spec(
        mode="temporary",
        model_path=str(tmp_path),
        startup_timeout=30,
        server_env={"PYTHONPATH": str(FAKE_VLLM), "FAKE_VLLM_CRASH": "1"},
    )
    result = acc.serve_check(spec, never)  # mode temporary: the unit is not asked
    assert result.status == "failed"
    assert result.reason == "the temporary server was not ready (it exited 3)"
    assert "crashing as asked" in result.detail["log_tail"]


# --------------------------------------------------------------------------------- report


def test_report_status_failures_and_masked_key():
    results = [
        acc.CheckResult("gpu_matmul", "skipped", "stack 'cpu' has no GPU").as_dict(),
        None,  # not run (tags)
        acc.CheckResult("serve", "failed", f"401 for key {KEY}", {"k": [KEY]}).as_dict(),
    ]
    report = acceptance_report(results, node="n1", stack="cpu", device="cpu", secrets=[KEY])
    assert report["status"] == "failed"
    assert report["summary"] == "gpu_matmul=skipped, serve=failed"
    assert report["failures"] == ["serve: 401 for key ********"]
    assert sorted(report["checks"]) == ["gpu_matmul", "serve"]
    assert KEY not in json.dumps(report)
    assert acc.overall([results[0]]) == "skipped"
    assert acc.overall([results[0], {"status": "ok"}]) == "ok"
