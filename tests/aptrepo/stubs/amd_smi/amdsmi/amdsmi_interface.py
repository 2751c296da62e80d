"""Test stub of amdsmi_interface (ROCm's amdsmi Python binding), replaying recordings.

No silicon: every value comes from a recording of a real 8 x MI300X host, read at call time from
recordings/ (copies of tests/unit/fixtures/instinct/, sources in SOURCES.md there):

- amd-smi_static_json_mi300x_8gpu_rocm7.2.1.json: the GPUs (BDF, asic, board, temperature
  limits); the non-root mode reads amd-smi_static_json_nonroot_permission_denied_*.txt instead;
- amd-smi_monitor_putm_mi300x_8gpu.txt: current hotspot (GPU_TEMP) and VRAM (MEM_TEMP)
  temperatures;
- vllm_collect_env_mi300x_8gpu_rocm6.2.txt: the GPU topology (link type, hops, weight).

The mode (`/etc/instinct-stub/amdsmi-mode`, or $INSTINCT_STUB_AMDSMI_MODE) picks the machine:
  mi300x  (default) the recorded 8 x MI300X node, as root or a member of group render;
  nonroot the same node without access to /dev/kfd: what the recording shows as "N/A" raises
          AmdSmiLibraryException(AMDSMI_STATUS_NO_PERM), as the recording's banner says why;
  no-gpu  amdgpu failed to initialise the GPUs (rocm-smi "No AMD GPUs specified" recording):
          amdsmi_init works, amdsmi_get_processor_handles() is empty.
A call with no recording behind it raises StubNotRecorded (never a made-up value); a function
the stub does not implement is an AttributeError, as in an older binding.
"""

import json
import os
import re
from enum import IntEnum
from pathlib import Path

from . import amdsmi_wrapper as w
from .amdsmi_exception import (
    AmdSmiLibraryException,
    AmdSmiParameterException,
    AmdSmiRetCode,
    StubNotRecorded,
)

MODE_FILE = Path("/etc/instinct-stub/amdsmi-mode")
MODES = ("mi300x", "nonroot", "no-gpu")
STATIC = "amd-smi_static_json_mi300x_8gpu_rocm7.2.1.json"
STATIC_NONROOT = "amd-smi_static_json_nonroot_permission_denied_mi300x_8gpu_rocm7.2.1.txt"
MONITOR = "amd-smi_monitor_putm_mi300x_8gpu.txt"
TOPOLOGY = "vllm_collect_env_mi300x_8gpu_rocm6.2.txt"
NA = "N/A"


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = w.AMDSMI_INIT_ALL_PROCESSORS
    INIT_AMD_CPUS = w.AMDSMI_INIT_AMD_CPUS
    INIT_AMD_GPUS = w.AMDSMI_INIT_AMD_GPUS
    INIT_AMD_APUS = w.AMDSMI_INIT_AMD_APUS
    INIT_NON_AMD_CPUS = w.AMDSMI_INIT_NON_AMD_CPUS
    INIT_NON_AMD_GPUS = w.AMDSMI_INIT_NON_AMD_GPUS


