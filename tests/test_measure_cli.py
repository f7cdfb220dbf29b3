"""`lazymlx bench`, `eval` and `calibrate` end to end on a tiny random model (fast), and their
output formats. The real-model smoke runs are in test_measure_real.py."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lazymlx.cli.app import app, main
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.presets import presets_file, resolve_preset
from lazymlx.errors import LazymlxError
from lazymlx.evals.choice import CANDIDATES
from lazymlx.evals.timing import bench, bench_prompt

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
            "1100,1200",
            "--lazy",
            "keep-all,gentle,static,random",
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
    assert modes == ["baseline", "lazy:keep-all", "lazy:gentle", "static", "random"] * 2
    for row in data["rows"]:
        assert set(row) >= BENCH_ROW_KEYS
        assert row["repeats"] == 2 and row["ttft_s"] > 0 and row["ttft_std"] >= 0
        assert row["prompt_tokens"] <= (1100 if data["rows"].index(row) < 5 else 1200)
    baseline, keep_all, default, static, random = data["rows"][:5]
    assert baseline["speedup"] == 1 and baseline["compute_fraction"] == 1
    assert keep_all["answer_matches_baseline"] and keep_all["compute_fraction"] == 1
    assert default["compute_fraction"] < 1
    # the comparison strategies prune at the same schedule: the same work, other tokens
    assert static["compute_fraction"] == random["compute_fraction"] == default["compute_fraction"]


def test_bench_csv_and_table(tiny_model_dir: Path):
    args = (
        "bench",
        "-m",
        str(tiny_model_dir),
        "-l",
        "600",
        "--lazy",
        "gentle",
        "-n",
        "2",
        "-r",
        "1",
    )
    rows = list(csv.DictReader(io.StringIO(invoke(*args, "--output", "csv"))))
    assert [r["mode"] for r in rows] == ["baseline", "lazy:gentle"]
    assert set(rows[0]) >= BENCH_ROW_KEYS
    table = invoke(*args)
    assert "device: " in table and "| mode " in table and "| lazy:gentle " in table
    assert "presets: lazy:gentle: keep 20% at 67%" in table


def test_bench_times_a_workload_per_prompt_and_its_geometric_mean(tiny_model_dir: Path):
    """Several prompts: a row per prompt and preset, then per preset the geometric mean of the
    TTFT ratios over them, the mean work share and how many pruned and kept stock's answer."""
    args = ("bench", "-m", str(tiny_model_dir), "-l", "1100", "--lazy", "fast", "-n", "2")
    data = json.loads(invoke(*args, "--prompt", "real-option,passkey", "--output", "json"))
    rows = data["rows"]
    assert [(r["prompt"], r["mode"]) for r in rows[:4]] == [
        ("real-option", "baseline"), ("real-option", "lazy:fast"),
        ("passkey", "baseline"), ("passkey", "lazy:fast"),
    ]  # fmt: skip
    mean = rows[5]
    assert mean["mode"] == "lazy:fast" and mean["prompt"] == "geometric mean of 2"
    expected = (rows[1]["speedup"] * rows[3]["speedup"]) ** 0.5
    assert mean["speedup"] == pytest.approx(expected)
    assert mean["compute_fraction"] == pytest.approx(
        (rows[1]["compute_fraction"] + rows[3]["compute_fraction"]) / 2
    )
    assert mean["pruned"] == f"{sum(bool(r['pruned']) for r in (rows[1], rows[3]))} of 2"
    table = runner.invoke(app, [*args, "--prompt", "real-option,passkey", "-r", "1"])
    assert "| geometric mean of 2 " in table.stdout and "| real-option " in table.stdout
    # the progress counts every run: per mode a warm-up, then each prompt's repeats
    counts = re.findall(r"\[(\d+)/(\d+)\]", table.stderr)
    assert counts[-1] == ("6", "6"), table.stderr


