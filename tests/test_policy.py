"""The pruning policy alone, on plain arrays: the length gate, the count a mass rule keeps, where
a question points and where the first cut falls (lazymlx/engine/policy.py)."""

from __future__ import annotations

import mlx.core as mx
import pytest

from lazymlx import LazyConfig
from lazymlx.engine import policy
from lazymlx.engine.policy import Phase
from lazymlx.errors import LazymlxError


def test_a_mass_rule_keeps_few_of_sharp_attention_and_most_of_spread_attention():
    sharp = mx.array([0.0] * 90 + [10.0] * 5 + [0.0] * 5)  # the mass on 5 tokens of 100
    spread = mx.ones(100)
    none = mx.zeros(100, dtype=mx.bool_)

    def count(scores, bounds, mass, forced=none, dense=1.0):
        return policy.kept_count(scores, forced, bounds, LazyConfig(mass=mass, dense=dense))

    assert count(sharp, (1, 100), 0.9) == 5
    assert count(spread, (1, 100), 0.9) == 90
    # the floor and the ceiling bound it; p = 1 (or no mass rule) keeps the ceiling's count
    assert count(sharp, (20, 100), 0.9) == 20
    assert count(spread, (1, 50), 0.9) == 50
    assert count(sharp, (1, 100), 1.0) == 100
    assert count(sharp, (1, 60), 0.0) == 60
    # forced tokens (sinks, the last one) go on beside the mass's, their scores aside
    assert count(sharp, (1, 100), 0.9, forced=mx.arange(100) >= 98) == 7
    # spread past `dense` of the tokens: every one goes on, past any ceiling
    assert count(spread, (1, 50), 0.9, dense=0.5) == 100


def test_the_length_gate_and_the_bounds_of_a_cut():
    config = LazyConfig(schedule=((0.25, 0.5),), mass=0.9, least=0.1, min_prompt=100)
    assert not policy.prunes_step(config, 99) and policy.prunes_step(config, 100)
    assert not policy.prunes_step(LazyConfig(), 10_000)  # keep-all prunes nothing
    assert policy.bounds(config, 0.5, 200, 4, prune=True) == (20, 100)
    assert policy.bounds(config, 0.5, 200, 4, prune=False) == (200, 200)
    assert policy.bounds(config, 0.5, 3, 4, prune=True) == (3, 3)  # the forced ones, at least


def peaks(rows: int, sharp: dict[tuple[int, int], float], queries: int = 4) -> mx.array:
    """A (queries, rows) peak: every query spread evenly, but for the (query, row) cells given."""
    peak = mx.full((queries, rows), 1.0 / rows)
    for (query, row), probability in sharp.items():
        peak[query, row] = probability
    return peak


def test_pointing_is_the_mean_of_the_sharpest_queries_on_rows_a_question_can_point_at():
    eligible = mx.arange(100) >= 4
    strength, best, rows = policy.pointing(peaks(100, {(0, 50): 0.9, (1, 51): 0.6}), eligible)
    assert strength == pytest.approx((0.9 + 0.6 + 0.01) / 3)
    assert rows[:2].tolist() == [50, 51] and best[0].item() == pytest.approx(0.9)
    # a sink or the window's own words are no place in the text
    strength, _, _ = policy.pointing(peaks(100, {(0, 2): 0.9, (1, 2): 0.9, (2, 2): 0.9}), eligible)
    assert strength == pytest.approx(0.01)
    assert policy.pointing(mx.zeros((0, 100)), eligible)[0] == 0.0


def test_the_first_cut_waits_for_the_question_to_point_and_else_runs_whole():
    config = LazyConfig(schedule=((0.25, 1.0),), mass=0.8, point=0.5)
    phase = Phase(prune=True)
    assert not policy.first_cut(config, phase, 0.2, last_chance=False)
    assert phase.prune and phase.pointing == 0.2
    assert policy.first_cut(config, phase, 0.6, last_chance=False)  # it points: cut here
    spread = Phase(prune=True)
    assert not policy.first_cut(config, spread, 0.3, last_chance=True)
    assert not spread.prune  # pointed nowhere by the last candidate layer: whole from here
    # without `point` the first cut falls at the schedule's first depth, whatever the attention
    assert policy.first_cut(LazyConfig(schedule=((0.25, 0.5),)), Phase(prune=True), 0.0, True)


def test_the_place_a_question_points_at_goes_on_with_its_neighbours():
    positions = mx.arange(200)
    best, rows = mx.array([0.9, 0.1]), mx.array([100, 10])
    near = policy.pointed_rows(best, rows, 0.5, positions)
    kept = [i for i, on in enumerate(near.tolist()) if on]
    assert kept == list(range(100 - policy.AROUND, 100 + policy.AROUND + 1))
    assert not policy.pointed_rows(best, rows, 0.95, positions).any().item()
    # rows out of text order (a pruned context's): by position, not by index
    shuffled = mx.array([150, 10, 100, 101, 0])
    near = policy.pointed_rows(mx.array([0.9]), mx.array([2]), 0.5, shuffled)
    assert near.tolist() == [False, False, True, True, False]


def test_the_first_cut_may_fall_at_any_ranking_layer_before_the_second_cut():
    config = LazyConfig(schedule=((0.25, 1.0), (0.5, 1.0)), mass=0.8, point=0.5)
    assert config.first_cuts(24) == [6, 7, 8, 9, 10, 11]
    assert set(config.pruning_layers(24)) == {6, 7, 8, 9, 10, 11, 12}
    assert set(config.pruning_layers(24, deferred=False)) == {6, 12}
    # on a sliding-window model only its global layers rank
    assert config.first_cuts(18, ranking=[5, 11, 17]) == [5]
    assert LazyConfig(schedule=((0.25, 1.0), (0.5, 1.0)), mass=0.8).first_cuts(24) == [6]
    # the attention decides whether and where: the work is known only as a least
    assert config.work_share(1000, 24) == 1.0 and config.work_share(1000, 24, fewest=True) < 1
    with pytest.raises(LazymlxError, match="point must be in"):
        LazyConfig(point=2.0)


def test_a_step_says_where_it_cut_or_why_it_ran_whole():
    phase = Phase(prune=True)
    phase.pointing = 0.62
    phase.cuts(6)
    phase.cuts(9)  # a later cut: the first one is what a user is told
    assert (
        phase.said(24, point=True) == "first cut at layer 7 of 24, where the question points (0.62)"
    )
    assert phase.said(24, point=False) == "first cut at layer 7 of 24"
    spread = Phase(prune=True)
    spread.runs_whole(policy.NOWHERE)
    spread.runs_whole(policy.SPREAD)  # the first reason stands
    assert spread.said(24, point=True) == "no look-up"
    assert Phase(prune=True).said(24, point=True) == ""  # a step that never reached a cut
