"""`lazymlx bench`, `eval` and `calibrate` end to end on a tiny random model (fast), and their
output formats. The real-model smoke runs are in test_measure_real.py."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lazymlx.bench import bench_prompt
from lazymlx.cli.app import app, main
from lazymlx.errors import LazymlxError
from lazymlx.evals import runner as runner_module
from lazymlx.presets import presets_file, resolve_preset

runner = CliRunner()

BENCH_ROW_KEYS = {
    "mode",
    "prompt_tokens",
    "ttft_s",
    "ttft_std",
    "prompt_tps",
    "generation_tps",
    "peak_memory_gb",
    "compute_fraction",
    "speedup",
    "answer_matches_baseline",
}


def invoke(*argv: str) -> str:
    result = runner.invoke(app, list(argv))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_bench_json_has_the_documented_schema(tiny_model_dir: Path):
    data = json.loads(
        invoke(
            "bench",
            "-m",
            str(tiny_model_dir),
            "--prompt-len",
            "600,700",
            "--lazy",
            "off,default,static,random",
            "--gen-len",
            "4",
            "--repeats",
            "2",
            "--output",
            "json",
        )  # fmt: skip
    )
    assert {"device", "model", "mlx", "mlx_lm", "lazymlx", "blas", "rows"} <= set(data)
    modes = [row["mode"] for row in data["rows"]]
    assert modes == ["baseline", "lazy:off", "lazy:default", "static", "random"] * 2
    for row in data["rows"]:
        assert set(row) >= BENCH_ROW_KEYS
        assert row["repeats"] == 2 and row["ttft_s"] > 0 and row["ttft_std"] >= 0
        assert row["prompt_tokens"] <= (600 if data["rows"].index(row) < 5 else 700)
    baseline, off, default, static, random = data["rows"][:5]
    assert baseline["speedup"] == 1 and baseline["compute_fraction"] == 1
    assert off["answer_matches_baseline"] and off["compute_fraction"] == 1
    assert default["compute_fraction"] < 1
    # the comparison strategies prune at the same schedule: the same work, other tokens
    assert static["compute_fraction"] == random["compute_fraction"] == default["compute_fraction"]


def test_bench_csv_and_table(tiny_model_dir: Path):
    args = ("bench", "-m", str(tiny_model_dir), "-l", "600", "--lazy", "default", "-n", "2")
    rows = list(csv.DictReader(io.StringIO(invoke(*args, "--output", "csv"))))
    assert [r["mode"] for r in rows] == ["baseline", "lazy:default"]
    assert set(rows[0]) >= BENCH_ROW_KEYS
    table = invoke(*args)
    assert "device: " in table and "| mode " in table and "| lazy:default " in table
    assert "presets: lazy:default: keep 40% at 24%" in table


def test_bench_prompt_kinds(tiny, tmp_path: Path):
    _, tokenizer = tiny
    assert len(bench_prompt(tokenizer, "random", 300).tokens) == 300
    passkey = bench_prompt(tokenizer, "passkey", 600)
    assert len(passkey.tokens) <= 600 and passkey.answer.isdigit()
    text = tmp_path / "doc.txt"
    text.write_text("the cat sat on the mat. " * 200)
    assert len(bench_prompt(tokenizer, str(text), 100).tokens) == 100
    with pytest.raises(LazymlxError, match=r"has \d+ tokens, fewer than the 100000 asked for"):
        bench_prompt(tokenizer, str(text), 100_000)
    with pytest.raises(LazymlxError, match="neither passkey nor random nor a readable file"):
        bench_prompt(tokenizer, str(tmp_path / "missing.txt"), 100)


def test_eval_reports_accuracy_per_task_length_and_mode(tiny_model_dir: Path):
    data = json.loads(
        invoke(
            "eval",
            "-m",
            str(tiny_model_dir),
            "--task",
            "passkey,kv",
            "--lengths",
            "600",
            "--cases",
            "2",
            "--lazy",
            "off,random",
            "--output",
            "json",
        )  # fmt: skip
    )
    rows = {(r["task"], r["mode"]): r for r in data["rows"]}
    assert set(rows) == {
        (t, m) for t in ("passkey", "kv") for m in ("baseline", "lazy:off", "random")
    }
    for (_, mode), row in rows.items():
        assert row["cases"] == 2 and 0 <= row["accuracy"] <= 1
        if mode in ("baseline", "lazy:off"):
            assert row["agreement"] == 1
    assert len(data["cases"]) == 2 * 2 * 3
    assert {"text", "correct", "agrees", "seed", "depth"} <= set(data["cases"][0])


def test_calibrate_saves_the_fastest_schedule_meeting_the_target(
    tiny_model_dir: Path, tmp_path: Path
):
    model = str(tiny_model_dir)
    presets_file().unlink(missing_ok=True)
    data = json.loads(
        invoke(
            "calibrate",
            "-m",
            model,
            "--target",
            "0",
            "--task",
            "passkey",
            "--lengths",
            "600",
            "--cases",
            "1",
            "--name",
            "mine",
            "--output",
            "json",
        )  # fmt: skip
    )
    attention = [r for r in data["rows"] if r["selection"] == "attention"]
    assert len(attention) >= 5 and all(r["meets_target"] for r in attention)
    fastest = min(attention, key=lambda r: r["compute_fraction"])
    assert data["chosen"] == fastest["mode"].removeprefix("attention: ")
    saved = resolve_preset("mine", model)
    assert [list(p) for p in saved.schedule] == fastest["schedule"]
    # the same measurements re-decided from the JSON, without running anything
    recorded = tmp_path / "calibration.json"
    recorded.write_text(json.dumps(data))
    again = json.loads(
        invoke("calibrate", "--records", str(recorded), "--target", "0", "--no-save", "-o", "json")
    )
    assert again["rows"] == data["rows"] and again["chosen"] == data["chosen"]
    assert again["case_count"] == 1
    strict = json.loads(
        invoke("calibrate", "--records", str(recorded), "--target", "1", "--metric", "tokens",
               "--no-save", "-o", "json")
    )  # fmt: skip
    assert [r["meets_target"] for r in strict["rows"]] == [
        r["agreement"] == 1 for r in data["rows"]
    ]
    assert "mine" in invoke("generate", "-m", model, "-p", "the", "--raw", "-n", "2", "--json", "--lazy", "mine")  # fmt: skip
    presets_file().unlink()


def test_calibrate_that_finds_nothing_says_so_and_saves_nothing(
    tiny_model_dir: Path, capsys, monkeypatch
):
    presets_file().unlink(missing_ok=True)
    # every pruned run disagrees with the baseline (which is the same run as itself)
    monkeypatch.setattr(runner_module, "agrees", lambda tokens, baseline, first: tokens is baseline)
    with pytest.raises(SystemExit) as exit_info:
        main(
            ["calibrate", "-m", str(tiny_model_dir), "--target", "0.5", "--task", "passkey",
             "--lengths", "600", "--cases", "1", "--metric", "tokens", "--output", "json"]
        )  # fmt: skip
    captured = capsys.readouterr()
    assert exit_info.value.code == 1
    assert json.loads(captured.out)["chosen"] is None  # the frontier is still printed
    assert captured.err.startswith("error: no candidate schedule reached tokens agreement 50%")
    assert not presets_file().exists()


def test_calibration_records_that_cannot_be_read_are_one_error_line(tmp_path: Path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text('{"rows": []}')
    with pytest.raises(SystemExit) as exit_info:
        main(["calibrate", "--records", str(broken)])
    captured = capsys.readouterr()
    assert exit_info.value.code == 1
    assert captured.err.startswith(f"error: cannot read calibration records from {broken}")
    assert len(captured.err.strip().splitlines()) == 1
