"""Test stub of AMD's device metrics exporter (package amdgpu-exporter of tests/aptrepo).

Serves, on the config's ServerPort (default 5000) at /metrics, the metric names and labels of
ROCm/device-metrics-exporter (docs/configuration/metricslist.md) with values replayed from
recordings of real 8 x MI300X hosts: `amd-smi monitor -putm` (power, hotspot and memory
temperature, GFX and memory activity, GFX clock) and `amd-smi static --json` (VRAM size,
serials, model). See tests/unit/fixtures/instinct/SOURCES.md. Nothing is invented: a metric
the recordings lack is not served.

Usage (as the real one): amd-metrics-exporter [-amd-metrics-config /etc/metrics/config.json]
(/usr/local/bin/amd-metrics-exporter is a shell wrapper that runs this file with python3.)
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SHARE = Path(os.environ.get("INSTINCT_STUB_SHARE", "/usr/share/instinct-stub/amd-metrics-exporter"))
MONITOR = "amd-smi-monitor-putm.txt"
STATIC = "amd-smi-static.json"
# amd-smi monitor -putm column -> (exporter metric, unit suffix in the recording)
COLUMNS = {
    "POWER": ("gpu_package_power", "W"),
    "GPU_TEMP": ("gpu_junction_temperature", "°C"),
    "MEM_TEMP": ("gpu_memory_temperature", "°C"),
    "GFX_UTIL": ("gpu_gfx_activity", "%"),
    "MEM_UTIL": ("gpu_umc_activity", "%"),
    "GFX_CLOCK": ("gpu_clock", "MHz"),
    "MEM_CLOCK": ("gpu_clock", "MHz"),
}
CLOCK_TYPE = {"GFX_CLOCK": "GPU_CLOCK_TYPE_SYSTEM", "MEM_CLOCK": "GPU_CLOCK_TYPE_MEMORY"}
HELP = {
    "gpu_package_power": "Current socket power in Watts",
    "gpu_junction_temperature": "Hotspot (aka junction) temperature value in Celsius",
    "gpu_memory_temperature": "Memory temperature value in Celsius",
    "gpu_gfx_activity": "Graphics engine usage percentage (0 - 100)",
    "gpu_umc_activity": "Memory engine usage percentage (0 - 100)",
    "gpu_clock": "Clock measure of the GPU in Mhz",
    "gpu_total_vram": "Total VRAM available in MB",
    "gpu_nodes_total": "Number of GPU nodes on the machine",
}


def parse_monitor(text: str) -> dict[int, dict[str, float]]:
    """`amd-smi monitor -putm` table -> {gpu: {column: value}}."""
    lines = [x for x in text.splitlines() if x.strip()]
    header = lines[0].split()
    rows: dict[int, dict[str, float]] = {}
    for line in lines[1:]:
        values = re.findall(r"(\d+(?:\.\d+)?)\s*(?:W|°C|%|MHz)?", line)
        gpu, rest = int(values[0]), [float(v) for v in values[1:]]
        rows[gpu] = dict(zip(header[1:], rest, strict=True))
    return rows


def render(monitor: dict[int, dict[str, float]], static: dict, hostname: str) -> str:
    gpus = {g["gpu"]: g for g in static.get("gpu_data", [])}
    out: list[str] = []
    series: dict[str, list[str]] = {}
    for gpu, cols in sorted(monitor.items()):
        info = gpus.get(gpu, {})
        labels = {
            "gpu_id": str(gpu),
            "serial_number": str(info.get("board", {}).get("product_serial", "")),
            "card_model": str(info.get("asic", {}).get("market_name", "")),
            "hostname": hostname,
        }
        for col, value in cols.items():
            metric = COLUMNS[col][0]
            extra = {"clock_type": CLOCK_TYPE[col]} if col in CLOCK_TYPE else {}
            series.setdefault(metric, []).append(_line(metric, labels | extra, value))
        vram = info.get("vram", {}).get("size", {})
        if vram.get("unit") == "MB":
            vram_line = _line("gpu_total_vram", labels, vram["value"])
            series.setdefault("gpu_total_vram", []).append(vram_line)
    series["gpu_nodes_total"] = [_line("gpu_nodes_total", {"hostname": hostname}, len(monitor))]
    for metric, lines in series.items():
        out += [f"# HELP {metric} {HELP[metric]}", f"# TYPE {metric} gauge", *lines]
    return "\n".join(out) + "\n"


def _line(metric: str, labels: dict[str, str], value: float) -> str:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{metric}{{{text}}} {float(value):g}"


def port_from(argv: list[str]) -> int:
    config = Path("/etc/metrics/config.json")
    if "-amd-metrics-config" in argv:
        config = Path(argv[argv.index("-amd-metrics-config") + 1])
    if config.exists():
        return int(json.loads(config.read_text()).get("ServerPort", 5000))
    return 5000


def main(argv: list[str]) -> int:
    body = render(
        parse_monitor((SHARE / MONITOR).read_text()),
        json.loads((SHARE / STATIC).read_text()),
        socket.gethostname(),
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    port = port_from(argv)
    bind = os.environ.get("INSTINCT_STUB_BIND", "")
    where = f"{bind or '*'}:{port}"
    print(f"amd-metrics-exporter test stub: serving recorded metrics on {where}", flush=True)
    ThreadingHTTPServer((bind, port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
