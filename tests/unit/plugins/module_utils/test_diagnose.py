"""diagnose (module_utils/diagnose.py + _diagnose/): collectors, redaction, failure classes.

Each class is tested on recorded outputs (fixtures/instinct, from real machines) or on the
built failure outputs in fixtures/diagnose (SOURCES.md there says where each message text
comes from), over a healthy MI300X node assembled from recordings.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tarfile
from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils import diagnose as dg
from ansible_collections.instinct.vllm.plugins.module_utils._diagnose import evidence as ev_mod

FIX = Path(__file__).resolve().parents[2] / "fixtures"
KEY = "unit-test-key-5b1e9a77c0d2"
HF = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"


def rec(name: str) -> str:
    return (FIX / "instinct" / name).read_text(encoding="utf-8")


def built(name: str) -> str:
    return (FIX / "diagnose" / name).read_text(encoding="utf-8")


HEALTHY_VERSIONS = json.dumps(
    {
        "dists": {
            "torch": "2.5.1+rocm6.2",
            "pytorch-triton-rocm": "3.1.0",
            "triton": None,
            "vllm": "0.6.6.post1+rocm621",
            "transformers": "4.47.1",
            "amdsmi": "24.6.3",
        },
        "imports": {m: {"ok": True} for m in ("torch", "triton", "amdsmi", "transformers", "vllm")},
        "torch": {"version": "2.5.1+rocm6.2", "hip": "6.2.41133-dd7f95766", "cuda": None},
    }
)
HEALTHY_STAMP = json.dumps({"key": "3f2a9c1d0b7e4a55", "inputs": {"archs": ["gfx942"]}})


def healthy() -> dict[str, str]:
    """A serving MI300X node: recorded rocminfo / amd-smi / lsmod / dkms, sane everything else."""
    return {
        "rocminfo": rec("rocminfo_mi300x_8gpu_xeon8470.txt"),
        "amd-smi_static": rec("amd-smi_static_json_mi300x_8gpu_rocm7.2.1.json"),
        "lsmod": rec("lsmod_grep_amdgpu_mi300x_vf_dkms.txt"),
        "dkms_status": rec("dkms_status_amdgpu_mi100_rocm6.3.3.txt"),
        "uname": "Linux mi300x-07 6.8.0-55-generic #57-Ubuntu SMP x86_64 GNU/Linux\n",
        "service_user_groups": built("id_vllm_ok.txt"),
        "modprobe_blacklist": "cmdline: BOOT_IMAGE=/vmlinuz-6.8.0-55-generic ro iommu=pt\n",
        "secure_boot": "secure_boot: disabled\n",
        "unit_status": "ActiveState=active\nSubState=running\n",
        "unit_journal": "2026-11-30T15:00:00+0000 n vllm[1]: INFO Application startup complete.\n",
        "kernel_log": "2026-11-30T08:00:10+0000 n kernel: [drm] amdgpu kernel modesetting\n",
        "versions": HEALTHY_VERSIONS,
        "build_stamp": HEALTHY_STAMP,
        "model": "model_path: /srv/models/m\nweight_files: 2\nweight_bytes: 16000000000\n",
    }


def verdict(**override: str) -> dict:
    texts = healthy()
    texts.update(override)
    return dg.classify(dg.Evidence.from_texts(texts))


def test_healthy_recorded_node_has_no_class() -> None:
    result = verdict()
    assert result["primary"] == "unknown" and result["findings"] == []
    assert "no known failure class matched" in result["summary"]
    assert result["service"] == "active"
    assert result["facts"]["gfx_agents"] == ["gfx942"]
    assert result["facts"]["build_archs"] == ["gfx942"]
    assert result["facts"]["torch_hip"] == "6.2.41133-dd7f95766"


# ------------------------------------------ the three ROCm segfault classes (docs/background.md)


def test_compile_time_hipcc_crash() -> None:
    result = verdict(build_log_tail=built("build_log_hipcc_segfault.txt"))
    assert result["primary"] == "build_compiler_crash"
    finding = result["findings"][0]
    assert any("clang frontend command failed" in line for line in finding["evidence"])
    assert "vllm_source_max_jobs" in finding["fix"]


def test_compile_time_cmath_missing_names_the_package() -> None:
    result = verdict(build_log_tail=built("build_log_cmath_missing.txt"))
    assert result["primary"] == "build_cxx_headers_missing"
    assert "libstdc++" in result["findings"][0]["fix"]


def test_compile_time_oom_killed_compiler() -> None:
    result = verdict(kernel_log=built("kernel_log_build_oom.txt"))
    assert result["primary"] == "build_oom_kill"
    assert "OOM killer" in result["findings"][0]["fix"]


@pytest.mark.parametrize(
    ("log", "cls"),
    [
        ("build_log_patch_hunk_failed.txt", "build_patch_failure"),
        ("build_log_torch_cmake_missing.txt", "build_missing_dependency"),
    ],
)
def test_build_failure_before_compiling(log: str, cls: str) -> None:
    result = verdict(build_log_tail=built(log))
    assert result["primary"] == cls
    assert "site.yml" in result["findings"][0]["fix"]


def test_import_time_triton_torch_mismatch() -> None:
    result = verdict(versions=built("versions_triton_conflict.json"))
    assert result["primary"] == "import_triton_mismatch"
    evidence = "\n".join(result["findings"][0]["evidence"])
    assert "triton 3.3.0" in evidence and "pytorch-triton-rocm 3.1.0" in evidence
    assert "cannot import name 'cdiv'" in evidence


def test_triton_mismatch_from_pip_freeze_alone() -> None:
    freeze = "pytorch-triton-rocm==3.1.0\ntorch==2.5.1+rocm6.2\ntriton==3.3.0\n"
    result = verdict(versions="", pip_freeze=freeze)
    assert "import_triton_mismatch" in result["classes"]


def test_run_time_hip_no_binary() -> None:
    result = verdict(unit_journal=built("journal_hip_no_binary.txt"))
    assert result["primary"] == "runtime_wrong_arch"
    assert "gfx942" in result["findings"][0]["fix"]


def test_run_time_illegal_instruction() -> None:
    result = verdict(unit_journal=built("journal_illegal_instruction.txt"))
    assert result["primary"] == "runtime_wrong_arch"


def test_build_key_arch_against_gfx_agents() -> None:
    # no crash logged yet: the stamp alone (built for gfx90a) against 8 gfx942 agents
    result = verdict(build_stamp=built("stamp_gfx90a.json"))
    assert result["primary"] == "runtime_wrong_arch"
    assert any(
        "PYTORCH_ROCM_ARCH=gfx90a, GPUs are gfx942" in e for e in result["findings"][0]["evidence"]
    )


# ------------------------------------------------------------------ the other known classes


def test_failed_to_infer_device_type_amdsmi_missing() -> None:
    result = verdict(
        unit_journal=built("journal_failed_infer_device.txt"),
        versions=built("versions_amdsmi_missing.json"),
    )
    assert result["primary"] == "device_type_unknown"
    assert any("No module named 'amdsmi'" in e for e in result["findings"][0]["evidence"])
    assert "/opt/rocm/share/amd_smi" in result["findings"][0]["fix"]


def test_transformers_too_new() -> None:
    result = verdict(unit_journal=built("journal_transformers5.txt"))
    assert result["primary"] == "transformers_mismatch"


def test_transformers_5_with_vllm_06_from_versions() -> None:
    data = json.loads(HEALTHY_VERSIONS)
    data["dists"]["transformers"] = "5.24.0"
    result = verdict(versions=json.dumps(data))
    assert result["primary"] == "transformers_mismatch"
    data["dists"]["vllm"] = "0.32.0"  # current vLLM reads no removed attribute
    assert verdict(versions=json.dumps(data))["findings"] == []


def test_amdgpu_not_loaded_recorded() -> None:
    result = verdict(
        rocminfo=rec("rocminfo_error_rock_module_not_loaded.txt"),
        **{"rocm-smi": rec("rocm-smi_no_amd_gpus_driver_init_failed.txt")},
        lsmod="Module                  Size  Used by\nxfs                  2441216  2\n",
    )
    assert result["primary"] == "amdgpu_not_loaded"
    evidence = result["findings"][0]["evidence"]
    assert "lsmod: no amdgpu module" in evidence
    assert "ROCk module is NOT loaded, possibly no GPU devices" in evidence
    assert "WARNING: No AMD GPUs specified" in evidence


def test_gpu_init_failed_cpu_agent_only_recorded() -> None:
    result = verdict(rocminfo=rec("rocminfo_cpu_agent_only_gpu_init_failed.txt"))
    assert result["primary"] == "amdgpu_not_loaded"
    assert "rocminfo: no GPU agent (only CPU agents)" in result["findings"][0]["evidence"]


def test_amdgpu_blacklisted() -> None:
    result = verdict(modprobe_blacklist=built("modprobe_blacklist_found.txt"))
    assert result["primary"] == "amdgpu_blacklisted"
    assert "Never blacklist amdgpu" in result["findings"][0]["fix"]


def test_user_not_in_render_video() -> None:
    result = verdict(service_user_groups=built("id_vllm_no_render.txt"))
    assert result["primary"] == "user_not_in_groups"
    assert "render, video" in result["findings"][0]["evidence"][0]


def test_kfd_permission_denied_recorded() -> None:
    text = rec("amd-smi_static_json_nonroot_permission_denied_mi300x_8gpu_rocm7.2.1.txt")
    result = verdict(**{"amd-smi_static": text})
    assert "user_not_in_groups" in result["classes"]


def test_oom_hip_out_of_memory() -> None:
    assert verdict(unit_journal=built("journal_hip_oom.txt"))["primary"] == "oom"


def test_oom_kv_cache_too_small() -> None:
    assert verdict(unit_journal=built("journal_kv_cache_too_small.txt"))["primary"] == "oom"


def test_oom_model_larger_than_vram_recorded() -> None:
    # 812 GB of weights against one recorded MI300X (206 GB of VRAM, rocm-smi)
    result = verdict(
        model=built("model_405b_bf16.txt"),
        **{"rocm-smi_vram": built("rocm-smi_showmeminfo_vram_mi300x_1gpu_rocm6.3.3.txt")},
    )
    assert result["primary"] == "oom"
    assert "755.9 GiB > 0.9 x VRAM 192.0 GiB" in result["findings"][0]["evidence"][0]


def test_vram_from_amd_smi_json_recorded() -> None:
    ev = dg.Evidence.from_texts(healthy())
    assert ev_mod.vram_bytes(ev) == pytest.approx(8 * 196592 * 2**20, rel=0.01)
    # 8 x 192 GB holds the 812 GB checkpoint
    assert verdict(model=built("model_405b_bf16.txt"))["findings"] == []


def test_dkms_build_failure() -> None:
    result = verdict(
        dkms_status=built("dkms_status_added_only.txt"),
        dkms_make_log=built("dkms_make_log_failed.txt"),
        uname="Linux n 6.8.0-44-generic #44-Ubuntu SMP x86_64 GNU/Linux\n",
    )
    assert result["primary"] == "dkms_build_failed"


def test_dkms_not_built_for_running_kernel_recorded() -> None:
    # the recorded dkms status is for 6.8.0-55-generic; the node booted another kernel
    result = verdict(uname="Linux n 6.11.0-19-generic #19-Ubuntu SMP x86_64 GNU/Linux\n")
    assert result["primary"] == "dkms_build_failed"
    assert (
        "not built for the running kernel 6.11.0-19-generic" in result["findings"][0]["evidence"][0]
    )


@pytest.mark.parametrize(
    ("collector", "fixture"),
    [
        ("kernel_log", "kernel_log_lockdown.txt"),
        ("modules_load_journal", "modules_load_key_rejected.txt"),
        ("kernel_log", "modprobe_required_key.txt"),
    ],
)
def test_secure_boot_refuses_module(collector: str, fixture: str) -> None:
    result = verdict(**{collector: built(fixture), "secure_boot": "secure_boot: enabled\n"})
    assert result["primary"] == "secure_boot_refused"
    assert "secure_boot: enabled" in result["findings"][0]["evidence"]
    assert "mokutil --import" in result["findings"][0]["fix"]


def test_secure_boot_before_not_loaded() -> None:
    # the refused module is the cause; the missing driver is its effect: both named, cause first
    result = verdict(
        kernel_log=built("kernel_log_lockdown.txt"),
        lsmod="Module                  Size  Used by\nxfs                  2441216  2\n",
    )
    assert result["classes"][:2] == ["secure_boot_refused", "amdgpu_not_loaded"]


def test_unknown_failure_says_so_recorded() -> None:
    # /dev/kfd "Invalid argument" in a container (ROCm/ROCm#4043): no class covers it
    result = verdict(
        rocminfo=rec("rocminfo_error_kfd_invalid_argument_mi300x_container.txt"),
        unit_status="ActiveState=failed\n",
    )
    assert result["primary"] == "unknown"
    assert "no known failure class matched (service failed)" in result["summary"]


def test_cpu_stack_skips_driver_classes() -> None:
    texts = healthy()
    texts["lsmod"] = "Module                  Size  Used by\nxfs                  2441216  2\n"
    result = dg.classify(dg.Evidence.from_texts(texts), gpu_expected=False)
    assert result["primary"] == "unknown"
    assert "amdgpu_not_loaded" in result["skipped"]


def test_every_class_is_tested() -> None:
    names = Path(__file__).read_text(encoding="utf-8")
    for cls in dg.CLASSES:
        assert f'"{cls}"' in names, cls


# ------------------------------------------------------------------ redaction


def test_redactor_values_env_file_and_patterns() -> None:
    redact = dg.Redactor([KEY])
    redact.add_env_file(f"VLLM_API_KEY={KEY}\nHF_TOKEN='{HF}'\nVLLM_CPU_KVCACHE_SPACE=1\n")
    text = redact(
        f"VLLM_API_KEY={KEY}\nHF_TOKEN='{HF}'\nAuthorization: Bearer abc.def\n--api-key sk-12345\n"
        "VLLM_CPU_KVCACHE_SPACE=1\n"
    )
    assert KEY not in text and HF not in text and "abc.def" not in text and "sk-12345" not in text
    assert "VLLM_CPU_KVCACHE_SPACE=1" in text
    assert redact.leaks(text) == []
    assert redact.leaks(f"x {KEY} y") == ["<redacted>"]


def test_values_of_secret_looking_names_are_redacted_anywhere() -> None:
    """Values nobody gave the redactor: a unit's Environment= lines, systemctl show, a journal."""
    redact = dg.Redactor([])
    text = redact(
        "Environment=HF_HUB_OFFLINE=1 S3_SECRET_ACCESS_KEY=abc123xyz789\n"
        'Environment="DB_PASSWORD=two words" "HOME=/var/lib/vllm"\n'
        "MY_API_KEY='quoted-value-1' MY_TOKEN=\n"
        "keyring==24.3.1\njson.dumps(x, sort_keys=True)\nVLLM_API_KEY=<redacted:VLLM_API_KEY>\n"
    )
    for secret in ("abc123xyz789", "two words", "quoted-value-1"):
        assert secret not in text
    assert "S3_SECRET_ACCESS_KEY=<redacted:S3_SECRET_ACCESS_KEY>" in text
    assert "DB_PASSWORD=<redacted:DB_PASSWORD>" in text
    assert "HF_HUB_OFFLINE=1" in text and "HOME=/var/lib/vllm" in text
    assert "keyring==24.3.1" in text and "sort_keys=True" in text
    assert "VLLM_API_KEY=<redacted:VLLM_API_KEY>\n" in text  # already redacted: kept as it is


