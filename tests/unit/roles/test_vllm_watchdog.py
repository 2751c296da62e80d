"""Decisions of the watchdog wrapper (roles/vllm_service/files/instinct-vllm-watchdog).

Pure parts only: no network, no processes, time passed in. The real wrapper against a fake
vLLM is in test_vllm_watchdog_run.py.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]
WRAPPER = ROOT / "roles" / "vllm_service" / "files" / "instinct-vllm-watchdog"


def load_wrapper() -> ModuleType:
    """Import the extensionless script as a module (dataclasses need it in sys.modules)."""
    return load_script("instinct_vllm_watchdog", WRAPPER, reuse=True)


wd = load_wrapper()

# A /metrics excerpt in the vLLM 0.6.x (V0) shape: gpu_cache_usage_perc, model_name label.
METRICS_V0 = """\
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="llama-70b"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="llama-70b"} 1.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="llama-70b"} 0.125
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="llama-70b"} 1200.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="llama-70b"} 3400.0
vllm:generation_tokens_created{model_name="llama-70b"} 1.7e+09
"""

# Current (V1) shape: kv_cache_usage_perc, an engine label, two engines (data parallel).
METRICS_V1 = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="my model {x}"} 2.0
vllm:num_requests_running{engine="1",model_name="my model {x}"} 1.0
vllm:num_requests_waiting{engine="0",model_name="my model {x}"} 0.0
vllm:num_requests_waiting{engine="1",model_name="my model {x}"} 4.0
vllm:kv_cache_usage_perc{engine="0",model_name="my model {x}"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="my model {x}"} 0.25
vllm:prompt_tokens_total{engine="0",model_name="my model {x}"} 10.0
vllm:prompt_tokens_total{engine="1",model_name="my model {x}"} 5.0
vllm:generation_tokens_total{engine="0",model_name="my model {x}"} 100.0
vllm:generation_tokens_total{engine="1",model_name="my model {x}"} 50.0 1700000000000
"""

# --disable-log-stats: vLLM exports no vllm:* series, only the process collector.
METRICS_NO_STATS = """\
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
python_gc_objects_collected_total{generation="0"} 100.0
"""


def test_parse_prometheus_sums_nothing_and_keeps_series() -> None:
    series = wd.parse_prometheus(METRICS_V1 + "bad line without value\nx NaN\n")
    assert series["vllm:num_requests_running"] == [2.0, 1.0]
    assert series["vllm:generation_tokens_total"] == [100.0, 50.0]
    assert "bad" not in series
    assert len(series["x"]) == 1


def test_metrics_sample_v0_names() -> None:
    s = wd.metrics_sample(METRICS_V0)
    assert (s.running, s.waiting, s.kv_usage) == (3.0, 1.0, 0.125)
    assert s.tokens == 4600.0
    assert s.has_progress


def test_metrics_sample_v1_names_sum_engines_kv_max() -> None:
    s = wd.metrics_sample(METRICS_V1)
    assert (s.running, s.waiting) == (3.0, 4.0)
    assert s.kv_usage == 0.5
    assert s.tokens == 165.0


def test_metrics_sample_without_stats() -> None:
    s = wd.metrics_sample(METRICS_NO_STATS)
    assert s == wd.MetricsSample()
    assert not s.has_progress
    assert s.tokens is None


def test_kv_cache_current_name_wins_over_old() -> None:
    text = "vllm:gpu_cache_usage_perc 0.9\nvllm:kv_cache_usage_perc 0.1\n"
    assert wd.metrics_sample(text).kv_usage == 0.1


def test_model_ids() -> None:
    body = b'{"object":"list","data":[{"id":"a","object":"model"},{"id":"b"}]}'
    assert wd.model_ids(body) == ["a", "b"]
    assert wd.model_ids(b"not json") == []
    assert wd.model_ids(b'{"data": "x"}') == []
    assert wd.model_ids(b"[]") == []


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "43"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_ping_interval(environ: dict[str, str], expected: float | None) -> None:
    assert wd.ping_interval(environ, 42) == expected


def test_notify_address() -> None:
    assert wd.notify_address("@abstract/sock") == "\0abstract/sock"
    assert wd.notify_address("/run/systemd/notify") == "/run/systemd/notify"
    assert wd.notify_address("") is None
    assert wd.notify_address(None) is None
    assert wd.notify_address("vsock:2:1234") is None


@pytest.mark.parametrize(
    ("returncode", "stop", "expected"),
    [(0, False, 70), (0, True, 0), (3, False, 3), (-9, False, 137), (-15, False, 143),
     (-15, True, 0), (-2, True, 0), (1, True, 1)],
)
def test_exit_code(returncode: int, stop: bool, expected: int) -> None:
    assert wd.exit_code(returncode, stop) == expected


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m/x"],
         ("http://127.0.0.1:8000", "/m/x")),
        (["api_server", "--model", "/m/x", "--served-model-name", "x", "alias", "--port", "9001"],
         ("http://127.0.0.1:9001", "x")),
        (["vllm", "serve", "/m/y", "--host", "10.0.0.5", "--port=8123"],
         ("http://10.0.0.5:8123", "/m/y")),
        (["api_server", "--served_model_name=z", "--host", "::1"], ("http://[::1]:8000", "z")),
        (["api_server", "--host", "0.0.0.0"], ("http://127.0.0.1:8000", None)),
    ],
)
def test_derive_target(argv: list[str], expected: tuple[str, str | None]) -> None:
    assert wd.derive_target(argv) == expected


