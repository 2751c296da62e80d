"""The amdsmi test stub (tests/aptrepo/stubs/amd_smi, shipped by the stub amd-smi-lib): vLLM's
own ROCm detection against it, and every value it returns checked against the recording it
replays (read here independently of the stub's parsers)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "galaxy.yml").is_file())
STUB = ROOT / "tests" / "aptrepo" / "stubs" / "amd_smi"
FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "instinct"
STATIC = json.loads((FIXTURES / "amd-smi_static_json_mi300x_8gpu_rocm7.2.1.json").read_text())
MONITOR = (FIXTURES / "amd-smi_monitor_putm_mi300x_8gpu.txt").read_text()
TOPOLOGY = (FIXTURES / "vllm_collect_env_mi300x_8gpu_rocm6.2.txt").read_text()
PREFIX = "/opt/rocm-6.2.1/share/amd_smi"


@pytest.fixture
def amdsmi(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("INSTINCT_STUB_AMDSMI_RECORDINGS", str(FIXTURES))
    monkeypatch.setenv("INSTINCT_STUB_AMDSMI_MODE", "mi300x")
    monkeypatch.syspath_prepend(str(STUB))
    for name in [n for n in sys.modules if n == "amdsmi" or n.startswith("amdsmi.")]:
        monkeypatch.delitem(sys.modules, name)
    module = importlib.import_module("amdsmi")
    assert Path(module.__file__).parent == STUB / "amdsmi"
    yield module
    module.amdsmi_interface._state["mode"] = None


def vllm_is_rocm(amdsmi) -> bool:
    """vLLM 0.6.6.post1's detection, vllm/platforms/__init__.py lines 42-52, verbatim logic."""
    is_rocm = False
    try:
        amdsmi.amdsmi_init()
        try:
            if len(amdsmi.amdsmi_get_processor_handles()) > 0:
                is_rocm = True
        finally:
            amdsmi.amdsmi_shut_down()
    except Exception:
        pass
    return is_rocm


def test_vllm_detection_sees_rocm_on_the_recorded_node(amdsmi):
    assert vllm_is_rocm(amdsmi)


def test_the_eight_recorded_gpus_with_their_bdfs_and_asic(amdsmi):
    amdsmi.amdsmi_init()
    handles = amdsmi.amdsmi_get_processor_handles()
    assert [amdsmi.amdsmi_get_gpu_device_bdf(h) for h in handles] == [
        g["bus"]["bdf"] for g in STATIC["gpu_data"]
    ]
    asic = amdsmi.amdsmi_get_gpu_asic_info(handles[0])
    assert asic["market_name"] == STATIC["gpu_data"][0]["asic"]["market_name"]
    assert asic["target_graphics_version"] == "gfx942"
    board = amdsmi.amdsmi_get_gpu_board_info(handles[7])
    assert board["product_serial"] == STATIC["gpu_data"][7]["board"]["product_serial"]
    assert amdsmi.amdsmi_get_processor_type(handles[0]) == {
        "processor_type": "AMDSMI_PROCESSOR_TYPE_AMD_GPU"
    }


def monitor_rows() -> dict[int, tuple[int, int]]:
    rows = re.findall(r"^\s*(\d+)\s+\d+ W\s+(\d+) °C\s+(\d+) °C", MONITOR, re.M)
    return {int(g): (int(hot), int(mem)) for g, hot, mem in rows}


def test_current_temperatures_replay_amd_smi_monitor(amdsmi):
    amdsmi.amdsmi_init()
    types, metric = amdsmi.AmdSmiTemperatureType, amdsmi.AmdSmiTemperatureMetric
    rows = monitor_rows()
    assert len(rows) == 8
    for index, handle in enumerate(amdsmi.amdsmi_get_processor_handles()):
        hot = amdsmi.amdsmi_get_temp_metric(handle, types.HOTSPOT, metric.CURRENT)
        vram = amdsmi.amdsmi_get_temp_metric(handle, types.VRAM, metric.CURRENT)
        assert (hot, vram) == rows[index]


