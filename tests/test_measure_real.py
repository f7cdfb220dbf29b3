"""CI smoke runs of `lazymlx bench` and `eval` on the real default model at short prompts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_measure_cli import BENCH_ROW_KEYS, invoke

from lazymlx.evals.families import FAMILIES, OPEN

pytestmark = pytest.mark.real_model
# The shipped presets' greedy tokens on the smoke cases, written when the engine's unused knobs
# were deleted (the tokens before and after were identical) and re-recorded at 512 tokens by an
# engine that still gave the 1k file's tokens: any engine change that moves them is a change in
# behaviour, to be measured before this file is rewritten.
REPO = Path(__file__).resolve().parents[1]
PRESET_TOKENS = Path(__file__).parent / "data" / "smoke_preset_tokens.json"


def test_bench_smoke_on_the_default_model(real):
    """512 tokens: past min_prompt, so `fast` prunes; the default (SmolLM2's mass rule) runs
    this prompt whole: the passkey's attention holds more than 4% of its tokens there (at 1k
    it prunes, to 45% of the work)."""
    data = json.loads(
        invoke(
            "bench",
            "--prompt-len",
            "512",
            "--lazy",
            "keep-all,default,fast,static,random",
            "--gen-len",
            "8",
            "--repeats",
            "1",
            "--output",
            "json",
        )  # fmt: skip
    )
    assert data["model"] == "smollm2-135m" and data["blas"] == "OpenBLAS"
    rows = {row["mode"]: row for row in data["rows"]}
    assert list(rows) == [
        "baseline",
        "lazy:keep-all",
        "lazy:default",
        "lazy:fast",
        "static",
        "random",
    ]
    for row in rows.values():
        assert set(row) >= BENCH_ROW_KEYS and row["prompt_tokens"] <= 512
    assert rows["baseline"]["answer_correct"]  # the passkey prompt is answerable
    assert rows["lazy:keep-all"]["answer_matches_baseline"]
    assert rows["lazy:keep-all"]["compute_fraction"] == 1
    assert rows["lazy:default"]["compute_fraction"] == 1
    assert rows["lazy:default"]["answer_matches_baseline"]
    assert rows["lazy:fast"]["compute_fraction"] < 0.7


def test_eval_smoke_on_the_default_model(real, tmp_path):
    """One short calibration case per family through its path (raw, follow-up, context file,
    LLM prefix reuse, chat), against the committed baselines: nothing re-runs stock mlx-lm;
    `fast` (which prunes past 256 tokens) gives the tokens it gave before. 512 tokens, not 1k:
    the same paths in 60% of the time. The default is not run here: the calibration and
    validation journals judge it (benchmarks/results/models/smollm2-135m/)."""
    baselines = tmp_path / "baselines.json"  # a copy: a miss must not write the shelf's file
    shutil.copy(REPO / "benchmarks" / "baselines" / "smollm2-135m.json", baselines)
    data = json.loads(
        invoke(
            "eval",
            "--baselines",
            str(baselines),
            "--split",
            "calibration",
            "--families",
            "all",
            "--lengths",
            "512",
            "--cases",
            "1",
            "--lazy",
            "fast",
            "--output",
            "json",
        )  # fmt: skip
    )
    assert data["baselines_run"] == 0, (
        "the shelf's baseline cache (benchmarks/baselines/smollm2-135m.json) misses these cases: "
        "the case generators or the model changed; regenerate it with `lazymlx eval --baselines "
        "benchmarks/baselines/smollm2-135m.json` (see benchmarks/README.md)"
    )
    rows = {(r["family"], r["mode"]): r for r in data["rows"] if r["length"] == 512}
    assert {family for family, _ in rows} == set(FAMILIES) | {"all"}
    assert rows["all", "lazy:fast"]["compute_fraction"] < 0.7
    for family in OPEN:  # stock's answers, judged against themselves
        assert rows[family, "baseline"]["score"] == 1
    tokens = {f"{c['family']} {c['mode']}": c["tokens"] for c in data["cases"]}
    assert tokens == json.loads(PRESET_TOKENS.read_text())
