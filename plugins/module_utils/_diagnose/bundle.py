# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""On the controller: the node archives -> one archive with a verdict per node, checked for
secrets before it is written. Standard library only."""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.classify import classify
from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.evidence import (
    Evidence,
    Item,
    read_archive_members,
)
from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.redact import Redactor

#: A node's last fingerprint (role fingerprint_gate's record on the controller), in its folder.
FINGERPRINT_FILE = "fingerprint.json"


class LeakError(Exception):
    """A secret survived redaction; nothing was written."""


def verdict_markdown(host: str, verdict: Mapping[str, Any], statuses: Mapping[str, str]) -> str:
    lines = [
        f"## {host}",
        "",
        f"**Verdict: {verdict['primary']}** (service {verdict['service']})",
        "",
    ]
    f = verdict.get("facts") or {}
    if f:
        agents = ", ".join(f.get("gfx_agents") or []) or "none"
        archs = ";".join(f.get("build_archs") or []) or "no stamp"
        lines += [
            f"- GPU agents (rocminfo): {agents}; built for PYTORCH_ROCM_ARCH: {archs}",
            f"- vllm {f.get('vllm')}, torch {f.get('torch')} (hip {f.get('torch_hip')}), "
            f"triton {f.get('triton')}, pytorch-triton-rocm {f.get('pytorch_triton_rocm')}, "
            f"transformers {f.get('transformers')}",
            "",
        ]
    for finding in verdict["findings"]:
        lines += [f"### {finding['cls']}: {finding['title']}", "", f"Fix: {finding['fix']}", ""]
        lines += [f"    {line}" for line in finding["evidence"]] + [""]
    if not verdict["findings"]:
        lines += [verdict["summary"], ""]
    if verdict.get("skipped"):
        lines += [
            f"Not checked (no GPU expected on this stack): {', '.join(verdict['skipped'])}",
            "",
        ]
    not_ok = {k: v for k, v in statuses.items() if v != "ok"}
    if not_ok:
        lines += [
            "Collectors that did not answer: "
            + ", ".join(f"{k} ({v})" for k, v in sorted(not_ok.items())),
            "",
        ]
    return "\n".join(lines)


def _add(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    info.mode = 0o600
    tar.addfile(info, io.BytesIO(data))


def bundle(
    node_archives: Mapping[str, str | Path],
    dest: str | Path,
    redact: Redactor,
    gpu_expected: Mapping[str, bool] | None = None,
    fingerprints: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Classify every node, check every file for the known secrets (again), write ``dest``.

    ``fingerprints``: per host, the text of its last fingerprint record (class outputs_drift).
    Returns ``{archive, verdicts: {host: verdict}, summary}``. Raises LeakError (and writes
    nothing) when a secret is found in any file.
    """
    members: dict[str, dict[str, str]] = {}
    for host, archive in node_archives.items():
        nodes = read_archive_members(archive)
        members[host] = next(iter(nodes.values())) if nodes else {}
        if (fingerprints or {}).get(host):
            members[host][FINGERPRINT_FILE] = (fingerprints or {})[host]
    verdicts: dict[str, Any] = {}
    sections: list[str] = []
    leaks: list[str] = []
    for host, files in sorted(members.items()):
        for name, text in files.items():
            leaks += [f"{host}/{name}: {mark}" for mark in redact.leaks(text)]
        if "collectors.json" not in files:
            verdicts[host] = {
                "primary": "unknown",
                "classes": [],
                "findings": [],
                "service": "unknown",
                "summary": "unknown: the node archive has no index",
                "skipped": [],
            }
            continue
        ev = Evidence.from_members(files)
        if FINGERPRINT_FILE in files:
            ev.items["fingerprint"] = Item("ok", files[FINGERPRINT_FILE])
        verdict = classify(
            ev, (gpu_expected or {}).get(host, bool(ev.meta.get("gpu_expected", True)))
        )
        verdicts[host] = verdict
        statuses = {k: v.status for k, v in ev.items.items()}
        sections.append(verdict_markdown(host, verdict, statuses))
    if leaks:
        raise LeakError("secret found after redaction in: " + ", ".join(leaks))
    summary = "# instinct.vllm diagnose\n\n" + "\n".join(sections)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, "w:gz") as tar:
        _add(tar, "diagnose/SUMMARY.md", summary)
        _add(tar, "diagnose/verdicts.json", json.dumps(verdicts, indent=1, sort_keys=True) + "\n")
        for host, files in sorted(members.items()):
            for name, text in sorted(files.items()):
                _add(tar, f"diagnose/{host}/{name}", text)
            if host in verdicts:
                _add(
                    tar,
                    f"diagnose/{host}/verdict.json",
                    json.dumps(verdicts[host], indent=1, sort_keys=True) + "\n",
                )
    dest.chmod(0o600)
    return {"archive": str(dest), "verdicts": verdicts, "summary": summary}


def hosts_in(paths: Sequence[str | Path]) -> dict[str, str]:
    """``<dir>/<host>.tar.gz`` paths -> {host: path}."""
    return {Path(p).name.removesuffix(".tar.gz"): str(p) for p in paths}


def fingerprint_records(directory: str | Path | None, hosts: Sequence[str]) -> dict[str, str]:
    """The text of each host's last fingerprint record in ``<directory>/nodes/<host>.json``
    (role fingerprint_gate writes them), for the hosts that have one."""
    if not directory:
        return {}
    found = {}
    for host in hosts:
        path = Path(directory) / "nodes" / f"{host}.json"
        if path.is_file():
            found[host] = path.read_text(encoding="utf-8")
    return found
