"""The docs and the files the nodes run agree with what they describe.

- The executables a role installs on an Ubuntu 24.04 node name an interpreter that Ubuntu 24.04
  ships: /usr/bin/python3 (package python3-minimal, Python 3.12). Stock Ubuntu 24.04 has no
  `python` command (that is the optional package python-is-python3), so `#!/usr/bin/env python`
  fails when someone runs the file by its name.
- The docs (every Markdown file of the repository) cite the repository and public sources only:
  no path of the machine they were written on (`/work/...`, `../shared/...`, a home directory).
- Their relative links name files that exist, and a section they cite by its title
  (`docs/serving.md, "Hardening"`) is a heading of that file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

# What Ubuntu 24.04 (noble) installs by default: python3-minimal's /usr/bin/python3.
# https://packages.ubuntu.com/noble/amd64/python3-minimal/filelist
UBUNTU_2404_PYTHON = "/usr/bin/python3"

# Files a role copies to a node with mode 0755, and the variable holding the interpreter the
# systemd unit runs them with.
NODE_EXECUTABLES = {
    "roles/vllm_service/files/instinct-vllm-watchdog": (
        "roles/vllm_service/defaults/main.yml", "vllm_service_watchdog_python"),
    "roles/gateway/files/instinct-haproxy-save-state": (
        "roles/gateway/vars/main.yml", "_gateway_save_state_command"),
}


def doc_files() -> list[Path]:
    """Every Markdown file of the repository (docs/, the READMEs, the fixtures' SOURCES.md...),
    not those under hidden or build directories (.venv, .collections, .cache, build)."""
    return sorted(p for p in ROOT.rglob("*.md")
                  if not any(part.startswith(".") or part == "build"
                             for part in p.relative_to(ROOT).parts[:-1]))


@pytest.mark.parametrize("path", sorted(NODE_EXECUTABLES))
def test_interpreter_line_is_what_ubuntu_2404_ships(path: str) -> None:
    first = (ROOT / path).read_text().splitlines()[0]
    assert first == f"#!{UBUNTU_2404_PYTHON}", (
        f"{path}: interpreter line {first!r}; Ubuntu 24.04 ships {UBUNTU_2404_PYTHON} "
        "and no `python` command")


@pytest.mark.parametrize("path", sorted(NODE_EXECUTABLES))
def test_unit_runs_it_with_the_same_interpreter(path: str) -> None:
    vars_file, name = NODE_EXECUTABLES[path]
    value = yaml.safe_load((ROOT / vars_file).read_text())[name]
    assert str(value).split()[0] == UBUNTU_2404_PYTHON


def test_watchdog_doc_names_the_interpreter_line() -> None:
    first = (ROOT / "roles/vllm_service/files/instinct-vllm-watchdog").read_text().splitlines()[0]
    assert f"`{first}`" in (ROOT / "docs" / "watchdog.md").read_text()


# A path outside the repository: ../shared, a bare shared/ or notes/ directory, /work/, a home
# directory (~/.ansible, Ansible's own directory, is allowed). Public URLs (https://...) are not
# matched: the pattern needs the path to start a word, not to follow a host name.
OUTSIDE = re.compile(
    r"(?<![\w/.:-])(?:\.\./shared\b|shared/|notes/|/work/|/home/|~/(?!\.ansible))")


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_cite_no_path_outside_the_repository(path: Path) -> None:
    hits = [f"{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
            if OUTSIDE.search(line)]
    assert not hits, f"{path.relative_to(ROOT)} cites files outside the repository:\n" + \
        "\n".join(hits)


def test_outside_pattern() -> None:
    for bad in ("see ../shared/fill-wheelhouse.yml", "(/work/main/notes.md)", "/home/u/x",
                "`~/notes/x`", "shared/notes/rocm-vllm-facts.md", "(notes/facts.md)"):
        assert OUTSIDE.search(bad), bad
    for good in ("https://github.com/vllm-project/vllm/blob/v0.6.6.post1/Dockerfile.rocm",
                 "molecule/shared/cpu-wheelhouse.yml", "docs/work/x", "~/.ansible/collections"):
        assert not OUTSIDE.search(good), good


# A Markdown link [text](target), and a section cited by title: `x.md, "Title"`,
# `[x.md](x.md), "Title"` or `(x.md, "Title")`.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SECTION = re.compile(r"([\w./-]+\.md)`?(?:\]\([^)]*\))?\)?,\s+\"([^\"]+)\"")
FENCE = re.compile(r"```.*?```", re.S)


def broken_links(path: Path) -> list[str]:
    """The relative link targets of a Markdown file (outside code blocks) that do not exist."""
    text = FENCE.sub("", path.read_text())
    targets = (m.group(1) for m in LINK.finditer(text))
    return [t for t in targets
            if not re.match(r"[a-z]+:|#", t) and not (path.parent / t.split("#")[0]).exists()]


def headings(path: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in path.read_text().splitlines()
            if line.startswith("#")]


def cited_file(path: Path, name: str) -> Path | None:
    """A file a doc names: relative to the doc, to the repository, or a docs/ page by name."""
    for candidate in (path.parent / name, ROOT / name, ROOT / "docs" / Path(name).name):
        if candidate.is_file():
            return candidate
    return None


def missing_sections(path: Path) -> list[str]:
    """Sections cited by title (`x.md, "Title"`) that are no heading of the file they name."""
    text = " ".join(FENCE.sub("", path.read_text()).split())
    missing = []
    for name, title in SECTION.findall(text):
        target = cited_file(path, name)
        if target is None or not any(title in h for h in headings(target)):
            missing.append(f"{name}, {title!r}")
    return missing


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert not broken_links(path), f"{path.relative_to(ROOT)}: no such file: {broken_links(path)}"


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_sections_exist(path: Path) -> None:
    assert not missing_sections(path), (
        f"{path.relative_to(ROOT)} cites sections that are no heading: {missing_sections(path)}")


def test_link_and_section_patterns(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n## Hardening\n")
    doc = tmp_path / "b.md"
    doc.write_text('[a](a.md), [x](https://e.org/x), [n](nope.md), `a.md, "Hardening"`, '
                   '[a.md](a.md), "Hardening", (a.md, "Gone")\n```\n[c](code.md)\n```\n')
    assert broken_links(doc) == ["nope.md"]
    assert missing_sections(doc) == ["a.md, 'Gone'"]


# A measured figure outside docs/benchmarks.md: a line that says "measured" and then gives a
# time, a share or a rate, or a table with a "measured" column. Design figures (a budget, a
# target, a timeout) are not measurements and stay where they are explained.
MEASURED = re.compile(r"\bmeasured\b", re.IGNORECASE)
FIGURE = re.compile(r"\d+(?:\.\d+)?\s?(?:s|ms|min|minutes|%|GB/s|tok/s|tokens/s)(?![\w/])")


def measured_lines(text: str) -> list[str]:
    lines = text.splitlines()
    hits = []
    for n, line in enumerate(lines, 1):
        header = line.startswith("|") and n < len(lines) and lines[n].startswith("| ---")
        found = MEASURED.search(line)
        if found and (FIGURE.search(line, found.end()) or header):
            hits.append(f"{n}: {line.strip()}")
    return hits


@pytest.mark.parametrize("path", [p for p in doc_files() if p.name != "benchmarks.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_measured_figures_only_in_benchmarks(path: Path) -> None:
    hits = measured_lines(path.read_text())
    assert not hits, (f"{path.relative_to(ROOT)} gives measured figures (they belong in "
                      "docs/benchmarks.md, with machine, date and command):\n" + "\n".join(hits))


def test_measured_pattern() -> None:
    assert measured_lines("Measured on 2 CPUs: 3446 s.")
    assert measured_lines("| scenario | measured |\n| --- | --- |\n| a | 1 |")
    assert not measured_lines("Measured figures: [benchmarks.md](benchmarks.md).")
    assert not measured_lines("at most one interval (1 s). Measured on loopback:")
    assert not measured_lines("| scenario | budget |\n| --- | --- |\n| a | 120 s |")
