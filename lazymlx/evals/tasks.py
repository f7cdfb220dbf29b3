"""Long-context retrieval tasks, generated offline and deterministically from (task, length, seed).

Each case is a raw completion prompt (SmolLM2-class models answer retrieval through a raw prompt
far better than through a chat template) whose last words lead straight into the answer, sized
with the model's own tokenizer to at most the target length, with the gold answer appearing
exactly once. The tasks follow the long-context suites the paper's claims rest on:

- passkey: a five-digit key in grass/sky filler; the key's depth sweeps 0.1 … 0.9 over seeds.
- needle: one "special magic number" in generated prose (see prose.py), depth swept likewise.
- multikey: RULER's multi-key needles: four word → number needles, ask for one word's number.
- kv: a JSON object of UUID → UUID pairs, ask for one key's value (lost-in-the-middle style).
- vartrack: RULER's variable tracking: two chains of VAR assignments, ask for the value at the
  end of one chain (the other chain holds a distractor value).
- docneedle: the needle task in real English: a special magic number among the paragraphs of
  Python's language reference (realtext.py).
- docfact: a person's pass key among the sentences of standard-library docstrings.
"""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.errors import LazymlxError
from lazymlx.evals.prose import NAMES, sentences
from lazymlx.evals.realtext import docstring_paragraphs, reference_paragraphs, split_sentences
from lazymlx.prompts import FILLER, holds_answer

DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)
NOISE = FILLER.strip()  # the classic grass/sky filler, one repetition per haystack unit
WORDS = (
    "apple", "river", "candle", "falcon", "marble", "lantern", "copper", "meadow", "violin",
    "harbor", "pepper", "glacier", "thimble", "saddle", "compass", "orchid",
)  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One prompt with its gold answer; `correct` is the suite's scoring (the gold appears whole
    in the answer)."""

    task: str
    length: int  # the target: the prompt has at most this many tokens
    seed: int
    text: str
    gold: str
    max_tokens: int  # enough generated tokens to hold the answer
    depth: float  # where the answer sits, 0 = start of the haystack, 1 = end

    def correct(self, output: str) -> bool:
        return holds_answer(output, self.gold)


@dataclass
class _Spec:
    """A task before sizing: a haystack of n units with needles placed at depths, framed."""

    units: Callable[[int], list[str]]  # the first n haystack units (a stable prefix for any n)
    needles: list[tuple[float, str]]
    question: str
    gold: str
    max_tokens: int
    depth: float
    head: str = ""
    joiner: str = " "
    extra: dict = field(default_factory=dict)

    def text(self, n: int) -> str:
        units = self.units(n)
        for depth, needle in sorted(self.needles, reverse=True):  # deepest first keeps indices
            units.insert(round(depth * len(units)), needle)
        return self.head + self.joiner.join(units) + self.question


def _number(rng: random.Random, digits: int) -> str:
    return str(rng.randrange(10 ** (digits - 1), 10**digits))


def _distinct_numbers(rng: random.Random, count: int, digits: int) -> list[str]:
    numbers: list[str] = []
    while len(numbers) < count:
        number = _number(rng, digits)
        if all(number not in other and other not in number for other in numbers):
            numbers.append(number)
    return numbers


def _noise(n: int) -> list[str]:
    return [NOISE] * n


def passkey(rng: random.Random, seed: int) -> _Spec:
    key = _number(rng, 5)
    depth = DEPTHS[seed % len(DEPTHS)]
    return _Spec(
        units=_noise,
        needles=[(depth, f"The pass key is {key}. Remember it.")],
        head="There is a pass key hidden in this text. Find it and remember it. ",
        question=" What is the pass key? The pass key is",
        gold=key,
        max_tokens=8,
        depth=depth,
    )


def _magic_number(
    rng: random.Random, seed: int, units: Callable[[int], Callable[[int], list[str]]], head: str
) -> _Spec:
    """A special magic number for a city hidden in a haystack; `units` makes the haystack from a
    seed drawn after the number and city, so every needle task draws in the same order."""
    number, city = _number(rng, 7), rng.choice(("Lisbon", "Oslo", "Quito", "Hanoi", "Tunis"))
    depth = DEPTHS[seed % len(DEPTHS)]
    return _Spec(
        units=units(rng.randrange(2**32)),
        needles=[(depth, f"The special magic number for {city} is {number}.")],
        head=head,
        question=(
            f"\n\nWhat is the special magic number for {city}? "
            f"The special magic number for {city} is"
        ),
        gold=number,
        max_tokens=10,
        depth=depth,
    )


def needle(rng: random.Random, seed: int) -> _Spec:
    return _magic_number(
        rng,
        seed,
        lambda prose_seed: lambda n: sentences(random.Random(prose_seed), n),
        "Read the story below; a special magic number is hidden in it.\n\n",
    )


def _real_prose(paragraphs: tuple[str, ...], seed: int) -> Callable[[int], list[str]]:
    """The first n sentences of the paragraphs in a seeded order (each paragraph whole, so the
    text reads as written), cycling if n outruns them."""
    order = list(paragraphs)
    random.Random(seed).shuffle(order)
    units = split_sentences(tuple(order))
    return lambda n: [units[i % len(units)] for i in range(n)]


def docneedle(rng: random.Random, seed: int) -> _Spec:
    return _magic_number(
        rng,
        seed,
        lambda order_seed: _real_prose(reference_paragraphs(), order_seed),
        "Read the documentation below; a special magic number is hidden in it.\n\n",
    )


def docfact(rng: random.Random, seed: int) -> _Spec:
    code, name = _number(rng, 5), rng.choice(NAMES)
    depth = DEPTHS[seed % len(DEPTHS)]
    return _Spec(
        units=_real_prose(docstring_paragraphs(), rng.randrange(2**32)),
        needles=[(depth, f"{name}'s pass key is {code}. Remember it.")],
        head="These are notes about Python's standard library. A pass key is hidden in them.\n\n",
        question=f"\n\nWhat is {name}'s pass key? {name}'s pass key is",
        gold=code,
        max_tokens=8,
        depth=depth,
    )


def multikey(rng: random.Random, seed: int) -> _Spec:
    words = rng.sample(WORDS, 4)
    numbers = _distinct_numbers(rng, 4, 7)
    depth = DEPTHS[seed % len(DEPTHS)]
    others = [rng.uniform(0.05, 0.95) for _ in words[1:]]
    return _Spec(
        units=_noise,
        needles=[
            (d, f"One of the special magic numbers for {word} is: {number}.")
            for d, word, number in zip([depth, *others], words, numbers, strict=True)
        ],
        head="Some special magic numbers are hidden in this text. Memorize them. ",
        question=(
            f" What is the special magic number for {words[0]}? "
            f"The special magic number for {words[0]} is:"
        ),
        gold=numbers[0],
        max_tokens=10,
        depth=depth,
    )


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def kv(rng: random.Random, seed: int) -> _Spec:
    key, value = _uuid(rng), _uuid(rng)
    depth = DEPTHS[seed % len(DEPTHS)]
    pairs_seed = rng.randrange(2**32)

    def pairs(n: int) -> list[str]:
        pairs_rng = random.Random(pairs_seed)
        return [f'"{_uuid(pairs_rng)}": "{_uuid(pairs_rng)}"' for _ in range(n)]

    return _Spec(
        units=pairs,
        needles=[(depth, f'"{key}": "{value}"')],
        head=(
            "Extract the value corresponding to the specified key in the JSON object below.\n\n"
            "JSON data:\n{"
        ),
        joiner=", ",
        question=f'}}\n\nKey: "{key}"\nThe value associated with the specified key is: "',
        gold=value,
        max_tokens=48,  # a UUID is 36 characters, most of them single-digit tokens
        depth=depth,
    )


def _variable(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_uppercase, k=5))


def vartrack(rng: random.Random, seed: int) -> _Spec:
    value, distractor = _distinct_numbers(rng, 2, 5)
    names = []
    while len(names) < 6:
        name = _variable(rng)
        if name not in names:
            names.append(name)
    chain, other = names[:3], names[3:]
    depth = DEPTHS[seed % len(DEPTHS)]  # where the chain starts; later hops sit deeper
    hops = sorted(rng.uniform(depth, 0.95) for _ in range(2))
    other_depths = sorted(rng.uniform(0.05, 0.95) for _ in range(3))
    needles = [(depth, f"VAR {chain[0]} = {value}.")]
    needles += [
        (d, f"VAR {b} = VAR {a}.") for d, a, b in zip(hops, chain[:-1], chain[1:], strict=True)
    ]
    needles += [(other_depths[0], f"VAR {other[0]} = {distractor}.")]
    needles += [
        (d, f"VAR {b} = VAR {a}.")
        for d, a, b in zip(other_depths[1:], other[:-1], other[1:], strict=True)
    ]
    return _Spec(
        units=_noise,
        needles=needles,
        head="Memorize and track the chain of variable assignments hidden in this text. ",
        question=(
            f" Question: what number does VAR {chain[-1]} hold? "
            f"Answer: VAR {chain[-1]} holds the number"
        ),
        gold=value,
        max_tokens=8,
        depth=depth,
    )


TASKS: dict[str, Callable[[random.Random, int], _Spec]] = {
    "passkey": passkey,
    "needle": needle,
    "multikey": multikey,
    "kv": kv,
    "vartrack": vartrack,
    "docneedle": docneedle,
    "docfact": docfact,
}


def parse_tasks(text: str) -> list[str]:
    names = list(TASKS) if text.strip() == "all" else [t.strip() for t in text.split(",")]
    for name in names:
        if name not in TASKS:
            raise LazymlxError(f"unknown task {name!r}; choose from: all, {', '.join(TASKS)}")
    return list(dict.fromkeys(names))


def make_case(task: str, tokenizer: TokenizerWrapper, length: int, seed: int) -> Case:
    """The case for (task, length, seed): the most haystack that keeps it within `length` tokens."""
    spec = TASKS[task](random.Random(f"{task}:{length}:{seed}"), seed)
    # as encode_prompt counts (special tokens added); verbose=False: the search may try a text
    # longer than the model's context, which is only measured, and needs no warning
    count = _fit(lambda n: len(tokenizer.encode(spec.text(n), verbose=False)), length)
    if count is None:
        raise LazymlxError(
            f"{length} tokens is too short for the {task} task; use at least a few hundred tokens"
        )
    text = spec.text(count)
    if text.count(spec.gold) != 1:  # real text may hold the number already: a case must not
        raise LazymlxError(
            f"the {task} case for seed {seed} at {length} tokens holds its answer "
            f"{text.count(spec.gold)} times; use another seed"
        )
    return Case(task, length, seed, text, spec.gold, spec.max_tokens, spec.depth)


def _fit(tokens: Callable[[int], int], length: int) -> int | None:
    """The largest unit count n >= 1 with tokens(n) <= length (token counts grow with n)."""
    if tokens(1) > length:
        return None
    low, high = 1, 2
    while tokens(high) <= length:
        low, high = high, high * 2
    while high - low > 1:  # tokens(low) fits, tokens(high) does not
        middle = (low + high) // 2
        low, high = (middle, high) if tokens(middle) <= length else (low, middle)
    return low
