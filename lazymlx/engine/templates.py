"""The chat template's closing tokens: what a chat turn ends with whatever the user asked.

A chat prompt ends with the template's end-of-message and generation-prompt tokens
("<|im_end|>\\n<|im_start|>assistant\\n"), the same in every turn. A scoring window of the last
8 tokens over such a prompt observes mostly them and only the question's last words; raw prompts
end with the question itself. Measuring how long that tail is lets the window observe as much of
the user's own text in a chat turn as in a raw prompt, on any model with a chat template.
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.tokenizer_utils import TokenizerWrapper

MARK = "\u2063lazymlx question\u2063"  # user text no template rewrites


def generation_tail(tokenizer: TokenizerWrapper) -> tuple[int, ...]:
    """The token ids a one-message chat renders after the user's text (cached on the
    tokenizer); empty without a chat template."""
    cached = getattr(tokenizer, "_lazymlx_generation_tail", None)
    if cached is None:
        cached = ()
        if getattr(tokenizer, "chat_template", None):
            try:
                text = tokenizer.apply_chat_template(
                    [{"role": "user", "content": MARK}], add_generation_prompt=True, tokenize=False
                )
            except Exception:  # a template that can't render one user message has no tail to skip
                text = ""
            if MARK in text:
                suffix = text[text.rindex(MARK) + len(MARK) :]
                cached = tuple(tokenizer.encode(suffix, add_special_tokens=False))
        tokenizer._lazymlx_generation_tail = cached
    return cached


def template_tail(tokenizer: TokenizerWrapper, tokens: mx.array) -> int:
    """How many of the prompt's last tokens are the chat template's closing tokens (0 if it
    doesn't end with them: a raw prompt)."""
    tail = generation_tail(tokenizer)
    if not tail or tokens.size < len(tail):
        return 0
    return len(tail) if tuple(tokens[-len(tail) :].tolist()) == tail else 0
