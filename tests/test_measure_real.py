"""CI smoke runs of `lazymlx bench` and `eval` on the real default model at short prompts."""

from __future__ import annotations

import json

import pytest
from test_measure_cli import BENCH_ROW_KEYS, invoke

from lazymlx.evals.tasks import TASKS

pytestmark = pytest.mark.real_model


def test_bench_smoke_on_the_default_model(real):
    data = json.loads(
        invoke(
            "bench",
            "--prompt-len",
            "256",
            "--lazy",
            "off,default,static,random",
            "--gen-len",
            "8",
            "--output",
            "json",
        )  # fmt: skip
    )
    assert data["model"] == "smollm2-135m" and data["blas"] == "OpenBLAS"
    rows = {row["mode"]: row for row in data["rows"]}
    assert list(rows) == ["baseline", "lazy:off", "lazy:default", "static", "random"]
    for row in rows.values():
        assert set(row) >= BENCH_ROW_KEYS and row["prompt_tokens"] <= 256
    assert rows["baseline"]["answer_correct"]  # the passkey prompt is answerable
    assert rows["lazy:off"]["answer_matches_baseline"]
    assert rows["lazy:off"]["compute_fraction"] == 1
    assert rows["lazy:default"]["compute_fraction"] < 0.6


def test_eval_smoke_on_the_default_model(real):
    data = json.loads(
        invoke(
            "eval",
            "--task",
            "all",
            "--lengths",
            "512",
            "--cases",
            "1",
            "--lazy",
            "off,default",
            "--output",
            "json",
        )  # fmt: skip
    )
    rows = {(r["task"], r["mode"]): r for r in data["rows"]}
    assert len(rows) == len(TASKS) * 3
    for task in TASKS:
        baseline, off = rows[task, "baseline"], rows[task, "lazy:off"]
        assert off["agreement"] == 1 and off["accuracy"] == baseline["accuracy"]
    assert rows["passkey", "baseline"]["accuracy"] == 1
