"""Role preflight's defaults for the model's disk check: which copies role model writes and
where, from role model's variables (rendered by Ansible in a local play)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from local_play import role_play, run_local_playbook

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "preflight"
CASES = {
    # the mi300x inventory: the checkpoint is on the node, role model converts it
    "path": {"model_source": "path", "model_name": "gpt-oss-120B"},
    "url": {"model_source": "url", "model_root": "/data/models", "model_name": "m"},
    "hf-unconverted": {
        "model_source": "huggingface",
        "model_convert_enabled": False,
        "model_dest_path": "/scratch/m",
    },
    "unset": {},
}
TASK = """\
    - name: {name}
      ansible.builtin.debug:
        msg: "RESULT {name} {{{{ {{'copies': preflight_model_copies,
              'path': preflight_model_disk_path | trim}} | to_json }}}}"
      vars: {vars}
"""


def test_the_copies_and_the_path_follow_role_models_variables(tmp_path: Path) -> None:
    play = tmp_path / "play.yml"
    tasks = "".join(TASK.format(name=n, vars=json.dumps(v)) for n, v in CASES.items())
    play.write_text(role_play(tasks))
    run = run_local_playbook(
        play, {"role": str(ROLE), "ansible_python_interpreter": sys.executable}
    )
    assert run.returncode == 0, run.stdout + run.stderr
    got = {m[0]: json.loads(m[1]) for m in re.findall(r"'RESULT (\S+) (\{.*\})'", run.stdout)}
    assert got == {
        "path": {"copies": ["converted copy"], "path": "/srv/models/gpt-oss-120B"},
        "url": {"copies": ["source (url)", "converted copy"], "path": "/data/models/m"},
        "hf-unconverted": {"copies": ["source (huggingface)"], "path": "/scratch/m"},
        "unset": {"copies": ["source (demo)", "converted copy"], "path": "/srv/models/model"},
    }, run.stdout
