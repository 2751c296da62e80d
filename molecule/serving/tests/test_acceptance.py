"""serving scenario: playbooks/acceptance.yml against the node (cpu stack, its running vLLM
service). Runs the playbook once through ansible-runner (its fingerprint computes the
transformers reference on the node: 5-40 s on 2 cores, by the load) and reads the JSON report
it writes on the controller: GPU checks skipped with the reason, vLLM's own platform cpu, one
completion through the service's API, the node's answers within the fingerprint's float32
tolerance of transformers (the first pass records the fleet baseline), every check but the
fingerprint run as the service's user (become, over the podman connection as root), and the
API key nowhere in the report or the run's log.

Last, the wrong model: the service is made to serve a copy of its checkpoint with layer 1's
weights scaled by 1.05 (the copy swapped in for the restart alone: once it is loaded the
checkpoint's own files are back, so the checkpoint on disk, and the cached reference, are the
right ones), and acceptance, with its fingerprint check alone, fails naming check fingerprint
against both references; then the node is restored. (Not a BindReadOnlyPaths= drop-in: in a
sandbox container a unit gets no mount namespace of its own and fails with 226/NAMESPACE.)
Two restarts of the service (~30-45 s each) and one acceptance run with the cached reference
(12 s on the host in tests/integration).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = Path(__file__).resolve().parents[1]
PLAYBOOK = ROOT / "playbooks" / "acceptance.yml"
NODE = "serving-node"
SKIP_REASON = "stack 'cpu' has no GPU (device cpu)"
JOURNAL_UNITS = ["vllm.service"]
MODEL_DIR = "/srv/models/demo-gptoss-legacy"  # role model's demo, converted (molecule.yml)
SCALED_DIR = "/srv/models/demo-gptoss-legacy-scaled"
KEPT_DIR = "/srv/models/demo-gptoss-legacy-kept"  # the checkpoint, while the copy is swapped in


def node_vars() -> dict:
    """The node's inventory vars, as molecule.yml gives them to converge."""
    config = yaml.safe_load((SCENARIO / "molecule.yml").read_text())
    return dict(config["provisioner"]["inventory"]["group_vars"]["vllm_nodes"])


_RUN: dict = {}


@pytest.fixture
def accepted(ansible_run, podman_hostvars, tmp_path_factory: pytest.TempPathFactory):
    """One run of the playbook for all tests of this file (the fixtures are per test)."""
    if not _RUN:
        reports = tmp_path_factory.mktemp("acceptance-reports")
        # the fleet baselines on the controller: this test's own (default /var/lib/...)
        baselines = tmp_path_factory.mktemp("fingerprints") / "baselines"
        hostvars = node_vars()
        _RUN["run"] = ansible_run(
            PLAYBOOK,
            {NODE: podman_hostvars(NODE, **hostvars)},
            extravars={"instinct_vllm_hosts": NODE, "acceptance_report_dir": str(reports),
                       "instinct_vllm_fingerprint_baseline_dir": str(baselines)},
        )
        _RUN["report"] = reports / f"{NODE}.json"
        _RUN["key"] = hostvars["vllm_service_api_key"]
        _RUN["baselines"] = baselines
    return _RUN["run"], _RUN["report"], _RUN["key"]


def test_the_playbook_passes_the_node(accepted):
    run, report_file = accepted[:2]
    assert run.rc == 0, run.failure_messages()
    assert run.count("failures") == 0
    # the report directory (its mode) and the report; the fingerprint's reference cache on the
    # node, the baseline directory and the baseline on the controller
    assert run.count("changed") <= 5
    assert report_file.is_file()


def test_gpu_checks_are_skipped_with_the_reason_on_cpu(accepted):
    report = json.loads(accepted[1].read_text())
    assert report["stack"] == "cpu" and report["device"] == "cpu"
    for name in ("gpu_matmul", "gpu_health", "collectives", "firmware", "kernel_log"):
        assert report["checks"][name]["status"] == "skipped"
        assert report["checks"][name]["reason"] == SKIP_REASON


def test_vllms_own_platform_is_cpu_with_an_attention_backend(accepted):
    check = json.loads(accepted[1].read_text())["checks"]["vllm_platform"]
    assert check["status"] == "ok", check["reason"]
    assert check["detail"]["platform"] == "cpu"
    assert check["detail"]["vllm"].startswith("0.32.0")
    assert check["detail"].get("attention_backend"), check["detail"]
    assert "attention_backend_error" not in check["detail"]


def test_one_completion_through_the_running_service(accepted):
    report = json.loads(accepted[1].read_text())
    check = report["checks"]["serve"]
    assert check["status"] == "ok", check["reason"]
    assert check["detail"]["mode"] == "service" and check["detail"]["service"] == "active"
    assert check["detail"]["model"] == node_vars()["vllm_service_served_model_name"]
    assert check["detail"]["completion_tokens"] >= 1
    assert report["status"] == "ok" and report["failures"] == []