def test_temperature_limits_replay_amd_smi_static(amdsmi):
    amdsmi.amdsmi_init()
    types, metric = amdsmi.AmdSmiTemperatureType, amdsmi.AmdSmiTemperatureMetric
    handle = amdsmi.amdsmi_get_processor_handles()[3]
    limit = STATIC["gpu_data"][3]["limit"]
    got = amdsmi.amdsmi_get_temp_metric(handle, types.HOTSPOT, metric.CRITICAL)
    assert got == limit["slowdown_hotspot_temperature"]["value"]
    got = amdsmi.amdsmi_get_temp_metric(handle, types.VRAM, metric.EMERGENCY)
    assert got == limit["shutdown_vram_temperature"]["value"]


def test_mi300x_has_no_edge_sensor_like_the_recording_says(amdsmi):
    amdsmi.amdsmi_init()
    handle = amdsmi.amdsmi_get_processor_handles()[0]
    assert STATIC["gpu_data"][0]["limit"]["slowdown_edge_temperature"] == "N/A"
    with pytest.raises(amdsmi.AmdSmiLibraryException) as err:
        amdsmi.amdsmi_get_temp_metric(
            handle, amdsmi.AmdSmiTemperatureType.EDGE, amdsmi.AmdSmiTemperatureMetric.CURRENT
        )
    assert err.value.get_error_code() == amdsmi.AmdSmiRetCode.ERR_NOT_SUPPORTED
    assert "AMDSMI_STATUS_NOT_SUPPORTED" in str(err.value)


def topology(table: str) -> list[list[str]]:
    block = TOPOLOGY.split(table, 1)[1].split("\n\n", 1)[0]
    return [line.split()[1:] for line in block.splitlines() if re.match(r"GPU\d+\s", line)]


def test_xgmi_topology_replays_the_recorded_tables(amdsmi):
    amdsmi.amdsmi_init()
    handles = amdsmi.amdsmi_get_processor_handles()
    links, hops = topology("Link Type between two GPUs"), topology("Hops between two GPUs")
    weights = topology("Weight between two GPUs")
    xgmi = int(amdsmi.AmdSmiIoLinkType.XGMI)
    pairs = [(a, b) for a in range(8) for b in range(8) if a != b]
    for a, b in pairs:
        link = amdsmi.amdsmi_topo_get_link_type(handles[a], handles[b])
        assert links[a][b] == "XGMI"
        assert link == {"hops": int(hops[a][b]), "type": xgmi}
        assert amdsmi.amdsmi_topo_get_link_weight(handles[a], handles[b]) == int(weights[a][b])


def test_what_was_never_recorded_fails_loudly(amdsmi):
    amdsmi.amdsmi_init()
    handle = amdsmi.amdsmi_get_processor_handles()[0]
    with pytest.raises(amdsmi.AmdSmiException, match="no recording for amdsmi_get_gpu_total_ecc"):
        amdsmi.amdsmi_get_gpu_total_ecc_count(handle)
    with pytest.raises(amdsmi.StubNotRecorded):
        amdsmi.amdsmi_topo_get_link_type(handle, handle)
    with pytest.raises(AttributeError):
        amdsmi.amdsmi_get_gpu_metrics_info  # noqa: B018 - not implemented: no recording


def test_ras_blocks_replay_the_recorded_ecc_block_state(amdsmi):
    amdsmi.amdsmi_init()
    handle = amdsmi.amdsmi_get_processor_handles()[0]
    blocks = amdsmi.amdsmi_get_gpu_ras_block_features_enabled(handle)
    assert {b["block"]: b["status"] for b in blocks} == STATIC["gpu_data"][0]["ras"][
        "ecc_block_state"
    ]


