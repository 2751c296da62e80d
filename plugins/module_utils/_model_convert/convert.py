"""model_convert core: plan, validate, then stream a checkpoint into vLLM/transformers layout.

Entry point: `convert(ConvertOptions(...), progress=callback, check=False) -> dict`.
Standard library at import time; torch (for `.bin` sources and dtype conversion) and
transformers/tokenizers/protobuf (for the tokenizer) are imported only when needed.
See docs/model-conversion.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils._fileutil import json_text, sha256_file
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert import tokenizer as tok
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.commit import (
    DirLock,
    clean_stale,
    commit,
    partial_dir,
)
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.direct import (
    open_direct,
)
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.io import (
    ST_INDEX,
    ConvertError,
    SourceLayout,
    SourceTensor,
    discover,
    fingerprint_files,
    list_tensors,
)
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.plan import (
    DTYPES,
    PROFILES,
    Plan,
    compile_rules,
    map_names,
    output_dtypes,
    parse_size,
    resolve_profile,
    rewrite_config,
    split_shards,
    validate_llama,
)
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.shard import (
    OutTensor,
    Progress,
    quick_gil_handover,
    write_shard,
)
from ansible_collections.instinct.vllm.plugins.module_utils._model_convert.writers import (
    Syncer,
    copy_file,
    write_bytes,
    write_json,
)

__all__ = ["ConvertError", "ConvertOptions", "convert"]

TOOL = "instinct.vllm.model_convert"
TOOL_VERSION = "0.1.0"
MANIFEST = "model_convert_manifest.json"
VERIFY_LEVELS = ("none", "layout", "full")
_SKIP_COPY = re.compile(
    r"(^\..*|.*\.(bin|safetensors|pt|pth|ckpt|py|pyc)$|.*\.index\.json$|^config\.json$|"
    r"^generation_config\.json$)"
)
_SPACE_MARGIN = 64 * 1024 * 1024


@dataclass
class ConvertOptions:
    src: str
    dest: str
    profile: str = "auto"
    key_map: list[dict[str, Any]] = field(default_factory=list)
    config_overrides: dict[str, Any] = field(default_factory=dict)
    dtype: str = "keep"
    max_shard_size: str | int = "5GB"
    tokenizer: str = "auto"
    verify: str = "layout"
    force: bool = False
    direct_io: bool = True  # O_DIRECT for the weights where the filesystems allow it

    def manifest_view(self) -> dict[str, Any]:
        """The options that decide the output bytes (src/dest/force/verify/direct_io do not)."""
        data = asdict(self)
        for key in ("src", "dest", "force", "verify", "direct_io"):
            data.pop(key)
        data["max_shard_size"] = parse_size(self.max_shard_size)
        return data


def _read_config(src: Path) -> dict[str, Any]:
    path = src / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConvertError(f"{path}: missing") from exc
    except (OSError, ValueError) as exc:
        raise ConvertError(f"{path}: cannot read JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConvertError(f"{path}: expected a JSON object")
    return data


def _fingerprint(src: Path) -> str:
    raw = json.dumps(fingerprint_files(src), sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()


def _check_paths(opts: ConvertOptions) -> tuple[Path, Path]:
    if not opts.src or not opts.dest:
        raise ConvertError("src and dest are required")
    src = Path(opts.src).expanduser().resolve()
    dest = Path(opts.dest).expanduser().resolve()
    if dest == src or src in dest.parents or dest in src.parents:
        raise ConvertError(f"dest {dest} must be outside src {src} (src is never modified)")
    if not dest.parent.is_dir():
        raise ConvertError(f"dest {dest}: parent directory {dest.parent} does not exist")
    for name, value, allowed in (
        ("verify", opts.verify, VERIFY_LEVELS),
        ("dtype", opts.dtype, DTYPES),
        ("profile", opts.profile, PROFILES),
    ):
        if value not in allowed:
            raise ConvertError(f"{name} {value!r}: expected one of {', '.join(allowed)}")
    return src, dest


def make_plan(opts: ConvertOptions, src: Path) -> tuple[Plan, SourceLayout, list[SourceTensor]]:
    """Read metadata and validate everything; nothing is written."""
    config = _read_config(src)
    layout = discover(src)
    tensors = list_tensors(layout)
    profile, native = resolve_profile(opts.profile, config, layout.fmt)
    if native:
        plan = Plan(profile, True, [(t, t.name) for t in tensors], [], {}, [], config, config)
        return plan, layout, tensors
    rules = compile_rules(opts.key_map, profile)
    mapping, dropped = map_names(tensors, rules)
    config_after = rewrite_config(config, profile, opts.config_overrides)
    if profile == "gptoss_llama":
        validate_llama(mapping, config_after)
    plan = Plan(profile, False, mapping, dropped, output_dtypes(mapping, opts.dtype))
    plan.config_before, plan.config_after = config, config_after
    plan.shards = split_shards(plan, parse_size(opts.max_shard_size))
    return plan, layout, tensors


def _generation_config(src: Path, config: dict[str, Any]) -> dict[str, Any]:
    path = src / "generation_config.json"
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConvertError(f"{path}: cannot read JSON: {exc}") from exc
        return data if isinstance(data, dict) else {}
    data = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in config}
    data["_from_model_config"] = True
    return data


def _extra_files(src: Path) -> list[str]:
    names = []
    for path in sorted(src.iterdir()):
        if (
            path.is_file()
            and not _SKIP_COPY.match(path.name)
            and path.name not in tok.COPY_FILES
            and path.name != MANIFEST
        ):
            names.append(path.name)
    return names


def _up_to_date(dest: Path, fingerprint: str, options: dict[str, Any], full: bool) -> bool:
    manifest_path = dest / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if (
        manifest.get("tool_version") != TOOL_VERSION
        or manifest.get("source", {}).get("fingerprint") != fingerprint
        or manifest.get("options") != options
    ):
        return False
    for rel, info in manifest.get("files", {}).items():
        path = dest / rel
        if not path.is_file() or path.stat().st_size != info.get("size"):
            return False
        if full and sha256_file(path) != info.get("sha256"):
            return False
    return True


def verify_layout(root: Path) -> tuple[int, int]:
    """Index <-> shard headers, all files present; returns (tensors, bytes)."""
    index_path = root / ST_INDEX
    layout = discover(root)
    if layout.fmt != "safetensors":
        raise ConvertError(f"{root}: expected safetensors weights, found {layout.fmt}")
    tensors = list_tensors(layout)
    if index_path.exists():
        listed = json.loads(index_path.read_text(encoding="utf-8")).get("weight_map", {})
        if len(listed) != len(tensors):
            raise ConvertError(
                f"{index_path}: lists {len(listed)} tensors, shards hold {len(tensors)}"
            )
    return len(tensors), sum(t.nbytes for t in tensors)


def _diff(plan: Plan) -> dict[str, str]:
    return {
        "before_header": "config.json (src)",
        "after_header": "config.json (dest)",
        "before": json_text(plan.config_before),
        "after": json_text(plan.config_after),
    }


def _byte_counter(total: int, progress: Progress | None) -> Callable[[int, str], None]:
    """The per-chunk callback of the shard writers: adds up the bytes, reports progress."""
    done = 0

    def on_bytes(count: int, name: str) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress(done, total, name)

    return on_bytes


def _start_tokenizer(mode: str, src: Path, plan: Plan) -> Future[dict[str, bytes]] | None:
    """For mode "convert", build the tokenizer in a thread while the weights stream."""
    if mode != "convert":
        return None
    max_len = plan.config_after.get("max_position_embeddings")
    pool = ThreadPoolExecutor(1, "model_convert-tokenizer")
    future = pool.submit(tok.build, src, max_len if isinstance(max_len, int) else None)
    pool.shutdown(wait=False)
    return future


@contextmanager
def _source_fds(
    src: Path, rels: list[str], direct_io: bool
) -> Iterator[tuple[dict[str, int], dict[str, int] | None]]:
    """Descriptors of the weight files: ``(fds, direct)``; direct is None unless all allow it."""
    fds: dict[str, int] = {}
    direct: dict[str, int | None] = {}
    try:
        for rel in rels:
            fds[rel] = os.open(src / rel, os.O_RDONLY)
            direct[rel] = open_direct(src / rel, os.O_RDONLY) if direct_io else None
        usable = {rel: fd for rel, fd in direct.items() if fd is not None}
        yield fds, (usable if len(usable) == len(fds) else None)
    finally:
        for fd in [*fds.values(), *direct.values()]:
            if fd is not None:
                os.close(fd)


def _write_shards(
    plan: Plan,
    src: Path,
    tmp: Path,
    rels: list[str],
    direct_io: bool,
    on_bytes: Callable[[int, str], None],
) -> tuple[dict[str, dict[str, Any]], dict[str, str], set[str]]:
    """Every shard into tmp: ``(files, weight_map, ios)``; ios: the I/O paths the shards took."""
    out_tensors = {t: OutTensor(s, t, plan.out_dtype[t]) for s, t in plan.mapping}
    files: dict[str, dict[str, Any]] = {}
    weight_map: dict[str, str] = {}
    ios: set[str] = set()
    with _source_fds(src, rels, direct_io) as (fds, direct), Syncer() as syncer:
        for shard_name, names in zip(plan.shard_names(), plan.shards, strict=True):
            shard = [out_tensors[n] for n in names]
            done = write_shard(src, tmp / shard_name, shard, fds, on_bytes, syncer, direct)
            files[shard_name] = done.info
            ios.add(done.io)
            weight_map.update(dict.fromkeys(names, shard_name))
    return files, weight_map, ios


def _write_configs(
    plan: Plan, src: Path, tmp: Path, weight_map: dict[str, str]
) -> dict[str, dict[str, Any]]:
    index = {
        "metadata": {"total_size": plan.total_bytes},
        "weight_map": dict(sorted(weight_map.items())),
    }
    return {
        ST_INDEX: write_json(tmp / ST_INDEX, index),
        "config.json": write_json(tmp / "config.json", plan.config_after),
        "generation_config.json": write_json(
            tmp / "generation_config.json", _generation_config(src, plan.config_after)
        ),
    }


def _write_tokenizer(
    mode: str, src: Path, tmp: Path, built: Future[dict[str, bytes]] | None
) -> dict[str, dict[str, Any]]:
    """Tokenizer files: copied (mode copy), converted (mode convert) or none (skip)."""
    files: dict[str, dict[str, Any]] = {}
    if mode == "copy":
        for name in tok.COPY_FILES:
            if (src / name).is_file():
                files[name] = copy_file(src / name, tmp / name)
    elif mode == "convert":
        files["tokenizer.model"] = copy_file(src / "tokenizer.model", tmp / "tokenizer.model")
        if built is None:
            raise RuntimeError("tokenizer conversion was not started for tokenizer mode 'convert'")
        for name, data in built.result().items():
            files[name] = write_bytes(tmp / name, data)
    return files


def _write_all(
    opts: ConvertOptions,
    plan: Plan,
    src: Path,
    tmp: Path,
    tensors_files: list[str],
    progress: Progress | None,
) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """Every output file into tmp: ``({file: {size, sha256}}, I/O paths of the shards)``."""
    mode = tok.resolve_mode(opts.tokenizer, src)
    built = _start_tokenizer(mode, src, plan)
    on_bytes = _byte_counter(plan.total_bytes, progress)
    files, weight_map, ios = _write_shards(plan, src, tmp, tensors_files, opts.direct_io, on_bytes)
    files.update(_write_configs(plan, src, tmp, weight_map))
    files.update(_write_tokenizer(mode, src, tmp, built))
    for name in _extra_files(src):
        files[name] = copy_file(src / name, tmp / name)
    return files, ios


def _new_result(plan: Plan, layout: SourceLayout) -> dict[str, Any]:
    return {
        "changed": False,
        "native": plan.native,
        "profile": plan.profile,
        "src_format": layout.fmt,
        "tensors": len(plan.mapping),
        "dropped": plan.dropped,
        "bytes": 0,
        "shards": 0,
        "files": [],
        "seconds": 0.0,
        "throughput_mb_s": 0.0,
    }


def _native(src: Path, plan: Plan, layout: SourceLayout) -> dict[str, Any]:
    """The result's fields for a checkpoint vLLM serves as it is (verified, not converted)."""
    count, nbytes = verify_layout(src)
    return {
        "model_dir": str(src),
        "bytes": nbytes,
        "tensors": count,
        "shards": len(layout.files),
        "msg": f"{src} is a {plan.config_before.get('architectures')} safetensors checkpoint vLLM "
        "serves natively: layout verified, nothing converted",
    }


