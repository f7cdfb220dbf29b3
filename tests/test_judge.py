"""The full model's judgment of an answer: stock's mean per-token NLL, through one prefilled
cache per prompt, equals a plain forward pass over prompt and answer."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from conftest import random_model, random_tokens

from lazymlx.errors import LazymlxError
from lazymlx.evals import judge
from lazymlx.evals.judge import Judge


def plain_nll(model, prompt: list[int], answer: list[int]) -> float:
    logits = model(mx.array(prompt + answer)[None])[0, len(prompt) - 1 : -1]
    logprobs = nn.log_softmax(logits.astype(mx.float32), axis=-1)
    return -sum(logprobs[i, token].item() for i, token in enumerate(answer)) / len(answer)


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])  # gemma: rotating local caches
def test_the_judges_nll_equals_a_plain_forward_pass(tmp_path, family):
    model = random_model(family, sliding_window=16) if family == "gemma3_text" else random_model()
    prompt = random_tokens(40, seed=1)
    answers = [random_tokens(7, seed=2), random_tokens(1, seed=3), random_tokens(12, seed=4)]
    judge = Judge(model, tmp_path)
    for answer in answers:  # each on the same prompt's cache, untouched by the one before
        assert judge.nll(prompt, answer) == pytest.approx(
            plain_nll(model, prompt, answer), abs=1e-4
        )
    assert judge.nll(prompt, []) is None


def test_the_judge_keeps_its_scores_and_the_prompts_cache(tmp_path, monkeypatch):
    model = random_model()
    prompt, answer = random_tokens(30, seed=5), random_tokens(5, seed=6)
    first = Judge(model, tmp_path).nll(prompt, answer)
    assert len(list(tmp_path.glob("*.safetensors"))) == 1
    again = Judge(model, tmp_path)
    monkeypatch.setattr(again, "_score", lambda *a: pytest.fail("scored twice"))
    assert again.nll(prompt, answer) == first
    # a new answer loads the saved cache instead of prefilling the prompt again
    other, answer = Judge(model, tmp_path), random_tokens(4, seed=7)
    monkeypatch.setattr(judge, "make_prompt_cache", lambda m: pytest.fail("prefilled twice"))
    assert other.nll(prompt, answer) == pytest.approx(plain_nll(model, prompt, answer), abs=1e-4)


def test_a_broken_scores_file_is_one_clear_error(tmp_path):
    (tmp_path / "scores.json").write_text("{not json")
    with pytest.raises(LazymlxError, match="delete that file"):
        Judge(random_model(), tmp_path)


def test_stocks_cached_answer_to_an_open_case_runs_again_without_the_prompt_the_judge_reads():
    from types import SimpleNamespace

    from lazymlx.evals.runner import needs_run

    open_case, exact_case = SimpleNamespace(judge="doc"), SimpleNamespace(judge=None)
    bare, whole = SimpleNamespace(context=None), SimpleNamespace(context=[1, 2, 3])
    assert needs_run(open_case, None) and needs_run(open_case, bare)
    assert not needs_run(open_case, whole) and not needs_run(exact_case, bare)
    assert not needs_run(open_case, bare, "reference")  # a reference's answer is judged as is
