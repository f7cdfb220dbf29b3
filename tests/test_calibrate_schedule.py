"""Calibration's search (lazymlx/evals/search_plan.py): what it runs, when it stops, and that it
chooses what running every candidate on every case would; on synthetic records (no model),
then end to end through `lazymlx calibrate --minutes` on a tiny random model."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

import lazymlx
from lazymlx.cli.app import app
from lazymlx.engine.config import PRESETS, LazyConfig
from lazymlx.evals.choice import Bar, candidate_config, choose
from lazymlx.evals.records import BASELINE, Record
from lazymlx.evals.reference import REFERENCE, REFERENCE_4BIT
from lazymlx.evals.search_plan import (
    Plan,
    Speed,
    by_work,
    fit,
    next_run,
    planned_runs,
    run_order,
    run_search,
    standing,
)

# three candidates, cheapest first by the work they schedule
SHARES = {"hard": 0.4, "middle": 0.5, "soft": 0.7}
OPEN_FAMILY = "summary"


# stock's judgment (mean NLL) of open answers: stock's own, the 4-bit reference's by default
STOCK_NLL, FOUR_BIT_NLL = 0.1, 0.2


def _record(case, mode: str, correct: bool, baseline_correct: bool = True, nll=None) -> Record:
    family, length, seed = case
    share = SHARES.get(mode, 1.0)
    return Record(
        family, "calibration", length, seed, "raw", "filler", 0.5, mode, length, correct,
        baseline_correct, 3, bool(correct), 1.0, 2.0, share, share, 10.0, 1.0, "", [1, 2, 3],
        score=None if nll is None else 1.0, nll=nll,
    )  # fmt: skip


class Oracle:
    """Every run's outcome, fixed ahead: what a deterministic greedy model would answer; an
    open case's outcome is stock's judgment of the answer (its NLL)."""

    def __init__(self, outcomes: dict[tuple, tuple[bool, float | None]], stock_right: dict):
        self.outcomes, self.stock_right, self.runs = outcomes, stock_right, []

    def __call__(self, step) -> Record:
        self.runs.append(step)
        case, mode = step
        right = self.stock_right.get(case, True)
        opened = case[0] == OPEN_FAMILY
        if mode == BASELINE:
            return _record(case, mode, right, right, STOCK_NLL if opened else None)
        usual = FOUR_BIT_NLL if mode == REFERENCE_4BIT else STOCK_NLL
        correct, nll = self.outcomes.get(step, (True, usual if opened else None))
        return _record(case, mode, correct, right, nll)

    def grid(self, plan: Plan) -> list[Record]:
        """What calibrating without the search ran: every mode on every case (a reference on
        the cases it runs on)."""
        runs = [(case, BASELINE) for case in plan.cases]
        runs += [
            (c, mode) for mode, cases in plan.references().items() for c in plan.cases if c in cases
        ]
        runs += [(case, mode) for case in plan.cases for mode in plan.candidates]
        return [self(step) for step in runs]


def _cases(families=("passkey", "json"), lengths=(1024, 2048), seeds=3):
    return run_order((f, n, s) for f in families for n in lengths for s in range(seeds))


def _plan(cases, reference=True, bar: Bar | None = None) -> Plan:
    bar = bar or Bar()
    exact = frozenset(c for c in cases if c[0] != OPEN_FAMILY)
    opened = frozenset(cases) - exact
    return Plan(cases, tuple(SHARES), exact if reference else frozenset(), bar, opened)


def test_the_cheapest_candidate_meeting_the_bar_ends_the_search():
    cases = _cases()
    plan, oracle = _plan(cases), Oracle({}, {})
    records = run_search(plan, oracle)
    assert [mode for _, mode in oracle.runs[: 2 * len(cases)]] == [BASELINE] * len(cases) + [
        REFERENCE
    ] * len(cases)  # stock and the reference once per case, first
    assert {mode for _, mode in oracle.runs[2 * len(cases) :]} == {"hard"}
    assert choose(records).chosen == choose(records).fast == "hard"
    assert standing(plan, records)["soft"].startswith("not needed")


def test_a_loss_the_reference_does_not_share_drops_a_candidate_at_once():
    cases = _cases()
    lost = ("json", 2048, 0)
    oracle = Oracle({(lost, "hard"): (False, None)}, {})
    plan = _plan(cases, bar=Bar(fast_overall=1.0))  # hard can meet no bar after its loss
    records = run_search(plan, oracle)
    hard = [case for case, mode in oracle.runs if mode == "hard"]
    assert hard[-1] == lost and len(hard) < len(cases)  # nothing after the loss
    assert choose(records).chosen == "middle"
    assert "2048 tokens" in standing(plan, records)["hard"]


def test_a_loss_the_reference_shares_is_forgiven_by_the_relative_bar():
    cases = _cases()
    lost = ("json", 2048, 0)
    oracle = Oracle({(lost, "hard"): (False, None), (lost, REFERENCE): (False, None)}, {})
    records = run_search(_plan(cases), oracle)
    assert choose(records).chosen == "hard"
    assert not any(mode == "middle" for _, mode in oracle.runs)


def test_a_candidate_runs_first_the_cases_a_cheaper_one_lost():
    cases = _cases()
    lost = ("json", 2048, 2)  # the last case in run order
    oracle = Oracle({(lost, "hard"): (False, None), (lost, "middle"): (False, None)}, {})
    run_search(_plan(cases, bar=Bar(fast_overall=1.0)), oracle)
    middle = [case for case, mode in oracle.runs if mode == "middle"]
    assert middle == [lost]  # lost there too: dropped after one run


def test_cases_stock_gets_wrong_are_not_run_by_candidates():
    cases = _cases()
    wrong = ("passkey", 1024, 1)
    oracle = Oracle({}, {wrong: False})
    records = run_search(_plan(cases), oracle)
    assert (wrong, "hard") not in oracle.runs and choose(records).chosen == "hard"


def test_open_answers_are_judged_against_the_4bit_reference():
    cases = _cases(families=(OPEN_FAMILY,), lengths=(512,), seeds=4)
    garbled = {(case, "hard"): (None, 0.5) for case in cases}  # stock finds them unlikely
    oracle = Oracle(garbled, {})
    plan = _plan(cases)
    records = run_search(plan, oracle)
    assert [mode for _, mode in oracle.runs[4:8]] == [REFERENCE_4BIT] * 4  # not the 8-bit
    assert choose(records).chosen == "middle"
    assert "summary (judge), open-ended" in standing(plan, records)["hard"]
    # dropped once its mean can no longer come under the 4-bit reference's: after two of four
    assert len([c for c, mode in oracle.runs if mode == "hard"]) == 2


def test_the_search_stops_where_the_budget_says():
    cases = _cases()
    oracle = Oracle({}, {})
    records = run_search(_plan(cases), oracle, stop=lambda step: step[1] == "hard")
    assert {r.mode for r in records} == {BASELINE, REFERENCE}
    assert choose(records).chosen is None
    assert next_run(_plan(cases), records) == (cases[0], "hard")  # --resume goes on here


@pytest.mark.parametrize("seed", range(10))
def test_the_search_chooses_what_running_everything_chooses(seed: int):
    """Random outcomes, with and without the reference: the drops never lose the answer."""
    rng = random.Random(seed)
    cases = _cases(families=("passkey", "json", OPEN_FAMILY), lengths=(512, 1024), seeds=4)
    outcomes = {}
    for case in cases:
        for mode, p in ((REFERENCE, 0.97), ("hard", 0.9), ("middle", 0.95), ("soft", 0.98)):
            nll = rng.choice((0.1, 0.1, 0.15, 0.4)) if case[0] == OPEN_FAMILY else None
            outcomes[case, mode] = (rng.random() < p, nll)
        outcomes[case, REFERENCE_4BIT] = (True, rng.choice((0.1, 0.2, 0.3)))
    stock_right = {case: rng.random() < 0.9 for case in cases}
    bar = Bar(fast_overall=rng.choice((0.9, 0.95)))
    for reference in (True, False):
        plan = _plan(cases, reference, bar)
        searched = choose(run_search(plan, Oracle(outcomes, stock_right)), bar)
        full = choose(Oracle(outcomes, stock_right).grid(plan), bar)
        assert (searched.chosen, searched.fast) == (full.chosen, full.fast)


def test_candidates_losing_short_prompts_are_chosen_behind_a_gate():
    """Every candidate loses at 512 tokens: each goes on behind the lowest gate (prompts under
    it run whole), running only the longer cases it had not run bare, and the search chooses
    what the whole grid chooses."""
    cases = _cases(lengths=(512, 1024, 2048))
    short = {(c, mode): (False, None) for c in cases if c[1] == 512 for mode in SHARES}
    oracle, plan = Oracle(short, {}), _plan(cases)
    records = run_search(plan, oracle)
    assert choose(records).chosen == choose(Oracle(short, {}).grid(plan)).chosen == "hard from1024"
    hard = [case for case, mode in oracle.runs if mode == "hard"]
    assert len(hard) == len(set(hard)) and [c[1] for c in hard[:2]] == [512, 512]  # dropped
    assert set(hard[2:]) == {c for c in cases if c[1] > 512}  # then behind the gate
    assert not any(mode in ("middle", "soft") and c[1] > 512 for c, mode in oracle.runs)
    assert "under 1024 tokens" in standing(plan, records)["hard from1024"]
    row = next(r for r in choose(records).frontier if r["mode"] == "hard from1024")
    assert row["compute_fraction"] == pytest.approx((1.0 + 0.4 + 0.4) / 3)


def test_the_gate_rises_past_every_length_a_candidate_loses():
    cases = _cases(lengths=(512, 1024, 2048))
    lost = {(c, "hard"): (False, None) for c in cases if c[1] < 2048 and c[2] == 0}
    lost |= {(c, mode): (False, None) for c in cases if c[1] == 512 for mode in SHARES}
    plan = _plan(cases)
    records = run_search(plan, Oracle(lost, {}))
    assert choose(records).chosen == "middle from1024"  # the lowest gate, then the cheapest
    no_gate_helps = {(c, mode): (False, None) for c in cases for mode in SHARES if c[2] == 0}
    records = run_search(plan, Oracle(no_gate_helps, {}))
    assert choose(records).chosen is None and next_run(plan, records) is None
    assert "behind a gate" in standing(plan, records)


def test_open_answers_are_judged_at_every_length_not_only_pooled():
    """Summaries stock finds less likely than the 4-bit reference's at 512 and stock's own at
    1k and 2k: within the bar pooled over the family, but the 512 group fails it, so a gate
    decides."""
    cases = _cases(families=(OPEN_FAMILY,), lengths=(512, 1024, 2048), seeds=2)
    low = {(c, mode): (None, 0.35) for c in cases if c[1] == 512 for mode in SHARES}
    plan = _plan(cases)
    records = run_search(plan, Oracle(low, {}))
    frontier = {row["mode"]: row for row in choose(records).frontier}
    assert frontier["hard"]["worst_open"] == "512 tokens (judge)"
    assert choose(records).chosen == "hard from1024"


def test_a_gate_is_written_into_the_candidates_name():
    config = candidate_config(PRESETS["gentle"], "0.5@24% 0.3@57% min1024 sparse from3840")
    assert (config.min_prompt, config.min_keep, config.decode) == (3840, 1024, "sparse")
    assert config.schedule == ((0.24, 0.5), (0.57, 0.3))
    assert candidate_config(PRESETS["gentle"], "default from2048").min_prompt == 2048


@pytest.mark.parametrize("seed", range(10))
def test_the_search_behind_gates_chooses_what_running_everything_chooses(seed: int):
    """Random outcomes where short prompts lose most, so gates decide: the same choice."""
    rng = random.Random(seed)
    cases = _cases(families=("passkey", OPEN_FAMILY), lengths=(512, 1024, 2048), seeds=3)
    outcomes = {}
    for case in cases:
        short = case[1] == 512
        for mode, p in ((REFERENCE, 0.99), ("hard", 0.9), ("middle", 0.95), ("soft", 0.98)):
            p = p - 0.3 if short and mode != REFERENCE else p
            nll = rng.choice((0.1, 0.1, 0.15, 0.5 if short else 0.1))
            outcomes[case, mode] = (rng.random() < p, nll if case[0] == OPEN_FAMILY else None)
        outcomes[case, REFERENCE_4BIT] = (True, rng.choice((0.1, 0.2, 0.3)))
    stock_right = {case: rng.random() < 0.95 for case in cases}
    for reference in (True, False):
        plan = _plan(cases, reference)
        searched = choose(run_search(plan, Oracle(outcomes, stock_right)))
        full = choose(Oracle(outcomes, stock_right).grid(plan))
        assert (searched.chosen, searched.fast) == (full.chosen, full.fast)


def test_cases_run_round_robin_cheap_lengths_first():
    cases = [("a", 2048, 0), ("a", 1024, 0), ("a", 1024, 1), ("b", 1024, 0)]
    assert run_order(cases) == (("a", 1024, 0), ("b", 1024, 0), ("a", 2048, 0), ("a", 1024, 1))


def test_candidates_rank_by_scheduled_work_sparse_first_on_a_tie():
    shares = {"b": lambda n: 0.5, "a sparse": lambda n: 0.5, "c": lambda n: 0.4}
    assert by_work(shares, [1024]) == ("c", "a sparse", "b")


def test_the_budget_keeps_the_cases_that_fit():
    cost = {("a", 256, 0): 10.0, ("a", 4096, 0): 100.0, ("b", 256, 0): 10.0}
    assert fit(list(cost), cost.get, 25.0) == (("a", 256, 0), ("b", 256, 0))
    assert fit([("a", 4096, 0)], cost.get, 1.0) == (("a", 4096, 0),)  # one case at least
    assert Speed(0.01, 0.1).run_s(1000, 10, share=0.5) == pytest.approx(6.0)


def test_a_budget_is_not_spent_on_runs_the_cache_already_holds():
    case, other = ("passkey", 1024, 0), ("passkey", 2048, 0)
    cands = tuple(SHARES) + ("extra",)
    ref = [REFERENCE]
    nothing = planned_runs(case, cands, ref, lambda step: False, lambda c: True)
    assert [mode for _, mode in nothing] == [BASELINE, REFERENCE, "hard", "middle", "soft"]
    both = planned_runs(case, cands, ref, lambda step: step[0] == case, lambda c: True)
    assert [mode for _, mode in both] == ["hard", "middle", "soft"]  # a registry model's
    stock = planned_runs(other, cands, ref, lambda step: step[1] == BASELINE, lambda c: True)
    assert [mode for _, mode in stock] == [REFERENCE, "hard", "middle", "soft"]
    # stock's cached answer is wrong: candidates never run the case, so it costs nothing
    assert planned_runs(case, cands, ref, lambda step: True, lambda c: False) == []
    assert planned_runs(case, cands, [], lambda step: False, lambda c: False) == [(case, BASELINE)]


def test_calibrate_with_minutes_sizes_the_cases_to_what_the_cache_leaves_to_run(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch
):
    from lazymlx.evals import calibration

    pace = calibration._pace

    def slow(*args):  # the tiny model at a big one's pace: sizing is what it decides
        _, probe = pace(*args)
        return Speed(0.03, 0.0), probe

    monkeypatch.setattr(calibration, "_pace", slow)
    args = [
        "calibrate", "-m", str(tiny_model_dir), "--families", "completion,passkey",
        "--lengths", "600,1000", "--cases", "1", "--per-length", "0", "--per-family", "0",
        "--fast", "0", "--no-save", "--output", "json",
    ]  # fmt: skip

    def head(baselines: Path, *more: str) -> dict:
        result = CliRunner().invoke(app, [*args, "--baselines", str(baselines), *more])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    # 3,200 prompt tokens at 0.03 s: stock and the reference alone are 192 s of the 300
    journal = str(tmp_path / "journal.jsonl")
    fresh = head(tmp_path / "fresh.json", "--minutes", "5", "--journal", journal)
    assert not fresh["rests_on"].startswith("4 cases")
    assert "did not fit the time budget" in fresh["left_out"]
    again = head(tmp_path / "fresh.json", "--minutes", "5", "--journal", journal, "--resume")
    assert again["rests_on"] == fresh["rests_on"] and again["left_out"] == fresh["left_out"]
    whole = head(tmp_path / "fresh.json", "--journal", journal, "--resume")  # adds them
    assert whole["rests_on"].startswith("4 cases") and "left_out" not in whole
    cached = tmp_path / "cached.json"
    assert head(cached)["rests_on"].startswith("4 cases")  # stock and the reference on all
    budgeted = head(cached, "--minutes", "5")
    assert budgeted["rests_on"].startswith("4 cases") and "left_out" not in budgeted


def test_work_share_is_what_the_prompt_step_computes(tiny):
    model, tokenizer = tiny
    config = LazyConfig(schedule=((0.25, 0.5), (0.5, 0.3)), min_keep=40)
    prompt = [3 + i % 250 for i in range(600)]
    *_, last = lazymlx.stream_generate(model, tokenizer, prompt, max_tokens=1, lazy=config)
    layers = len(model.layers)
    assert config.work_share(len(prompt), layers) == pytest.approx(last.lazy.work_share)
    assert PRESETS["gentle"].work_share(4003, 24) == pytest.approx(0.78294, abs=1e-5)
    assert PRESETS["gentle"].work_share(1003, 24) == 1.0  # its floor keeps every token
    assert PRESETS["gentle"].work_share(200, 24) == 1.0  # under min_prompt: whole
    # an uncalibrated model: whole where the question points nowhere, at most
    assert PRESETS["default"].work_share(4003, 24) == 1.0
    assert PRESETS["default"].work_share(4003, 24, fewest=True) < 0.6


def test_calibrate_with_minutes_says_what_its_choice_rests_on_and_resumes(
    tiny_model_dir: Path, tmp_path: Path
):
    journal = tmp_path / "journal.jsonl"
    args = [
        "calibrate", "-m", str(tiny_model_dir), "--families", "completion,passkey",
        "--lengths", "600,1000", "--cases", "1", "--minutes", "30", "--per-length", "0",
        "--per-family", "0", "--fast", "0", "--baselines", str(tmp_path / "b.json"),
        "--journal", str(journal), "--no-save", "--output", "json",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["rests_on"].startswith("4 cases (2 at 600, 2 at 1000) in 2 families")
    assert "prompt tok/s" in data["pace"] and data["stopped"] is None
    assert data["chosen"] in data["search"] and float(data["spent"].split()[0]) < 30
    lines = journal.read_text().splitlines()
    again = CliRunner().invoke(app, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    resumed = json.loads(again.stdout)
    assert resumed["resumed"] == len(lines) and journal.read_text().splitlines() == lines
    assert resumed["chosen"] == data["chosen"]
    # stopped before any candidate ran: its sizing was never used, so it is sized again
    journal.write_text(next(line for line in lines if '"mode": "baseline"' in line) + "\n")
    early = CliRunner().invoke(app, [*args, "--resume"])
    assert early.exit_code == 0, early.output
    assert json.loads(early.stdout)["rests_on"].startswith("4 cases")


def test_gentle_prunes_half_as_hard_as_the_rule_it_comes_from():
    from lazymlx.evals.choice import gentler

    fixed = candidate_config(PRESETS["gentle"], "0.4@24% 0.6@57% sparse")
    assert gentler(fixed).schedule == ((0.24, 0.7), (0.57, 0.8))
    assert gentler(fixed).decode == "sparse"
    mass = candidate_config(PRESETS["gentle"], "mass0.9 1@24% 0.5@57% least0.2 dense0.04")
    gentle = gentler(mass)
    assert (gentle.mass, gentle.dense, gentle.least) == pytest.approx((0.9, 0.04, 0.6))
    assert gentle.schedule == ((0.24, 1.0), (0.57, 0.75))