def test_bench_with_no_lazy_times_every_preset_that_prunes_and_says_why(tiny_model_dir: Path):
    """The tiny model is not calibrated: its default is the built-in rule, which prunes where the
    question points; gentle's 1,024-token floor runs a 600-token prompt whole, which its row
    says. A preset that runs every prompt whole (keep-all saved as the user's) is left out."""
    from lazymlx.engine.presets import save_preset, saved_presets

    save_preset(str(tiny_model_dir), "whole", LazyConfig(), {})
    # presets other tests saved for this model are the user's: those that prune are timed too
    saved = saved_presets(str(tiny_model_dir))
    pruning = ["default", "gentle", "fast", *(name for name, c in saved.items() if c.prunes)]
    whole = [name for name, c in saved.items() if not c.prunes]
    args = ("bench", "-m", str(tiny_model_dir), "-l", "600", "-n", "2", "-r", "1")
    data = json.loads(invoke(*args, "--output", "json"))
    assert [row["mode"] for row in data["rows"]] == ["baseline"] + [f"lazy:{n}" for n in pruning]
    them = "it runs" if len(whole) == 1 else "they run"
    assert data["compares"] == (
        f"stock mlx-lm beside every preset that prunes on {tiny_model_dir} "
        f"({', '.join(pruning)}), to show what each saves; left out: {', '.join(whole)} "
        f"({them} every prompt whole: stock's work)"
    )
    baseline, default, gentle, fast = data["rows"][:4]
    assert [row["pruned"] for row in (baseline, default, gentle, fast)] == [
        None,
        False,
        False,
        True,
    ]
    table = invoke(*args)
    assert "compares: stock mlx-lm beside every preset that prunes" in table
    assert "| pruned " in table and "| nothing " in table and "| yes " in table
    # the table first; right under it, the presets that ran this length whole, by name
    lines = table.splitlines()
    assert lines[0].startswith("| mode ")
    under = lines[next(i for i, line in enumerate(lines) if not line.startswith("|"))]
    tokens = baseline["prompt_tokens"]
    # the random model's question points nowhere: the built-in default runs it whole too (and
    # so may presets other tests saved)
    assert under.startswith(f"pruned nothing: at {tokens} tokens ")
    ran_whole = under.split(" tokens ", 1)[1].split(" ran the prompt whole")[0].split(", ")
    assert {"default", "gentle"} <= set(ran_whole) and "fast" not in ran_whole
    assert data["pruned nothing"] == under.removeprefix("pruned nothing: ")


def test_off_is_stock_everywhere_and_keep_all_the_engine_keeping_every_token(tiny_model_dir):
    from lazymlx.evals.strategies import strategy

    assert strategy("off", str(tiny_model_dir)).config is None
    assert not strategy("keep-all", str(tiny_model_dir)).config.prunes
    args = (
        "bench",
        "-m",
        str(tiny_model_dir),
        "-l",
        "600",
        "-n",
        "2",
        "-r",
        "1",
        "--lazy",
        "off,keep-all",
    )
    data = json.loads(invoke(*args, "--output", "json"))
    assert data["presets"] == {
        "lazy:off": "stock mlx-lm",
        "lazy:keep-all": resolve_preset("keep-all", None).describe(),
    }
    assert [row["pruned"] for row in data["rows"]] == [None, None, False]


def test_bench_prompt_kinds(tiny, tmp_path: Path):
    _, tokenizer = tiny
    assert len(bench_prompt(tokenizer, "random", 300).tokens) == 300
    passkey = bench_prompt(tokenizer, "passkey", 600)
    assert len(passkey.tokens) <= 600 and passkey.answer.isdigit()
    code = bench_prompt(tokenizer, "code", 600)  # real source code, a constant asked
    assert len(code.tokens) <= 600 and code.answer in tokenizer.decode(code.tokens)
    assert code.tokens != passkey.tokens
    option = bench_prompt(tokenizer, "real-option", 600)  # a flag's short and long names
    assert option.right(f"the option is {option.answer}")
    assert all(option.right(alias) for alias in option.aliases) and not option.right("--nothing")
    text = tmp_path / "doc.txt"
    text.write_text("the cat sat on the mat. " * 200)
    assert len(bench_prompt(tokenizer, str(text), 100).tokens) == 100
    with pytest.raises(LazymlxError, match=r"has \d+ tokens, fewer than the 100000 asked for"):
        bench_prompt(tokenizer, str(text), 100_000)
    with pytest.raises(LazymlxError, match=r"neither a one-prompt task \(passkey, .*code"):
        bench_prompt(tokenizer, "followup", 600)  # two turns: not one prompt to time
    with pytest.raises(LazymlxError, match="nor a readable file"):
        bench_prompt(tokenizer, str(tmp_path / "missing.txt"), 100)


