"""The watchdog under saturation on vLLM 0.6.6.post1 (issue 14, point 3; docs/watchdog.md).

On the node that serves vLLM through vllm_service and the watchdog (SATURATION_NODE, default
vllm-source-1; unit vllm.service), requests to 127.0.0.1 inside the node only, bounded:

1. as deployed (engine stats on: the MI300X defaults): a queue deeper than the watchdog's
   probe timeout, held for the window in which a watchdog that took a slow probe for a stall
   would be killed (probe interval + probe timeout + WatchdogSec + MARGIN, from the unit) ->
   no request fails, NRestarts unchanged, the watchdog never paused its pings;
2. the same with --disable-log-stats (a runtime drop-in; /metrics then has no vllm:* series);
3. SIGSTOP of the engine process (stats still off) -> systemd's watchdog kill within
   WatchdogSec + probe interval + MARGIN seconds, then a restart (NRestarts + 1).

The node is left as converge made it (drop-in removed, unit restarting; not waited for).
molecule/shared/saturate.py is the load driver, copied into the node.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import testinfra
import unit_argv  # molecule/shared (on the path: molecule/conftest.py)

NODE = os.environ.get("SATURATION_NODE", "vllm-source-1")
UNIT = "vllm.service"
UNIT_FILE = f"/etc/systemd/system/{UNIT}"
DROP_IN = f"/run/systemd/system/{UNIT}.d/50-saturation-stats-off.conf"
ENV_FILE = "/etc/vllm/vllm.env"
DRIVER = "/tmp/instinct-saturate.py"
RAMP_LIMIT = 150.0  # seconds to build the queue (about 60 on a loaded 2-core host)
MARGIN = 10.0  # journal timestamps, the poller's timing on a loaded 2-core host
READY_TIMEOUT = 900.0


@pytest.fixture(scope="module")
def host() -> Any:
    return testinfra.get_host(f"sandbox://{NODE}")


def prop(host: Any, name: str) -> str:
    return host.check_output(f"systemctl show -p {name} --value {UNIT}").strip()


def wait_for(what: str, check: Callable[[], bool], timeout: float, every: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(every)


def serving(host: Any) -> bool:
    return prop(host, "ActiveState") == "active" and prop(host, "StatusText").startswith("serving")


def exec_start(host: Any) -> str:
    """The unit file's ExecStart= line (as role vllm_service quoted it)."""
    lines = host.file(UNIT_FILE).content_string.splitlines()
    return next(line for line in lines if line.startswith("ExecStart="))


def argv(host: Any) -> tuple[dict[str, float], list[str]]:
    """(watchdog settings, vLLM argv): the drop-in's ExecStart, else the unit file's."""
    drop_in = host.file(DROP_IN)
    return unit_argv.split(unit_argv.exec_start(drop_in.content_string) if drop_in.exists
                           else exec_start(host))


flag = unit_argv.flag


def watchdog_sec(host: Any) -> float:
    line = next(ln for ln in host.file(UNIT_FILE).content_string.splitlines()
                if ln.startswith("WatchdogSec="))  # fmt: skip
    return float(line.split("=", 1)[1])


def node_time(host: Any) -> float:
    return float(host.check_output("date +%s.%N"))


def journal_since(host: Any, since: float) -> str:
    return host.check_output(
        f"journalctl --no-pager -o short-unix -u {UNIT} --since @{int(since)}"
    )


