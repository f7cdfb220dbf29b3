"""Presets: built-in ones, the paper's comparison strategies, and calibrated ones saved per model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from lazymlx import LazyConfig
from lazymlx.engine import presets
from lazymlx.engine.config import PRESETS
from lazymlx.engine.presets import (
    calibrated,
    config_from_dict,
    presets_file,
    resolve_preset,
    save_preset,
    saved_presets,
    ship_preset,
    shipped_file,
)
from lazymlx.errors import LazymlxError
from lazymlx.evals.choice import candidate_config, candidate_configs
from lazymlx.evals.records import NO_IDLE
from lazymlx.evals.strategies import check_preset_name, resolve
from lazymlx.models.registry import REGISTRY


@pytest.fixture(autouse=True)
def no_saved_presets():
    presets_file().unlink(missing_ok=True)
    yield
    presets_file().unlink(missing_ok=True)


def test_builtin_presets_and_the_comparison_strategies():
    assert resolve_preset("keep-all", "any-model") == LazyConfig()
    with pytest.raises(LazymlxError, match="'off' is stock mlx-lm, not a preset of the engine"):
        resolve_preset("off", "any-model")  # stock has no config: lazy=None
    # an uncalibrated model prunes by the built-in rule that travels (cut where the question
    # points, else whole); the strategies, which read no question, follow the gentle rule
    default = resolve_preset("default", "any-model")
    assert default == PRESETS["default"] and default.prunes and default.point == 0.5
    gentle = resolve_preset("gentle", "any-model")  # built in: the fixed-ratio rule, as a trade
    assert gentle == PRESETS["gentle"] and gentle.prunes and gentle.decode == "revive"
    for selection in ("static", "random"):
        variant = resolve(selection, "any-model")
        assert variant.schedule == gentle.schedule
        assert variant.selection == selection and variant.decode == "sparse"
    sparse = resolve("sparse", "any-model")
    assert sparse.schedule == gentle.schedule and sparse.decode == "sparse"
    fast = resolve_preset("fast", "any-model")  # built in, not derived: the calibrated trade
    assert fast == PRESETS["fast"] and fast.prunes


def test_a_calibrated_preset_belongs_to_its_model(tmp_path):
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    # JSON makes the schedule's pairs lists: they must come back equal
    tuned = LazyConfig(schedule=((0.5, 0.7), (0.6, 0.5)), selection="paper", complete="never")
    path = save_preset(str(model_dir), "tuned", tuned, {"target": 0.97})
    assert resolve_preset("tuned", str(model_dir)) == tuned
    assert resolve_preset("tuned", str(tmp_path / ".." / tmp_path.name / "my-model")) == tuned
    with pytest.raises(LazymlxError, match="unknown lazy preset 'tuned' for other"):
        resolve_preset("tuned", "other")
    saved = json.loads(path.read_text())
    assert saved[str(model_dir)]["tuned"]["calibration"] == {"target": 0.97}
    assert [p.name for p in path.parent.iterdir() if p.suffix == ".tmp"] == []


def test_a_calibrated_default_moves_static_and_random_with_it():
    tuned = LazyConfig(schedule=((0.4, 0.6),))
    save_preset("m", "default", tuned, {})
    assert resolve_preset("default", "m") == tuned
    assert resolve("static", "m").schedule == tuned.schedule
    assert resolve_preset("default", "other") == PRESETS["default"]


def test_a_default_whose_schedule_keeps_everything_counts_as_running_whole():
    # a schedule of keep ratios of 1 prunes nothing: the strategies follow the gentle rule, and
    # calibration does not try that default as a candidate (its answers are stock's)
    save_preset("m", "default", LazyConfig(schedule=((0.5, 1.0),)), {})
    assert resolve("static", "m").schedule == PRESETS["gentle"].schedule
    assert "default" not in candidate_configs(resolve_preset("default", "m"))
    assert "default" in candidate_configs(PRESETS["gentle"])


def test_candidates_build_on_the_models_own_gentle_rule_as_its_strategies_do():
    # a model whose default runs whole and that has its own gentle (saved by its user): its
    # candidates keep that rule's scoring, as resolve_preset's comparison strategies do
    gentle = replace(PRESETS["gentle"], complete="never")
    save_preset("m", "default", LazyConfig(), {})
    save_preset("m", "gentle", gentle, {})
    default, own = resolve_preset("default", "m"), resolve_preset("gentle", "m")
    candidate = candidate_config(default, "0.5@24% 0.3@57%", own)
    assert candidate.complete == "never"
    assert resolve("static", "m").complete == "never"
    assert candidate_config(default, "0.5@24% 0.3@57%").complete == PRESETS["gentle"].complete


def test_preset_errors():
    with pytest.raises(
        LazymlxError,
        match="choose one of: off \\(stock mlx-lm\\), keep-all, default, gentle, fast$",
    ):
        resolve_preset("turbo", "m")
    with pytest.raises(LazymlxError, match="'keep-all' is a built-in strategy"):
        save_preset("m", "keep-all", LazyConfig(), {})
    with pytest.raises(LazymlxError, match="'static' names a comparison strategy of bench"):
        check_preset_name("static")
    presets_file().parent.mkdir(parents=True, exist_ok=True)
    presets_file().write_text("{not json")
    with pytest.raises(LazymlxError, match="cannot read saved presets in .*; fix or delete"):
        saved_presets("m")


def test_a_saved_config_lacking_fields_takes_the_defaults():
    assert config_from_dict({}) == LazyConfig()
    assert config_from_dict({"decode": "revive"}) == LazyConfig(decode="revive")


def test_a_registry_models_shipped_presets_come_before_the_built_in_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(presets, "SHIPPED", tmp_path)
    own = LazyConfig(schedule=((0.4, 0.3),), decode="revive")
    assert not calibrated("some-model")
    ship_preset("some-model", "default", own, {"candidate": "0.3@40%"})
    assert calibrated("some-model") and resolve_preset("default", "some-model") == own
    assert resolve("sparse", "some-model").schedule == own.schedule  # derived from it
    assert resolve_preset("default", "another-model") == PRESETS["default"]
    mine = LazyConfig(schedule=((0.5, 0.5),))
    save_preset("some-model", "default", mine, {})
    assert resolve_preset("default", "some-model") == mine  # the user's calibration first


def test_qwen_cuts_where_the_question_points_from_1536_tokens():
    """Qwen2.5-Coder's calibration on the real-document questions at 2k and every scored family
    at 1k and 2k (gold answers, stock's judgment, the 4-bit reference): the point rule with its
    second cut at 67% kept every right answer; at 1k a summary's question pointed and lost, so
    prompts under 1,536 tokens run whole. Its `fast` stays the mass rule that prunes every
    prompt (benchmarks/studies/2026-12-02-real-prompts/)."""
    default = resolve_preset("default", "qwen2.5-coder-0.5b")
    assert (default.mass, default.least, default.point, default.dense) == (0.8, 0.25, 0.5, 1.0)
    assert default.schedule == ((0.24, 1.0), (0.67, 1.0))
    assert default.min_prompt == resolve_preset("gentle", "qwen2.5-coder-0.5b").min_prompt == 1536
    fast = resolve_preset("fast", "qwen2.5-coder-0.5b")
    assert fast.min_prompt == 256 and not fast.point  # a trade: no gate, no question needed
    assert default == replace(PRESETS["default"], min_prompt=1536)  # the built-in rule, gated


# The mass rule Qwen2.5-Coder shipped before its point rule (2026-11-28 to 2026-12-01).
MASS_SCHEDULE = ((0.24, 1.0), (0.57, 1.0))


def test_smollm2_ships_qwens_mass_rule_as_its_default():
    """SmolLM2's calibration at 1k and 2k (gold answers, stock's judgment, the 4-bit reference)
    chose the rule Qwen2.5-Coder's did: keep by attention mass where it points at a few tokens,
    else run whole; it kept its 1k answers, so from 256 tokens on. Its comparison strategies
    prune as that default does; its `fast` stays the built-in schedule, which kept the exact
    answers but not the open ones."""
    default = resolve_preset("default", "smollm2-135m")
    assert calibrated("smollm2-135m") and default.prunes
    assert default.schedule == MASS_SCHEDULE and default.min_prompt == 256
    assert (default.mass, default.least, default.dense) == (0.8, 0.25, 0.04)
    assert resolve_preset("gentle", "smollm2-135m").least == 0.625
    assert resolve("sparse", "smollm2-135m").schedule == default.schedule
    assert resolve_preset("fast", "smollm2-135m") == PRESETS["fast"]


def test_gemma3_ships_the_mass_rule_with_a_tighter_dense_gate():
    """Gemma 3's calibration at 1k and 2k (gold answers, stock's judgment, the 4-bit reference)
    chose Qwen2.5-Coder's mass rule with the dense gate at 3%: at 4% a 2k docstring pruned and
    looped where stock's did not, and at 3% a 1k one fell below the 4-bit model's gold score,
    so prompts under 1,792 tokens run whole. Its `fast` is Qwen's, and its comparison
    strategies prune as its default does."""
    default = resolve_preset("default", "gemma3-270m")
    assert calibrated("gemma3-270m") and default.prunes
    assert (default.mass, default.least, default.dense) == (0.8, 0.25, 0.03)
    assert default.min_prompt == resolve_preset("gentle", "gemma3-270m").min_prompt == 1792
    assert resolve_preset("fast", "gemma3-270m").min_prompt == 256  # a trade: no gate
    assert default.schedule == MASS_SCHEDULE
    assert resolve_preset("gentle", "gemma3-270m").least == 0.625
    assert resolve_preset("fast", "gemma3-270m") == resolve_preset("fast", "qwen2.5-coder-0.5b")
    for name in ("sparse", "static", "random", "paper"):
        assert resolve(name, "gemma3-270m").schedule == default.schedule, name


def test_every_registry_model_ships_its_own_calibrated_default_and_fast():
    for model in REGISTRY:
        assert calibrated(model), model
        shipped = json.loads(shipped_file(model).read_text())
        # gentle is the default's rule, pruning less: the same prompts run whole
        assert (
            shipped["gentle"]["config"]["min_prompt"] == shipped["default"]["config"]["min_prompt"]
        )
        for name in ("default", "fast"):
            candidate = shipped[name]["calibration"]["candidate"]
            # the config shipped is the candidate's, as calibrate built it: its schedule, how
            # its name says it decodes (" sparse") and the gate it names (" from1536"; none:
            # the built-in 256)
            built = candidate_config(PRESETS["gentle"], candidate)
            assert tuple(map(tuple, shipped[name]["config"]["schedule"])) == built.schedule
            if candidate == "keep-all":  # no candidate held: every prompt whole
                assert not resolve(name, model).prunes
                continue
            assert shipped[name]["config"]["min_prompt"] == built.min_prompt, (model, name)
            assert shipped[name]["config"]["decode"] == built.decode, (model, name)
            assert resolve(name, model).prunes


def test_a_models_card_runs_whole_what_its_shipped_presets_do():
    """A card shows stock's own rows for a preset's prompts under its gate (card.json's
    "runs_whole": the longest prompt kept whole); re-shipping a gate must move the card too."""
    cards = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "models"
    for model in REGISTRY:
        card = json.loads((cards / model / "card.json").read_text())
        for mode, tokens in card.get("runs_whole", {}).items():
            preset = mode.removeprefix("lazy:").removesuffix(NO_IDLE)
            assert tokens == resolve_preset(preset, model).min_prompt - 1, (model, mode)


def test_a_preset_saved_before_the_constants_loads_where_it_holds_their_values():
    """Presets calibrate saved before 2026-12-02 write keep_first, window, pool...: at the
    constants' values (every one calibrate saved) they load; another value is refused."""
    old = {"schedule": [[0.24, 0.5]], "keep_first": 4, "window": 8, "past_template": True}
    old |= {"pool": 12, "revive": 16, "revive_steps": 8, "prompt_revive": True}
    assert config_from_dict(old) == LazyConfig(schedule=((0.24, 0.5),))
    with pytest.raises(LazymlxError, match="sets window, which lazymlx does not have"):
        config_from_dict({**old, "window": 4})
