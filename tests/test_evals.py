"""The offline accuracy suite: task generators, scoring and length parsing."""

from __future__ import annotations

import pytest

from lazymlx.errors import LazymlxError
from lazymlx.evals.runner import CALIBRATION_SEED, Record, make_cases, summarize
from lazymlx.evals.scoring import agrees, correct
from lazymlx.evals.tasks import TASKS, make_case, parse_tasks
from lazymlx.generation import encode_prompt
from lazymlx.lengths import parse_length, parse_lengths


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("length", [600, 1500])
def test_cases_are_deterministic_sized_and_hold_the_gold_answer_once(tiny, task, length):
    _, tokenizer = tiny
    case = make_case(task, tokenizer, length, seed=3)
    assert case == make_case(task, tokenizer, length, seed=3)
    assert case.text != make_case(task, tokenizer, length, seed=4).text
    assert case.text.count(case.gold) == 1
    tokens = encode_prompt(tokenizer, case.text).size
    # at most the target, and within one haystack unit of it (a real sentence can be long: the
    # tiny model's tokenizer spends a token on every few characters)
    assert length - 200 < tokens <= length


@pytest.mark.parametrize("task", list(TASKS))
def test_the_answer_depth_sweeps_over_seeds(tiny, task):
    _, tokenizer = tiny
    depths = [make_case(task, tokenizer, 600, seed).depth for seed in range(5)]
    assert depths == [0.1, 0.3, 0.5, 0.7, 0.9]


def test_the_gold_answer_sits_at_its_depth(tiny):
    _, tokenizer = tiny
    for seed, depth in enumerate((0.1, 0.3, 0.5, 0.7, 0.9)):
        case = make_case("passkey", tokenizer, 3000, seed)
        where = case.text.index(case.gold) / len(case.text)
        assert abs(where - depth) < 0.05


def test_calibration_cases_never_repeat_eval_cases(tiny):
    _, tokenizer = tiny
    evals = make_cases(tokenizer, list(TASKS), [600], 3)
    calibration = make_cases(tokenizer, list(TASKS), [600], 3, CALIBRATION_SEED)
    assert not {c.text for c in evals} & {c.text for c in calibration}


def test_a_length_too_short_for_a_task_is_a_clear_error(tiny):
    _, tokenizer = tiny
    with pytest.raises(LazymlxError, match="too short for the kv task"):
        make_case("kv", tokenizer, 20, 0)


def test_task_names():
    assert parse_tasks("all") == list(TASKS)
    assert parse_tasks("kv, passkey,kv") == ["kv", "passkey"]
    with pytest.raises(LazymlxError, match="unknown task 'haystack'; choose from: all, passkey"):
        parse_tasks("haystack")


def test_scoring(tiny):
    _, tokenizer = tiny
    case = make_case("passkey", tokenizer, 600, 0)
    assert correct(case, f" {case.gold}. Remember")
    assert not correct(case, f" {case.gold[:-1]}")
    assert not correct(case, f" {case.gold}2.")  # a number run on by a digit is a wrong number
    assert not correct(case, f"1{case.gold}")
    assert correct(case, f'"{case.gold}"\n')
    assert agrees([1, 2, 3, 9], [1, 2, 3, 4], first=3)
    assert not agrees([1, 2, 3, 9], [1, 2, 3, 4], first=4)
    assert agrees([1, 2], [1, 2], first=8)  # both stopped early, the same way
    assert not agrees([1, 2], [1, 2, 5], first=8)


def test_summarize_groups_in_order():
    def record(mode, task, ok, agree, fraction):
        return Record(task, 512, 0, 0.5, mode, 500, ok, ok, agree, 1.0, 2.0, fraction, "")

    rows = summarize(
        [
            record("baseline", "kv", True, True, 1.0),
            record("lazy:default", "kv", False, False, 0.5),
            record("baseline", "kv", True, True, 1.0),
            record("lazy:default", "kv", True, True, 0.6),
        ]
    )
    assert [r["mode"] for r in rows] == ["baseline", "lazy:default"]
    assert rows[1] | {"compute_fraction": 0} == {
        "mode": "lazy:default",
        "task": "kv",
        "length": 512,
        "cases": 2,
        "correct": 1,
        "accuracy": 0.5,
        "answer_agreement": 0.5,
        "agreement": 0.5,
        "compute_fraction": 0,
        "speedup": 2.0,
    }
    assert rows[1]["compute_fraction"] == pytest.approx(0.55)


@pytest.mark.parametrize(
    ("text", "tokens"), [("512", 512), ("2k", 2048), ("8K", 8192), (" 1.5k ", 1536)]
)
def test_lengths(text, tokens):
    assert parse_length(text) == tokens


def test_length_lists_and_errors():
    assert parse_lengths("1k,2k,8k,2k") == [1024, 2048, 8192]
    for bad in ("2x", "0", "-5", "k", "0.3"):
        with pytest.raises(LazymlxError, match="bad prompt length"):
            parse_length(bad)
    with pytest.raises(LazymlxError, match="no prompt length given"):
        parse_lengths(" , ")
