"""The pruning schedule: which layers prune, how much they keep, and what decoding does.

Depths are fractions of the model's layer count so one schedule fits SmolLM2's 30 layers and a
7B model's 32 alike; `pruning_layers` turns them into layer indices for a given model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from lazymlx.errors import LazymlxError

# What decoding does with pruned prompt tokens (lazymlx/decode.py). "sparse": the new token attends
# to the KV the prompt step left, nothing is revived. "revive": at each pruning layer the new token
# brings back up to `revive` of the tokens that stopped there, from their Aux slots.
DECODE_MODES = ("sparse", "revive")
# How a pruning layer ranks tokens. "attention": the attention the prompt's last tokens pay at that
# layer (LazyLLM's rule with window=1). The paper's two baselines, run by the same engine at the
# same schedule: "static" ranks once, at the step's first pruning layer, and reuses that order
# deeper; "random" drops tokens at random.
SELECTIONS = ("attention", "static", "random")
# How the attention of the query heads becomes one score per token.
HEAD_REDUCTIONS = ("mean", "max")
# What idle time does with a pruned context kept for later turns (lazymlx/complete.py). "fill":
# every pruned token resumes from its Aux slot through the layers it skipped, each (token, layer)
# pair computed once. "exact": every token is recomputed from the first pruning layer down, so
# the context's KV is stock's. "off": nothing (batch use).
COMPLETIONS = ("fill", "exact", "off")


class Keep(NamedTuple):
    """What one pruning layer keeps of the n tokens reaching it: ceil(ratio × n), at most budget
    and, with a mass, at most the fewest tokens holding that share of the attention; neither cap
    cuts below ceil(floor × n)."""

    ratio: float = 1.0
    budget: int | None = None
    floor: float = 0.0
    mass: float = 0.0

    def count(self, present: int, holding: int | None = None) -> int:
        """holding: with a mass, the fewest tokens holding that share (prefill.py measures it)."""
        kept = math.ceil(self.ratio * present)
        caps = [cap for cap in (self.budget, holding if self.mass else None) if cap is not None]
        if not caps:
            return kept
        return min(kept, max(min(caps), math.ceil(self.floor * present)))


@dataclass(frozen=True)
class LazyConfig:
    """A LazyLLM schedule.

    schedule: (depth fraction, keep ratio) pairs. At layer floor(depth × layers) the tokens present
        are ranked (see window, pool, heads, selection) and the top ceil(ratio × n) go on.
        Ratios compound: (0.25, 0.5), (0.5, 0.5) leaves a quarter of the tokens after mid-depth.
    budgets: (depth fraction, tokens) pairs: at that depth at most `tokens` of a prompt step's
        tokens go on, whatever the ratios allow. Ratios prune the same share at every length; a
        budget makes the saving grow with the prompt (FastKV, GemFilter), so long prompts get
        the largest speedup while short ones are ruled by the ratios alone.
    masses: (depth fraction, share) pairs: at that depth the count adapts to how concentrated
        the attention is: at most the fewest tokens holding `share` of the attention the
        observing tokens pay the ones that may be pruned (sinks and the observers left out),
        within the ratio above and the floor below. Attention spread over many tokens (a table,
        several candidate facts) keeps more; attention on one place (a passkey) keeps fewer.
    floors: (depth fraction, ratio) pairs: at that depth a budget or a mass never cuts below
        that share of the tokens present. How far down the ranking an answer sits grows with the
        prompt, so a budget alone drops answers on long prompts (the `long` preset at 8k); a
        floor bounds how far the share may fall.
    keep_first: the first tokens (attention sinks) are never pruned.
    keep_last: the step's last tokens (the question, the recent window) are never pruned; the
        very last token always goes on.
    window: tokens are scored by the attention the last `window` carried tokens pay them,
        averaged (SnapKV's observation window); 1 is LazyLLM's last-token rule. Only the last
        `max(1, keep_last)` are sure to go on, so deeper layers observe with the last carried.
    past_template: a step that ends with the chat template's closing tokens (the same every
        turn; lazymlx/templates.py) observes `window` tokens before them too, so a chat turn is
        scored by its question as a raw prompt is, not by its template.
    pool: a token scores the best of itself and the `pool` carried tokens before it, so the
        tokens that follow a high-scoring one (the rest of a number, of a sentence) go on with
        it: the last token attends most to where an answer starts, and an answer is copied
        token after token. Counted in carried tokens: after a prune, the neighbours are the
        next tokens still carried. Static selection pools its first scores again each layer.
    segments: when > 0, a token scores the best score of its segment (a sentence or a line, cut
        every `segments` tokens; lazymlx/segments.py) before pooling, so a fact is kept or
        dropped whole: its key goes on with its value.
    heads: how the query heads' attention becomes one score, one of HEAD_REDUCTIONS.
    retrieval_heads: (layer, query heads) pairs: at that pruning layer (an index, not a depth;
        a model whose schedule ranks nothing there refuses the pair) tokens are scored by the mean
        attention of those heads alone (numbered over the model's query heads), in the prompt
        step and in decode revival. Heads that copy what a question asks for rank its answer
        higher than all heads together (benchmarks/head_ranks.py finds them); their numbers
        belong to one model, so they belong in its calibrated preset.
    decode: what a decode step does with pruned tokens, one of DECODE_MODES. Prompt steps (the
        prompt, a new chat turn) always prune their own tokens by the schedule.
    revive: with decode="revive", the most tokens one decode step brings back per pruning layer.
    revive_shaped: decode revival ranks the pruned tokens by the new token's attention shaped as
        a prompt step's (pool, segments, in text order), not by the attention alone, so a revived
        token brings the tokens after it along (the rest of a number or a fact), as a prompt
        step's pick and its revival of context tokens do.
    revive_steps: how many decode steps of a call revive (None: every step); later steps decode
        like "sparse". The tokens an answer needs are picked in its first steps.
    prompt_revive: a prompt step over a pruned context (a chat turn, a question about a kept
        document) ranks the context tokens pruned at each pruning layer with its own, and the
        ones a prune of the whole context would keep resume from their Aux slot; at most this
        many per layer (None: no cap; 0: never). Short steps too, though their own tokens run
        whole (min_prompt).
    min_prompt: prompt steps (a prompt, a chat turn) of fewer tokens run whole: pruning them
        saves little and changes everyday answers.
    selection: how pruning layers rank tokens, one of SELECTIONS.
    seed: for random selection, so a random-drop run can be repeated exactly.
    complete: what idle time does with a pruned context kept for later turns (a chat, the
        server's kept conversations, a saved context), one of COMPLETIONS. It never delays an
        answer: it runs in small units between requests, and a request arriving stops it.
    """

    schedule: tuple[tuple[float, float], ...] = ()
    budgets: tuple[tuple[float, int], ...] = ()
    masses: tuple[tuple[float, float], ...] = ()
    floors: tuple[tuple[float, float], ...] = ()
    keep_first: int = 0
    keep_last: int = 0
    window: int = 1
    past_template: bool = False
    pool: int = 0
    segments: int = 0
    heads: str = "mean"
    retrieval_heads: tuple[tuple[int, tuple[int, ...]], ...] = ()
    decode: str = "sparse"
    revive: int = 16
    revive_shaped: bool = False
    revive_steps: int | None = 8
    prompt_revive: int | None = None
    min_prompt: int = 0
    selection: str = "attention"
    seed: int = 0
    complete: str = "fill"

    def __post_init__(self) -> None:
        for name in (
            "keep_first", "keep_last", "window", "pool", "segments", "revive", "min_prompt", "seed"
        ):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise LazymlxError(f"{name} must be a whole number, got {value!r}")
        for name in ("past_template", "revive_shaped"):
            if not isinstance(getattr(self, name), bool):
                raise LazymlxError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("revive_steps", "prompt_revive"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise LazymlxError(f"{name} must be a whole number or None, got {value!r}")
            if value is not None and value < 0:
                raise LazymlxError(f"{name} must be >= 0 or None, got {value}")
        pairs = _pairs(self.schedule, float, "schedule", "(depth, keep ratio)")
        for depth, ratio in pairs:
            _check_depth(depth, "pruning")
            _check_ratio(ratio, "keep")
        budgets = _pairs(self.budgets, int, "budgets", "(depth, tokens)")
        for depth, tokens in budgets:
            _check_depth(depth, "budget")
            if tokens < 1:
                raise LazymlxError(f"token budget must be >= 1, got {tokens}")
        masses = _pairs(self.masses, float, "masses", "(depth, attention share)")
        for depth, share in masses:
            _check_depth(depth, "mass")
            _check_ratio(share, "attention share")
        floors = _pairs(self.floors, float, "floors", "(depth, floor ratio)")
        capped = {depth for depth, _ in budgets} | {depth for depth, _ in masses}
        for depth, ratio in floors:
            _check_depth(depth, "floor")
            _check_ratio(ratio, "floor")
            if depth not in capped:
                raise LazymlxError(
                    f"the floor at depth {depth} has no budget or mass at that depth; a floor "
                    "only limits one, so give both the same depth"
                )
        for name in ("keep_first", "keep_last", "pool", "segments"):
            if getattr(self, name) < 0:
                raise LazymlxError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.window < 1:
            raise LazymlxError(f"window must be >= 1, got {self.window}")
        if self.heads not in HEAD_REDUCTIONS:
            raise LazymlxError(
                f"unknown head reduction {self.heads!r}; choose one of: {', '.join(HEAD_REDUCTIONS)}"
            )
        retrieval = _retrieval_heads(self.retrieval_heads)
        if self.revive < 0:
            raise LazymlxError(f"revive must be >= 0, got {self.revive}")
        if self.min_prompt < 0:
            raise LazymlxError(f"min_prompt must be >= 0, got {self.min_prompt}")
        if self.decode not in DECODE_MODES:
            raise LazymlxError(
                f"unknown decode mode {self.decode!r}; choose one of: {', '.join(DECODE_MODES)}"
            )
        if self.complete not in COMPLETIONS:
            raise LazymlxError(
                f"unknown completion {self.complete!r}; choose one of: {', '.join(COMPLETIONS)}"
            )
        if self.selection not in SELECTIONS:
            raise LazymlxError(
                f"unknown selection {self.selection!r}; choose one of: {', '.join(SELECTIONS)}"
            )
        object.__setattr__(self, "schedule", pairs)
        object.__setattr__(self, "budgets", budgets)
        object.__setattr__(self, "masses", masses)
        object.__setattr__(self, "floors", floors)
        object.__setattr__(self, "retrieval_heads", retrieval)

    @classmethod
    def preset(cls, name: str) -> LazyConfig:
        if name not in PRESETS:
            raise LazymlxError(f"unknown lazy preset {name!r}; choose one of: {', '.join(PRESETS)}")
        return PRESETS[name]

    def heads_at(self, layer: int) -> str | tuple[int, ...]:
        """How a pruning layer reduces the heads' attention: its retrieval heads, or `heads`."""
        return dict(self.retrieval_heads).get(layer, self.heads)

    def check_retrieval_heads(self, num_layers: int, num_heads: int) -> None:
        """Refuse retrieval heads a model cannot read, before a step changes anything: a layer
        where this schedule ranks nothing (the pair would be silently ignored), or a head the
        model lacks (num_heads: its query heads, over every rank of a group)."""
        ranking = sorted(self.pruning_layers(num_layers))
        for layer, heads in self.retrieval_heads:
            if layer not in ranking:
                where = ", ".join(map(str, ranking)) or "none"
                raise LazymlxError(
                    f"retrieval_heads names layer {layer}, where nothing is ranked: this schedule "
                    f"ranks at layers {where} of {num_layers}; fix retrieval_heads in the preset"
                )
            if heads[-1] >= num_heads:
                raise LazymlxError(
                    f"retrieval head {heads[-1]} does not exist: the model has {num_heads} query "
                    f"heads (0-{num_heads - 1}); fix retrieval_heads in the preset"
                )

    @property
    def prunes(self) -> bool:
        return bool(self.budgets or self.masses) or any(ratio < 1 for _, ratio in self.schedule)

    def pruning_layers(self, num_layers: int) -> dict[int, Keep]:
        """Layer index → what it keeps, for a model with `num_layers` layers.

        Two ratios landing on the same layer compound, two budgets or masses take the smaller and
        two floors the larger; pruning at the last layer would select tokens for no deeper layer, so
        it is dropped.
        """
        layers: dict[int, Keep] = {}
        for depth, ratio in self.schedule:
            layer = math.floor(depth * num_layers)
            if ratio < 1 and layer < num_layers - 1:
                keep = layers.get(layer, Keep())
                layers[layer] = keep._replace(ratio=keep.ratio * ratio)
        for depth, tokens in self.budgets:
            layer = math.floor(depth * num_layers)
            if layer < num_layers - 1:
                keep = layers.get(layer, Keep())
                budget = tokens if keep.budget is None else min(keep.budget, tokens)
                layers[layer] = keep._replace(budget=budget)
        for depth, share in self.masses:
            layer = math.floor(depth * num_layers)
            if layer < num_layers - 1:
                keep = layers.get(layer, Keep())
                layers[layer] = keep._replace(mass=min(keep.mass or 1.0, share))
        for depth, ratio in self.floors:  # each has a budget or mass at its depth (checked above)
            layer = math.floor(depth * num_layers)
            if layer in layers:
                layers[layer] = layers[layer]._replace(floor=max(layers[layer].floor, ratio))
        return layers

    def describe(self) -> str:
        if not self.prunes:
            return "keep all tokens"
        steps = [f"keep {ratio:.0%} at {depth:.0%}" for depth, ratio in self.schedule]
        steps += [f"at most {tokens} at {depth:.0%}" for depth, tokens in self.budgets]
        steps += [
            f"at most those holding {share:.0%} of the attention at {depth:.0%}"
            for depth, share in self.masses
        ]
        steps += [f"at least {ratio:.0%} at {depth:.0%}" for depth, ratio in self.floors]
        sinks = f", first {self.keep_first} kept" if self.keep_first else ""
        sinks += f", last {self.keep_last} kept" if self.keep_last else ""
        if self.min_prompt:
            sinks += f", prompts under {self.min_prompt} tokens whole"
        ranked = "" if self.selection == "attention" else f", {self.selection} selection"
        shaped = (
            self.window > 1
            or self.pool
            or self.segments
            or self.heads != "mean"
            or self.retrieval_heads
        )
        if self.selection != "random" and shaped:
            ranked += f", scored by the last {self.window} token(s)"
            if self.past_template:
                ranked += " of the user's text"
            ranked += f" ({self.heads} over heads"
            for layer, heads in self.retrieval_heads:
                ranked += f", at layer {layer} heads {', '.join(map(str, heads))} only"
            if self.segments:
                ranked += f", whole sentences and lines of up to {self.segments} tokens"
            if self.pool:
                ranked += f", the {self.pool} after a high-scoring token scored with it"
            ranked += ")"
        decode = self.decode
        if decode == "revive":
            span = "every step" if self.revive_steps is None else f"{self.revive_steps} steps"
            shaped = ", scored as the prompt step scores" if self.revive_shaped else ""
            decode = f"revive {self.revive} a layer for {span}{shaped}"
        later = (
            "later prompt steps revive none"
            if self.prompt_revive == 0 or self.selection != "attention"
            else "later prompt steps revive what a whole-context prune keeps"
            + ("" if self.prompt_revive is None else f" (at most {self.prompt_revive} a layer)")
        )
        idle = (
            "" if self.complete == "off" else f", idle time completes the context ({self.complete})"
        )
        return f"{', '.join(steps)}{sinks}{ranked}, decode {decode}, {later}{idle}"


def _check_depth(depth: float, name: str) -> None:
    if not 0 <= depth < 1:
        raise LazymlxError(f"{name} depth must be in [0, 1), got {depth}")


def _check_ratio(ratio: float, name: str) -> None:
    if not 0 < ratio <= 1:
        raise LazymlxError(f"{name} ratio must be in (0, 1], got {ratio}")


def _retrieval_heads(value) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """(layer, heads) pairs, sorted, each head list sorted and non-empty; else a clear error.
    Layers and heads must be whole numbers: a string or a mapping would otherwise unpack
    character by character into other layers than the ones meant."""

    def whole(number: object) -> int:
        if isinstance(number, bool) or not isinstance(number, int):
            raise TypeError
        return number

    def listed(items: object) -> object:
        if isinstance(items, (str, bytes, Mapping)):
            raise TypeError
        return items

    try:
        pairs = sorted(
            (whole(layer), tuple(sorted({whole(head) for head in listed(heads)})))
            for layer, heads in listed(value)
        )
    except (TypeError, ValueError):
        raise LazymlxError(
            f"retrieval_heads must be a list of (layer, [query heads]) pairs of whole numbers, "
            f"got {value!r}"
        ) from None
    layers = [layer for layer, _ in pairs]
    for layer, heads in pairs:
        if layer < 0 or not heads or heads[0] < 0:
            raise LazymlxError(
                f"retrieval_heads needs a layer >= 0 and at least one head >= 0, got {layer}: {list(heads)}"
            )
        if layers.count(layer) > 1:
            raise LazymlxError(
                f"retrieval_heads names layer {layer} twice; give each layer one list of heads"
            )
    return tuple(pairs)


def _pairs(value, kind, name: str, shape: str) -> tuple:
    """A schedule's (depth, number) pairs, sorted by depth; anything else is a clear error."""
    try:
        return tuple(sorted((float(depth), kind(number)) for depth, number in value))
    except (TypeError, ValueError):
        raise LazymlxError(f"{name} must be a list of {shape} pairs, got {value!r}") from None


PRESETS: dict[str, LazyConfig] = {
    "off": LazyConfig(),
    # Chosen on the eval's calibration split, reported on its validation split; every knob's
    # measurements, and which of them should hold on other models, are in benchmarks/STUDIES.md
    # (round 3). `calibrate` re-makes the choice for another model.
    "default": LazyConfig(
        schedule=((0.67, 0.2),),
        keep_first=4,
        window=8,
        past_template=True,
        pool=12,
        decode="revive",
        min_prompt=256,
    ),
}
# The faster trade (benchmarks/STUDIES.md): a first prune at 24% of depth too, fewer answers kept;
# decode sparse, as it was chosen and validated.
PRESETS["fast"] = replace(PRESETS["default"], schedule=((0.24, 0.5), (0.57, 0.3)), decode="sparse")


def preset_name(config: LazyConfig | None) -> str:
    """The built-in preset a lazy context's config is, else "custom" (a context file's
    metadata; a context that never ran a step has none)."""
    named = (name for name, preset in PRESETS.items() if preset == config and name != "off")
    return next(named, "custom")  # "off" names stock's files, never a lazy context


def baseline_variant(config: LazyConfig, selection: str) -> LazyConfig:
    """The paper's comparison strategies at a schedule: ranked statically or at random, and, like
    one-shot pruning, never revived (decoding attends to the KV the prompt step left)."""
    return replace(config, selection=selection, decode="sparse", prompt_revive=0)


def first_pruning_depth(config: LazyConfig) -> float:
    """Where a config first prunes (the built-in default's depth if it never does)."""
    depths = [depth for depth, ratio in config.schedule if ratio < 1]
    depths += [depth for depth, _ in config.budgets]
    return min(depths, default=PRESETS["default"].schedule[0][0])


def long_variant(config: LazyConfig, budget: int) -> LazyConfig:
    """At most `budget` tokens past the config's first pruning layer (or its own budget there,
    if smaller), with no floor there."""
    depth = first_pruning_depth(config)
    own = [tokens for d, tokens in config.budgets if d == depth]
    budgets = [(d, tokens) for d, tokens in config.budgets if d != depth]
    floors = tuple((d, ratio) for d, ratio in config.floors if d != depth)
    budgets.append((depth, min([budget, *own])))
    return replace(config, budgets=tuple(budgets), floors=floors)


# Presets defined from the default, so they follow a model's calibrated default too.
DERIVED: dict[str, Callable[[LazyConfig], LazyConfig]] = {
    # decoding revives nothing: the new token attends to the KV the prompt step left
    "sparse": lambda default: replace(default, decode="sparse"),
    # LazyLLM's own rule (the last prompt token's head-averaged attention), same schedule
    "paper": lambda default: replace(
        default,
        window=1,
        past_template=False,
        pool=0,
        segments=0,
        heads="mean",
        retrieval_heads=(),
        keep_last=0,
    ),
    # at most 1,024 tokens past the first pruning layer, with no floor, so prompts beyond ~2.5k
    # tokens save more the longer they are; faster, and measured to lose answers the default
    # keeps on long prompts (benchmarks/STUDIES.md, round 2, "Length-aware budgets"): the
    # answer's rank at that layer grows with the prompt, so a budget without a floor drops it
    "long": lambda default: long_variant(default, 1024),
    "static": lambda default: baseline_variant(default, "static"),
    "random": lambda default: baseline_variant(default, "random"),
}
PRESETS.update({name: derive(PRESETS["default"]) for name, derive in DERIVED.items()})