def _check_dest(opts: ConvertOptions, plan: Plan, dest: Path) -> None:
    """dest is ours to replace (or force says so) and its filesystem has room."""
    foreign = dest.exists() and not (dest / MANIFEST).is_file()
    if foreign and not opts.force and (not dest.is_dir() or any(dest.iterdir())):
        raise ConvertError(
            f"dest {dest} exists and was not written by model_convert (no {MANIFEST}); "
            "remove it or set force to replace it"
        )
    needed = plan.total_bytes + _SPACE_MARGIN
    free = shutil.disk_usage(dest.parent).free
    if needed > free:
        raise ConvertError(
            f"not enough free disk in {dest.parent}: need {needed / 1e9:.2f} GB, "
            f"free {free / 1e9:.2f} GB"
        )


def _manifest(
    fingerprint: str,
    layout: SourceLayout,
    plan: Plan,
    options: dict[str, Any],
    files: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    return {
        "tool": TOOL,
        "tool_version": TOOL_VERSION,
        "source": {
            "fingerprint": fingerprint,
            "format": layout.fmt,
            "files": list(layout.files),
        },
        "profile": plan.profile,
        "options": options,
        "dropped": plan.dropped,
        "files": dict(sorted(files.items())),
    }


def _convert_into(
    opts: ConvertOptions,
    plan: Plan,
    layout: SourceLayout,
    dests: tuple[Path, Path],
    fingerprint: str,
    progress: Progress | None,
) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """Write beside dest under the lock, verify, swap into place: ``(files, ios)``."""
    src, dest = dests
    with DirLock(dest):
        clean_stale(dest)
        tmp = partial_dir(dest)
        tmp.mkdir()
        with quick_gil_handover():
            files, ios = _write_all(opts, plan, src, tmp, list(layout.files), progress)
        manifest = _manifest(fingerprint, layout, plan, opts.manifest_view(), files)
        write_json(tmp / MANIFEST, manifest)
        if opts.verify != "none":
            verify_layout(tmp)
        commit(tmp, dest)
    return files, ios


def _up_to_date_result(dest: Path) -> dict[str, Any]:
    manifest = json.loads((dest / MANIFEST).read_text(encoding="utf-8"))
    return {"files": [*sorted(manifest["files"]), MANIFEST], "msg": f"{dest} is up to date"}


def convert(
    opts: ConvertOptions, progress: Progress | None = None, check: bool = False
) -> dict[str, Any]:
    """Convert (or, for a native checkpoint, verify) opts.src into opts.dest."""
    started = time.monotonic()
    src, dest = _check_paths(opts)
    options = opts.manifest_view()
    fingerprint = _fingerprint(src)  # names, sizes, mtimes: no reading
    plan, layout, _tensors = make_plan(opts, src)
    result = _new_result(plan, layout)
    if plan.native:
        return {**result, **_native(src, plan, layout)}
    result.update(
        model_dir=str(dest), bytes=plan.total_bytes, shards=len(plan.shards), diff=_diff(plan)
    )
    if not opts.force and _up_to_date(dest, fingerprint, options, opts.verify == "full"):
        result.update(_up_to_date_result(dest))
        result["seconds"] = round(time.monotonic() - started, 3)
        return result
    result["changed"] = True
    _check_dest(opts, plan, dest)
    if check:
        result.update(files=plan.shard_names(), msg=f"would convert {src} into {dest}")
        return result
    files, ios = _convert_into(opts, plan, layout, (src, dest), fingerprint, progress)
    seconds = time.monotonic() - started
    result.update(
        files=[*sorted(files), MANIFEST],
        seconds=round(seconds, 3),
        throughput_mb_s=round(plan.total_bytes / 1e6 / seconds, 1) if seconds > 0 else 0.0,
        io="mixed" if len(ios) > 1 else next(iter(ios), "none"),
        msg=f"converted {src} into {dest}",
    )
    if opts.verify == "full" and not _up_to_date(dest, fingerprint, options, True):
        raise ConvertError(f"{dest}: verification failed: files do not match the manifest")
    return result