def test_env_file_secrets_only_secret_names() -> None:
    found = dg.env_file_secrets(f'export MY_PASSWORD="{KEY}"\nPATH=/usr/bin\nSHORT_KEY=ab\n')
    assert found == {"MY_PASSWORD": KEY}


# ------------------------------------------------------------------ collectors


def test_missing_tool_absent_file_failed_command(tmp_path: Path) -> None:
    missing = dg.run_spec(dg.Spec("x", (("no-such-tool-instinct",),)))
    assert missing.status == "missing" and "no-such-tool-instinct" in missing.note
    absent = dg.run_spec(dg.Spec("y", path=str(tmp_path / "nope")))
    assert absent.status == "absent"
    failed = dg.run_spec(
        dg.Spec("z", ((sys.executable, "-c", "import sys; print('out'); sys.exit(3)"),))
    )
    assert failed.status == "failed" and failed.rc == 3 and "out" in failed.text
    slow = dg.run_spec(
        dg.Spec("t", ((sys.executable, "-c", "import time; time.sleep(5)"),), timeout=1)
    )
    assert slow.status == "timeout"
    second = dg.run_spec(dg.Spec("alt", (("no-such-tool-instinct",), (sys.executable, "-V"))))
    assert second.status == "ok" and "Python" in second.text


