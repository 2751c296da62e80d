"""scripts/bench rewrites only its own section of docs/benchmarks.md (between its markers): the
page's introduction, the fleet-bench section and every other section stay as they were."""

from __future__ import annotations

from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[3]
bench = load_script("instinct_bench", ROOT / "scripts" / "bench")
fb = load_script("instinct_fleet_bench", ROOT / "scripts" / "fleet-bench", reuse=True)

NEW = "## model_convert (`make bench`, scripts/bench)\n\nRun 2026-12-02 on vm.\n\n| new table |\n"
DOC = f"""# Benchmarks

Introduction.

{bench.BEGIN}

## model_convert (`make bench`, scripts/bench)

| old table |

{bench.END}

### Other runs of `make bench` on the same machine

| kept by hand |

{fb.BEGIN}

## Fleet

| fleet figures |

{fb.END}

## `make test`

| suite timings |
"""


def test_only_the_bench_section_is_replaced() -> None:
    out = bench.with_section(DOC, NEW)
    head, rest = DOC.split(bench.BEGIN)
    tail = rest.split(bench.END, 1)[1]
    assert out == f"{head}{bench.BEGIN}\n\n{NEW.strip()}\n\n{bench.END}{tail}"
    assert "| old table |" not in out
    for kept in ("Introduction.", "| kept by hand |", "| fleet figures |", "| suite timings |"):
        assert kept in out
    assert bench.with_section(out, NEW) == out  # a second run changes nothing more


def test_a_page_without_the_section_gets_it_appended() -> None:
    doc = "# Benchmarks\n\n## `make test`\n\n| suite timings |\n"
    out = bench.with_section(doc, NEW)
    assert out.startswith(doc.rstrip("\n"))
    assert out.endswith(f"{bench.BEGIN}\n\n{NEW.strip()}\n\n{bench.END}\n")


def test_the_docs_page_has_one_bench_section_holding_the_model_convert_figures() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert page.count(bench.BEGIN) == 1 and page.count(bench.END) == 1
    section = page.split(bench.BEGIN, 1)[1].split(bench.END, 1)[0]
    assert section.strip().startswith("## model_convert (`make bench`, scripts/bench)")
    assert fb.BEGIN not in section and "## `make test`" not in section