class AmdSmiTemperatureType(IntEnum):
    EDGE = w.AMDSMI_TEMPERATURE_TYPE_EDGE
    HOTSPOT = w.AMDSMI_TEMPERATURE_TYPE_HOTSPOT
    JUNCTION = w.AMDSMI_TEMPERATURE_TYPE_JUNCTION
    VRAM = w.AMDSMI_TEMPERATURE_TYPE_VRAM
    HBM_0 = w.AMDSMI_TEMPERATURE_TYPE_HBM_0
    HBM_1 = w.AMDSMI_TEMPERATURE_TYPE_HBM_1
    HBM_2 = w.AMDSMI_TEMPERATURE_TYPE_HBM_2
    HBM_3 = w.AMDSMI_TEMPERATURE_TYPE_HBM_3
    PLX = w.AMDSMI_TEMPERATURE_TYPE_PLX


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = w.AMDSMI_TEMP_CURRENT
    MAX = w.AMDSMI_TEMP_MAX
    MIN = w.AMDSMI_TEMP_MIN
    MAX_HYST = w.AMDSMI_TEMP_MAX_HYST
    MIN_HYST = w.AMDSMI_TEMP_MIN_HYST
    CRITICAL = w.AMDSMI_TEMP_CRITICAL
    CRITICAL_HYST = w.AMDSMI_TEMP_CRITICAL_HYST
    EMERGENCY = w.AMDSMI_TEMP_EMERGENCY
    EMERGENCY_HYST = w.AMDSMI_TEMP_EMERGENCY_HYST
    CRIT_MIN = w.AMDSMI_TEMP_CRIT_MIN
    CRIT_MIN_HYST = w.AMDSMI_TEMP_CRIT_MIN_HYST
    OFFSET = w.AMDSMI_TEMP_OFFSET
    LOWEST = w.AMDSMI_TEMP_LOWEST
    HIGHEST = w.AMDSMI_TEMP_HIGHEST


class AmdSmiIoLinkType(IntEnum):
    UNDEFINED = w.AMDSMI_IOLINK_TYPE_UNDEFINED
    PCIEXPRESS = w.AMDSMI_IOLINK_TYPE_PCIEXPRESS
    XGMI = w.AMDSMI_IOLINK_TYPE_XGMI
    NUMIOLINKTYPES = w.AMDSMI_IOLINK_TYPE_NUMIOLINKTYPES
    SIZE = w.AMDSMI_IOLINK_TYPE_SIZE


class AmdSmiProcessorType(IntEnum):
    UNKNOWN = w.AMDSMI_PROCESSOR_TYPE_UNKNOWN
    AMDSMI_PROCESSOR_TYPE_AMD_GPU = w.AMDSMI_PROCESSOR_TYPE_AMD_GPU
    AMDSMI_PROCESSOR_TYPE_AMD_CPU = w.AMDSMI_PROCESSOR_TYPE_AMD_CPU
    AMDSMI_PROCESSOR_TYPE_NON_AMD_GPU = w.AMDSMI_PROCESSOR_TYPE_NON_AMD_GPU
    AMDSMI_PROCESSOR_TYPE_NON_AMD_CPU = w.AMDSMI_PROCESSOR_TYPE_NON_AMD_CPU


# amd-smi static prints CRITICAL as slowdown_* and EMERGENCY as shutdown_* (amdsmi_commands.py)
_LIMIT_PREFIX = {
    AmdSmiTemperatureMetric.CRITICAL: "slowdown",
    AmdSmiTemperatureMetric.EMERGENCY: "shutdown",
}
_LIMIT_SENSOR = {
    AmdSmiTemperatureType.EDGE: "edge",
    AmdSmiTemperatureType.HOTSPOT: "hotspot",
    AmdSmiTemperatureType.VRAM: "vram",
}
# amd-smi monitor: GPU_TEMP is the hotspot sensor, MEM_TEMP the VRAM one (amdsmi_commands.py)
_MONITOR_COLUMNS = {
    AmdSmiTemperatureType.HOTSPOT: "GPU_TEMP",
    AmdSmiTemperatureType.VRAM: "MEM_TEMP",
}
_LINK_TYPES = {"XGMI": AmdSmiIoLinkType.XGMI, "PCIE": AmdSmiIoLinkType.PCIEXPRESS}

_state = {"mode": None}


def _recordings() -> Path:
    override = os.environ.get("INSTINCT_STUB_AMDSMI_RECORDINGS")
    return Path(override) if override else Path(__file__).parent / "recordings"


def _read(name: str) -> str:
    path = _recordings() / name
    if not path.is_file():
        raise StubNotRecorded(name, f"recording {path} is missing")
    return path.read_text(encoding="utf-8")


def _mode() -> str:
    mode = os.environ.get("INSTINCT_STUB_AMDSMI_MODE", "")
    if not mode and MODE_FILE.is_file():
        mode = MODE_FILE.read_text(encoding="utf-8").strip()
    mode = mode or "mi300x"
    if mode not in MODES:
        raise StubNotRecorded(f"mode {mode!r}", f"known modes: {', '.join(MODES)} ({MODE_FILE})")
    return mode