def test_filters_keep_matching_tail(tmp_path: Path) -> None:
    log = tmp_path / "k.log"
    log.write_text("".join(f"line {i} amdgpu\nnoise {i}\n" for i in range(10)), encoding="utf-8")
    result = dg.run_spec(dg.Spec("k", path=str(log), grep="amdgpu", tail=2))
    assert result.text == "line 8 amdgpu\nline 9 amdgpu\n"


def _settings(**kwargs: str) -> dg.Settings:
    """Settings with the facts the module passes (role vllm_service's unit, user, env file)."""
    facts = {"unit": "vllm-b.service", "user": "vllm", "env_file": "/etc/vllm/vllm-b.env"}
    return dg.Settings(**{**facts, **kwargs})  # type: ignore[arg-type]


def test_settings_have_no_default_for_the_node_facts() -> None:
    """venv, unit, user, env file and the build directory come from the caller (the published
    facts): a default here would restate them."""
    required = {"venv", "unit", "user", "env_file", "source_work_dir"}
    fields = dataclasses.fields(dg.Settings)
    defaulted = {f.name for f in fields if f.default is not dataclasses.MISSING}
    assert not defaulted & required
    with pytest.raises(TypeError):
        dg.Settings()  # type: ignore[call-arg]


def test_default_specs_cover_the_brief(tmp_path: Path) -> None:
    settings = _settings(venv=str(tmp_path / "venv"), source_work_dir=str(tmp_path / "src"))
    names = {s.name for s in dg.default_specs(settings)}
    assert {
        "rocminfo",
        "amd-smi_static",
        "rocm-smi",
        "lspci",
        "dkms_status",
        "lsmod",
        "kernel_log",
        "service_user_groups",
        "unit_file",
        "unit_journal",
        "pip_freeze",
        "versions",
        "build_stamp",
        "build_log_tail",
        "secure_boot",
        "modprobe_blacklist",
        "env_file",
    } <= names


