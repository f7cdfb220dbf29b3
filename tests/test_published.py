"""benchmarks/ as a shelf and a notebook: run_published.sh names every current script and the
files its steps make, every figure benchmarks/README.md lists comes from one of its steps, every
results file the READMEs and docs cite exists, and each study names what its folder holds.

All read as text: no model runs, so a moved or renamed file is caught before a reader follows a
dead path or a step writes where no figure looks.
"""

from __future__ import annotations

import re
from itertools import product
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
RUN = BENCH / "run_published.sh"
STUDIES = BENCH / "studies"
# the GPU steps write to $OUT on the device machine; their files are copied into results/gpu/
GPU_OUT = {"out": ["benchmarks/results/gpu"]}
# files a figure rests on that no step writes under their own name
NOT_WRITTEN = {
    "cp_fit_qwen.json": "the block's fit the context step replays (an input)",
    "cp_cpu_ranks_2k_keep-all_gpu_host.json": "cpu_ranks.sh's cp_cpu_ranks_2k_keep-all.json, renamed",
}
CITING = [
    REPO / "README.md",
    REPO / "CHANGELOG.md",
    *sorted((REPO / "docs").glob("*.md")),
    BENCH / "README.md",
    STUDIES / "STUDIES.md",
    *sorted(STUDIES.glob("*/README.md")),
]
PATH = re.compile(r"(?:\$\{?\w+\}?|benchmarks)/[^\s\"'`>)|,;]+")


def _values(text: str, variables: dict[str, list[str]]) -> list[str]:
    """`text` with each $name or ${name} replaced by each of its values (none if one is unknown)."""
    names = re.findall(r"\$\{?(\w+)\}?", text)
    if any(name not in variables for name in names):
        return []
    out = []
    for choice in product(*(variables[name] for name in names)):
        expanded = text
        for name, value in zip(names, choice, strict=True):
            expanded = re.sub(rf"\$\{{?{name}\}}?", value, expanded, count=1)
        out.append(expanded)
    return out


def run_published_paths() -> set[str]:
    """Every path under benchmarks/ that run_published.sh names, its variables expanded as the
    script sets them line by line (an assignment, or a `for x in a b c` loop's values)."""
    variables: dict[str, list[str]] = dict(GPU_OUT)
    found: set[str] = set()
    for line in RUN.read_text().splitlines():
        code = line.split("#", 1)[0]
        for name, value in re.findall(r"(?:local\s+)?\b(\w+)=([\w./$*{}-]+)", code):
            if values := _values(value, variables):
                variables[name] = values
        if loop := re.search(r"\bfor (\w+) in ([\w. -]+); do", code):
            variables[loop[1]] = loop[2].split()
        for token in PATH.findall(line):
            found.update(p for p in _values(token, variables) if p.startswith("benchmarks/"))
    return found


def _existing(pattern: str) -> list[Path]:
    return sorted(REPO.glob(pattern)) if "*" in pattern else [REPO / pattern]


def test_every_script_run_published_names_exists_and_every_script_is_named():
    named = {p for p in run_published_paths() if p.endswith((".py", ".sh"))}
    assert named, "no script found in run_published.sh"
    assert [p for p in named if not (REPO / p).is_file()] == []
    scripts = [*BENCH.glob("*.py"), *(BENCH / "gpu").glob("*.py"), *(BENCH / "gpu").glob("*.sh")]
    unnamed = sorted(p.relative_to(REPO).as_posix() for p in scripts)
    assert [p for p in unnamed if p not in named] == [], (
        "a current script run_published.sh never calls: call it in a step, or move it to the "
        "study it belongs to (benchmarks/studies/)"
    )


def test_every_results_file_run_published_writes_is_on_the_shelf():
    results = [p for p in run_published_paths() if p.startswith("benchmarks/results/")]
    missing = [p for p in results if not all(path.exists() for path in _existing(p))]
    missing += [p for p in results if not _existing(p)]
    assert missing == []


def test_every_figure_in_the_benchmarks_readme_comes_from_a_step_of_run_published():
    readme = (BENCH / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| ") and "`results/" in line]
    assert len(rows) >= 10, "the figure table is gone"
    steps = set(re.findall(r"^(\w+)\(\) \{", RUN.read_text(), re.M))
    written = {
        path.resolve() for p in run_published_paths() for path in _existing(p) if path.exists()
    }
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[2].strip("`") in steps, row
        for cited in re.findall(r"`(results/[^`]+)`", cells[3]):
            files = _existing(f"benchmarks/{cited}")
            assert files and all(f.exists() for f in files), cited
            made = [f for f in files if f.resolve() in written or f.name in NOT_WRITTEN]
            assert made == files, (
                f"{cited}: no step of run_published.sh writes {set(files) - set(made)}"
            )


def cited_paths(path: Path) -> list[str]:
    """Repository paths a document cites: benchmarks/results/... and benchmarks/studies/... (not
    those read from an old commit, `git show COMMIT:path`), results/... in benchmarks/README.md,
    and its relative markdown links."""
    text = path.read_text()
    found = re.findall(r"(?<![\w:/.-])(benchmarks/(?:results|studies)/[\w./*-]*\w/?)", text)
    if path == BENCH / "README.md":
        found += [f"benchmarks/{p}" for p in re.findall(r"`(results/[\w./*-]+)`", text)]
    for link in re.findall(r"\]\(([^)#\s]+)\)", text):
        if not re.match(r"\w+://", link):
            found.append((path.parent / link).resolve().relative_to(REPO).as_posix())
    return found


@pytest.mark.parametrize("path", CITING, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_file_a_readme_or_doc_cites_exists(path: Path):
    missing = [p for p in cited_paths(path) if not any(f.exists() for f in _existing(p))]
    assert missing == []


@pytest.mark.parametrize("study", sorted(p for p in STUDIES.iterdir() if p.is_dir()), ids=str)
def test_a_study_is_dated_and_names_every_file_it_holds(study: Path):
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+", study.name)
    readme = (study / "README.md").read_text()
    files = [p.name for p in study.iterdir() if p.name not in ("README.md", "record.md")]
    assert [name for name in files if name not in readme] == []
    assert study.name in (STUDIES / "STUDIES.md").read_text()
