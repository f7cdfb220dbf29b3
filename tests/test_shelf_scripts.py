"""Every script on the shelf runs: each of benchmarks/*.py, benchmarks/gpu/*.py and the shell
scripts answers --help with its usage and exit status 0, and the GPU tables print today's names.

Nothing is measured: --help stops each before it loads a model. The scripts run at once (most
spend their second or two importing mlx-lm), from a scratch folder (the shell scripts from copies
there), so one that ignored --help would fail there rather than write into the checkout; the
test ends every process it starts.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
SCRIPTS = sorted(
    p.relative_to(REPO).as_posix()
    for pattern in ("*.py", "gpu/*.py", "*.sh", "gpu/*.sh")
    for p in BENCH.glob(pattern)
)
SECONDS = 60  # for all of them together, on a loaded 2-core machine


def _command(script: str, scratch: Path) -> list[str]:
    if script.endswith(".sh"):
        copy = scratch / script  # run_published.sh reads itself there for --help
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / script, copy)
        return ["bash", str(copy), "--help"]
    return [sys.executable, str(REPO / script), "--help"]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """Each script's --help, run at once: script -> (exit status, output)."""
    scratch = tmp_path_factory.mktemp("shelf")
    commands = {script: _command(script, scratch) for script in SCRIPTS}
    started = {
        name: subprocess.Popen(
            command, cwd=scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for name, command in commands.items()
    }
    done, deadline = {}, time.monotonic() + SECONDS
    try:
        for name, process in started.items():
            try:
                out, _ = process.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                out = f"still running after {SECONDS} s"
            done[name] = (process.returncode, out)
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()
            process.wait()
    return done


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_on_the_shelf_answers_help_with_its_usage(script, ran):
    status, out = ran[script]
    assert status == 0, out
    if script.endswith(".py"):
        assert out.startswith("usage: " + Path(script).name), out
    else:
        assert f"bash {script}" in out, out  # the header's own command line


def test_run_published_help_lists_every_step(ran):
    _, out = ran["benchmarks/run_published.sh"]
    text = (BENCH / "run_published.sh").read_text()
    steps = " ".join(re.findall(r'^(?:CPU|OTHER)_STEPS="([^"]+)"', text, re.M)).split()
    assert len(steps) >= 10
    assert [step for step in steps if not re.search(rf"^  {step}: \S", out, re.M)] == []


def test_the_gpu_tables_name_modes_as_today():
    """The runs of 2026-11-26 and 27 named the built-in rule `default` (today's `gentle`) and
    Qwen's fixed-ratio schedules then `qwen2.5-coder-0.5b:default` and `:fast`; the tables
    benchmarks/README.md prints from them say what each ran in today's names."""
    spec = importlib.util.spec_from_file_location("shelf_tables", BENCH / "tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    gpu = BENCH / "results" / "gpu"
    for table, runs in (("gpu", "llama_shapes_*.json"), ("gpukept", "kept_shapes_*.json")):
        out = tables.TABLES[table](sorted(gpu.glob(runs)))
        modes = {line.split("|")[3].strip() for line in out.splitlines()[2:]}
        assert not {"default", "qwen2.5-coder-0.5b:default"} & modes, modes
        assert not [m for m in modes if m.startswith("qwen2.5-coder-0.5b:default ")], modes

    def named(mode: str, ran: str) -> str:
        return tables.named_now(mode, {mode: ran})

    assert named("default", "keep 20% at 67%, decode revive 16 a layer") == "gentle"
    qwen = (
        "keep 50% at 24%, keep 30% at 57%, at least 1024 tokens on past each prune, decode sparse"
    )
    assert named("qwen2.5-coder-0.5b:default fill", qwen) == "0.5@24% 0.3@57% min1024 sparse fill"
    mass = "keep the fewest tokens holding 95% of the attention"  # a mass rule: Qwen's fast now
    assert named("qwen2.5-coder-0.5b:fast", mass) == "qwen2.5-coder-0.5b:fast"
