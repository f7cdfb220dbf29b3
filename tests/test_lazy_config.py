"""LazyConfig: validation, presets and the mapping of depth fractions onto layers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lazymlx import LazyConfig
from lazymlx.config import Keep
from lazymlx.errors import LazymlxError


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schedule": ((0.5, 0.0),)}, r"keep ratio must be in \(0, 1\], got 0.0"),
        ({"schedule": ((0.5, 1.5),)}, r"keep ratio must be in \(0, 1\], got 1.5"),
        ({"schedule": ((1.0, 0.5),)}, r"pruning depth must be in \[0, 1\), got 1.0"),
        ({"schedule": ((-0.1, 0.5),)}, r"pruning depth must be in \[0, 1\), got -0.1"),
        ({"keep_first": -1}, "keep_first must be >= 0"),
        ({"decode": "eager"}, "unknown decode mode 'eager'; choose one of: sparse, revive"),
        ({"revive": -1}, "revive must be >= 0, got -1"),
        ({"revive_steps": -1}, "revive_steps must be >= 0 or None, got -1"),
        ({"min_prompt": -1}, "min_prompt must be >= 0, got -1"),
        ({"budgets": ((0.5, 0),)}, "token budget must be >= 1, got 0"),
        ({"budgets": ((1.2, 10),)}, r"budget depth must be in \[0, 1\), got 1.2"),
        ({"floors": ((0.5, 0.0),)}, r"floor ratio must be in \(0, 1\], got 0.0"),
        ({"floors": ((1.0, 0.5),)}, r"floor depth must be in \[0, 1\), got 1.0"),
        ({"floors": "deep"}, "floors must be a list of \\(depth, floor ratio\\) pairs"),
        ({"floors": ((0.5, 0.2),)}, "the floor at depth 0.5 has no budget or mass at that"),
        ({"masses": ((0.5, 0.0),)}, r"attention share ratio must be in \(0, 1\], got 0.0"),
        ({"masses": ((1.0, 0.5),)}, r"mass depth must be in \[0, 1\), got 1.0"),
        ({"masses": "most"}, r"masses must be a list of \(depth, attention share\) pairs"),
        ({"window": 0}, "window must be >= 1, got 0"),
        ({"past_template": "yes"}, "past_template must be true or false, got 'yes'"),
        ({"revive_shaped": 1}, "revive_shaped must be true or false, got 1"),
        ({"pool": -1}, "pool must be >= 0, got -1"),
        ({"keep_last": -2}, "keep_last must be >= 0, got -2"),
        ({"heads": "sum"}, "unknown head reduction 'sum'; choose one of: mean, max"),
        ({"retrieval_heads": 7}, r"retrieval_heads must be a list of \(layer, \[query heads\]\)"),
        ({"retrieval_heads": {"12": [3]}}, "pairs of whole numbers, got \\{'12': \\[3\\]\\}"),
        ({"retrieval_heads": ((7, "12"),)}, "pairs of whole numbers"),
        ({"retrieval_heads": ((7.9, (1,)),)}, "pairs of whole numbers"),
        ({"retrieval_heads": ((7, (True,)),)}, "pairs of whole numbers"),
        ({"retrieval_heads": ((7, (1,)), (7, (2,)))}, "names layer 7 twice; give each layer one"),
        ({"retrieval_heads": ((7, ()),)}, "needs a layer >= 0 and at least one head >= 0, got 7"),
        ({"retrieval_heads": ((7, (-1,)),)}, "at least one head >= 0, got 7: \\[-1\\]"),
        ({"selection": "best"}, "unknown selection 'best'; choose one of: attention, static"),
    ],
)
def test_invalid_fields_are_clear_errors(kwargs, message):
    with pytest.raises(LazymlxError, match=message):
        LazyConfig(**kwargs)


def test_presets():
    assert not LazyConfig.preset("off").prunes
    default = LazyConfig.preset("default")
    assert default.prunes
    # the first fifth of the layers never prune: pruning there destroys retrieval (design note)
    assert min(depth for depth, _ in default.schedule) >= 0.2
    with pytest.raises(
        LazymlxError, match="unknown lazy preset 'turbo'; choose one of: off, default, fast"
    ):
        LazyConfig.preset("turbo")


def test_depth_fractions_map_onto_any_layer_count():
    config = LazyConfig(schedule=((0.8, 0.5), (0.27, 0.5), (0.54, 0.5)))
    assert config.schedule == ((0.27, 0.5), (0.54, 0.5), (0.8, 0.5))  # sorted by depth
    half = Keep(ratio=0.5)
    assert config.pruning_layers(30) == {8: half, 16: half, 24: half}
    assert config.pruning_layers(32) == {8: half, 17: half, 25: half}
    # two depths on one layer compound; pruning after the last layer would select for nothing
    assert config.pruning_layers(2) == {0: half}
    assert LazyConfig(schedule=((0.5, 1.0),)).pruning_layers(30) == {}


def test_budgets_cap_the_kept_tokens_so_the_saving_grows_with_length():
    config = LazyConfig(schedule=((0.3, 0.5),), budgets=((0.3, 1000), (0.6, 300), (0.6, 200)))
    assert config.prunes and LazyConfig(budgets=((0.5, 64),)).prunes
    layers = config.pruning_layers(10)
    assert layers == {3: Keep(0.5, 1000), 6: Keep(1.0, 200)}  # two budgets on a layer: the least
    assert [layers[3].count(n) for n in (100, 2000, 8000)] == [50, 1000, 1000]
    assert layers[6].count(150) == 150 and layers[6].count(1000) == 200
    assert "at most 1000 at 30%" in config.describe()


def test_floors_stop_a_budget_cutting_long_prompts_below_a_share():
    config = LazyConfig(
        schedule=((0.3, 0.4),), budgets=((0.3, 2048),), floors=((0.3, 0.25), (0.3, 0.2))
    )
    layers = config.pruning_layers(10)
    assert layers == {3: Keep(0.4, 2048, 0.25)}  # two floors on a layer: the larger
    # the ratio up to 5k tokens, then the budget, then the floor: 25% of 16k is 4096
    assert [layers[3].count(n) for n in (1024, 4096, 6000, 8192, 16384)] == [
        410, 1639, 2048, 2048, 4096,
    ]  # fmt: skip
    assert "at least 25% at 30%" in config.describe()
    # a floor only relaxes the budget: it never keeps more than the ratio
    assert Keep(0.4, 100, 0.9).count(1000) == 400


def test_masses_keep_as_many_as_the_attention_needs_within_the_ratio_and_floor():
    config = LazyConfig(
        schedule=((0.3, 0.6),), masses=((0.3, 0.9), (0.3, 0.8)), floors=((0.3, 0.2),)
    )
    layers = config.pruning_layers(10)
    assert config.prunes and layers == {3: Keep(0.6, None, 0.2, 0.8)}  # two masses: the smaller
    keep = layers[3]
    assert keep.count(1000) == 600  # before the attention is measured: the ratio, an upper bound
    assert [keep.count(1000, held) for held in (50, 400, 900)] == [200, 400, 600]
    assert Keep(1.0, 300, 0.0, 0.5).count(1000, 500) == 300  # a budget and a mass: the smaller
    assert Keep(0.5, 300, 0.0, 0.0).count(1000, 10) == 300  # no mass: what it measured is unused
    assert LazyConfig(masses=((0.5, 0.9),)).pruning_layers(10) == {5: Keep(1.0, None, 0.0, 0.9)}
    assert "at most those holding 80% of the attention at 30%" in config.describe()


def scheduled_work(config: LazyConfig, tokens: int = 1000, layers: int = 30) -> int:
    """(token, layer) pairs a prompt's schedule computes, sinks and neighbours aside."""
    keep, present, work = config.pruning_layers(layers), tokens, 0
    for layer in range(layers):
        work += present
        if layer in keep:
            present = keep[layer].count(present)
    return work


def test_fast_computes_less_than_the_default_with_the_same_scoring():
    default, fast = LazyConfig.preset("default"), LazyConfig.preset("fast")
    assert scheduled_work(fast) < scheduled_work(default) < scheduled_work(LazyConfig())
    # the same scoring; decode as each was validated (fast sparse, the default revives)
    assert (default.decode, fast.decode) == ("revive", "sparse")
    assert replace(fast, schedule=default.schedule, decode="revive") == default