def test_eval_reports_answers_kept_per_family_length_and_mode(tiny_model_dir: Path, tmp_path):
    cache, journal = tmp_path / "baselines.json", tmp_path / "records.jsonl"
    args = [
        "eval", "-m", str(tiny_model_dir), "--families", "passkey,kept,freeform-text",
        "--lengths", "1000",
        "--cases", "2", "--lazy", "keep-all,random", "--baselines", str(cache),
        "--journal", str(journal), "--output", "json",
    ]  # fmt: skip
    data = json.loads(invoke(*args))
    assert data["split"] == "validation" and data["baselines_run"] == 6
    rows = {(r["family"], r["length"], r["mode"]): r for r in data["rows"]}
    for mode in ("baseline", "lazy:keep-all", "random"):
        for family in ("passkey", "kept", "all"):
            row = rows[family, 1000, mode]
            assert row["cases"] == (6 if family == "all" else 2)
            assert {"baseline_right", "kept", "kept_low", "kept_high", "gained"} <= set(row)
        assert rows["all", 1000, mode]["compute_fraction"] <= 1
    assert rows["all", 1000, "lazy:keep-all"]["identical"] == 1  # keep-all is the baseline
    # random also runs the 2 kept cases with no idle time (it completes between turns)
    assert rows["kept", 1000, "random no-idle"]["cases"] == 2
    assert len(data["cases"]) == 20 == len(journal.read_text().splitlines())
    assert {"text", "correct", "baseline_correct", "seed", "depth", "kind"} <= set(data["cases"][0])
    assert rows["all", 1000, "random"]["speedup"] > 0  # baselines ran in this run: timed
    again = json.loads(invoke(*args))  # every baseline is cached now: only the presets run
    assert again["baselines_cached"] == 6 and again["baselines_run"] == 0
    assert all(row["speedup"] is None for row in again["rows"])  # another run's TTFT: no ratio
    tallied = json.loads(invoke("eval", "--records", str(journal), "-o", "json"))
    assert len(tallied["cases"]) == 40 and tallied["rows"][0]["cases"] == 4
    table = invoke("eval", "--records", str(journal))
    assert "| family " in table and "kept or free-form agreement [95% CI]" in table
    free = rows["freeform-text", 1000, "lazy:keep-all"]  # keep-all continues as stock does
    assert free["identical"] == 1 and free["agreed_interval"] == [free["agreed_tokens"]] * 2
    assert f"{free['agreed_tokens']:.1f} tok [" in table


def test_eval_runs_a_rule_no_preset_ships_and_names_a_typo_a_preset(tiny_model_dir: Path, tmp_path):
    """--lazy takes calibrate's grammar as well as preset names, so a user tries a rule on
    their own cases before calibrating; a name with no "@" is an unknown preset."""
    rule = "mass0.8 1@24% 1@57% least0.25 point0.5 sparse"
    args = [
        "eval", "-m", str(tiny_model_dir), "--families", "real-option", "--lengths", "1000",
        "--cases", "1", "--baselines", str(tmp_path / "b.json"), "--output", "json",
    ]  # fmt: skip
    data = json.loads(invoke(*args, "--lazy", rule))
    assert f"lazy:{rule}" in {row["mode"] for row in data["rows"]}
    with pytest.raises(AssertionError, match="unknown lazy preset 'defualt'"):
        invoke(*args, "--lazy", "defualt")


