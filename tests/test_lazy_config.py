"""LazyConfig: validation, presets and the mapping of depth fractions onto layers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lazymlx import LazyConfig
from lazymlx.engine.presets import config_from_dict, resolve_preset
from lazymlx.errors import LazymlxError


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schedule": ((0.5, 0.0),)}, r"keep ratio must be in \(0, 1\], got 0.0"),
        ({"schedule": ((0.5, 1.5),)}, r"keep ratio must be in \(0, 1\], got 1.5"),
        ({"schedule": ((1.0, 0.5),)}, r"pruning depth must be in \[0, 1\), got 1.0"),
        ({"schedule": ((-0.1, 0.5),)}, r"pruning depth must be in \[0, 1\), got -0.1"),
        ({"decode": "eager"}, "unknown decode mode 'eager'; choose one of: sparse, revive"),
        ({"min_prompt": -1}, "min_prompt must be >= 0, got -1"),
        ({"min_keep": -1}, "min_keep must be >= 0, got -1"),
        (
            {"selection": "best"},
            "unknown selection 'best'; choose one of: attention, paper, static",
        ),
    ],
)
def test_invalid_fields_are_clear_errors(kwargs, message):
    with pytest.raises(LazymlxError, match=message):
        LazyConfig(**kwargs)


def test_presets():
    assert not resolve_preset("keep-all", None).prunes
    assert resolve_preset("default", None).point  # uncalibrated: the rule that travels
    gentle = resolve_preset("gentle", None)
    assert gentle.prunes
    # the first fifth of the layers never prune: pruning there destroys retrieval (design note)
    assert min(depth for depth, _ in gentle.schedule) >= 0.2
    with pytest.raises(
        LazymlxError,
        match=r"unknown lazy preset 'turbo' for this model; choose one of: off \(stock mlx-lm\), "
        "keep-all, default",
    ):
        resolve_preset("turbo", None)


def test_a_saved_preset_with_a_knob_lazymlx_lacks_is_refused_not_run_as_another():
    default = resolve_preset("gentle", None)
    saved = {f: getattr(default, f) for f in default.__dataclass_fields__}
    assert config_from_dict(saved) == default
    with pytest.raises(LazymlxError, match="a saved preset sets masses, segments, which"):
        config_from_dict({**saved, "segments": 16, "masses": [[0.5, 0.9]]})


def test_depth_fractions_map_onto_any_layer_count():
    config = LazyConfig(schedule=((0.8, 0.5), (0.27, 0.5), (0.54, 0.5)))
    assert config.schedule == ((0.27, 0.5), (0.54, 0.5), (0.8, 0.5))  # sorted by depth
    half = 0.5
    assert config.pruning_layers(30) == {8: half, 16: half, 24: half}
    assert config.pruning_layers(32) == {8: half, 17: half, 25: half}
    # two depths on one layer compound; pruning after the last layer would select for nothing
    assert config.pruning_layers(2) == {0: half}
    assert LazyConfig(schedule=((0.5, 1.0),)).pruning_layers(30) == {}


def test_a_sliding_window_model_prunes_at_its_global_layers_only():
    """Gemma 3 270M: 18 layers, global ones at 5, 11 and 17. Each depth goes to the nearest
    global layer but the last (the deeper on a tie); a model with no usable global layer keeps
    the depths' own layers."""
    gemma = (5, 11, 17)
    assert LazyConfig(schedule=((0.24, 0.5), (0.57, 0.3))).pruning_layers(18, gemma) == {
        5: 0.5,
        11: 0.3,
    }
    assert LazyConfig(schedule=((0.67, 0.2),)).pruning_layers(18, gemma) == {11: 0.2}
    assert LazyConfig(schedule=((0.45, 0.5),)).pruning_layers(18, gemma) == {11: 0.5}  # 8: a tie
    two = LazyConfig(schedule=((0.5, 0.5), (0.6, 0.5))).pruning_layers(18, gemma)
    assert two == {11: 0.25}  # both land on one layer: they compound
    assert LazyConfig(schedule=((0.5, 0.5),)).pruning_layers(18, (17,)) == {9: 0.5}


def scheduled_work(config: LazyConfig, tokens: int = 1000, layers: int = 30) -> int:
    """(token, layer) pairs a prompt's schedule computes, sinks and neighbours aside."""
    keep, present, work = config.pruning_layers(layers), tokens, 0
    for layer in range(layers):
        work += present
        if layer in keep:
            present = config.kept_count(keep[layer], present)
    return work


def test_fast_computes_less_than_gentle_with_the_same_scoring():
    default, fast = resolve_preset("gentle", None), resolve_preset("fast", None)
    off = LazyConfig()
    assert scheduled_work(fast, 4000) < scheduled_work(default, 4000) < scheduled_work(off, 4000)
    # the default's floor keeps a 1k prompt whole; fast has none
    assert scheduled_work(fast) < scheduled_work(default) == scheduled_work(LazyConfig())
    # the same scoring; decode as each was validated (fast sparse, the default revives)
    assert (default.decode, fast.decode) == ("revive", "sparse")
    assert replace(fast, schedule=default.schedule, decode="revive", min_keep=1024) == default


def test_min_keep_is_a_floor_of_tokens_at_each_prune():
    floor = LazyConfig(schedule=((0.24, 0.5), (0.57, 0.3)), min_keep=256)
    assert floor.kept_count(0.5, 500) == 256  # the floor, not the ratio's 250
    assert floor.kept_count(0.3, 256) == 256  # a second prune keeps what reached it
    assert floor.kept_count(0.5, 100) == 100  # never more than reach the layer
    assert floor.kept_count(0.5, 2048) == 1024  # the ratio where it keeps more
    assert LazyConfig().kept_count(0.3, 500) == 150
    assert "at least 256 tokens" in floor.describe()
    with pytest.raises(LazymlxError, match="min_keep must be >= 0"):
        LazyConfig(min_keep=-1)