def saturate(host: Any) -> dict[str, Any]:
    """Run saturate.py in the node: a queue deeper than the probe timeout, held for the window
    in which a watchdog that paused its pings on a slow probe would be killed."""
    options, vllm = argv(host)
    hold = unit_argv.probe_window(options) + watchdog_sec(host) + MARGIN
    max_tokens = max(16, min(200, flag(vllm, "--max-model-len", 32768) - 32))
    target = unit_argv.deep_queue(options)
    seqs = flag(vllm, "--max-num-seqs", 256)  # clients: 2x the batch, grown up to 6x
    command = [
        "/usr/bin/python3", DRIVER, "--url", f"http://127.0.0.1:{flag(vllm, '--port', 8000)}",
        "--env-file", ENV_FILE, "--seconds", str(hold), "--ramp-limit", str(RAMP_LIMIT),
        "--target", str(target),
        "--max-tokens", str(max_tokens), "--clients", str(2 * seqs),
        "--max-clients", str(6 * seqs), "--step", str(max(8, seqs // 4)),
    ]  # fmt: skip
    result = json.loads(host.check_output(shlex.join(command)).splitlines()[-1])
    result["target"] = target
    result["hold_wanted"] = hold
    print(f"saturation: {json.dumps(result)}")
    return result


@pytest.fixture(scope="module")
def driver(host: Any) -> None:
    source = Path(__file__).resolve().parents[2] / "shared" / "saturate.py"
    subprocess.run(["podman", "cp", str(source), f"{NODE}:{DRIVER}"], check=True)


@pytest.fixture(scope="module")
def stats_off(host: Any) -> Iterator[None]:
    """A runtime drop-in appending --disable-log-stats; removed (and restarted) afterwards."""
    line = exec_start(host)
    assert "--disable-log-stats" not in line, "the scenario already runs with stats off"
    body = f"[Service]\nExecStart=\n{line} --disable-log-stats\n"
    host.check_output(f"mkdir -p {shlex.quote(os.path.dirname(DROP_IN))}")
    host.check_output(f"printf %s {shlex.quote(body)} > {DROP_IN}")
    host.check_output(f"systemctl daemon-reload && systemctl restart --no-block {UNIT}")
    time.sleep(5)
    wait_for("serving with --disable-log-stats", lambda: serving(host), READY_TIMEOUT, 5)
    yield
    # Back to the converged unit. Not waited for: every test here waits for "serving" first,
    # and this module runs last (the engine's start would only delay Molecule's destroy).
    host.run(f"rm -f {DROP_IN}")
    host.check_output(f"systemctl daemon-reload && systemctl restart --no-block {UNIT}")


def assert_no_restart_under_saturation(host: Any) -> dict[str, Any]:
    wait_for("serving", lambda: serving(host), READY_TIMEOUT, 5)
    restarts, main_pid = prop(host, "NRestarts"), prop(host, "MainPID")
    began = node_time(host)
    result = saturate(host)
    assert result["failures"] == 0, result["failure_examples"]
    assert result["requests"] > 0
    # the queue was deeper than the probe timeout: a 1-token request waited longer than it,
    # and the load stayed on for the whole detection window after that
    assert result["max_marker"] > result["target"], result["markers"]
    assert result["hold_seconds"] >= result["hold_wanted"], result
    assert (prop(host, "NRestarts"), prop(host, "MainPID")) == (restarts, main_pid)
    assert "pings paused" not in journal_since(host, began)
    return result


def test_saturated_engine_with_stats_on_is_not_restarted(host: Any, driver: None) -> None:
    # an earlier test may have just restarted the engine (SIGSTOP): /metrics answers once serving
    wait_for("serving", lambda: serving(host), READY_TIMEOUT, 5)
    _options, vllm = argv(host)
    assert "--disable-log-stats" not in vllm  # the MI300X defaults keep stats on
    assert "vllm:generation_tokens_total" in host.check_output(
        f"curl -s http://127.0.0.1:{flag(vllm, '--port', 8000)}/metrics"
    )
    assert_no_restart_under_saturation(host)


def test_saturated_engine_with_stats_off_is_not_restarted(
    host: Any, driver: None, stats_off: None
) -> None:
    _options, vllm = argv(host)
    assert "--disable-log-stats" in vllm
    metrics = host.check_output(f"curl -s http://127.0.0.1:{flag(vllm, '--port', 8000)}/metrics")
    assert "vllm:" not in metrics  # 0.6.6: the flag also removes the engine's series
    assert_no_restart_under_saturation(host)


def engine_pid(host: Any) -> int:
    """The engine: the largest (RSS) process of vLLM's session but its leader (the API server);
    the API server itself when the engine runs in it."""
    api = int(host.check_output(f"pgrep -P {prop(host, 'MainPID')} -o"))
    rows = [line.split() for line in host.check_output("ps -e -o pid=,sid=,rss=").splitlines()]
    members = [(int(r), int(p)) for p, s, r in rows if int(s) == api and int(p) != api]
    return max(members)[1] if members else api


def test_sigstopped_engine_is_restarted_within_watchdogsec_plus_probe_interval(
    host: Any, stats_off: None
) -> None:
    wait_for("serving", lambda: serving(host), READY_TIMEOUT, 5)
    options, _vllm = argv(host)
    bound = watchdog_sec(host) + options["probe-interval"] + MARGIN
    restarts = int(prop(host, "NRestarts"))
    engine = engine_pid(host)
    stopped = node_time(host)
    host.check_output(f"kill -STOP {engine}")
    try:
        wait_for("a watchdog kill", lambda: "Watchdog timeout" in journal_since(host, stopped),
                 bound + 60, 1)  # fmt: skip
    finally:
        host.run(f"kill -CONT {engine}")
    line = next(ln for ln in journal_since(host, stopped).splitlines() if "Watchdog timeout" in ln)
    killed_after = float(line.split()[0]) - stopped
    print(f"watchdog kill {killed_after:.1f} s after SIGSTOP of pid {engine} (bound {bound:.0f} s)")
    assert killed_after <= bound
    wait_for("a restart", lambda: int(prop(host, "NRestarts")) > restarts, 300)
    wait_for("serving after the restart", lambda: serving(host), READY_TIMEOUT, 5)