def test_eval_resume_runs_only_what_the_journal_lacks(tiny_model_dir: Path, tmp_path, capsys):
    cache, journal = tmp_path / "baselines.json", tmp_path / "records.jsonl"

    def run(cases: str, lazy: str) -> dict:
        args = [
            "eval", "-m", str(tiny_model_dir), "--families", "passkey,code", "--lengths", "1000",
            "--cases", cases, "--lazy", lazy, "--baselines", str(cache), "--journal",
            str(journal), "--resume", "--output", "json",
        ]  # fmt: skip
        return json.loads(invoke(*args))

    first = run("1", "keep-all")  # an interrupted run: one case a family
    assert first["resumed"] == 0 and first["baselines_run"] == 2
    later = run("2", "keep-all,random")  # goes on: a second case a family, and another preset
    assert later["resumed"] == 4 and later["baselines_run"] == 2 and later["baselines_cached"] == 2
    assert len(later["cases"]) == 12  # 4 cases x (baseline, keep-all, random)
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    keys = [(r["family"], r["seed"], r["mode"]) for r in rows]
    assert len(keys) == len(set(keys)) == 12  # nothing written twice
    assert run("2", "keep-all,random")["resumed"] == 12  # all done: nothing runs
    assert len(journal.read_text().splitlines()) == 12
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "-m", str(tiny_model_dir), "--resume"])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.strip() == (
        "error: --resume needs --journal FILE: the journal of the run to go on with"
    )


def test_eval_right_only_runs_presets_on_the_baselines_right_answers_alone(
    tiny_model_dir: Path, tmp_path
):
    cache = tmp_path / "baselines.json"
    args = [
        "eval", "-m", str(tiny_model_dir), "--families", "passkey,code", "--lengths", "1000",
        "--cases", "2", "--lazy", "keep-all", "--baselines", str(cache), "--output", "json",
    ]  # fmt: skip
    everything = json.loads(invoke(*args))
    cases = {(c["family"], c["seed"]) for c in everything["cases"]}
    assert len(cases) == 4 and not any(c["baseline_correct"] for c in everything["cases"])
    data = json.loads(cache.read_text())  # the random model answers one passkey right after all
    entry = next(e for e in data["entries"].values() if e["case"].startswith("passkey"))
    seed = int(entry["case"].split("#")[1])
    gold = _gold("passkey", tiny_model_dir, seed)
    entry["outcome"]["text"] = f"The pass key is {gold}."
    cache.write_text(json.dumps(data))
    right = json.loads(invoke(*args, "--right-only"))
    assert right["right_only"] and right["baselines_cached"] == 4 and right["baselines_run"] == 0
    assert {(c["family"], c["seed"], c["mode"]) for c in right["cases"]} == {
        ("passkey", seed, "baseline"),
        ("passkey", seed, "lazy:keep-all"),
    }
    assert {(r["family"], r["baseline_right"]) for r in right["rows"]} == {
        ("passkey", 1),
        ("all", 1),
    }


def _gold(family: str, model_dir: Path, seed: int) -> str:
    from lazymlx.cli.loading import load_model
    from lazymlx.evals.cases import make_case

    return make_case(family, load_model(str(model_dir))[1], 1000, seed, "validation").gold


# The listed fixed-ratio candidates: the built-in default, which prunes only where a question
# points, runs the random model's prompts whole, and would meet a bar of 0 first.
SCHEDULED = ",".join(name for name in CANDIDATES if name != "default")


def test_calibrate_saves_the_fastest_candidates_meeting_each_bar(
    tiny_model_dir: Path, tmp_path: Path
):
    model = str(tiny_model_dir)
    presets_file().unlink(missing_ok=True)
    args = [
        "calibrate", "-m", model, "--families", "completion", "--lengths", "1000", "--cases", "1",
        "--per-length", "0", "--per-family", "0", "--fast", "0", "--name", "mine",
        "--baselines", str(tmp_path / "b.json"), "--output", "json", "--candidates", SCHEDULED,
    ]  # fmt: skip
    data = json.loads(invoke(*args))
    # candidates run cheapest first until one meets the bar (the open answers' bar against
    # the 4-bit reference still applies); the cheapest meets fast's bar of 0 at once
    stock = ("baseline", "reference", "reference-4bit")
    candidates = [r for r in data["rows"] if r["mode"] not in stock]
    assert candidates[-1]["mode"] == data["chosen"] and candidates[-1]["meets_default"]
    assert not any(r["meets_default"] for r in candidates[:-1])
    assert data["fast"] == candidates[0]["mode"]
    assert resolve_preset("mine", model).prunes and resolve_preset("mine-fast", model).prunes
    # gentle: half the default's pruning, written beside it by the same command
    mine, gentle = resolve_preset("mine", model), resolve_preset("mine-gentle", model)
    assert gentle.schedule == tuple((d, (1 + r) / 2) for d, r in mine.schedule)
    recorded = tmp_path / "calibration.json"  # re-decided from the JSON, running nothing
    recorded.write_text(json.dumps(data))
    again = json.loads(
        invoke("calibrate", "--records", str(recorded), "--per-length", "0", "--per-family", "0",
               "--fast", "0", "--no-save", "-o", "json")
    )  # fmt: skip
    assert again["rows"] == data["rows"] and again["chosen"] == data["chosen"]
    assert "mine" in invoke("generate", "-m", model, "-p", "the", "--raw", "-n", "2", "--json", "--lazy", "mine")  # fmt: skip
    presets_file().unlink()


