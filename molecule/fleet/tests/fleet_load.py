"""A light streaming load through the gateway, recording every request's outcome.

Workers loop over streamed chat completions (OpenAI SDK) until stopped; each request becomes
an Outcome (start, end, ok, error, tokens, time to first token). Used by test_fleet.py around
rolling_update.yml, and by scripts/fleet-bench for the gateway's TTFT overhead.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Outcome:
    start: float  # wall clock (time.time()), comparable with systemd timestamps
    end: float
    ok: bool
    error: str = ""
    chunks: int = 0
    ttft: float | None = None


def stream_once(client: Any, model: str, max_tokens: int) -> Outcome:
    """One streamed chat completion read to its end."""
    start = time.time()
    t0 = time.monotonic()
    ttft = None
    chunks = 0
    finish = None
    try:
        for chunk in client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Tell a story."}],
            max_tokens=max_tokens, stream=True,
        ):
            for choice in chunk.choices:
                if ttft is None and choice.delta.content:
                    ttft = time.monotonic() - t0
                finish = choice.finish_reason or finish
            chunks += 1
    except Exception as exc:  # every failure is an outcome, never a crash of the worker
        return Outcome(start, time.time(), False, f"{type(exc).__name__}: {exc}", chunks, ttft)
    if finish is None:
        return Outcome(start, time.time(), False, "stream ended without finish_reason", chunks,
                       ttft)
    return Outcome(start, time.time(), True, "", chunks, ttft)


@dataclass
class Load:
    make_client: Any  # () -> openai.OpenAI
    model: str
    workers: int = 2
    max_tokens: int = 16
    pause: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _work(self) -> None:
        client = self.make_client()
        while not self._stop.is_set():
            outcome = stream_once(client, self.model, self.max_tokens)
            with self._lock:
                self.outcomes.append(outcome)
            if self.pause:
                self._stop.wait(self.pause)

    def start(self) -> Load:
        for _worker in range(self.workers):
            t = threading.Thread(target=self._work, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout: float = 120.0) -> list[Outcome]:
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        with self._lock:
            return list(self.outcomes)


def failed(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if not o.ok]


def succeeded_within(outcomes: list[Outcome], start: float, end: float) -> list[Outcome]:
    """Successful requests that ran (at least partly) inside [start, end]."""
    return [o for o in outcomes if o.ok and o.end >= start and o.start <= end]


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of values, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ttft_summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """Requests, failures and TTFT p50/p90 (ms) of one side of a comparison."""
    ttft = [o.ttft for o in outcomes if o.ok and o.ttft is not None]
    return {
        "requests": len(outcomes),
        "failed": len(failed(outcomes)),
        "ttft_p50_ms": round(1000 * statistics.median(ttft), 1) if ttft else None,
        "ttft_p90_ms": round(1000 * percentile(ttft, 0.9), 1) if ttft else None,
    }


def compare_ttft(
    sides: dict[str, Callable[[], Any]],
    model: str,
    concurrency: int = 16,
    max_tokens: int = 16,
    seconds: float = 15,
    rounds: int = 2,
) -> dict[str, Any]:
    """Time to first token of each side (name -> client factory) at a fixed concurrency, in
    alternating rounds (a, b, a, b, ...) so that every side sees the same machine load; the
    p50 difference of the first two sides as overhead_p50_ms."""
    outcomes: dict[str, list[Outcome]] = {name: [] for name in sides}
    for _round in range(rounds):
        for name, make_client in sides.items():
            load = Load(make_client, model, workers=concurrency, max_tokens=max_tokens).start()
            time.sleep(seconds)
            outcomes[name] += load.stop(timeout=300)
    figures: dict[str, Any] = {name: ttft_summary(o) for name, o in outcomes.items()}
    first, second = (figures[name]["ttft_p50_ms"] for name in list(sides)[:2])
    figures["overhead_p50_ms"] = (
        round(first - second, 1) if first is not None and second is not None else None
    )
    figures.update(concurrency=concurrency, max_tokens=max_tokens, seconds_per_round=seconds,
                   rounds=rounds)
    return figures
