"""Retrieval prompts sized in tokens, for benchmarks and accuracy checks.

Random tokens say nothing about pruning quality: a prompt whose answer hides at a known depth
does. The passkey prompt is the classic one (grass/sky filler, a five-digit key, raw completion;
SmolLM2-135M answers it through a raw prompt, not through its chat template).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mlx_lm.tokenizer_utils import TokenizerWrapper

FILLER = (
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
)


def holds_answer(output: str, answer: str) -> bool:
    """The answer appears whole in the output: "4473263." holds 4473263, "44732632" does not.

    Plain containment (RULER's string match) would score a number run on by extra digits as
    right, and pruning that loses where a number ends does exactly that.
    """
    return re.search(rf"(?<![0-9A-Za-z]){re.escape(answer)}(?![0-9A-Za-z])", output) is not None


@dataclass(frozen=True)
class RetrievalPrompt:
    text: str
    answer: str
    depth: float  # where the key line sits in the filler: 0 = first, 1 = last

    def correct(self, output: str) -> bool:
        return holds_answer(output, self.answer)


def passkey_prompt(
    tokenizer: TokenizerWrapper, length: int, depth: float = 0.5, passkey: str = "68217"
) -> RetrievalPrompt:
    """About `length` tokens of filler with the key line at `depth`, ending "The pass key is"."""
    key_line = f"The pass key is {passkey}. Remember it. {passkey} is the pass key. "
    question = "What is the pass key? The pass key is"
    per_filler = len(tokenizer.encode(FILLER))
    fixed = len(tokenizer.encode(key_line + question))
    repeats = max(2, (length - fixed) // per_filler)
    before = round(depth * repeats)
    text = FILLER * before + key_line + FILLER * (repeats - before) + question
    return RetrievalPrompt(text=text, answer=passkey, depth=depth)


EVERYDAY_QUESTIONS = (
    "What is the capital of France?",
    "What is 2+2?",
    "Name three primary colors.",
    "How many days are in a week?",
    "Who wrote Romeo and Juliet?",
    "Give me a synonym for happy.",
)
EVERYDAY_COMPLETIONS = ("The capital of France is", "Water boils at a temperature of")


def everyday_prompts(tokenizer: TokenizerWrapper) -> list[tuple[str, list[int]]]:
    """(kind, tokens) of short everyday requests: chat questions through the chat template and
    raw completions. Prompts this short run whole under every preset, so whatever runs them
    (ranks against one process, benchmarks/distributed.py) must give stock's tokens."""
    cases = []
    for question in EVERYDAY_QUESTIONS:
        messages = [{"role": "user", "content": question}]
        cases.append(
            ("chat question", tokenizer.apply_chat_template(messages, add_generation_prompt=True))
        )
    cases += [("raw completion", tokenizer.encode(text)) for text in EVERYDAY_COMPLETIONS]
    return cases