def test_calls_before_init_and_bad_handles_fail_like_the_binding(amdsmi):
    with pytest.raises(amdsmi.AmdSmiLibraryException) as err:
        amdsmi.amdsmi_get_processor_handles()
    assert err.value.get_error_code() == amdsmi.AmdSmiRetCode.NOT_INIT
    amdsmi.amdsmi_init()
    with pytest.raises(amdsmi.AmdSmiParameterException):
        amdsmi.amdsmi_get_gpu_device_bdf(0)
    with pytest.raises(amdsmi.AmdSmiParameterException):
        amdsmi.amdsmi_init(2)


def test_nonroot_mode_replays_the_permission_denied_recording(amdsmi, monkeypatch):
    monkeypatch.setenv("INSTINCT_STUB_AMDSMI_MODE", "nonroot")
    amdsmi.amdsmi_init()
    handles = amdsmi.amdsmi_get_processor_handles()
    assert len(handles) == 8
    assert amdsmi.amdsmi_get_gpu_device_bdf(handles[0]) == "0000:1b:00.0"
    with pytest.raises(amdsmi.AmdSmiLibraryException) as err:
        amdsmi.amdsmi_get_gpu_asic_info(handles[0])
    assert err.value.get_error_code() == amdsmi.AmdSmiRetCode.ERR_NO_PERM
    assert "Permission Denied" in str(err.value)
    with pytest.raises(amdsmi.StubNotRecorded):
        amdsmi.amdsmi_get_temp_metric(
            handles[0], amdsmi.AmdSmiTemperatureType.HOTSPOT, amdsmi.AmdSmiTemperatureMetric.CURRENT
        )


def test_no_gpu_mode_makes_vllm_detection_fail(amdsmi, monkeypatch):
    monkeypatch.setenv("INSTINCT_STUB_AMDSMI_MODE", "no-gpu")
    assert not vllm_is_rocm(amdsmi)
    amdsmi.amdsmi_init()
    assert amdsmi.amdsmi_get_processor_handles() == []


def test_an_unknown_mode_is_named(amdsmi, monkeypatch):
    monkeypatch.setenv("INSTINCT_STUB_AMDSMI_MODE", "mi250")
    with pytest.raises(amdsmi.StubNotRecorded, match=r"mode 'mi250'.*mi300x, nonroot, no-gpu"):
        amdsmi.amdsmi_init()


def test_packages_json_ships_every_stub_file_and_recording():
    spec = json.loads((ROOT / "tests" / "aptrepo" / "packages.json").read_text())
    files = next(p for p in spec["packages"] if p["name"] == "amd-smi-lib")["files"]
    shipped = {k.removeprefix(PREFIX + "/"): v for k, v in files.items() if k.startswith(PREFIX)}
    sources = {str(p.relative_to(STUB)) for p in STUB.rglob("*") if p.suffix in (".py", ".toml")}
    assert {k for k in shipped if not k.startswith("amdsmi/recordings/")} == sources
    recorded = {k.removeprefix("amdsmi/recordings/") for k in shipped if "recordings/" in k}
    interface = (STUB / "amdsmi" / "amdsmi_interface.py").read_text()
    names = re.findall(r'^[A-Z_]+ = "([^"]+)"', interface, re.M)
    assert {n for n in names if (FIXTURES / n).is_file()} == recorded


@pytest.mark.skipif(importlib.util.find_spec("setuptools") is None, reason="needs setuptools")
def test_stub_package_installs_with_pip(tmp_path: Path):
    """What `pip install /opt/rocm/share/amd_smi` does on a node, from the stub's own tree."""
    tree = tmp_path / "amd_smi"
    shutil.copytree(STUB, tree, ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "amdsmi" / "recordings").mkdir()
    for name in ("amd-smi_static_json_mi300x_8gpu_rocm7.2.1.json",):
        shutil.copy(FIXTURES / name, tree / "amdsmi" / "recordings" / name)
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(tree),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    probe = (
        "import amdsmi; amdsmi.amdsmi_init(); "
        "print(len(amdsmi.amdsmi_get_processor_handles()), amdsmi.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(target), "INSTINCT_STUB_AMDSMI_MODE": "mi300x"},
        cwd=tmp_path,
    ).stdout.split()
    assert out[0] == "8" and out[1].startswith(str(target))
