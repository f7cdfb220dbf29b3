"""The pruning schedule: which layers prune, how much they keep, and what decoding does.

Depths are fractions of the model's layer count so one schedule fits SmolLM2's 30 layers and a
7B model's 32 alike; `pruning_layers` turns them into layer indices for a given model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from lazymlx.errors import LazymlxError

# What decoding does with pruned prompt tokens (lazymlx/engine/decode.py). "sparse": the new token attends
# to the KV the prompt step left, nothing is revived. "revive": at each pruning layer the new token
# brings back up to `revive` of the tokens that stopped there, from their Aux slots.
DECODE_MODES = ("sparse", "revive")
# How a pruning layer ranks tokens. "attention": the attention the prompt's last WINDOW tokens
# pay at that layer, each token taking the POOL after it along (every preset's). The comparison
# strategies bench and eval run (lazymlx/evals/strategies.py), by the same engine at the same
# schedule: "paper" is LazyLLM's own rule (the last token's attention, no pool); "static" ranks
# once, at the step's first pruning layer, and reuses that order deeper; "random" drops tokens
# at random. The last two are one-shot: a later prompt step revives nothing.
SELECTIONS = ("attention", "paper", "static", "random")

# What no preset varies (all 9 shipped and the built-in ones agree), so constants, not settings:
KEEP_FIRST = 4  # the first tokens (attention sinks) are never pruned; the last always goes on
# Tokens are scored by the attention of the last WINDOW carried tokens, averaged over those
# queries and the heads (SnapKV's observation window; LazyLLM's rule is 1); a step that ends
# with the chat template's closing tokens (lazymlx/engine/templates.py) observes WINDOW tokens
# before them too, so a chat turn is scored by its question, not by its template.
WINDOW = 8
# A token scores the best of itself and the POOL carried tokens before it, so the tokens after a
# high-scoring one (the rest of a number, of a sentence) go on with it: the last token attends
# most to where an answer starts, and an answer is copied token after token.
POOL = 12
# decode="revive": each of a call's first REVIVE_STEPS decode steps brings back up to REVIVE of
# the tokens that stopped at each pruning layer; later steps decode like "sparse" (the tokens an
# answer needs are picked in its first steps).
REVIVE, REVIVE_STEPS = 16, 8
# What idle time does with a pruned context kept for later turns (lazymlx/engine/complete.py). "fill":
# every pruned token resumes from its Aux slot through the layers it skipped, each (token, layer)
# pair computed once. "never": nothing (batch use).
COMPLETIONS = ("fill", "never")


@dataclass(frozen=True)
class LazyConfig:
    """A LazyLLM schedule.

    schedule: (depth fraction, keep ratio) pairs. At layer floor(depth × layers) the tokens present
        are ranked (see window, pool, selection) and the top ceil(ratio × n) go on. Ratios
        compound: (0.25, 0.5), (0.5, 0.5) leaves a quarter of the tokens after mid-depth.
        Under a mass rule (mass > 0) a ratio is the most that goes on there (1: no ceiling).
    mass: 0 prunes by the schedule's fixed ratios. A share p in (0, 1] keeps, at each pruning
        layer, the fewest tokens whose scores hold p of the score mass (the forced tokens
        aside), between the fewest it may keep (least, min_keep) and the layer's ratio: a
        look-up, whose attention sits on a few tokens, keeps few; a summary, whose attention is
        spread, keeps most. p = 1 keeps every token up to the ceiling.
    least: under a mass rule, the least share of the tokens that goes on past each prune.
    dense: under a mass rule, a prompt step whose mass needs more than this share of its tokens
        at a pruning layer keeps every token there and runs whole from there on: its attention
        is spread over the prompt (a summary, a question about the whole of it), and it needs
        all of it. 1: never.
    point: 0 cuts first at the schedule's first depth. A share p in (0, 1] lets the attention
        place the first cut: it falls at the first ranking layer from the first depth on (before
        the second's) where the step's last words point at one place in the text, some of
        their queries paying at least p of a head's attention to one earlier token (a quoted
        line, a name, a key), and that place goes on with its neighbours
        (lazymlx/engine/policy.py); a step whose words point nowhere by then (a summary, a
        question about the whole text) runs whole.
    decode: what a decode step does with pruned tokens, one of DECODE_MODES. Prompt steps (the
        prompt, a new chat turn) always prune their own tokens by the schedule.
    min_prompt: prompt steps (a prompt, a chat turn) of fewer tokens run whole: pruning them
        saves little and changes everyday answers.
    min_keep: at each pruning layer at least this many tokens go on (all of them if fewer
        reach it), so the ratios never starve the deep layers of a short prompt: a 500-token
        prompt at 0.5 then 0.3 would leave 75 tokens there, and summaries of it loop.
    selection: how pruning layers rank tokens, one of SELECTIONS. With "attention" or "paper", a
        prompt step over a pruned context (a chat turn, a question about a kept document) ranks
        the context tokens pruned at each pruning layer with its own, and the ones a prune of
        the whole context would keep resume from their Aux slot; short steps too, though their
        own tokens run whole (min_prompt).
    complete: what idle time does with a pruned context kept for later turns (a chat, the
        server's kept conversations, a saved context), one of COMPLETIONS. It never delays an
        answer: it runs in small units between requests, and a request arriving stops it.
    """

    schedule: tuple[tuple[float, float], ...] = ()
    mass: float = 0.0
    least: float = 0.0
    dense: float = 1.0
    point: float = 0.0
    decode: str = "sparse"
    min_prompt: int = 0
    min_keep: int = 0
    selection: str = "attention"
    complete: str = "fill"

    def __post_init__(self) -> None:
        for name in ("min_prompt", "min_keep"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise LazymlxError(f"{name} must be a whole number, got {value!r}")
            if value < 0:
                raise LazymlxError(f"{name} must be >= 0, got {value}")
        for name in ("mass", "least", "dense", "point"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise LazymlxError(f"{name} must be a number in [0, 1], got {value!r}")
            if not 0 <= value <= 1:
                raise LazymlxError(f"{name} must be in [0, 1], got {value}")
        for name, value, choices in (
            ("decode mode", self.decode, DECODE_MODES),
            ("completion", self.complete, COMPLETIONS),
            ("selection", self.selection, SELECTIONS),
        ):
            if value not in choices:
                raise LazymlxError(f"unknown {name} {value!r}; choose one of: {', '.join(choices)}")
        object.__setattr__(self, "schedule", _schedule(self.schedule))

    # The constants and what the selection implies, read by the engine as settings are (at
    # call time, so a test may patch a constant).
    @property
    def keep_first(self) -> int:
        return KEEP_FIRST

    @property
    def revive(self) -> int:
        return REVIVE

    @property
    def revive_steps(self) -> int | None:
        return REVIVE_STEPS

    @property
    def window(self) -> int:
        return 1 if self.selection == "paper" else WINDOW

    @property
    def past_template(self) -> bool:
        return self.selection != "paper"

    @property
    def pool(self) -> int:
        return 0 if self.selection == "paper" else POOL

    @property
    def prompt_revive(self) -> bool:
        """Whether a later prompt step revives context tokens (one-shot selections do not)."""
        return self.selection in ("attention", "paper")

    @property
    def prunes(self) -> bool:
        return any(self._prunes_at(ratio) for _, ratio in self.schedule)

    def _prunes_at(self, ratio: float) -> bool:
        """Whether a schedule step keeping at most `ratio` can drop a token."""
        return ratio < 1 or 0 < self.mass < 1

    def kept_count(self, ratio: float, present: int) -> int:
        """How many of the `present` tokens a pruning layer keeping `ratio` lets go on (under a
        mass rule, the most it may)."""
        return max(math.ceil(ratio * present), min(present, self.min_keep))

    def kept_bounds(self, ratio: float, present: int) -> tuple[int, int]:
        """The fewest and the most of the `present` tokens a pruning layer keeping `ratio` lets
        go on: one count under fixed ratios; under a mass rule the fewest (least, min_keep) and
        the most, the attention's mass deciding between them."""
        most = self.kept_count(ratio, present)
        if not self.mass:
            return most, most
        fewest = max(math.ceil(self.least * present), min(present, self.min_keep))
        return min(fewest, most), most

    def work_share(
        self,
        tokens: int,
        num_layers: int,
        ranking: Sequence[int] | None = None,
        fewest: bool = False,
    ) -> float:
        """The share of stock's (token, layer) pairs a fresh prompt step of `tokens` tokens
        computes, counted as the prompt step keeps them (min_prompt, min_keep, the sinks and
        the last token forced on): known before anything runs, so calibration can try the
        cheapest candidates first and a user can be told what a preset saves. Under a mass rule
        the attention decides, so this is the most it computes, or with `fewest` the least."""
        if not self.prunes or tokens < self.min_prompt or tokens <= 0:
            return 1.0
        spread = self.mass and self.dense < 1 or self.point  # the attention may call for all
        if spread and not fewest:
            return 1.0
        ratios, present, pairs = self.pruning_layers(num_layers, ranking, deferred=False), tokens, 0
        forced = min(tokens, min(self.keep_first, tokens) + 1)
        for layer in range(num_layers):
            pairs += present
            if layer in ratios:
                low, high = self.kept_bounds(ratios[layer], present)
                present = max(low if fewest else high, min(present, forced))
        return pairs / (tokens * num_layers)

    def pruning_layers(
        self, num_layers: int, ranking: Sequence[int] | None = None, deferred: bool = True
    ) -> dict[int, float]:
        """Layer index → the share of the tokens reaching it that go on, for a model with
        `num_layers` layers. Two ratios landing on the same layer compound; pruning at the last
        layer would select tokens for no deeper layer, so it is dropped. With `point` (and
        `deferred`), every ranking layer the first cut may move to carries the first ratio too
        (`first_cuts`).

        ranking: the layers whose attention reaches every position (a sliding-window model's
        global layers). A local layer's attention says nothing of tokens beyond its window, so
        each depth moves to the nearest of them (the deeper on a tie) when there is one.
        """
        usable = [layer for layer in ranking or () if layer < num_layers - 1]
        layers: dict[int, float] = {}
        for depth, ratio in self.schedule:
            layer = math.floor(depth * num_layers)
            if usable:
                layer = min(usable, key=lambda at, wanted=layer: (abs(at - wanted), -at))
            if self._prunes_at(ratio) and layer < num_layers - 1:
                layers[layer] = layers.get(layer, 1.0) * ratio
        if deferred and layers:
            first = min(layers)
            layers |= {layer: layers[first] for layer in self.first_cuts(num_layers, ranking)}
        return layers

    def first_cuts(self, num_layers: int, ranking: Sequence[int] | None = None) -> list[int]:
        """The layers a step's first cut may fall at, in order: the schedule's first pruning
        layer, and with `point` every ranking layer after it before the next one."""
        layers = sorted(self.pruning_layers(num_layers, ranking, deferred=False))
        if not layers or not self.point:
            return layers[:1]
        end = layers[1] if len(layers) > 1 else num_layers - 1
        usable = ranking if ranking else range(num_layers)
        return [layer for layer in usable if layers[0] <= layer < end]

    def describe(self) -> str:
        if not self.prunes:
            return "keep all tokens"
        if self.mass:
            at = ", ".join(f"{depth:.0%}" for depth, _ in self.schedule)
            steps = f"keep the fewest tokens holding {self.mass:.0%} of the attention at {at}"
            ceilings = {ratio for _, ratio in self.schedule}
            if ceilings != {1.0}:
                most = "/".join(f"{ratio:.0%}" for _, ratio in self.schedule)
                steps += f" (at most {most})"
            if self.least:
                steps += f", at least {self.least:.0%}"
            if self.dense < 1:
                steps += f", whole where that is over {self.dense:.0%} of the prompt"
        else:
            steps = ", ".join(f"keep {ratio:.0%} at {depth:.0%}" for depth, ratio in self.schedule)
        if self.point:
            steps += (
                f", the first cut from {self.schedule[0][0]:.0%} of depth where the question "
                f"points at the text ({self.point:.0%} of a head's attention on one token), "
                "else whole"
            )
        steps += f", first {self.keep_first} kept"
        if self.min_prompt:
            steps += f", prompts under {self.min_prompt} tokens whole"
        if self.min_keep:
            steps += f", at least {self.min_keep} tokens on past each prune"
        if self.selection != "attention":
            steps += f", {self.selection} selection"
        elif self.window > 1 or self.pool:
            steps += f", scored by the last {self.window} token(s)"
            steps += " of the user's text" if self.past_template else ""
            steps += f", the {self.pool} after a high-scoring token with it" if self.pool else ""
        decode = self.decode
        if decode == "revive":
            span = "every step" if self.revive_steps is None else f"{self.revive_steps} steps"
            decode = f"revive {self.revive} a layer for {span}"
        revives = self.prompt_revive
        later = "what a whole-context prune keeps" if revives else "none"
        idle = f", idle time completes the context ({self.complete})"
        idle = "" if self.complete == "never" else idle
        return f"{steps}, decode {decode}, later prompt steps revive {later}{idle}"


def _schedule(value) -> tuple[tuple[float, float], ...]:
    """A schedule's (depth, keep ratio) pairs, sorted by depth; anything else is a clear error."""
    try:
        pairs = tuple(sorted((float(depth), float(ratio)) for depth, ratio in value))
    except (TypeError, ValueError):
        raise LazymlxError(
            f"schedule must be a list of (depth, keep ratio) pairs, got {value!r}"
        ) from None
    for depth, ratio in pairs:
        if not 0 <= depth < 1:
            raise LazymlxError(f"pruning depth must be in [0, 1), got {depth}")
        if not 0 < ratio <= 1:
            raise LazymlxError(f"keep ratio must be in (0, 1], got {ratio}")
    return pairs


# The tokens the gentle rule keeps past each prune, and calibration's floored candidates
# (lazymlx/evals/choice.py): fewer starve the deep layers of a pasted page
# (benchmarks/studies/2026-11-27-open-answers/).
FLOOR_TOKENS = 1024

# `gentle`, the fixed-ratio trade, chosen on SmolLM2's calibration split (benchmarks/studies/
# STUDIES.md, round 3), its floor on the open-ended families, where SmolLM2 and Qwen2.5-Coder
# both needed 1,024 tokens past each prune up to 1k (benchmarks/studies/2026-11-27-open-answers/).
_GENTLE = LazyConfig(
    schedule=((0.67, 0.2),),
    decode="revive",
    min_prompt=256,
    min_keep=FLOOR_TOKENS,
)
PRESETS: dict[str, LazyConfig] = {
    "keep-all": LazyConfig(),  # the engine keeping every token (stock's is lazy=None, "off")
    # Every model's default until `lazymlx calibrate` refines it ("mass0.8 1@24% 1@67% least0.25
    # point0.5 sparse from1536"): a prompt whose question points at one place in the text is cut
    # where it points, from 24% of depth on, to the tokens holding 80% of the attention, and
    # again at 67%; one that points nowhere (a summary, a question about the whole text) runs
    # whole, as do prompts under 1,536 tokens (a 1k summary pointed, and lost). Chosen to travel: calibrated on
    # Qwen2.5-Coder and SmolLM2, validated on Gemma 3 and on 4-bit weights
    # (benchmarks/studies/2026-12-02-real-prompts/).
    "default": replace(
        _GENTLE,
        schedule=((0.24, 1.0), (0.67, 1.0)),
        mass=0.8,
        least=0.25,
        point=0.5,
        decode="sparse",
        min_prompt=1536,
        min_keep=0,
    ),
    "gentle": _GENTLE,
}
# The faster trade (benchmarks/studies/STUDIES.md): a first prune at 24% of depth too, no floor,
# fewer answers kept; decode sparse, as it was chosen and validated.
PRESETS["fast"] = replace(
    PRESETS["gentle"], schedule=((0.24, 0.5), (0.57, 0.3)), decode="sparse", min_keep=0
)
