"""Where PyPI triton comes from on a rocm-6.2.1 node, from the wheels' own metadata.

PyPI's CUDA torch 2.5.1 (what files/locks/rocm-6.2.1.txt is resolved with) requires
``triton==3.1.0``; xgrammar 0.1.8 (the lock's) requires no triton. The collection's texts must
say so: a claim that xgrammar pulls triton sends a site after the wrong package.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[3]
WHEELS = ROOT / "tests" / "unit" / "fixtures" / "wheels"
LOCK = ROOT / "files" / "locks" / "rocm-6.2.1.txt"
# A Linux x86_64 node with the lock's Python (its header: "cpython 3.12.1").
NODE = {"platform_system": "Linux", "platform_machine": "x86_64", "python_version": "3.12",
        "sys_platform": "linux", "extra": ""}  # fmt: skip
TEXTS = ["docs", "roles", "plugins", "files", "README.md"]
CLAIM = re.compile(r"xgrammar\W[^.\n]{0,60}\b(pulls?|pulling|requires?)\b[^.\n]{0,25}triton", re.I)


def requires(metadata: str) -> dict[str, Requirement]:
    """The requirements that apply on the node, by name."""
    lines = (WHEELS / metadata).read_text().splitlines()
    reqs = [
        Requirement(line.split(":", 1)[1]) for line in lines if line.startswith("Requires-Dist:")
    ]
    return {r.name: r for r in reqs if r.marker is None or r.marker.evaluate(NODE)}


def lock_pins() -> dict[str, str]:
    pins = (line.split("==", 1) for line in LOCK.read_text().splitlines() if "==" in line)
    return {name.strip(): version.strip() for name, version in pins if not name.startswith("#")}


def test_the_fixtures_are_the_locks_versions() -> None:
    pins = lock_pins()
    assert pins["xgrammar"] == "0.1.8" and pins["torch"] == "2.5.1" and pins["triton"] == "3.1.0"
    assert "cpython 3.12." in LOCK.read_text()


def test_pypi_torch_requires_the_locks_triton_and_xgrammar_does_not() -> None:
    torch = requires("torch-2.5.1-pypi.METADATA")
    assert str(torch["triton"].specifier) == "==3.1.0"
    assert "triton" not in requires("xgrammar-0.1.8.METADATA")


def _texts() -> list[Path]:
    paths = [ROOT / t for t in TEXTS]
    return [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()]


def test_no_text_says_xgrammar_pulls_triton() -> None:
    found = []
    for path in _texts():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        # "later xgrammar releases require triton" is true (vllm PR #16664); 0.1.8's is not.
        found += [
            f"{path.relative_to(ROOT)}: {m.group(0)}"
            for m in CLAIM.finditer(text)
            if "later" not in text[max(0, m.start() - 7) : m.start()]
        ]
    assert not found, found