def test_calibrate_model_is_the_commands_search_as_a_python_call(tiny_model_dir: Path, tmp_path):
    from contextlib import contextmanager

    from lazymlx.evals.calibration import calibrate_model
    from lazymlx.evals.choice import Bar

    model, told = str(tiny_model_dir), []

    @contextmanager
    def progress(expected_s: float):
        told.append(expected_s)
        yield told.append

    done = calibrate_model(
        model, lengths="1000", families="completion", cases=1, bar=Bar(0, 0, 0),
        baselines=str(tmp_path / "b.json"), save="py", progress=progress,
        candidates=SCHEDULED.split(","),
    )  # fmt: skip
    assert told[0] > 0 and any(str(run).startswith("completion 1000 #0") for run in told[1:])
    assert done.choice.chosen is not None and done.head["chosen"] == done.choice.chosen
    assert [s.preset for s in done.saved] == ["py", "py-gentle", "py-fast"]
    assert done.saved[0].candidate == done.choice.chosen and done.saved[0].path == presets_file()
    assert resolve_preset("py", model).prunes
    with pytest.raises(LazymlxError, match="--minutes sizes a run"):
        calibrate_model(model, minutes=1, records=str(tmp_path / "any.jsonl"))
    presets_file().unlink()


def test_calibrate_runs_only_the_candidates_named(tiny_model_dir: Path, tmp_path: Path, capsys):
    model = str(tiny_model_dir)
    args = [
        "calibrate", "-m", model, "--families", "completion", "--lengths", "1000", "--cases", "1",
        "--per-length", "0", "--per-family", "0", "--fast", "0", "--no-reference",
        "--baselines", str(tmp_path / "b.json"), "--no-save", "-o", "json",
    ]  # fmt: skip
    data = json.loads(invoke(*args, "--candidates", "0.2@67%, 0.2@50%"))
    modes = [r["mode"] for r in data["rows"]]  # the cheaper first, the other if it failed
    # without the 8-bit reference; the 4-bit one still sets the open answers' bar
    assert modes[:2] == ["baseline", "reference-4bit"]
    assert 1 <= len(set(modes[2:]) & {"0.2@67%", "0.2@50%"}) == len(modes) - 2
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--candidates", "0.2@67%,half"])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.startswith("error: no calibration candidate 'half'")


def test_calibrate_that_finds_nothing_says_so_and_saves_nothing(tmp_path: Path, capsys):
    presets_file().unlink(missing_ok=True)
    records = tmp_path / "records.jsonl"
    rows = []
    for mode, right in (("baseline", True), ("worse", False)):
        rows.append(
            {
                "family": "passkey", "split": "calibration", "length": 1024, "seed": 0,
                "kind": "raw", "source": "filler", "depth": 0.5, "mode": mode,
                "prompt_tokens": 1000, "correct": right, "baseline_correct": True,
                "agreed_tokens": 0, "identical": right, "ttft_s": 1.0, "baseline_ttft_s": 1.0,
                "compute_fraction": 0.5, "step_fraction": 0.5, "generation_tps": 1.0,
                "peak_memory_gb": 1.0, "text": "", "tokens": [],
            }
        )  # fmt: skip
    records.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(SystemExit) as exit_info:
        main(["calibrate", "--records", str(records), "--output", "json"])
    captured = capsys.readouterr()
    assert exit_info.value.code == 1
    data = json.loads(captured.out)  # the frontier is still printed
    assert data["chosen"] is None and data["fast"] is None
    assert captured.err.startswith("error: no candidate kept 97% of the baseline's answers")
    assert not presets_file().exists()


