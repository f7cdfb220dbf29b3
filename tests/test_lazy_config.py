"""LazyConfig: validation, presets and the mapping of depth fractions onto layers."""

from __future__ import annotations

import pytest

from lazymlx import LazyConfig
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
    assert min(depth for depth, _ in default.schedule) >= 0.25  # nothing pruned before 25% depth
    with pytest.raises(
        LazymlxError, match="unknown lazy preset 'fast'; choose one of: off, default"
    ):
        LazyConfig.preset("fast")


def test_depth_fractions_map_onto_any_layer_count():
    config = LazyConfig(schedule=((0.8, 0.5), (0.27, 0.5), (0.54, 0.5)))
    assert config.schedule == ((0.27, 0.5), (0.54, 0.5), (0.8, 0.5))  # sorted by depth
    assert config.pruning_layers(30) == {8: 0.5, 16: 0.5, 24: 0.5}
    assert config.pruning_layers(32) == {8: 0.5, 17: 0.5, 25: 0.5}
    # two depths on one layer compound; pruning after the last layer would select for nothing
    assert config.pruning_layers(2) == {0: 0.5}
    assert LazyConfig(schedule=((0.5, 1.0),)).pruning_layers(30) == {}
