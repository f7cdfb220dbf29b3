"""Cases: a task family's draft sized with the model's tokenizer to a length, and the suite.

A case is one to three *segments* of text and a *kind* saying how they reach the model, the way
a user's text does (lazymlx/evals/runner.py runs them):
- raw: one raw completion prompt whose last words lead into the answer (SmolLM2-class models
  retrieve far better through a raw prompt than through a chat template);
- followup: a raw prompt answered, then a second question appended to the same context;
- kept-file: a document's context saved to a file (`--prompt-cache-file`), loaded, then asked;
- kept-llm: the same through `LLM`'s prefix reuse (what the server does for a conversation);
- chat: messages through the chat template (ChatSession), the last reply scored.
A case is sized with the model's tokenizer to at most its length in tokens (replies included),
its gold answer appearing exactly once. The families that draft them, and how each is scored,
are in families.py.

Calibration and validation cases differ in seed (validation seeds start at VALIDATION_SEED) and,
for prose, in the documents they are cut from (sources.split_of), so whatever chooses a knob on
calibration cases meets unseen text in validation.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.errors import LazymlxError
from lazymlx.evals.draft import ASK_LEAD, Draft, TextRanOut
from lazymlx.evals.families import FAMILIES, GROUPS
from lazymlx.evals.scoring import edit_similarity, first_line, rouge_l
from lazymlx.evals.sources import SPLITS
from lazymlx.generation import encode_prompt
from lazymlx.prompts import holds_answer

VALIDATION_SEED = 1_000_000
FIRST_REPLY = 24  # the reply to a chat's first message, before the scored one
FIRST_ANSWER = 10  # a follow-up case's first answer
CHAT_OVERHEAD = 12  # template tokens around one more chat message
FILLED = 0.8  # a document shorter than this share of a case's length is no case of that length


@dataclass(frozen=True)
class Case:
    """One case: its segments, how they are fed (kind), and its gold answer (None: free-form)."""

    family: str
    split: str
    length: int  # the target: the whole conversation fits in this many tokens
    seed: int
    kind: str
    segments: tuple[str, ...]
    gold: str | None
    max_tokens: int  # tokens generated for the scored answer
    depth: float  # where the asked fact sits, 0 = start of the haystack, 1 = end
    source: str  # the haystack's text source
    planted: tuple[str, ...] = ()  # the text inserted into the haystack, the asked fact first
    judge: str | None = None  # open-ended: how answers are compared, one of JUDGES
    target: str | None = None  # open-ended: the gold text (the file's next line, the docstring)
    aliases: tuple[str, ...] = ()  # other right answers (an option's short flag)

    def correct(self, output: str) -> bool | None:
        """Right: the gold answer (or an alias) whole; None where there is no exact answer
        (open-ended and free-form cases, scored by `similarity` and the judge instead)."""
        if self.gold is None:
            return None
        return any(holds_answer(output, answer) for answer in (self.gold, *self.aliases))

    def similarity(self, output: str, other: str) -> float | None:
        """How close an open-ended answer is to another text (the gold, or stock's answer)."""
        if self.judge == "line":
            return edit_similarity(first_line(output), first_line(other))
        if self.judge == "doc":
            return rouge_l(output.split('"""')[0], other)
        return None if self.judge is None else rouge_l(output, other)


def prompt_tokens(tokenizer: TokenizerWrapper, case: Case) -> list[int]:
    """A one-prompt case's tokens as the runner feeds them: its message through the chat
    template, or its raw text."""
    if case.kind == "chat":
        return list(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": case.segments[0]}], add_generation_prompt=True
            )
        )
    return encode_prompt(tokenizer, case.segments[0]).tolist()


def parse_families(text: str) -> list[str]:
    """Family names from a comma list; 'all', 'scored', 'freeform', 'open' and 'real' name
    groups (families.GROUPS)."""
    names = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        if item not in GROUPS and item not in FAMILIES:
            raise LazymlxError(
                f"unknown task family {item!r}; choose from: {', '.join(GROUPS)}, "
                f"{', '.join(FAMILIES)}"
            )
        names += GROUPS.get(item, [item])
    return list(dict.fromkeys(names))