def _record(mode: str, right: bool, work: float, length: int = 1024) -> dict:
    """One calibration record of a passkey case, as a journal holds it."""
    return {
        "family": "passkey", "split": "calibration", "length": length, "seed": 0, "kind": "raw",
        "source": "filler", "depth": 0.5, "mode": mode, "prompt_tokens": length - 24,
        "correct": right, "baseline_correct": True, "agreed_tokens": 0, "identical": right,
        "ttft_s": 1.0, "baseline_ttft_s": 1.0, "compute_fraction": work, "step_fraction": work,
        "generation_tps": 1.0, "peak_memory_gb": 1.0, "text": "", "tokens": [],
    }  # fmt: skip


def test_calibrate_prints_no_none_calls_no_whole_run_fast_and_puts_the_table_first(
    tmp_path: Path,
):
    """A default whose gate ran every case whole meets the bar but buys nothing: it is chosen
    (the model's default stays), the header says it ran whole, and it is not called `fast`;
    nothing prints Python's None (an unfinished search's "stopped", a row's open group)."""
    records = tmp_path / "records.jsonl"
    rows = [_record("baseline", True, 1.0), _record("default", True, 1.0)]
    records.write_text("\n".join(json.dumps(r) for r in rows))
    printed = invoke("calibrate", "--records", str(records), "--no-save")
    assert "None" not in printed
    lines = printed.splitlines()
    assert lines[0].startswith("| candidate")  # the table first, the header under it
    said = dict(line.split(": ", 1) for line in lines if not line.startswith("|"))
    assert said["chosen"] == "default" and "fast" not in said
    assert said["chosen_work"].startswith("default ran every case here whole")
    assert said["no_fast"].startswith("no candidate that prunes kept 90%")
    data = json.loads(invoke("calibrate", "--records", str(records), "--no-save", "-o", "json"))
    assert data["chosen"] == "default" and data["fast"] is None
    pruning = [*rows, _record("0.5@24% 0.3@57%", True, 0.5)]
    records.write_text("\n".join(json.dumps(r) for r in pruning))
    data = json.loads(invoke("calibrate", "--records", str(records), "--no-save", "-o", "json"))
    assert data["fast"] == "0.5@24% 0.3@57%" and "no_fast" not in data


def test_records_that_cannot_be_read_are_one_error_line(tmp_path: Path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text('{"rows": []}')
    for command in ("calibrate", "eval"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--records", str(broken)])
        captured = capsys.readouterr()
        assert exit_info.value.code == 1
        assert captured.err.startswith(f"error: cannot read eval records from {broken}")
        assert len(captured.err.strip().splitlines()) == 1


def test_a_base_model_without_a_chat_template_skips_the_chat_families(
    tiny_model_dir: Path, tmp_path
):
    base = tmp_path / "base-model"
    shutil.copytree(tiny_model_dir, base)
    config = json.loads((base / "tokenizer_config.json").read_text())
    config.pop("chat_template")
    (base / "tokenizer_config.json").write_text(json.dumps(config))
    data = json.loads(
        invoke(
            "eval",
            "-m",
            str(base),
            "--families",
            "passkey,chat,freeform-chat",
            "--lengths",
            "1000",
            "--cases",
            "1",
            "--lazy",
            "none",
            "--baselines",
            str(tmp_path / "b.json"),
            "--output",
            "json",
        )  # fmt: skip
    )
    assert data["skipped"] == "chat, freeform-chat: the model has no chat template"
    assert {case["family"] for case in data["cases"]} == {"passkey"}


def test_bench_progress_names_the_prompt_length_its_table_gives(tiny):
    model, tokenizer = tiny
    said: list[str] = []
    rows = bench(model, tokenizer, [600], [], gen_len=2, on_run=said.append)
    tokens = rows[0]["prompt_tokens"]
    assert tokens < 600 and said == [
        f"{tokens} tokens, warm-up baseline",
        f"{tokens} tokens, baseline, run 1/1",
    ]