def test_build_log_found_from_stamp_key(tmp_path: Path) -> None:
    venv, work = tmp_path / "venv", tmp_path / "src"
    (work / "aaaa").mkdir(parents=True)
    (work / "bbbb").mkdir()
    (work / "aaaa" / "build.log").write_text("the stamp's build\n", encoding="utf-8")
    (work / "bbbb" / "build.log").write_text("a newer build\n", encoding="utf-8")
    venv.mkdir()
    settings = _settings(venv=str(venv), source_work_dir=str(work))
    from ansible_collections.instinct.vllm.plugins.module_utils._diagnose.collect import (
        find_build_log,
    )

    assert find_build_log(settings) == str(work / "bbbb" / "build.log")  # no stamp: newest
    (venv / "instinct-vllm-source.json").write_text('{"key": "aaaa"}', encoding="utf-8")
    assert find_build_log(settings) == str(work / "aaaa" / "build.log")


def _node_archive(tmp_path: Path, host: str, redact: dg.Redactor) -> str:
    py = sys.executable
    specs = [
        dg.Spec("unit_journal", ((py, "-c", f"print('started with --api-key {KEY}')"),)),
        dg.Spec("env_file", func=lambda: f"VLLM_API_KEY={KEY}\nHF_TOKEN={HF}\n"),
        dg.Spec("rocminfo", (("no-such-rocminfo",),)),
        dg.Spec("unit_status", func=lambda: "ActiveState=failed\n"),
        dg.Spec("kernel_log", func=lambda: built("kernel_log_lockdown.txt")),
    ]
    results = dg.collect(specs, redact)
    work = tmp_path / "node" / host
    dg.write_evidence(results, work, {"host": host, "gpu_expected": True})
    return dg.pack(work, tmp_path / "node" / f"{host}.tar.gz", host)


