"""The comparison strategies bench and eval run beside a model's presets, named as in reports:
not presets a user runs (`lazymlx generate --lazy` takes those only: off, keep-all, default,
gentle, fast and the model's calibrated ones), but the same engine at a preset's schedule with
one thing changed, so a table says what each part of the rule is worth.

- sparse: decoding revives nothing (the new token attends to the KV the prompt step left);
- paper: LazyLLM's own scoring, the last prompt token's head-averaged attention;
- static, random: the paper's two comparison strategies: ranked once at the first pruning
  layer, or at random, and like one-shot pruning never revived.

Each is built on the model's pruning base (`pruning_base`), so it prunes exactly as much as the
preset it is compared to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from lazymlx.engine.config import PRESETS, LazyConfig
from lazymlx.engine.presets import lazy_config, resolve_preset
from lazymlx.errors import LazymlxError
from lazymlx.evals.records import BASELINE

STRATEGIES: dict[str, Callable[[LazyConfig], LazyConfig]] = {
    "sparse": lambda base: replace(base, decode="sparse"),
    "paper": lambda base: replace(base, selection="paper"),
    "static": lambda base: replace(base, selection="static", decode="sparse"),
    "random": lambda base: replace(base, selection="random", decode="sparse"),
}


def pruning_base(default: LazyConfig, gentle: LazyConfig | None = None) -> LazyConfig:
    """What schedules and the comparison strategies are built on: a model's default where it
    prunes at its schedule's depths (its scoring and length rules), else its gentle rule, the
    built-in one unless the model has its own: a default that runs whole scores nothing, and
    one whose first cut waits for the question to point (`point`) cuts where the static and
    random selections, which read no question, could not compare."""
    if default.prunes and not default.point:
        return default
    return gentle or PRESETS["gentle"]


def resolve(name: str, model: str | None) -> LazyConfig | None:
    """A comparison strategy for the model (built on its own default and gentle rule), or else
    one of its presets (None: 'off', stock mlx-lm; presets.lazy_config)."""
    if name not in STRATEGIES:
        return lazy_config(name, model)
    base = pruning_base(resolve_preset("default", model), resolve_preset("gentle", model))
    return STRATEGIES[name](base)


def check_preset_name(name: str) -> None:
    """Refuse to save a preset under a comparison strategy's name: bench and eval would run the
    strategy instead."""
    if name in STRATEGIES:
        raise LazymlxError(
            f"{name!r} names a comparison strategy of bench and eval; save the preset under "
            "another name"
        )


# How reports name a run: "baseline" is stock mlx-lm, "lazy:<preset>" the engine with a preset
# (lazy:off is stock again, as `off` is everywhere), "static" / "random" the paper's two
# comparison strategies.
COMPARISONS = ("static", "random")


@dataclass(frozen=True)
class Strategy:
    """A named way to run a prompt: `config` None is stock mlx-lm."""

    mode: str
    config: LazyConfig | None


def strategy(
    preset: str, model: str, lookup: Callable[[str, str], LazyConfig | None] = resolve
) -> Strategy:
    """The strategy a preset name stands for in a benchmark or an eval: 'off' is stock mlx-lm,
    as everywhere (a row beside the baseline's, stock run again), 'keep-all' the engine
    keeping every token (what the wrapper and the compact caches cost). `lookup` turns any
    other name into a config (an eval also takes calibrate's rules)."""
    mode = preset if preset in COMPARISONS else f"lazy:{preset}"
    return Strategy(mode, lookup(preset, model))


BASELINE_STRATEGY = Strategy(BASELINE, None)
