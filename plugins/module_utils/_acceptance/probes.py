"""The probe programs (run by the node's venv Python with ARGS and emit() from probe.PRELUDE)."""

from __future__ import annotations

# Per GPU: float32 matmul on device "cuda" (ROCm PyTorch's HIP device), checked against a
# float64 CPU reference of the same inputs.
MATMUL = r"""
import torch
device_kind = ARGS["device"]
info = {"torch": torch.__version__, "hip": getattr(torch.version, "hip", None)}
if device_kind == "cuda" and not torch.cuda.is_available():
    emit({"error": "torch.cuda.is_available() is False", **info})
    raise SystemExit(0)
torch.backends.cuda.matmul.allow_tf32 = False
n = int(ARGS["size"])
gen = torch.Generator().manual_seed(int(ARGS.get("seed", 0)))
a = torch.randn(n, n, generator=gen, dtype=torch.float32)
b = torch.randn(n, n, generator=gen, dtype=torch.float32)
ref = a.double() @ b.double()
scale = ref.abs().max().item()
count = torch.cuda.device_count() if device_kind == "cuda" else 1
gpus = []
for index in range(count):
    dev = torch.device(device_kind, index) if device_kind == "cuda" else torch.device("cpu")
    name = torch.cuda.get_device_name(index) if device_kind == "cuda" else "cpu"
    start = time.monotonic()
    try:
        c = a.to(dev) @ b.to(dev)
        if device_kind == "cuda":
            torch.cuda.synchronize(dev)
        err = (c.cpu().double() - ref).abs().max().item()
        gpus.append({"index": index, "name": name, "max_abs_error": err,
                     "rel_error": err / scale, "seconds": round(time.monotonic() - start, 3)})
    except Exception as exc:
        gpus.append({"index": index, "name": name, "error": f"{type(exc).__name__}: {exc}"})
emit({**info, "size": n, "gpus": gpus})
"""

# vLLM's own platform detection and attention-backend selection, in the node's venv.
PLATFORM = r"""
import importlib.metadata as md, inspect, os
out = {}
try:
    out["vllm"] = md.version("vllm")
except md.PackageNotFoundError:
    out["vllm"] = None
from vllm.platforms import current_platform
enum = getattr(current_platform, "_enum", None)
out["platform"] = (getattr(enum, "name", None) or type(current_platform).__name__).lower()
out["platform_class"] = type(current_platform).__name__
out["device_type"] = getattr(current_platform, "device_type", None)
out["env"] = {k: os.environ[k] for k in ("VLLM_ATTENTION_BACKEND", "VLLM_USE_TRITON_FLASH_ATTN")
              if k in os.environ}
try:
    import torch
    try:
        from vllm.v1.attention.selector import get_attn_backend
    except ImportError:
        from vllm.attention.selector import get_attn_backend
    known = {"head_size": ARGS["head_size"], "dtype": getattr(torch, ARGS["dtype"]),
             "kv_cache_dtype": ARGS["kv_cache_dtype"], "block_size": ARGS["block_size"],
             "is_attention_free": False, "num_heads": ARGS.get("num_heads")}
    params = inspect.signature(get_attn_backend).parameters
    missing = [p for p, v in params.items() if v.default is inspect.Parameter.empty
               and p not in known]
    if missing:
        raise TypeError(f"get_attn_backend needs {missing}, which this probe does not know")
    kwargs = {p: known[p] for p in params if p in known}
    try:
        backend = get_attn_backend(**kwargs)
    except AssertionError as exc:  # newer vLLM reads its config from a context
        if "config is not set" not in str(exc):
            raise
        from vllm.config import VllmConfig, set_current_vllm_config
        with set_current_vllm_config(VllmConfig()):
            backend = get_attn_backend(**kwargs)
    out["attention_backend"] = backend.get_name() if hasattr(backend, "get_name") else str(backend)
except Exception as exc:
    out["attention_backend_error"] = f"{type(exc).__name__}: {exc}"
if out["platform"] == "rocm":
    # which kernel vLLM 0.6's ROCm backend runs (_acceptance/attention.py): its own reading of
    # VLLM_USE_TRITON_FLASH_ATTN, and the import it tries for CK flash-attention
    try:
        import vllm.envs as envs
        out["use_triton_flash_attn"] = bool(envs.VLLM_USE_TRITON_FLASH_ATTN)
    except Exception as exc:  # AttributeError: this vLLM has no such switch
        out["use_triton_flash_attn"] = None
        out["use_triton_flash_attn_error"] = f"{type(exc).__name__}: {exc}"
    try:
        from flash_attn import flash_attn_varlen_func  # noqa: F401
        out["flash_attn_error"] = ""
    except Exception as exc:
        out["flash_attn_error"] = f"{type(exc).__name__}: {exc}"
emit(out)
sys.stdout.flush()
os._exit(0)  # skip the interpreter teardown of torch's threads (seconds on a busy node)
"""

# amd-smi health through the amdsmi binding in the venv: temperatures, ECC counts, XGMI links.
HEALTH = r"""
def reading(call):
    try:
        return call()
    except Exception as exc:
        code = getattr(exc, "err_code", None)
        return {"error": f"{type(exc).__name__}: {exc}", "code": code}
try:
    import amdsmi
except ImportError as exc:
    emit({"error": f"the amdsmi Python binding is not in this venv ({exc})"})
    raise SystemExit(0)
try:
    amdsmi.amdsmi_init()
except Exception as exc:
    emit({"error": f"amdsmi_init: {type(exc).__name__}: {exc}"})
    raise SystemExit(0)
try:
    handles = amdsmi.amdsmi_get_processor_handles()
    T, M = amdsmi.AmdSmiTemperatureType, amdsmi.AmdSmiTemperatureMetric
    gpus = []
    for index, h in enumerate(handles):
        gpus.append({
            "index": index,
            "bdf": reading(lambda: amdsmi.amdsmi_get_gpu_device_bdf(h)),
            "name": reading(lambda: amdsmi.amdsmi_get_gpu_asic_info(h)["market_name"]),
            "temperature": {
                "hotspot": reading(lambda: amdsmi.amdsmi_get_temp_metric(h, T.HOTSPOT, M.CURRENT)),
                "vram": reading(lambda: amdsmi.amdsmi_get_temp_metric(h, T.VRAM, M.CURRENT)),
            },
            "ecc": reading(lambda: amdsmi.amdsmi_get_gpu_total_ecc_count(h)),
        })
    names = {int(v): k for k, v in amdsmi.AmdSmiIoLinkType.__members__.items()}
    links = []
    for a, ha in enumerate(handles):
        for b, hb in enumerate(handles):
            if a < b:
                link = reading(lambda: amdsmi.amdsmi_topo_get_link_type(ha, hb))
                if "type" in link:
                    kind = names.get(int(link["type"]), link["type"])
                    link = {"hops": link["hops"], "type": kind}
                links.append({"src": a, "dst": b, **link})
finally:
    amdsmi.amdsmi_shut_down()
emit({"gpus": gpus, "links": links})
"""
