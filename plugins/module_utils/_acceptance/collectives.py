"""Collective bandwidth: all-reduce and all-to-all across the node's GPUs, measured and judged
the way rccl-tests does.

The probe (``HARNESS``) runs one process per GPU with torch.distributed (backend ``nccl``, which
is RCCL on ROCm PyTorch; ``gloo`` on the CPU) and times each collective over a list of sizes.
Bandwidths follow rccl-tests' definitions (doc/PERFORMANCE.md): ``algbw = bytes / time``;
``busbw = algbw * 2 (n - 1) / n`` for all-reduce and ``algbw * (n - 1) / n`` for all-to-all,
which for all-to-all is also the bandwidth each GPU receives from the others. ``parse_rccl_tests``
reads rccl-tests' own table into the same rows, so one judgement serves both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

ALL_REDUCE = "all_reduce"
ALL_TO_ALL = "all_to_all"
OPS = (ALL_REDUCE, ALL_TO_ALL)

# rccl-tests' data row: size count type redop root, then time algbw busbw #wrong twice
# (out-of-place, in-place); #wrong is "N/A" when validation is off
_ROW = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)"
    r"\s+(?P<time>[\d.]+)\s+(?P<algbw>[\d.]+)\s+(?P<busbw>[\d.]+)\s+(?P<wrong>\S+)"
    r"\s+(?P<ip_time>[\d.]+)\s+(?P<ip_algbw>[\d.]+)\s+(?P<ip_busbw>[\d.]+)\s+(?P<ip_wrong>\S+)\s*$"
)


def bus_factor(op: str, ranks: int) -> float:
    """rccl-tests' busbw / algbw for an operation on ``ranks`` GPUs."""
    if ranks < 2:
        return 0.0
    if op == ALL_REDUCE:
        return 2.0 * (ranks - 1) / ranks
    if op == ALL_TO_ALL:
        return (ranks - 1) / ranks
    raise ValueError(f"unknown collective {op!r} (known: {', '.join(OPS)})")


def _wrong(text: str) -> int:
    return 0 if text == "N/A" else int(text)


def parse_rccl_tests(text: str) -> list[dict[str, Any]]:
    """The data rows of an rccl-tests ``*_perf`` table: size (bytes), time (us), algbw and
    busbw (GB/s) and #wrong, out of place; in-place busbw and #wrong as ``ip_*``."""
    rows = []
    for line in text.splitlines():
        match = _ROW.match(line)
        if not match:
            continue
        g = match.groupdict()
        rows.append(
            {
                "size": int(g["size"]),
                "time_us": float(g["time"]),
                "algbw": float(g["algbw"]),
                "busbw": float(g["busbw"]),
                "wrong": _wrong(g["wrong"]),
                "ip_busbw": float(g["ip_busbw"]),
                "ip_wrong": _wrong(g["ip_wrong"]),
            }
        )
    return rows


@dataclass(frozen=True)
class Bar:
    """A pass bar: at least ``min_busbw`` GB/s bus bandwidth at ``size`` bytes."""

    op: str
    size: int
    min_busbw: float


def judge(rows: list[dict[str, Any]], limit: Bar) -> tuple[bool, str]:
    """(passed, reason) for one collective's rows against its bar: no wrong element at any size,
    and the busbw at the bar's size (the slowest of out-of-place and in-place) at least the
    bar. A bar of 0 only reports."""
    wrong = [r["size"] for r in rows if r.get("wrong") or r.get("ip_wrong")]
    if wrong:
        return False, f"{limit.op}: wrong results at {', '.join(map(str, wrong))} bytes"
    at = [r for r in rows if r["size"] == limit.size]
    if not at:
        sizes = ", ".join(str(r["size"]) for r in rows) or "none"
        return False, f"{limit.op}: no measurement at {limit.size} bytes (measured: {sizes})"
    row = at[0]
    busbw = min(row["busbw"], row.get("ip_busbw", row["busbw"]))
    text = f"{limit.op} busbw {busbw:.2f} GB/s at {limit.size} bytes"
    if busbw < limit.min_busbw:
        return False, f"{text}, below {limit.min_busbw:g} GB/s"
    if limit.min_busbw <= 0:
        return True, f"{text} (no bar)"
    return True, f"{text} (bar {limit.min_busbw:g})"