def test_parse_cli_env_argv_and_derived() -> None:
    env = {"INSTINCT_WATCHDOG_STALL_TIMEOUT": "12", "INSTINCT_WATCHDOG_PROBE_INTERVAL": "7"}
    cfg, child = wd.parse_cli(
        ["--probe-interval", "0", "--", "python", "-m", "x", "--model", "/m", "--port", "81"], env
    )
    assert child == ["python", "-m", "x", "--model", "/m", "--port", "81"]
    assert cfg.stall_timeout == 12.0  # from the environment
    assert cfg.probe_interval == 0.0  # argv wins
    assert cfg.base_url == "http://127.0.0.1:81"
    assert cfg.served_model_name == "/m"
    assert cfg.health == "http://127.0.0.1:81/health"
    cfg, child = wd.parse_cli(
        ["--health-url", "http://h/healthz", "--served-model-name", "n", "--", "v"], {}
    )
    assert (cfg.health, cfg.served_model_name) == ("http://h/healthz", "n")
    assert child == ["v"]


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--served-model-name", "x"], {}, "usage"),
        (["--served-model-name", "x", "--"], {}, "no vLLM command line"),
        (["--", "vllm-without-model"], {}, "no served model name"),
        (["--", "v", "--model", "m"], {"INSTINCT_WATCHDOG_POLL_INTERVAL": "fast"}, "POLL_INTERVAL"),
        (["--stall-timeout", "0", "--", "v", "--model", "m"], {}, "stall-timeout"),
        (["--probe-interval", "-1", "--", "v", "--model", "m"], {}, "probe-interval"),
        (["--proc-interval", "0", "--", "v", "--model", "m"], {}, "proc-interval"),
        (["--status-port", "70000", "--", "v", "--model", "m"], {}, "status-port"),
        (["--status-allow", "10.0.0.0/8,gateway", "--", "v", "--model", "m"], {},
         "--status-allow: 'gateway' is not an address or network"),
    ],
)
def test_parse_cli_errors(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        wd.parse_cli(argv, env)


def test_parse_cli_status_options() -> None:
    cfg, _child = wd.parse_cli(["--", "vllm", "serve", "m", "--host", "10.0.0.5"], {})
    assert (cfg.status_port, cfg.status_host, cfg.status_allow) == (0, "10.0.0.5", "")
    assert cfg.proc_interval == 0.5
    env = {"INSTINCT_WATCHDOG_STATUS_PORT": "8001",
           "INSTINCT_WATCHDOG_STATUS_ALLOW": "10.1.0.0/16, 192.0.2.7"}
    cfg, _child = wd.parse_cli(["--status-host", "::", "--", "vllm", "serve", "m"], env)
    assert (cfg.status_port, cfg.status_host) == (8001, "::")
    assert wd.parse_cli(["--", "vllm", "serve", "m"], {})[0].status_host == ""  # every address


def test_peer_allowed() -> None:
    nets = wd.allow_networks("10.1.0.0/16, 192.0.2.7, fd00::/8")
    assert wd.peer_allowed("10.1.2.3", nets) and wd.peer_allowed("192.0.2.7", nets)
    assert wd.peer_allowed("::ffff:10.1.2.3", nets)  # IPv4 through a dual-stack listener
    assert wd.peer_allowed("fd00::5", nets)
    assert not wd.peer_allowed("10.2.0.1", nets) and not wd.peer_allowed("192.0.2.8", nets)
    assert not wd.peer_allowed("not-an-address", nets)
    assert wd.peer_allowed("203.0.113.9", wd.allow_networks(""))  # no list: anyone
    assert wd.allow_networks(" , ") == ()


# ------------------------------------------------------------------------------------------
# Monitor


def cfg(**kw: float) -> object:
    """Settings for the decision tests; no warm-up unless given (test_warm_up_* give it)."""
    base = {"poll_interval": 1.0, "health_timeout": 2.0, "stall_timeout": 10.0,
            "warmup_timeout": 0.0}
    base.update(kw)
    return wd.Config(base_url="http://127.0.0.1:8000", served_model_name="m", **base)


def sample(tokens: float, running: float, waiting: float = 0, kv: float | None = 0.2) -> object:
    return wd.MetricsSample(
        generation_tokens=tokens, prompt_tokens=0.0, running=running, waiting=waiting, kv_usage=kv
    )


def tick(m: object, t: float, s: object = None) -> None:
    """One poll: /health 200 and, if given, a metrics sample."""
    m.observe_health(t, True, "HTTP 200")
    if s is not None:
        m.observe_metrics(t, s)


def ready_monitor(**kw: float) -> object:
    m = wd.Monitor(cfg(**kw), 0.0)
    m.observe_health(0.0, True, "HTTP 200")
    m.observe_models(0.0, ["m"], "listed: m")
    assert m.ready
    return m


def test_ready_needs_health_and_model() -> None:
    m = wd.Monitor(cfg(), 0.0)
    assert m.verdict(0.0) == wd.Verdict("loading", False)
    assert m.status(0.0) == "loading: /health not polled yet"
    m.observe_health(1.0, False, "connection refused")
    assert "connection refused" in m.status(1.0)
    m.observe_health(2.0, True, "HTTP 200")
    m.observe_models(2.0, ["other"], "listed: other")
    assert not m.ready
    assert m.status(2.0) == (
        "loading: /health 200, waiting for model 'm' in /v1/models (listed: other)"
    )
    m.observe_models(3.0, None, "HTTP 401 (check VLLM_API_KEY)")
    assert not m.ready and "401" in m.status(3.0)
    # model listed while /health fails: not ready until /health is 200 again
    m.observe_health(4.0, False, "HTTP 503")
    m.observe_models(4.0, ["m"], "listed: m")
    assert not m.ready
    m.observe_health(5.0, True, "HTTP 200")
    assert m.ready
    assert m.verdict(5.0).alive


def test_warm_up_answered_before_ready() -> None:
    """With a warm-up: /health 200 and the model listed are not enough; READY once the warm-up
    completion answered."""
    m = wd.Monitor(cfg(warmup_timeout=60.0), 0.0)
    assert not m.warmup_due()
    m.observe_health(1.0, True, "HTTP 200")
    assert not m.warmup_due()  # the model is not listed yet
    m.observe_models(1.0, ["m"], "listed: m")
    assert m.warmup_due() and not m.ready
    assert m.verdict(1.0) == wd.Verdict("loading", False)
    assert m.status(1.0) == "loading: /health 200, 'm' listed, warming up"
    m.observe_warmup(20.0, None, "timed out in 60.0s")  # retried: still loading
    assert m.warmup_due() and not m.ready
    assert m.status(20.0) == (
        "loading: /health 200, 'm' listed, warming up (last: timed out in 60.0s)")
    m.observe_warmup(21.0, 500, "HTTP 500 in 0.1s")  # a 5xx: the engine is not well
    assert m.warmup_due() and not m.ready
    m.observe_warmup(40.0, 200, "HTTP 200 in 18.2s")
    assert not m.ready and not m.warmup_due()  # READY with the next /health answer
    m.observe_health(40.1, True, "HTTP 200")
    assert m.ready and m.verdict(40.1).alive
    ready = [o for o in m.tick(40.1) if isinstance(o, wd.Log)]
    assert ready[0].message == "ready: /health 200 and 'm' listed, warm-up HTTP 200 in 18.2s"


def test_a_failed_warm_up_waits_a_poll_interval_before_the_next(monkeypatch) -> None:
    """A 5xx warm-up is retried at the poll interval, not at once; an answered one asks /health
    again at once (READY follows a fresh answer)."""
    answers = {"/health": (200, b"", "HTTP 200"),
               "/v1/models": (200, b'{"data": [{"id": "m"}]}', "HTTP 200"),
               "/v1/completions": (500, b"", "HTTP 500")}

    def fake_call(url: str, *_args: object, **_kw: object) -> tuple[int, bytes, str]:
        return answers[url.removeprefix("http://127.0.0.1:8000")]

    monkeypatch.setattr(wd, "http_call", fake_call)
    m = wd.Monitor(cfg(warmup_timeout=60.0, poll_interval=5.0), 0.0)
    poller = wd.Poller(m, threading.Lock(), "sk", lambda *a: None)
    assert poller._poll_once() > 4.0 and not m.warmed
    answers["/v1/completions"] = (200, b'{"choices": []}', "HTTP 200")
    assert poller._poll_once() == 0.0 and m.warmed
    poller._poll_once()
    assert m.ready


def test_warm_up_refused_is_skipped() -> None:
    """A server that refuses the warm-up request (4xx): ready without it."""
    m = wd.Monitor(cfg(warmup_timeout=60.0), 0.0)
    m.observe_health(1.0, True, "HTTP 200")
    m.observe_models(1.0, ["m"], "listed: m")
    m.observe_warmup(2.0, 400, "HTTP 400 in 0.0s (refused: ready without warm-up)")
    m.observe_health(2.1, True, "HTTP 200")
    assert m.ready


def test_ready_is_latched() -> None:
    m = ready_monitor()
    m.observe_health(1.0, False, "HTTP 503")
    m.observe_models(1.0, [], "listed: none")
    assert m.ready
    assert m.verdict(1.0) == wd.Verdict("unhealthy", False, ("/health: HTTP 503",))


def test_health_must_be_recent() -> None:
    # max age 2 x (poll + timeout) = 6 s: a poll cycle may wait for /health, then /metrics
    m = ready_monitor(poll_interval=1.0, health_timeout=2.0)
    assert m.verdict(6.0).alive
    v = m.verdict(6.5)
    assert not v.alive and v.reasons == ("/health: no answer for 6s",)
    m.observe_health(7.0, True, "HTTP 200")
    assert m.verdict(7.0).alive
    # a stuck poller is no saturation: not excused even while tokens flow
    busy = ready_monitor(poll_interval=1.0, health_timeout=2.0)
    tick(busy, 0.0, sample(0, 8, waiting=4))
    tick(busy, 1.0, sample(50, 8, waiting=4))
    assert busy.timeout_excused(7.5)
    assert busy.verdict(7.5).reasons == ("/health: no answer for 6s",)


def test_frozen_counters_with_running_requests_is_a_stall() -> None:
    m = ready_monitor(stall_timeout=10.0)
    tick(m, 0.0, sample(100, 2))
    tick(m, 1.0, sample(100, 2))  # frozen from t=0
    tick(m, 10.0, sample(100, 2))
    assert m.verdict(10.0).alive  # exactly the timeout: not yet
    tick(m, 10.5, sample(100, 2))
    v = m.verdict(10.5)
    assert v.state == "stalled" and not v.alive
    assert v.reasons == ("no token progress for 10s with 2 request(s) running",)
    assert m.status(10.5).startswith("stalled: no token progress")
    tick(m, 11.0, sample(101, 2))  # progress again
    assert m.verdict(11.0).alive
    assert m.stalled_for(30.0) == 0.0


def test_idle_engine_with_frozen_counters_is_fine() -> None:
    m = ready_monitor(stall_timeout=10.0)
    for t in range(0, 100, 5):
        tick(m, float(t), sample(100, 0))
        assert m.verdict(float(t)).alive
    # a request arrives after a long idle period: the clock starts at the last idle sample
    tick(m, 100.0, sample(100, 1))
    assert m.stalled_for(100.0) == pytest.approx(5.0)
    assert m.verdict(100.0).alive
    tick(m, 106.0, sample(100, 1))
    assert m.verdict(106.0).state == "stalled"


def test_stall_verdict_grows_between_samples() -> None:
    m = ready_monitor(stall_timeout=10.0, poll_interval=5.0, health_timeout=5.0)
    tick(m, 0.0, sample(5, 1))
    tick(m, 1.0, sample(5, 1))
    assert m.verdict(9.0).alive
    assert not m.verdict(11.0).alive  # no new sample (poller slow): still judged from t=0


def test_a_missed_metrics_read_neither_hides_a_stall_nor_progress() -> None:
    m = ready_monitor(stall_timeout=10.0)
    tick(m, 0.0, sample(100, 2))
    tick(m, 1.0, sample(100, 2))  # frozen from t=1
    for t in (3.0, 7.0):
        m.observe_metrics(t, None)  # /metrics timed out
        tick(m, t + 2, sample(100, 2))
    assert m.stalled_for(11.5) > 10.0 and m.verdict(11.5).state == "stalled"
    m.observe_metrics(12.0, None)
    tick(m, 14.0, sample(150, 2))  # moved while unseen: progress
    assert m.last_progress == 14.0 and m.verdict(14.0).alive


def test_counter_reset_counts_as_change() -> None:
    m = ready_monitor(stall_timeout=1.0)
    tick(m, 0.0, sample(500, 1))
    tick(m, 5.0, sample(3, 1))
    assert m.verdict(5.0).alive


def test_no_counters_means_no_stall_detection() -> None:
    m = ready_monitor(stall_timeout=1.0)
    for t in range(10):
        tick(m, float(t), wd.MetricsSample(running=5.0))
    assert m.verdict(9.0).alive
    assert "no token counters" in m.status(9.0)
    m.observe_metrics(10.0, None)
    assert m.status(10.0) == "serving m: no metrics"
    fresh = ready_monitor()
    assert fresh.status(0.0) == "serving m: metrics not polled yet"


def test_status_serving_shows_load() -> None:
    m = ready_monitor()
    tick(m, 0.0, sample(10, 3, waiting=2, kv=0.1234))
    assert m.status(0.0) == "serving m: running 3, waiting 2, KV cache 12.3%"
    tick(m, 0.5, sample(11, 3, waiting=2, kv=None))
    assert m.status(0.5).endswith("KV cache n/a")


def test_probe_schedule_failure_and_recovery() -> None:
    m = wd.Monitor(cfg(probe_interval=30.0, probe_timeout=5.0, poll_interval=1.0), 0.0)
    assert not m.probe_due(0.0)  # not ready yet
    m.observe_health(0.0, True, "HTTP 200")
    m.observe_models(0.0, ["m"], "")
    assert m.probe_due(0.0)
    m.probe_started(0.0)
    assert not m.probe_due(0.5)  # one at a time
    m.observe_probe(0.2, True, "HTTP 200")
    assert not m.probe_due(29.0)
    assert m.probe_due(30.0)
    m.probe_started(30.0)
    m.observe_probe(35.0, False, "timed out")
    tick(m, 35.0)
    v = m.verdict(35.0)
    assert not v.alive and v.reasons == ("probe: timed out",)
    assert m.probe_due(31.0)  # a failed probe is retried at the poll interval
    m.probe_started(36.0)
    tick(m, 36.0)
    assert not m.verdict(36.0).alive
    m.observe_probe(36.1, True, "HTTP 200")
    assert m.verdict(36.1).alive


def test_probe_in_flight_too_long() -> None:
    m = ready_monitor(probe_interval=30.0, probe_timeout=5.0)
    m.probe_started(1.0)
    tick(m, 6.9)
    assert m.verdict(6.9).alive
    v = m.verdict(7.5)
    assert not v.alive and v.reasons == ("probe: no answer for 6s",)


def test_probe_off_never_due() -> None:
    m = ready_monitor(probe_interval=0.0)
    assert not m.probe_due(1000.0)


def test_probe_timeout_excused_while_busy_and_progressing() -> None:
    m = ready_monitor(probe_interval=30.0, probe_timeout=5.0, stall_timeout=10.0)
    tick(m, 0.0, sample(100, 256, waiting=40))
    tick(m, 1.0, sample(180, 256, waiting=40))
    m.probe_started(1.0)
    tick(m, 7.5, sample(900, 256, waiting=40))
    assert m.verdict(7.5).alive  # probe stuck in the queue, tokens flowing
    m.observe_probe(7.6, False, "timed out")
    assert m.verdict(7.6).alive
    # an HTTP error is never excused
    m.observe_probe(7.7, False, "HTTP 500")
    assert not m.verdict(7.7).alive
    # a timeout while the counters are frozen is not excused either
    m.observe_probe(7.8, False, "timed out")
    tick(m, 8.0, sample(900, 256, waiting=40))
    assert not m.verdict(8.0).alive
    assert m.verdict(8.0).reasons == ("probe: timed out",)


def test_probe_timeout_counts_without_counters() -> None:
    m = ready_monitor(probe_interval=30.0, probe_timeout=5.0)
    tick(m, 0.0, wd.MetricsSample(running=3.0))
    m.observe_probe(1.0, False, "timed out")
    tick(m, 1.0, wd.MetricsSample(running=3.0))
    assert not m.verdict(1.0).alive


# Monitor.tick: what the main loop sends and logs ---------------------------------------------


def notified(actions: list[object]) -> list[tuple[str, ...]]:
    return [a.fields for a in actions if isinstance(a, wd.Notify)]


def logged(actions: list[object]) -> list[tuple[str, int]]:
    return [(a.message, a.level) for a in actions if isinstance(a, wd.Log)]


def test_tick_loading_shows_status_once_and_never_pings() -> None:
    m = wd.Monitor(cfg(), 0.0)
    first = m.tick(0.0, ping_every=1.0)
    assert notified(first) == [("STATUS=loading: /health not polled yet",)]
    assert logged(first) == []
    assert m.tick(5.0, ping_every=1.0) == []  # same status, not ready: nothing


def test_tick_ready_once_then_pings_at_the_interval() -> None:
    m = ready_monitor()
    tick(m, 0.0, sample(10, 1))
    first = m.tick(0.0, ping_every=2.0)
    assert notified(first) == [
        ("READY=1", "STATUS=serving m: running 1, waiting 0, KV cache 20.0%"),
        ("WATCHDOG=1",),
    ]
    assert logged(first) == [
        ("ready: /health 200 and 'm' listed", 6),
        ("serving m: running 1, waiting 0, KV cache 20.0%", 6),
    ]
    assert m.tick(1.0, ping_every=2.0) == []  # ping not due yet, nothing changed
    assert notified(m.tick(2.0, ping_every=2.0)) == [("WATCHDOG=1",)]
    assert notified(m.tick(3.0)) == []  # pings off (no WATCHDOG_USEC)


def test_tick_pauses_pings_while_stalled_and_logs_the_changes() -> None:
    m = ready_monitor(stall_timeout=10.0)
    tick(m, 0.0, sample(100, 2))
    m.tick(0.0, ping_every=1.0)
    tick(m, 1.0, sample(100, 2))
    tick(m, 11.0, sample(100, 2))
    stalled = m.tick(11.0, ping_every=1.0)
    assert ("WATCHDOG=1",) not in notified(stalled)
    [(message, level)] = logged(stalled)
    assert message.startswith("stalled: no token progress") and level == 4
    assert message.endswith("(watchdog pings paused)")
    tick(m, 12.0, sample(101, 2))
    resumed = m.tick(12.0, ping_every=1.0)
    assert ("WATCHDOG=1",) in notified(resumed)
    assert logged(resumed)[0][0].endswith("(watchdog pings resumed)")


def test_tick_warns_once_without_token_counters() -> None:
    m = ready_monitor()
    tick(m, 0.0, wd.MetricsSample(running=1.0))
    warnings = [line for line in logged(m.tick(0.0)) if line[1] == 4]
    assert warnings == [
        (
            "no vllm:* token counters in /metrics (--disable-log-stats?): stall detection off; "
            "the watchdog relies on /health, stopped processes only",
            4,
        )
    ]
    assert [line for line in logged(m.tick(1.0)) if line[1] == 4] == []


def test_tick_while_stopping_sends_no_ready() -> None:
    m = ready_monitor()
    assert m.stopping() == wd.Notify(("STOPPING=1", "STATUS=stopping"))
    actions = m.tick(0.0, stop_requested=True, ping_every=1.0)
    assert not any("READY=1" in fields for fields in notified(actions))
    assert ("STATUS=stopping",) not in notified(actions)  # stopping() already said so


# vLLM's processes from /proc: stopped processes and the engine's CPU ---------------------------

# /proc/<pid>/stat lines (Linux proc(5) layout; comm may hold spaces and parentheses).
STAT_ENGINE = "4242 (python3 (engine)) R 4200 4200 4200 0 -1 4194560 100 0 0 0 1500 250 0 0 20 0"
STAT_STOPPED = "4243 (VLLM::EngineCore) T 4200 4200 4200 0 -1 0 0 0 0 0 900 100 0 0 20 0"


def test_parse_proc_stat() -> None:
    assert wd.parse_proc_stat(STAT_ENGINE) == wd.ProcStat(4242, "R", 4200, 1750)
    assert wd.parse_proc_stat(STAT_STOPPED) == wd.ProcStat(4243, "T", 4200, 1000)
    assert wd.parse_proc_stat("garbage") is None
    assert wd.parse_proc_stat("12 (x) R 1 2") is None
    assert wd.parse_proc_stat("x (y) R 1 1 1 0 -1 0 0 0 0 0 1 1 0") is None


def proc(pid: int, state: str = "S", session: int = 100, ticks: int = 0) -> object:
    return wd.ProcStat(pid, state, session, ticks)


def test_tree_sample_counts_the_engine_not_the_api_server() -> None:
    stats = [proc(100, ticks=5000), proc(101, ticks=300), proc(102, "t", ticks=100)]
    stats.append(proc(7, session=7))  # another session
    tree = wd.tree_sample(stats, 100, 100.0)
    assert tree == wd.TreeSample(pids=(100, 101, 102), stopped=(102,), engine_cpu=4.0)
    alone = wd.tree_sample([proc(100, "R", ticks=250)], 100, 100.0)  # engine in the API server
    assert alone.engine_cpu == 2.5 and alone.stopped == ()
    assert wd.tree_sample([proc(7, session=7)], 100, 100.0) == wd.TreeSample()


def test_read_tree_from_a_proc_directory(tmp_path: Path) -> None:
    for pid, line in ((4200, STAT_ENGINE.replace("4242 ", "4200 ", 1)), (4243, STAT_STOPPED)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(line + "\n")
    (tmp_path / "self").mkdir()
    (tmp_path / "999").mkdir()  # ended meanwhile: no stat file
    tree = wd.read_tree(4200, str(tmp_path))
    assert tree is not None and tree.pids == (4200, 4243) and tree.stopped == (4243,)
    assert wd.read_tree(4200, str(tmp_path / "absent")) is None


def tree_at(cpu: float, stopped: bool = False) -> object:
    return wd.TreeSample(pids=(100, 101), stopped=(101,) if stopped else (), engine_cpu=cpu)


def test_a_stopped_process_fails_after_two_polls_not_one() -> None:
    m = ready_monitor()
    m.observe_tree(1.0, tree_at(0.0, stopped=True))  # e.g. py-spy dump: one poll
    assert m.verdict(1.0).alive
    m.observe_tree(2.0, tree_at(0.0))
    m.observe_tree(3.0, tree_at(0.0, stopped=True))
    assert m.verdict(3.0).alive
    m.observe_tree(4.0, tree_at(0.0, stopped=True))
    tick(m, 4.0)
    assert m.verdict(4.0).reasons == ("vLLM process(es) 101 stopped (SIGSTOP?)",)
    m.observe_tree(5.0, tree_at(0.0))  # SIGCONT
    tick(m, 5.0)
    assert m.verdict(5.0).alive


def test_engine_cores_over_the_stall_window() -> None:
    m = ready_monitor(stall_timeout=10.0, poll_interval=1.0, health_timeout=2.0)
    assert m.engine_cores() is None
    for t in range(0, 21):
        m.observe_tree(float(t), tree_at(0.5 * t if t <= 10 else 5.0))
    # frozen for the last 10 s; the base is the sample just before the window (t=9)
    assert m.engine_cores() == pytest.approx(0.5 / 11)
    assert len(m.cpu_history) == 12  # the window plus one sample before it
    m.observe_health(20.0, True, "HTTP 200")
    # the poller stuck in HTTP for a while: /health's age check fails, the CPU figure stays
    assert m.engine_cores() == pytest.approx(0.5 / 11)
    assert m.verdict(60.0).reasons == ("/health: no answer for 40s",)
    m.observe_tree(25.0, None)
    assert m.engine_cores() is None and m.cpu_history == []


def test_busy_cpu_option() -> None:
    config, _argv = wd.parse_cli(["--busy-cpu", "0.5", "--", "vllm", "serve", "m"], {})
    assert config.busy_cpu == 0.5
    assert wd.parse_cli(["--", "vllm", "serve", "m"], {})[0].busy_cpu == 0.25
    with pytest.raises(ValueError, match="--busy-cpu must be > 0"):
        wd.parse_cli(["--busy-cpu", "0", "--", "vllm", "serve", "m"], {})


# The gateway's agent check: one verdict for the pings and for the agent's answer --------------

PING_EVERY = 1.0


def scenario_loading() -> tuple[object, float]:
    m = wd.Monitor(cfg(), 0.0)
    m.observe_health(1.0, False, "connection refused")
    return m, 1.0


def scenario_serving() -> tuple[object, float]:
    m = ready_monitor()
    tick(m, 1.0, sample(10, 1))
    return m, 1.0


def scenario_stopped() -> tuple[object, float]:
    m = ready_monitor()
    tick(m, 1.0, sample(10, 1))
    m.observe_tree(1.0, tree_at(0.5, stopped=True))
    m.observe_tree(1.5, tree_at(0.5, stopped=True))  # two listings in a row
    return m, 1.5


def scenario_stalled() -> tuple[object, float]:
    m = ready_monitor(stall_timeout=10.0)
    for t in (0.0, 5.0, 10.5):
        tick(m, t, sample(100, 2))  # frozen with 2 running
    return m, 10.5


def scenario_probe_failing() -> tuple[object, float]:
    m = ready_monitor(probe_interval=30.0, probe_timeout=5.0)
    tick(m, 1.0, sample(10, 1))
    m.probe_started(1.0)
    m.observe_probe(1.2, False, "HTTP 500")
    return m, 1.2


def saturated(health: str, frozen: bool = False, probe: str = "timed out",
              stats: bool = True) -> tuple[object, float]:
    """256 running and 40 waiting; the last /health and probe ended with ``health`` and
    ``probe``; tokens moving unless ``frozen`` (stats off: no counters, the engine busy on
    the CPU)."""
    m = ready_monitor(probe_interval=30.0, probe_timeout=5.0, stall_timeout=10.0)
    for t in (0.0, 1.0, 2.0, 3.0):
        m.observe_tree(t, tree_at(0.9 * t))
        ok = health == "HTTP 200" or t < 3.0
        m.observe_health(t, ok, "HTTP 200" if ok else health)
        tokens = 1000.0 if frozen else 1000.0 * (t + 1)
        m.observe_metrics(t, sample(tokens, 256, waiting=40) if stats else wd.MetricsSample())
    m.probe_started(0.5)
    m.observe_probe(3.0, probe == "HTTP 200", probe)
    return m, 3.0


SCENARIOS = {  # name -> (the monitor at that moment, the agent's answer)
    "loading": (scenario_loading, "down #loading\n"),
    "serving": (scenario_serving, "up\n"),
    "stopped (SIGSTOP)": (scenario_stopped, "down #stopped\n"),
    "stalled": (scenario_stalled, "down #stalled\n"),
    "probe failing": (scenario_probe_failing, "down #unhealthy\n"),
    "saturated, progressing: /health and probe timed out": (
        lambda: saturated("timed out"), "up\n"),
    "saturated, stats off, engine busy on the CPU": (
        lambda: saturated("timed out", stats=False), "up\n"),
    "saturated, /health HTTP 500": (lambda: saturated("HTTP 500"), "down #unhealthy\n"),
    "saturated, counters frozen: /health timeout counts": (
        lambda: saturated("timed out", frozen=True), "down #unhealthy\n"),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_agent_answers_what_the_pings_decide(name: str) -> None:
    build, answer = SCENARIOS[name]
    m, now = build()
    verdict = m.verdict(now)
    assert wd.agent_answer(verdict) == answer, verdict
    # the same verdict decides the systemd watchdog: a ping exactly when the agent says up
    pinged = ("WATCHDOG=1",) in notified(m.tick(now, ping_every=PING_EVERY))
    assert pinged == (answer == "up\n")


def test_the_agent_says_stopping_once_a_stop_is_requested() -> None:
    m, now = scenario_serving()
    assert wd.agent_answer(m.verdict(now), stopping=True) == "down #stopping\n"
    m, now = scenario_stopped()
    assert wd.agent_answer(m.verdict(now), stopping=True) == "down #stopping\n"


def test_the_agent_never_touches_the_administrative_state() -> None:
    """A rollout drains or holds a node out through the gateway's runtime API; an agent that
    said ready, drain or maint would undo or fake that (HAProxy 2.6 manual, agent-check)."""
    answers = {wd.agent_answer(build()[0].verdict(build()[1]), stop)
               for build, _answer in SCENARIOS.values() for stop in (False, True)}
    for line in answers:
        words = line.replace(",", " ").split("#", 1)[0].split()
        assert line.endswith("\n") and words in (["up"], ["down"]), line
        assert " #" in line or line == "up\n"  # "down#x" is one unknown word to HAProxy 2.6


def test_a_stopped_process_outranks_other_reasons() -> None:
    m, now = scenario_stalled()
    m.observe_tree(now, tree_at(0.0, stopped=True))
    m.observe_tree(now, tree_at(0.0, stopped=True))
    verdict = m.verdict(now)
    assert verdict.state == "stopped" and len(verdict.reasons) == 2
    assert m.status(now).startswith("stopped: no token progress")


def test_a_health_timeout_while_idle_is_not_excused() -> None:
    m = ready_monitor()
    tick(m, 0.0, sample(10, 0))
    m.observe_health(1.0, False, "timed out")
    assert m.verdict(1.0).reasons == ("/health: timed out",)


def test_a_poll_records_a_slow_health_with_the_metrics_of_the_same_poll(monkeypatch) -> None:
    """Load arrives between two polls: /health times out, /metrics then shows the engine busy
    and progressing. The timeout is recorded with that sample, never judged alone against the
    older, idle one (the gateway's agent would eject the node meanwhile)."""
    import threading

    m = ready_monitor(stall_timeout=10.0)
    tick(m, 0.0, sample(100, 0))  # idle at the previous poll
    clock = iter([1.0, 1.0, 5.0, 5.0, 5.0, 5.0])
    verdicts_during_metrics = []

    def call(url: str, timeout: float, token: object = None, payload: object = None,
             context: object = None) -> tuple:
        if url.endswith("/health"):
            return None, b"", "timed out"
        verdicts_during_metrics.append(m.verdict(5.0).alive)  # what the agent answers now
        return 200, METRICS_V0.replace("3400.0", "3999.0").encode(), "HTTP 200"

    monkeypatch.setattr(wd, "http_call", call)
    poller = wd.Poller(m, threading.Lock(), None, lambda *a: None, clock=lambda: next(clock))
    poller._poll_once()
    assert verdicts_during_metrics == [True]
    assert m.health_detail == "timed out" and m.sample is not None and m.sample.running == 3.0
    assert m.verdict(5.0).alive  # busy and progressing: the slow /health is excused


# Over time: the Monitor driven like the poller and main loop drive it, with the role's
# settings (poll 5 s, /health timeout 10 s, stall 30 s, probe every 30 s with a 30 s timeout)
# and WatchdogSec=30 (pings every 15 s). systemd restarts when no ping came for WatchdogSec.

WATCHDOG_SEC = 30.0
ROLE = {"poll_interval": 5.0, "health_timeout": 10.0, "stall_timeout": 30.0}
PROBES = {"probe_interval": 30.0, "probe_timeout": 30.0}
Metrics = Callable[[float], object]
Tree = Callable[[float], object]


@dataclasses.dataclass
class Node:
    """What vLLM shows the watchdog at time t."""

    metrics: Metrics
    tree: Tree
    probe_latency: Callable[[float], float]  # seconds a probe started at t takes (inf: never)
    health: Callable[[float], bool] = lambda t: True  # False: /health does not answer
    health_slow: Callable[[float], bool] = lambda t: False  # True: /health times out


def drive(m: object, node: Node, until: float, start: float = 0.0,
          downs: list[float] | None = None) -> list[float]:
    """Advance the Monitor from start to until (0.5 s steps); the times of WATCHDOG=1.
    ``downs`` collects the times the gateway's agent would hear "down" after READY."""
    pings: list[float] = []
    probe_end: tuple[float, bool] | None = None
    timeout = m.config.probe_timeout
    t = start
    while t <= until:
        if (t - start) % m.config.poll_interval == 0:
            m.observe_tree(t, node.tree(t))
            if node.health(t):
                slow = node.health_slow(t)
                m.observe_health(t, not slow, "timed out" if slow else "HTTP 200")
                m.observe_models(t, ["m"], "listed: m")
                if m.ready:
                    m.observe_metrics(t, node.metrics(t))
        if probe_end is None and m.probe_due(t):
            m.probe_started(t)
            latency = node.probe_latency(t)
            probe_end = (t + min(latency, timeout), latency <= timeout)
        if probe_end is not None and t >= probe_end[0]:
            m.observe_probe(t, probe_end[1], "HTTP 200" if probe_end[1] else "timed out")
            probe_end = None
        actions = m.tick(t, ping_every=WATCHDOG_SEC / 2)
        pings += [t for a in actions if isinstance(a, wd.Notify) and a.fields == ("WATCHDOG=1",)]
        if downs is not None and m.ready_sent and wd.agent_answer(m.verdict(t)) != "up\n":
            downs.append(t)
        t += 0.5
    return pings


def restart_time(pings: list[float], until: float) -> float | None:
    """When systemd would kill the unit (WatchdogSec after a ping with none after it)."""
    for last, following in zip(pings, [*pings[1:], math.inf], strict=True):
        if following - last > WATCHDOG_SEC and last + WATCHDOG_SEC <= until:
            return last + WATCHDOG_SEC
    return None


def saturated_metrics(t: float) -> object:
    """256 running, 300 waiting, tokens flowing (the engine's counters: stats on)."""
    return sample(1000.0 * t, 256, waiting=300)


def no_stats(t: float) -> object:
    """--disable-log-stats: /metrics answers without vllm:* series."""
    return wd.MetricsSample()


def busy_tree(t: float) -> object:
    return tree_at(0.9 * t)  # the engine uses 0.9 of a core


def idle_tree(t: float) -> object:
    return tree_at(0.01 * t)


def queued_probe(t: float) -> float:
    return 90.0  # the queue ahead of the probe takes 90 s: three times the probe timeout


def serving_monitor() -> object:
    return wd.Monitor(cfg(**ROLE, **PROBES), 0.0)


def test_saturated_and_progressing_with_stats_on_is_never_restarted() -> None:
    node = Node(saturated_metrics, busy_tree, queued_probe)
    m = serving_monitor()
    pings = drive(m, node, 600.0)
    assert pings and restart_time(pings, 600.0) is None
    assert m.probe_ok is False and m.probe_detail == "timed out"  # the probes did time out


def saturated_metrics_every_other_poll(t: float) -> object:
    """Saturated, and /metrics itself times out on every other poll (the poller gets None)."""
    return saturated_metrics(t) if t % 10 == 0 else None


@pytest.mark.parametrize(
    "metrics",
    [saturated_metrics, no_stats, saturated_metrics_every_other_poll],
    ids=["stats-on", "stats-off", "stats-on-metrics-timing-out"],
)
def test_saturated_with_slow_health_is_never_restarted_nor_ejected(metrics: Metrics) -> None:
    """/health times out on every other poll and every probe times out, while the engine
    progresses: the watchdog keeps pinging and the gateway's agent never hears "down"."""
    node = Node(metrics, busy_tree, queued_probe, health_slow=lambda t: t % 10 == 5)
    m, downs = serving_monitor(), []
    pings = drive(m, node, 600.0, downs=downs)
    assert pings and restart_time(pings, 600.0) is None
    assert downs == []
    assert m.health_detail == "timed out" or m.health_ok


def test_slow_health_of_an_idle_engine_ejects_at_the_first_timeout() -> None:
    """Nothing running, nothing queued: a /health timeout is no saturation."""
    node = Node(lambda t: sample(100, 0), idle_tree, lambda t: 0.1,
                health_slow=lambda t: t >= 100)
    downs: list[float] = []
    drive(serving_monitor(), node, 130.0, downs=downs)
    assert downs and downs[0] == 100.0


def test_saturated_with_stats_off_is_never_restarted() -> None:
    node = Node(no_stats, busy_tree, queued_probe)
    m = serving_monitor()
    pings = drive(m, node, 600.0)
    assert pings and restart_time(pings, 600.0) is None
    assert m.probe_ok is False and m.probe_detail == "timed out"


def test_saturated_with_stats_off_below_busy_cpu_is_restarted() -> None:
    # the same node, the engine using 0.2 of a core (< --busy-cpu 0.25): probe timeouts count
    node = Node(no_stats, lambda t: tree_at(0.2 * t), queued_probe)
    assert restart_time(drive(serving_monitor(), node, 300.0), 300.0) is not None


@pytest.mark.parametrize("metrics", [saturated_metrics, no_stats], ids=["stats-on", "stats-off"])
def test_engine_sigstop_while_saturated_restarts_within_watchdogsec_plus_probe_interval(
    metrics: Metrics,
) -> None:
    hang = 300.0

    def frozen(t: float) -> object:
        return metrics(min(t, hang))

    def tree(t: float) -> object:
        return tree_at(0.9 * min(t, hang), stopped=t >= hang)

    node = Node(frozen, tree, lambda t: queued_probe(t) if t < hang - 90 else math.inf)
    pings = drive(serving_monitor(), node, 500.0)
    restart = restart_time(pings, 500.0)
    # the stopped processes are seen on two polls: at most 2 x poll + WatchdogSec (40 s)
    assert restart is not None and hang < restart <= hang + 2 * ROLE["poll_interval"] + WATCHDOG_SEC


def test_whole_server_sigstop_restarts_within_watchdogsec_plus_probe_interval() -> None:
    hang = 200.0
    node = Node(
        no_stats,
        lambda t: tree_at(0.01 * min(t, hang), stopped=t >= hang),
        lambda t: 0.2 if t < hang - 1 else math.inf,
        health=lambda t: t < hang,
    )
    restart = restart_time(drive(serving_monitor(), node, 400.0), 400.0)
    assert restart is not None and hang < restart <= hang + 2 * ROLE["poll_interval"] + WATCHDOG_SEC


def test_hung_engine_with_stats_off_no_cpu_no_answer_is_restarted() -> None:
    # a deadlock (not stopped: state S), idle CPU, the probe never answers
    hang = 100.0
    node = Node(no_stats, lambda t: tree_at(0.9 * min(t, hang)), lambda t: math.inf)
    restart = restart_time(drive(serving_monitor(), node, 400.0), 400.0)
    bound = hang + ROLE["stall_timeout"] + PROBES["probe_timeout"] + WATCHDOG_SEC
    assert restart is not None and restart <= bound


def test_idle_engine_answering_probes_with_stats_off_is_fine() -> None:
    node = Node(no_stats, idle_tree, lambda t: 0.1)
    pings = drive(serving_monitor(), node, 300.0)
    assert pings and restart_time(pings, 300.0) is None


def test_startup_loading_then_saturated_at_once_with_stats_off() -> None:
    # 120 s of loading (no /health): no READY, no pings (systemd arms the watchdog at READY);
    # then a flood at once: the CPU seen while loading already fills the window.
    loaded = 120.0
    node = Node(no_stats, busy_tree, queued_probe, health=lambda t: t >= loaded)
    m = serving_monitor()
    before = drive(m, node, loaded - 0.5)
    assert before == [] and m.verdict(loaded - 0.5).state == "loading"
    pings = drive(m, node, 600.0, start=loaded)
    assert pings[0] == loaded and restart_time(pings, 600.0) is None