def test_archive_end_to_end_has_no_key(tmp_path: Path) -> None:
    redact = dg.Redactor([KEY, HF])
    archive = _node_archive(tmp_path, "node-1", redact)
    result = dg.bundle(dg.hosts_in([archive]), tmp_path / "out" / "diagnose.tar.gz", redact)
    assert result["verdicts"]["node-1"]["primary"] == "secure_boot_refused"
    with tarfile.open(result["archive"]) as tar:
        names = tar.getnames()
        blob = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
    assert KEY.encode() not in blob and HF.encode() not in blob
    assert b"<redacted>" in blob
    assert "diagnose/SUMMARY.md" in names and "diagnose/node-1/verdict.json" in names
    with tarfile.open(result["archive"]) as tar:
        index = json.loads(tar.extractfile("diagnose/node-1/collectors.json").read())
    status = {c["name"]: c["status"] for c in index["collectors"]}
    assert status["rocminfo"] == "missing"
    assert "rocminfo (missing)" in result["summary"]


class _NoRedaction(dg.Redactor):
    """Leaves every text as it is (a node archive collected without redaction)."""

    def __call__(self, text: str) -> str:
        return text


def test_bundle_refuses_a_leak(tmp_path: Path) -> None:
    archive = _node_archive(tmp_path, "node-2", _NoRedaction([]))
    dest = tmp_path / "out" / "diagnose.tar.gz"
    with pytest.raises(dg.LeakError, match="node-2/"):
        dg.bundle(dg.hosts_in([archive]), dest, dg.Redactor([KEY]))
    assert not dest.exists()