def _gpus() -> list:
    mode = _state["mode"]
    if mode is None:
        raise AmdSmiLibraryException(AmdSmiRetCode.NOT_INIT)
    if mode == "no-gpu":
        return []
    if mode == "nonroot":
        text = _read(STATIC_NONROOT)
        return json.loads(text[text.index("{") :])["gpu_data"]
    return json.loads(_read(STATIC))["gpu_data"]


def _gpu(handle) -> dict:
    if not isinstance(handle, w.amdsmi_processor_handle):
        raise AmdSmiParameterException(handle, w.amdsmi_processor_handle)
    gpus = _gpus()
    index = (handle.value or 0) - 1
    if not 0 <= index < len(gpus):
        raise AmdSmiLibraryException(AmdSmiRetCode.ERR_INVAL)
    return gpus[index]


def _recorded(value):
    """A recorded section or field; "N/A" is what amd-smi printed when the call failed."""
    if value == NA or (isinstance(value, dict) and value and all(v == NA for v in value.values())):
        if _state["mode"] == "nonroot":
            raise AmdSmiLibraryException(AmdSmiRetCode.ERR_NO_PERM)
        raise AmdSmiLibraryException(AmdSmiRetCode.ERR_NOT_SUPPORTED)
    return value


def _full_mode(call: str) -> None:
    if _state["mode"] != "mi300x":
        raise StubNotRecorded(call, f"nothing recorded in mode {_state['mode']}")


def amdsmi_init(flag=AmdSmiInitFlags.INIT_AMD_GPUS):
    if not isinstance(flag, AmdSmiInitFlags):
        raise AmdSmiParameterException(flag, AmdSmiInitFlags)
    _state["mode"] = _mode()


def amdsmi_shut_down():
    if _state["mode"] is None:
        raise AmdSmiLibraryException(AmdSmiRetCode.NOT_INIT)
    _state["mode"] = None


def amdsmi_get_processor_handles():
    return [w.amdsmi_processor_handle(i + 1) for i in range(len(_gpus()))]


def amdsmi_get_processor_type(processor_handle):
    _gpu(processor_handle)
    return {"processor_type": AmdSmiProcessorType.AMDSMI_PROCESSOR_TYPE_AMD_GPU.name}


def amdsmi_get_gpu_device_bdf(processor_handle) -> str:
    return _recorded(_gpu(processor_handle)["bus"]["bdf"])


def amdsmi_get_gpu_asic_info(processor_handle) -> dict:
    return dict(_recorded(_gpu(processor_handle)["asic"]))


def amdsmi_get_gpu_board_info(processor_handle) -> dict:
    return dict(_recorded(_gpu(processor_handle)["board"]))


def amdsmi_get_gpu_vram_info(processor_handle) -> dict:
    vram = _recorded(_gpu(processor_handle)["vram"])
    return {
        "vram_type": vram["type"],
        "vram_vendor": vram["vendor"],
        "vram_size": vram["size"]["value"],
        "vram_bit_width": vram["bit_width"],
    }


def _monitor_temps(index: int) -> dict:
    lines = [line for line in _read(MONITOR).splitlines() if line.strip()]
    header = lines[0].split()
    for line in lines[1:]:
        tokens = line.split()
        if int(tokens[0]) == index:
            values = [tokens[i] for i in range(1, len(tokens), 2)]
            return dict(zip(header[1:], values, strict=True))
    raise StubNotRecorded(f"amd-smi monitor of GPU {index}")