def judge_burnin(samples: list[dict[str, Any]], limit: Bar) -> tuple[bool, str]:
    """(passed, reason) for the burn-in's repeated runs of one collective at the bar's size:
    every run correct, the slowest at least the bar."""
    runs = [s for s in samples if s["op"] == limit.op]
    if not runs:
        return False, f"{limit.op}: no burn-in run"
    wrong = sum(1 for s in runs if s["wrong"])
    if wrong:
        return False, f"{limit.op}: {wrong} of {len(runs)} burn-in runs had wrong results"
    slowest = min(s["busbw"] for s in runs)
    text = f"{limit.op} burn-in: {len(runs)} runs, slowest busbw {slowest:.2f} GB/s"
    if slowest < limit.min_busbw:
        return False, f"{text}, below {limit.min_busbw:g} GB/s"
    return True, text


# One process per rank (fork: the parent never touches the GPUs), rendezvous on loopback TCP.
# Each rank fills its tensor with rank + 1, so the all-reduce sum and the all-to-all blocks are
# known exactly and every run is checked element by element (rccl-tests' #wrong).
HARNESS = r"""
import multiprocessing as mp, os, socket
import torch, torch.distributed as dist

def factor(op, n):
    return (2.0 * (n - 1) / n) if op == "all_reduce" else ((n - 1) / n)

def run_once(op, x, out, n, rank):
    if op == "all_reduce":
        x.fill_(rank + 1)
        dist.all_reduce(x)
        return int((x != n * (n + 1) / 2).sum().item())
    x.fill_(rank + 1)
    dist.all_to_all_single(out, x)
    expect = torch.arange(1, n + 1, dtype=x.dtype, device=x.device)
    expect = expect.repeat_interleave(x.numel() // n)
    return int((out != expect).sum().item())

def timed(op, x, out, n, rank, dev, iters):
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    wrong = run_once(op, x, out, n, rank)
    dist.barrier(); sync()
    start = time.perf_counter()
    for _ in range(iters):
        if op == "all_reduce":
            dist.all_reduce(x)
        else:
            dist.all_to_all_single(out, x)
    sync()
    seconds = (time.perf_counter() - start) / iters
    worst = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return float(worst.item()), wrong

def measure(op, size, n, rank, dev, warmup, iters):
    elems = max(n, size // 4 // n * n)
    x = torch.empty(elems, dtype=torch.float32, device=dev)
    out = torch.empty_like(x) if op == "all_to_all" else None
    for _ in range(warmup):
        run_once(op, x, out, n, rank)
    seconds, wrong = timed(op, x, out, n, rank, dev, iters)
    nbytes = elems * 4
    algbw = nbytes / seconds / 1e9
    return {"op": op, "size": nbytes, "time_us": seconds * 1e6, "algbw": algbw,
            "busbw": algbw * factor(op, n), "wrong": wrong}

def rank_main(rank, n, port, queue):
    backend = ARGS["backend"]
    if backend == "nccl":
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    else:
        dev = torch.device("cpu")
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=n)
    rows = [measure(op, size, n, rank, dev, ARGS["warmup"], ARGS["iters"])
            for op in ARGS["ops"] for size in ARGS["sizes"]]
    burnin, deadline = [], time.monotonic() + float(ARGS["burnin_seconds"])
    while ARGS["burnin_seconds"] > 0:
        for op in ARGS["ops"]:
            burnin.append(measure(op, ARGS["burnin_size"], n, rank, dev, 0, ARGS["iters"]))
        done = torch.tensor([1 if time.monotonic() >= deadline else 0])
        dist.all_reduce(done, op=dist.ReduceOp.MIN)
        if done.item():
            break
    if rank == 0:
        queue.put({"rows": rows, "burnin": burnin})
    dist.destroy_process_group()

info = {"torch": torch.__version__, "hip": getattr(torch.version, "hip", None),
        "backend": ARGS["backend"]}
n = int(ARGS["ranks"]) or (torch.cuda.device_count() if ARGS["backend"] == "nccl" else 2)
if n < 2:
    emit({**info, "ranks": n, "error": f"{n} GPU(s): a collective needs at least 2"})
    raise SystemExit(0)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
ctx = mp.get_context("fork")
queue = ctx.Queue()
procs = [ctx.Process(target=rank_main, args=(r, n, port, queue)) for r in range(n)]
for p in procs:
    p.start()
try:
    result = queue.get(timeout=float(ARGS["timeout"]))
except Exception as exc:
    result = {"error": f"no result from rank 0 within {ARGS['timeout']} s ({type(exc).__name__})"}
for p in procs:
    p.join(timeout=30)
    if p.is_alive():
        p.kill()
codes = [p.exitcode for p in procs]
if any(codes) and "error" not in result:
    result["error"] = f"rank exit codes {codes}"
emit({**info, "ranks": n, **result})
"""
