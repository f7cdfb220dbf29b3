"""The pruning schedule: which layers prune, how much they keep, and what decoding does.

Depths are fractions of the model's layer count so one schedule fits SmolLM2's 30 layers and a
7B model's 32 alike; `pruning_layers` turns them into layer indices for a given model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from lazymlx.errors import LazymlxError

# What decoding does with pruned prompt tokens (lazymlx/decode.py). "sparse": the new token attends
# to the KV the prompt step left, nothing is revived. "revive": at each pruning layer the new token
# brings back up to `revive` of the tokens that stopped there, from their Aux slots.
DECODE_MODES = ("sparse", "revive")
# How a pruning layer ranks tokens. "attention": the last token's attention at that layer (LazyLLM).
# The paper's two baselines, run by the same engine at the same schedule: "static" ranks once, at
# the step's first pruning layer, and reuses that order deeper; "random" drops tokens at random.
SELECTIONS = ("attention", "static", "random")


@dataclass(frozen=True)
class LazyConfig:
    """A LazyLLM schedule.

    schedule: (depth fraction, keep ratio) pairs. At layer floor(depth × layers) the tokens present
        are ranked by the last token's head-averaged attention and the top ceil(ratio × n) go on.
        Ratios compound: (0.25, 0.5), (0.5, 0.5) leaves a quarter of the tokens after mid-depth.
    keep_first: the first tokens (attention sinks) are never pruned.
    decode: what a decode step does with pruned tokens, one of DECODE_MODES. Prompt steps (the
        prompt, a new chat turn) always prune their own tokens by the schedule.
    revive: with decode="revive", the most tokens one decode step brings back per pruning layer.
    revive_steps: how many decode steps of a call revive (None: every step); later steps decode
        like "sparse". The tokens an answer needs are picked in its first steps.
    min_prompt: prompt steps (a prompt, a chat turn) of fewer tokens run whole: pruning them
        saves little and changes everyday answers.
    selection: how pruning layers rank tokens, one of SELECTIONS.
    seed: for random selection, so a random-drop run can be repeated exactly.
    """

    schedule: tuple[tuple[float, float], ...] = ()
    keep_first: int = 0
    decode: str = "sparse"
    revive: int = 16
    revive_steps: int | None = 8
    min_prompt: int = 0
    selection: str = "attention"
    seed: int = 0

    def __post_init__(self) -> None:
        pairs = tuple(sorted((float(depth), float(ratio)) for depth, ratio in self.schedule))
        for depth, ratio in pairs:
            if not 0 <= depth < 1:
                raise LazymlxError(f"pruning depth must be in [0, 1), got {depth}")
            if not 0 < ratio <= 1:
                raise LazymlxError(f"keep ratio must be in (0, 1], got {ratio}")
        if self.keep_first < 0:
            raise LazymlxError(f"keep_first must be >= 0, got {self.keep_first}")
        if self.revive < 0:
            raise LazymlxError(f"revive must be >= 0, got {self.revive}")
        if self.min_prompt < 0:
            raise LazymlxError(f"min_prompt must be >= 0, got {self.min_prompt}")
        if self.revive_steps is not None and self.revive_steps < 0:
            raise LazymlxError(f"revive_steps must be >= 0 or None, got {self.revive_steps}")
        if self.decode not in DECODE_MODES:
            raise LazymlxError(
                f"unknown decode mode {self.decode!r}; choose one of: {', '.join(DECODE_MODES)}"
            )
        if self.selection not in SELECTIONS:
            raise LazymlxError(
                f"unknown selection {self.selection!r}; choose one of: {', '.join(SELECTIONS)}"
            )
        object.__setattr__(self, "schedule", pairs)

    @classmethod
    def preset(cls, name: str) -> LazyConfig:
        if name not in PRESETS:
            raise LazymlxError(f"unknown lazy preset {name!r}; choose one of: {', '.join(PRESETS)}")
        return PRESETS[name]

    @property
    def prunes(self) -> bool:
        return any(ratio < 1 for _, ratio in self.schedule)

    def pruning_layers(self, num_layers: int) -> dict[int, float]:
        """Layer index → keep ratio for a model with `num_layers` layers.

        Two depths landing on the same layer compound; pruning at the last layer would select
        tokens for no deeper layer, so it is dropped.
        """
        layers: dict[int, float] = {}
        for depth, ratio in self.schedule:
            layer = math.floor(depth * num_layers)
            if ratio < 1 and layer < num_layers - 1:
                layers[layer] = layers.get(layer, 1.0) * ratio
        return layers

    def describe(self) -> str:
        if not self.prunes:
            return "keep all tokens"
        steps = ", ".join(f"keep {ratio:.0%} at {depth:.0%}" for depth, ratio in self.schedule)
        sinks = f", first {self.keep_first} kept" if self.keep_first else ""
        if self.min_prompt:
            sinks += f", prompts under {self.min_prompt} tokens whole"
        ranked = "" if self.selection == "attention" else f", {self.selection} selection"
        decode = self.decode
        if decode == "revive":
            span = "every step" if self.revive_steps is None else f"{self.revive_steps} steps"
            decode = f"revive {self.revive} a layer for {span}"
        return f"{steps}{sinks}{ranked}, decode {decode}"


PRESETS: dict[str, LazyConfig] = {
    "off": LazyConfig(),
    # Chosen by `lazymlx calibrate` on SmolLM2-135M (benchmarks/results/calibrate.json): of six
    # candidate schedules, the one computing the fewest (token, layer) pairs whose answers were
    # right exactly where the baseline's were on all 10 calibration cases (5 tasks, 1k and 2k).
    # Decode "revive" (16 a layer for the first 8 steps), chosen on the eval suite at 1k-2k:
    # reviving answered 10 of the baseline's 11, as in every step or in the first 2 only;
    # "sparse" answered 5. Prompts under 256 tokens run whole: pruning them changed the first
    # 16 generated tokens of 25 of 28 everyday and documentation prompts, to save 0.39 s at most
    # (128-255 tokens, on average) on a 2-core CPU (benchmarks/results/short_prompts.json).
    "default": LazyConfig(
        schedule=((0.27, 0.6), (0.54, 0.5), (0.8, 0.5)), decode="revive", min_prompt=256
    ),
}


def baseline_variant(config: LazyConfig, selection: str) -> LazyConfig:
    """The paper's comparison strategies at a schedule: ranked statically or at random, and, like
    one-shot pruning, never revived (decoding attends to the KV the prompt step left)."""
    return replace(config, selection=selection, decode="sparse")


PRESETS["sparse"] = replace(PRESETS["default"], decode="sparse")
PRESETS["static"] = baseline_variant(PRESETS["default"], "static")
PRESETS["random"] = baseline_variant(PRESETS["default"], "random")
