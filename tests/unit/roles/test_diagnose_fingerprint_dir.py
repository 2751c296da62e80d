"""Role diagnose reads the fingerprint directory role fingerprint_gate writes to: its default
falls back to the same path as fingerprint_gate's default (one fact, checked here)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROLES = Path(__file__).resolve().parents[3] / "roles"


def test_diagnose_defaults_to_the_fingerprint_gates_directory() -> None:
    gate = yaml.safe_load((ROLES / "fingerprint_gate" / "defaults" / "main.yml").read_text())
    diagnose = yaml.safe_load((ROLES / "diagnose" / "defaults" / "main.yml").read_text())
    expected = ("{{ instinct_vllm_fingerprint_baseline_dir | default('"
                f"{gate['instinct_vllm_fingerprint_baseline_dir']}') }}}}")
    assert diagnose["diagnose_fingerprint_dir"] == expected