def amdsmi_get_temp_metric(processor_handle, sensor_type, metric) -> int:
    gpu = _gpu(processor_handle)
    if not isinstance(sensor_type, AmdSmiTemperatureType):
        raise AmdSmiParameterException(sensor_type, AmdSmiTemperatureType)
    if not isinstance(metric, AmdSmiTemperatureMetric):
        raise AmdSmiParameterException(metric, AmdSmiTemperatureMetric)
    call = f"amdsmi_get_temp_metric({sensor_type.name}, {metric.name})"
    if metric == AmdSmiTemperatureMetric.CURRENT:
        _full_mode(call)
        if sensor_type == AmdSmiTemperatureType.EDGE:
            # MI300X has no edge sensor: the recorded limits say N/A for it
            _recorded(gpu["limit"]["slowdown_edge_temperature"])
        column = _MONITOR_COLUMNS.get(sensor_type)
        if column is None:
            raise StubNotRecorded(call)
        return int(_recorded(_monitor_temps(gpu["gpu"])[column]))
    if metric not in _LIMIT_PREFIX or sensor_type not in _LIMIT_SENSOR:
        raise StubNotRecorded(call)
    key = f"{_LIMIT_PREFIX[metric]}_{_LIMIT_SENSOR[sensor_type]}_temperature"
    return int(_recorded(gpu["limit"][key])["value"])


def amdsmi_get_gpu_ras_block_features_enabled(processor_handle) -> list:
    states = _recorded(_gpu(processor_handle)["ras"]["ecc_block_state"])
    return [{"block": block, "status": status} for block, status in states.items()]


def amdsmi_get_gpu_total_ecc_count(processor_handle) -> dict:
    _gpu(processor_handle)
    raise StubNotRecorded(
        "amdsmi_get_gpu_total_ecc_count", "no ECC error count of an MI300X was found to replay"
    )


def amdsmi_get_xgmi_info(processor_handle) -> dict:
    _gpu(processor_handle)
    raise StubNotRecorded("amdsmi_get_xgmi_info", "no xgmi hive/node ids were recorded")


def _topology(table: str) -> list:
    lines = _read(TOPOLOGY).splitlines()
    start = next((i for i, line in enumerate(lines) if table in line), None)
    if start is None:
        raise StubNotRecorded(f"topology table {table!r}")
    rows = []
    for line in lines[start + 2 :]:
        if not re.match(r"GPU\d+\s", line):
            break
        rows.append(line.split()[1:])
    return rows


def _pair(src, dst, call: str) -> tuple:
    a, b = _gpu(src)["gpu"], _gpu(dst)["gpu"]
    _full_mode(call)
    if a == b:
        raise StubNotRecorded(call, "a GPU with itself")
    return a, b


def amdsmi_topo_get_link_type(processor_handle_src, processor_handle_dst) -> dict:
    a, b = _pair(processor_handle_src, processor_handle_dst, "amdsmi_topo_get_link_type")
    link = _topology("Link Type between two GPUs")[a][b]
    hops = _topology("Hops between two GPUs")[a][b]
    if link not in _LINK_TYPES:
        raise StubNotRecorded("amdsmi_topo_get_link_type", f"link type {link!r}")
    return {"hops": int(hops), "type": int(_LINK_TYPES[link])}


def amdsmi_topo_get_link_weight(processor_handle_src, processor_handle_dst) -> int:
    a, b = _pair(processor_handle_src, processor_handle_dst, "amdsmi_topo_get_link_weight")
    return int(_topology("Weight between two GPUs")[a][b])


__all__ = [
    "AmdSmiInitFlags",
    "AmdSmiIoLinkType",
    "AmdSmiProcessorType",
    "AmdSmiTemperatureMetric",
    "AmdSmiTemperatureType",
    "amdsmi_get_gpu_asic_info",
    "amdsmi_get_gpu_board_info",
    "amdsmi_get_gpu_device_bdf",
    "amdsmi_get_gpu_ras_block_features_enabled",
    "amdsmi_get_gpu_total_ecc_count",
    "amdsmi_get_gpu_vram_info",
    "amdsmi_get_processor_handles",
    "amdsmi_get_processor_type",
    "amdsmi_get_temp_metric",
    "amdsmi_get_xgmi_info",
    "amdsmi_init",
    "amdsmi_shut_down",
    "amdsmi_topo_get_link_type",
    "amdsmi_topo_get_link_weight",
]
