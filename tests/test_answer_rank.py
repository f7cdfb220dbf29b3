"""benchmarks/answer_rank.py: it finds the answer's tokens and ranks them at each pruning layer."""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
from conftest import benchmark_script

from lazymlx.engine import prefill
from lazymlx.engine.config import PRESETS
from lazymlx.evals.cases import make_case
from lazymlx.generation import encode_prompt

answer_rank = benchmark_script("answer_rank")


def test_the_answer_is_found_and_ranked_at_every_pruning_layer(tiny):
    model, tokenizer = tiny
    case = make_case("needle-docs", tokenizer, 1000, 0, "calibration")
    tokens = encode_prompt(tokenizer, case.segments[0]).tolist()
    wanted = answer_rank.answer_tokens(tokenizer, tokens, case.gold)
    assert tokenizer.decode([tokens[i] for i in wanted]) == case.gold
    ranker_own = prefill.Ranker.own
    config = PRESETS["fast"]  # two pruning layers: 0 and 2 of the tiny model's 4
    rows = answer_rank.ranks(model, tokenizer, case, config)
    assert prefill.Ranker.own is ranker_own  # the engine is as it was
    assert [r["layer"] for r in rows] == sorted(lazymlx.LazyState(model).pruning_layers(config))
    first, second = rows
    assert first["ranked"] == len(tokens) and 1 <= first["rank"] <= len(tokens)
    assert first["share"] == first["rank"] / len(tokens)
    # the second layer ranks what the first kept, the answer among them or not
    assert second["ranked"] == -(-len(tokens) // 2)
    assert second["rank"] is None or 1 <= second["rank"] <= second["ranked"]
