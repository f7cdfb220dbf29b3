"""The first time an uncalibrated model runs here, one line says what its preset computes and
how long calibrating it would take on this machine; later runs get the short note."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from lazymlx.cli.app import app
from lazymlx.engine.config import PRESETS
from lazymlx.evals.search_plan import Speed, calibration_minutes


def test_generate_says_what_calibrating_costs_the_first_time_only(
    tiny_model_dir: Path, tmp_path: Path
):
    model = tmp_path / "fresh-model"  # never used here before
    shutil.copytree(tiny_model_dir, model)
    runner = CliRunner()
    args = ["generate", "-m", str(model), "-p", "the", "--raw", "-n", "2"]
    quiet = runner.invoke(app, [*args, "--quiet"])  # shows no note: keeps the first use
    assert quiet.exit_code == 0 and "calibrat" not in quiet.stderr
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    line = re.search(r"is not calibrated: 'default' is a built-in rule, (\d+)% of the prompt work "
                     r"at 2k tokens where the question points at the text, else all of it; "
                     r"`lazymlx calibrate -m .*` takes about (\d+) minutes on this machine",
                     " ".join(first.stderr.split()))  # fmt: skip
    assert line is not None, first.stderr
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "takes about" not in again.stderr
    assert "'default' is a built-in rule, chosen on other models" in again.stderr
    gentle = runner.invoke(app, [*args, "--lazy", "gentle"])
    assert "'gentle' is a built-in rule, chosen on other models" in gentle.stderr


def test_the_first_use_of_a_pruning_rule_says_how_much_it_computes(
    tiny_model_dir: Path, tmp_path: Path
):
    model = tmp_path / "fresh-model"
    shutil.copytree(tiny_model_dir, model)
    args = ["generate", "-m", str(model), "-p", "the", "--raw", "-n", "2", "--lazy", "gentle"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    line = re.search(r"is not calibrated: 'gentle' is a built-in rule, (\d+)% of the prompt "
                     r"work at 2k tokens; `lazymlx calibrate -m .*` takes about (\d+) minutes",
                     " ".join(first.stderr.split()))  # fmt: skip
    assert line is not None, first.stderr
    assert 50 < int(line[1]) < 100


def test_calibration_minutes_counts_stock_the_reference_and_three_passes():
    speed = Speed(prompt_s=0.01, decode_s=0.1)  # 10 s per 1k prompt tokens, 10 tok/s decoding
    half = lambda n: 0.5  # noqa: E731
    minutes = calibration_minutes(speed, {1000: 2}, ["a"], [half] * 5, lambda f: 10)
    # per case: stock and reference 2 x (10 + 1) s, three passes 3 x (5 + 1) s
    assert minutes == (2 * (2 * 11 + 3 * 6)) / 60
    assert PRESETS["gentle"].work_share(4096, 30) < 0.8
