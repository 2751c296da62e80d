"""scripts/galaxy-import: how the importer's log and result are judged. Errors, an import
that did not complete, an undocumented module or role, and every warning fail; the one warning
explained in docs/development.md (ansible-lint cannot resolve a module of a required
collection, which the importer does not install) does not. The importer itself runs as a stage of
`make test` (STAGES=galaxy-importer)."""

from __future__ import annotations

from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]
gi = load_script("galaxy_import", ROOT / "scripts" / "galaxy-import")

DONE = "Collection loading complete\nImporter processing completed successfully\n"
UNKNOWN = ("WARNING: playbooks/awx_configure.yml:33:7: syntax-check[unknown-module]: couldn't "
           "resolve module/action '{}'. This often indicates a misspelling, missing collection, "
           "or incorrect module path.")
FRAGMENT = ("WARNING: changelogs/fragments/a-playbook.yml:2:1: syntax-check[specific][/]: "
            "A playbook must be a list of plays")
DOCS = {"docs_blob": {"contents": [
    {"content_type": "module", "content_name": "gpu_facts", "doc_strings": {"doc": {}}},
    {"content_type": "role", "content_name": "vllm", "doc_strings": {}, "readme_html": "<h1>"},
    {"content_type": "filter", "content_name": "rocm", "doc_strings": {}},
]}}


def test_a_clean_import_passes():
    report = gi.classify(0, "Importing with galaxy-importer\n" + DONE, DOCS, {"awx.awx"})
    assert report == gi.Report([], [], [])


def test_an_unresolved_module_of_a_required_collection_is_explained_any_other_fails():
    log = "\n".join([UNKNOWN.format("awx.awx.organization"),
                     UNKNOWN.format("community.general.ufw"), FRAGMENT]) + "\n" + DONE
    report = gi.classify(0, log, DOCS, {"awx.awx", "ansible.posix"})
    assert report.explained == [UNKNOWN.format("awx.awx.organization")]
    assert report.warnings == [UNKNOWN.format("community.general.ufw"), FRAGMENT]
    assert report.errors == []


def test_errors_and_an_unfinished_import_fail():
    report = gi.classify(0, "ERROR: galaxy.yml: tags: one of the required tags\n" + DONE, DOCS,
                         set())
    assert report.errors == ["ERROR: galaxy.yml: tags: one of the required tags"]
    report = gi.classify(1, "Importing with galaxy-importer\n", {}, set())
    assert report.errors == ["the import did not complete (exit 1)"]


def test_a_module_or_role_without_documentation_fails():
    result = {"docs_blob": {"contents": [
        *DOCS["docs_blob"]["contents"],
        {"content_type": "module", "content_name": "nodoc", "doc_strings": {}},
        {"content_type": "role", "content_name": "bare", "doc_strings": {}, "readme_html": ""},
    ]}}
    assert gi.classify(0, DONE, result, set()).errors == [
        "module nodoc: no documentation found",
        "role bare: no documentation found",
    ]


def test_the_required_collections_are_galaxy_yml_s_and_the_optional_ones():
    """galaxy.yml's dependencies (ansible.posix, community.crypto) and
    collections/requirements.yml's names."""
    assert gi.requirements() == {"ansible.posix", "community.crypto", "awx.awx",
                                 "community.grafana"}


def test_the_suite_turns_only_the_importers_own_lint_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("INSTINCT_IMPORTER_LINT", raising=False)
    assert gi.config(tmp_path) == gi.CONFIG  # make release: the settings as Galaxy's
    monkeypatch.setenv("INSTINCT_IMPORTER_LINT", "0")
    copy = gi.config(tmp_path).read_text()
    assert "run_ansible_lint = False" in copy
    original = gi.CONFIG.read_text()
    assert copy.replace("run_ansible_lint = False", "run_ansible_lint = True") == original
