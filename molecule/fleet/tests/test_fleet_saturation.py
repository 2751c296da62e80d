"""fleet scenario: a saturated node stays in the gateway's rotation (docs/gateway.md, "Hung nodes").

fleet-node2 gets a queue of completions deeper than its watchdog's probe timeout: saturate.py
(molecule/shared) runs on the controller against the node's published mTLS port, grows its
clients until a 1-token request waits longer than the probe timeout, then holds that load for
FLEET_SATURATION_SECONDS (default: the probe interval + probe timeout + 10 s, 30 s in the
scenario; `make bench-fleet`: 600). Meanwhile the client load of fleet_load.py streams through
the gateway and a watch polls the gateway's server states. The watchdog excuses a slow probe
while tokens flow, so the node stays UP at the gateway the whole time (no ejection), no request
fails on either path, and systemd never restarts the engine.

Runs after test_fleet_ejection.py (name order); starts by waiting for both nodes UP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import unit_argv  # molecule/shared (on the path: molecule/conftest.py)
from fleet_load import Load, failed
from test_fleet import (
    DIRECT,
    LOAD_PAUSE,
    MODEL,
    NODE_KEY,
    PKI,
    REPO,
    GatewayWatch,
    in_rotation,
    main_pid,
    openai_client,
    sh,
    wait_status,
)

NODE = "fleet-node2"
# The hold, once deeper than the timeout: one probe interval + probe timeout, the window in which
# a slow probe the watchdog did not excuse would turn its agent down, + MARGIN (the poller's
# timing on a loaded 2-core machine); FLEET_SATURATION_SECONDS sets it instead.
MARGIN = 10.0
RAMP_LIMIT = 300.0  # seconds to build the queue
DRIVER = REPO / "molecule" / "shared" / "saturate.py"


def unit_settings(node: str) -> tuple[dict[str, float], list[str]]:
    """(the watchdog wrapper's settings, vLLM's argv) of the node's unit."""
    return unit_argv.split(unit_argv.exec_start(sh(node, "cat /etc/systemd/system/vllm.service")))


def hold_seconds(options: dict[str, float]) -> float:
    """How long the deep queue is held: FLEET_SATURATION_SECONDS, else the unit's window."""
    return float(os.environ.get("FLEET_SATURATION_SECONDS",
                                unit_argv.probe_window(options) + MARGIN))


def saturate(node: str, vllm: list[str], target: float, hold: float, env_file: Path) -> dict:
    """saturate.py on the controller against the node's published port, over mTLS."""
    seqs = unit_argv.flag(vllm, "--max-num-seqs", 256)
    # clients from 8 x the batch, grown until the queue is deeper than the target, up to 64 x:
    # how many that takes follows the machine's speed and what else runs on it (on 2 cores
    # between about 80 and 190 clients at a batch of 4; docs/benchmarks.md, "make test")
    max_tokens = max(16, min(400, unit_argv.flag(vllm, "--max-model-len", 32768) - 64))
    command = [
        sys.executable, str(DRIVER), "--url", DIRECT[node], "--env-file", str(env_file),
        "--ca-file", str(PKI / "ca.crt"), "--cert-file", str(PKI / "controller.crt"),
        "--key-file", str(PKI / "controller.key"), "--seconds", str(hold),
        "--ramp-limit", str(RAMP_LIMIT), "--target", str(target),
        "--max-tokens", str(max_tokens), "--clients", str(8 * seqs),
        "--max-clients", str(64 * seqs), "--step", str(2 * seqs),
    ]  # fmt: skip
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def test_a_saturated_node_stays_in_rotation(ca, tmp_path, figures, results):
    assert all(wait_status(n, "UP", 300) == "UP" for n in DIRECT)
    options, vllm = unit_settings(NODE)
    # the node's watchdog probes the engine, as the role's default does: the case to excuse
    assert options["probe-interval"] > 0, options
    target = unit_argv.deep_queue(options)
    hold = hold_seconds(options)
    restarts = sh(NODE, "systemctl show -P NRestarts vllm.service").strip()
    pid = main_pid(NODE)
    env_file = tmp_path / "node.env"
    env_file.touch(mode=0o600)
    env_file.write_text(f"VLLM_API_KEY={NODE_KEY}\n")
    watch = GatewayWatch().start()
    load = Load(lambda: openai_client(ca), MODEL, workers=2, max_tokens=16,
                pause=LOAD_PAUSE).start()
    began = time.monotonic()
    try:
        found = saturate(NODE, vllm, target, hold, env_file)
    finally:
        seconds = time.monotonic() - began
        outcomes = load.stop()
        changes = watch.stop()
    bad = failed(outcomes)
    states = [status for _when, status in changes[NODE]]
    figures.append(
        f"saturation: {NODE}'s queue deeper than its probe timeout ({options['probe-timeout']:.0f} "
        f"s; a 1-token request waited up to {found['max_marker']} s) with {found['clients']} "
        f"clients, held {found['hold_seconds']} s after a {found['ramp_seconds']} s ramp; "
        f"{found['requests']} direct requests answered, {found['failures']} failed, "
        f"{found['cut']} cut at the hold's end; through the gateway "
        f"{len(outcomes)} requests, {len(bad)} failed; gateway states of {NODE}: {states}")
    results["saturation"] = {
        "node": NODE, "probe_timeout_s": options["probe-timeout"],
        "max_marker_s": found["max_marker"], "clients": found["clients"],
        "ramp_s": found["ramp_seconds"], "hold_s": found["hold_seconds"],
        "direct_requests": found["requests"], "direct_failed": found["failures"],
        "direct_cut": found["cut"],
        "requests": len(outcomes), "failed": len(bad), "states": states,
        "seconds": round(seconds, 1),
    }
    # deeper than the probe timeout, for the whole hold
    assert found["max_marker"] > target, found["markers"]
    assert found["hold_seconds"] >= hold, found
    assert found["failures"] == 0, found["failure_examples"]
    assert not bad, [o.error for o in bad[:5]]
    # never out of rotation: UP throughout ("UP 1/2" would be one failed check, not an ejection)
    assert states and all(in_rotation(s) for s in states), changes[NODE]
    assert (sh(NODE, "systemctl show -P NRestarts vllm.service").strip(), main_pid(NODE)) == \
        (restarts, pid)
