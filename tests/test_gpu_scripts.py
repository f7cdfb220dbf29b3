"""benchmarks/gpu/: the timing scripts run their main path, through lazymlx.stream_generate, on
a tiny random-weight shape on the CPU (the real shapes need a GPU; this catches a script the
library moved out from under before a GPU session is spent on it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GPU = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"


def run_script(name: str, output: Path, *args: str) -> list[dict]:
    command = [sys.executable, str(GPU / name), "--shapes", "tiny", "--lengths", "300"]
    done = subprocess.run(
        [*command, "--gen-len", "4", "--repeats", "1", "--output", str(output), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(output.read_text())
    assert report["device"] and report["presets"]
    return report["rows"]


def test_llama_shapes_times_stock_a_preset_and_rules_in_calibrates_grammar(tmp_path):
    """A mass rule whose ratios cap it keeps what the top-k rule keeps (gpu_mass times the
    ranking's cost by the two)."""
    top_k, capped = "0.5@24% 0.3@57% sparse", "mass0.999 0.5@24% 0.3@57% sparse"
    modes = f"baseline,fast,{top_k},{capped}"
    rows = run_script("llama_shapes.py", tmp_path / "shapes.json", "--modes", modes)
    assert [(r["shape"], r["prompt_tokens"], r["mode"]) for r in rows] == [
        ("tiny", 300, mode) for mode in modes.split(",")
    ]
    stock, fast, ranked, massed = rows
    assert stock["compute_fraction"] == 1 and 0 < fast["compute_fraction"] < 1
    assert 0 < ranked["compute_fraction"] == massed["compute_fraction"] < 1
    for row in rows:
        assert row["ttft_s"] > 0 and row["decode_tps"] > 0 and row["peak_gb"] > 0
        assert row["answer_s"] >= row["ttft_s"]


def test_kept_shapes_asks_over_a_kept_context_with_and_without_idle_completion(tmp_path):
    rows = run_script("kept_shapes.py", tmp_path / "kept.json", "--lazy", "fast")
    by_mode = {row["mode"]: row for row in rows}
    assert list(by_mode) == ["stock", "fast no idle", "fast fill"]
    assert by_mode["stock"]["units"] == 0 and by_mode["fast no idle"]["units"] == 0
    assert by_mode["fast fill"]["units"] > 0 and by_mode["fast fill"]["idle_s"] > 0
    for row in rows:
        assert row["document_ttft_s"] > 0 and row["question_ttft_s"] > 0
        assert row["decode_tps"] > 0 and row["peak_gb"] > 0