def test_the_nodes_answers_pass_the_fingerprint(accepted):
    """Against transformers from the checkpoint the node serves, within float32's tolerance;
    no baseline existed for the key, so this pass is now the fleet baseline."""
    check = json.loads(accepted[1].read_text())["checks"]["fingerprint"]
    assert check["status"] == "ok", check["reason"]
    detail = check["detail"]
    assert detail["judged"] == ["transformers"] and detail["dtype"] == "float32"
    assert detail["model_path"] == MODEL_DIR
    verdict = detail["verdicts"]["transformers"]
    assert verdict["ok"] and verdict["agreement"] == 1.0 and verdict["greedy_mismatches"] == 0
    assert verdict["max_abs"] <= verdict["tolerance"]["max_abs"] == 0.001
    assert detail["reference_seconds"] > 0  # computed on the node (then cached there)
    assert detail["baseline_recorded"] and not detail["baseline_found"]
    assert (_RUN["baselines"] / f"{detail['baseline_key']}.json").is_file()
    assert "this node's fingerprint is now that baseline" in check["reason"]


def test_every_check_ran_as_the_service_user(accepted):
    """vllm_service_user is not set in molecule.yml: role vllm_service's default, vllm. The
    kernel log is read as root; so is the fingerprint (role fingerprint_gate: the checkpoint,
    the reference cache), whose result has no user (tests/unit/test_acceptance_fingerprint_
    playbook.py records its become)."""
    checks = json.loads(accepted[1].read_text())["checks"]
    ran_as = {name: check["detail"].get("user") for name, check in checks.items()
              if name != "fingerprint"}
    names = ("gpu_matmul", "vllm_platform", "gpu_health", "serve", "collectives", "firmware")
    assert ran_as == {**dict.fromkeys(names, "vllm"), "kernel_log": "root"}


def test_the_api_key_is_in_neither_the_report_nor_the_log(accepted):
    run, report_file, key = accepted
    assert key not in report_file.read_text()
    assert key not in json.dumps(run.events)


def _serve_scaled_weights(host) -> None:
    """A copy of the checkpoint with layer 1's weights x 1.05 (molecule/shared/scale_layer.py
    on the node's Python, owned as the checkpoint), in the model directory's place while the
    service restarts on it (systemctl returns once the wrapper says READY: served), then the
    checkpoint back in place whether the restart worked or not."""
    script = (ROOT / "molecule" / "shared" / "scale_layer.py").read_text()
    out = host.check_output("rm -rf %s && python3 -c %s %s %s model.layers.1. 1.05",
                            SCALED_DIR, script, MODEL_DIR, SCALED_DIR)
    assert int(out.split()[0]) >= 9, out  # 2 norms, 4 attention and 3 MLP projections
    host.check_output("chown -R --reference=%s %s", MODEL_DIR, SCALED_DIR)
    host.check_output(
        f"mv {MODEL_DIR} {KEPT_DIR} && mv {SCALED_DIR} {MODEL_DIR} && "
        f"{{ systemctl restart vllm; rc=$?; mv {MODEL_DIR} {SCALED_DIR} && mv {KEPT_DIR} "
        f"{MODEL_DIR} && exit $rc; }}")


def _restore(host) -> None:
    """The checkpoint in place (should the swap back have failed) and the service restarted on
    it. Then its start counter is reset (systemctl reset-failed: the rate limit and NRestarts):
    these two starts must not use up the unit's StartLimitBurst (5 in 30 min), which
    test_serving.py's restarts need."""
    host.run(f"if [ -d {KEPT_DIR} ]; then rm -rf {MODEL_DIR} && mv {KEPT_DIR} {MODEL_DIR}; fi")
    host.run("systemctl restart vllm && systemctl reset-failed vllm")
    host.run("rm -rf %s", SCALED_DIR)


def test_a_scaled_layer_served_fails_acceptance_naming_fingerprint(
        accepted, host, ansible_run, podman_hostvars, tmp_path):
    """After the passing run above (its baseline recorded, the reference cached on the node)."""
    assert accepted[0].rc == 0, "the passing run must come first: it records the baseline"
    try:
        _serve_scaled_weights(host)
        run = ansible_run(
            PLAYBOOK,
            {NODE: podman_hostvars(NODE, **node_vars())},
            extravars={"instinct_vllm_hosts": NODE, "acceptance_report_dir": str(tmp_path),
                       "instinct_vllm_fingerprint_baseline_dir": str(_RUN["baselines"])},
            tags="fingerprint",
        )
    finally:
        _restore(host)
    assert run.rc != 0
    assert [m for m in run.failure_messages()
            if m.startswith(f"acceptance failed on {NODE}: fingerprint: transformers: ")], \
        run.failure_messages()
    report = json.loads((tmp_path / f"{NODE}.json").read_text())
    assert report["status"] == "failed" and list(report["checks"]) == ["fingerprint"]
    check = report["checks"]["fingerprint"]
    assert check["status"] == "failed" and "FAILED" in check["reason"]
    detail = check["detail"]
    assert detail["judged"] == ["baseline", "transformers"] and detail["baseline_found"]
    assert not detail["verdicts"]["transformers"]["ok"] and not detail["verdicts"]["baseline"]["ok"]
    assert detail["reference_seconds"] == 0  # the reference of the checkpoint, from the cache


def test_the_node_is_restored_after_the_scaled_weights(host):
    assert not host.file(SCALED_DIR).exists and not host.file(KEPT_DIR).exists
    assert host.file(f"{MODEL_DIR}/config.json").exists
    assert host.check_output("systemctl is-active vllm") == "active"