# ------------------------------------------ outputs drift (the node's last fingerprint)


def fingerprint(name: str, **meta: object) -> str:
    """A node's last fingerprint record as role fingerprint_gate wrote it (fixtures/diagnose,
    recorded through the real playbooks against stand-in endpoints), meta changed by `meta`."""
    record = json.loads(built(name))
    record["meta"].update(meta)
    return json.dumps(record)


def test_outputs_drift_from_a_peer_names_the_other_revision() -> None:
    result = verdict(fingerprint=built("fingerprint_record_consensus_failed.json"))
    assert result["primary"] == "outputs_drift" and result["classes"] == ["outputs_drift"]
    finding = result["findings"][0]
    assert finding["title"] == "outputs drift from the unchanged node node-b"
    assert finding["evidence"][0].startswith("fingerprint of 20")
    assert ": consensus: disagrees with node-b, node-c (against node-b: 0/32 prompts" in \
        finding["evidence"][0]
    assert "model directory: /srv/models/demo-r2 (this node) vs /srv/models/demo-r1 (the " \
        "unchanged node node-b)" in finding["evidence"]
    assert "another model revision than the unchanged node node-b" in finding["fix"]
    assert "instinct_vllm_rollback=true" in finding["fix"]


def test_outputs_drift_from_the_baseline_names_revision_and_flag() -> None:
    result = verdict(fingerprint=built("fingerprint_record_baseline_failed.json"))
    finding = result["findings"][0]
    assert finding["cls"] == "outputs_drift"
    assert finding["title"] == "outputs drift from the fleet baseline"
    assert "revision: /srv/models/demo-r2 (this node) vs /srv/models/demo-r1 (the fleet " \
        "baseline)" in finding["evidence"]
    assert "flag kv-cache-dtype: fp8 (this node) vs None (the fleet baseline)" in \
        finding["evidence"]
    assert "record a new baseline" in finding["fix"]


def test_outputs_drift_with_another_stack_or_nothing_changed() -> None:
    record = json.loads(built("fingerprint_record_baseline_failed.json"))
    same = dict(record["baseline_meta"])
    stack = verdict(fingerprint=fingerprint("fingerprint_record_baseline_failed.json",
                                            **{**same, "stack": "rocm-6.4.1"}))["findings"][0]
    assert "stack: rocm-6.4.1 (this node) vs cpu (the fleet baseline)" in stack["evidence"]
    assert stack["fix"].startswith("The stack differs from the fleet baseline")
    nothing = verdict(fingerprint=fingerprint("fingerprint_record_baseline_failed.json",
                                              **same))["findings"][0]
    assert "nothing in revision, stack or numerics flags differs from the fleet baseline" in \
        nothing["evidence"]
    assert nothing["fix"].startswith("Same revision, stack and numerics flags as the fleet "
                                     "baseline, yet the answers moved: suspect the hardware")


def test_a_passing_or_absent_fingerprint_is_no_drift() -> None:
    record = json.loads(built("fingerprint_record_consensus_failed.json"))
    for verdict_ in record["verdicts"].values():
        verdict_["ok"] = True
    assert verdict(fingerprint=json.dumps(record))["primary"] == "unknown"
    assert verdict(fingerprint="not json")["primary"] == "unknown"
    assert verdict()["primary"] == "unknown"


def test_bundle_reads_each_nodes_last_fingerprint(tmp_path: Path) -> None:
    redact = dg.Redactor([KEY, HF])
    archive = _node_archive(tmp_path, "node-a", redact)
    records = tmp_path / "fingerprints" / "nodes"
    records.mkdir(parents=True)
    (records / "node-a.json").write_text(built("fingerprint_record_consensus_failed.json"))
    (records / "elsewhere.json").write_text("{}")
    found = dg.fingerprint_records(tmp_path / "fingerprints", ["node-a", "node-z"])
    assert list(found) == ["node-a"] and dg.fingerprint_records("", ["node-a"]) == {}
    result = dg.bundle(dg.hosts_in([archive]), tmp_path / "out" / "d.tar.gz", redact,
                       fingerprints=found)
    assert result["verdicts"]["node-a"]["classes"] == ["secure_boot_refused", "outputs_drift"]
    with tarfile.open(result["archive"]) as tar:
        assert f"diagnose/node-a/{dg.FINGERPRINT_FILE}" in tar.getnames()