def first_seed(split: str) -> int:
    if split not in SPLITS:
        raise LazymlxError(f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
    return 0 if split == "calibration" else VALIDATION_SEED


def context_tokens(tokenizer: TokenizerWrapper, kind: str, segments: tuple[str, ...]) -> int:
    """Tokens the whole conversation needs: the segments as the runner feeds them, plus the
    replies generated before the scored one."""
    if kind == "chat":
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": segments[0]}], add_generation_prompt=True, tokenize=False
        )
        first = tokenizer.encode(rendered, add_special_tokens=False, verbose=False)
        later = sum(
            len(tokenizer.encode(s, add_special_tokens=False, verbose=False)) for s in segments[1:]
        )
        turns = len(segments) - 1
        return len(first) + later + turns * (CHAT_OVERHEAD + FIRST_REPLY)
    total = len(tokenizer.encode(segments[0], verbose=False))
    total += sum(
        len(tokenizer.encode(s, add_special_tokens=False, verbose=False)) for s in segments[1:]
    )
    return total + (FIRST_ANSWER if kind == "followup" else 0)


Segments = Callable[[int], tuple[str, ...]]


def _framing(draft: Draft, tokenizer: TokenizerWrapper) -> tuple[str, Segments]:
    """How a draft reaches the model: its kind and its segments at n units. A question (`ask`)
    goes through the chat template where the model has one, else as a raw prompt ending with
    "Answer:"."""
    if draft.kind != "ask":
        return draft.kind, draft.segments
    if tokenizer.chat_template:
        return "chat", draft.segments
    return "raw", lambda n: (draft.segments(n)[0] + ASK_LEAD,)


def make_case(family: str, tokenizer: TokenizerWrapper, length: int, seed: int, split: str) -> Case:
    """The case for (family, split, length, seed): the most haystack that fits in `length` tokens
    with its scored answer, every planted number appearing only where it was planted (real text
    may hold one already, or a document be too short for the length: then the next draw,
    deterministically)."""
    if family not in FAMILIES:
        raise LazymlxError(f"unknown task family {family!r}; choose from: {', '.join(FAMILIES)}")
    for attempt in range(20):
        rng = random.Random(f"{family}:{split}:{length}:{seed}:{attempt}")
        draft = FAMILIES[family](rng, seed, split)
        kind, segments = _framing(draft, tokenizer)

        def tokens(
            n: int, kind: str = kind, segments: Segments = segments, spare: int = draft.max_tokens
        ) -> int:
            return context_tokens(tokenizer, kind, segments(n)) + spare

        try:
            count = _fit(tokens, length)
        except TextRanOut:  # a document too short for the length: the next draw
            continue
        if count is None:
            raise LazymlxError(
                f"{length} tokens is too short for the {family} family; use at least 512"
            )
        if draft.clean(count):
            return Case(
                family, split, length, seed, kind, segments(count), draft.gold,
                draft.max_tokens, draft.depth, draft.source,
                tuple(piece.strip() for _, piece in draft.inserts), draft.judge,
                draft.target(count), draft.aliases,
            )  # fmt: skip
    raise LazymlxError(
        f"no clean {family} case for seed {seed} at {length} tokens; use another seed"
    )


# Cases per family at each length: calibration chooses knobs, validation reports them.
SUITE = {
    "calibration": {256: 2, 512: 2, 1024: 3, 2048: 3, 4096: 1, 8192: 1},
    "validation": {256: 3, 512: 3, 1024: 4, 2048: 4, 4096: 2, 8192: 2},
}


def suite_counts(split: str, lengths: list[int], cases: int | None = None) -> dict[int, int]:
    """Cases per family at each length: `cases` if given, else the suite's (2 at other lengths)."""
    first_seed(split)  # an unknown split is a clear error
    return {length: cases or SUITE[split].get(length, 2) for length in lengths}


def make_cases(
    tokenizer: TokenizerWrapper,
    families: list[str],
    split: str,
    counts: dict[int, int],
) -> list[Case]:
    """counts[length] cases of every family at each length, seeds from the split's first."""
    start = first_seed(split)
    return [
        make_case(family, tokenizer, length, start + i, split)
        for length, count in counts.items()
        for family in families
        for i in range(count)
    ]


def _fit(tokens: Callable[[int], int], length: int) -> int | None:
    """The largest unit count n >= 1 with tokens(n) <= length (token counts grow with n). A text
    that runs out first (TextRanOut past its last unit) must fill FILLED of the length."""

    def fits(n: int) -> bool:
        try:
            return tokens(n) <= length
        except TextRanOut:
            return False

    if not fits(1):
        return None
    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:  # tokens(low) fits, tokens(high) does not
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    try:
        tokens(low + 1)
    except TextRanOut:
        if tokens(low) < FILLED * length:
            raise
    return low
