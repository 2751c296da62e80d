"""scripts/demo: where torch's CPU build comes from (a local wheel directory or PyTorch's CPU
index), what the node gets mounted, and what inventories/demo makes of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
NODE = "instinct-demo-node"


def _load_script() -> Any:
    return load_script("demo_script", ROOT / "scripts/demo")


demo = _load_script()


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    d = tmp_path / "wheels"
    d.mkdir()
    (d / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    return d


def test_default_directory_with_a_torch_wheel_is_used(wheels: Path) -> None:
    assert demo.torch_wheels({}, default=wheels) == wheels


def test_no_local_wheels_means_the_pytorch_index(tmp_path: Path) -> None:
    assert demo.torch_wheels({}, default=tmp_path / "absent") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "numpy-2.0.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
    assert demo.torch_wheels({}, default=empty) is None  # no torch wheel there


def test_instinct_demo_wheels_wins(wheels: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    assert demo.torch_wheels({"INSTINCT_DEMO_WHEELS": str(other)}, default=wheels) == other
    assert demo.torch_wheels({"INSTINCT_DEMO_WHEELS": ""}, default=wheels) is None
    with pytest.raises(SystemExit, match=r"INSTINCT_DEMO_WHEELS=.* is not a directory"):
        demo.torch_wheels({"INSTINCT_DEMO_WHEELS": str(tmp_path / "nope")}, default=wheels)


def test_mount_and_inventory_env(wheels: Path) -> None:
    assert demo.wheel_mount(wheels) == ["-v", f"{wheels}:/opt/wheels:ro"]
    assert demo.wheel_mount(None) == []
    assert demo.inventory_env(wheels) == {"INSTINCT_DEMO_TORCH_WHEELS": "/opt/wheels"}
    assert demo.inventory_env(None) == {"INSTINCT_DEMO_TORCH_WHEELS": ""}


def _demo_pip_vars(env: dict[str, str]) -> dict[str, Any]:
    full = dict(os.environ)
    full.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        **env,
    )
    run = subprocess.run(
        [str(BIN / "ansible"), NODE, "-i", str(ROOT / "inventories/demo"),
         "-e", "ansible_connection=local", "-e", f"ansible_python_interpreter={sys.executable}",
         "-m", "ansible.builtin.debug",
         "-a", "msg={{ [instinct_vllm_pip_find_links, vllm_pip_extra_index_urls] | to_json }}"],
        capture_output=True, text=True, env=full, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(yaml.safe_load(run.stdout.split("=>", 1)[1])["msg"])


@pytest.mark.parametrize(
    ("wheels_env", "expected"),
    [
        ("/opt/wheels", [["/opt/wheels"], []]),
        ("", [[], ["https://download.pytorch.org/whl/cpu"]]),
    ],
    ids=["local-wheels", "pytorch-index"],
)
def test_demo_inventory_takes_torch_from_the_choice(wheels_env: str, expected: list[Any]) -> None:
    assert _demo_pip_vars({"INSTINCT_DEMO_TORCH_WHEELS": wheels_env}) == expected
