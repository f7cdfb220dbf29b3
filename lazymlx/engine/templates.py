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


# A question is found among this many of the user's last tokens; a longer one is read by these.
QUESTION_MOST = 96


def special_ids(tokenizer: TokenizerWrapper) -> frozenset[int]:
    """The tokenizer's special tokens (a chat template's markers among them: Qwen lists only
    its end-of-text ones as `all_special_ids`), cached on the tokenizer."""
    cached = getattr(tokenizer, "_lazymlx_special_ids", None)
    if cached is None:
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        marked = {i for i, token in added.items() if getattr(token, "special", False)}
        cached = frozenset(marked | set(getattr(tokenizer, "all_special_ids", ()) or ()))
        tokenizer._lazymlx_special_ids = cached
    return cached


def question_length(tokenizer: TokenizerWrapper, tokens: mx.array, tail: int) -> int:
    """How many of the prompt's last tokens before the template's `tail` are the user's question:
    those after the last blank line, or after the last special token (a chat message's start),
    among the last QUESTION_MOST; 0 where neither is there (a raw prompt that runs on).

    A question pasted under a document follows a blank line or opens a message of its own, and
    its words are what point at the document (lazymlx/engine/policy.py); the document's last
    lines, which a fixed window would read instead, point at their own repeats."""
    end = tokens.size - tail
    ids = tokens[max(0, end - QUESTION_MOST) : end].tolist()
    special = special_ids(tokenizer)
    pieces = [tokenizer.decode([token]) for token in ids]
    starts, text = [], ""
    for piece in pieces:
        starts.append(len(text))
        text += piece
    first = -1
    blank = text.rfind("\n\n")
    if blank >= 0:  # the first token that starts after the blank line
        first = next((i for i, start in enumerate(starts) if start >= blank + 2), len(ids))
    for i, token in enumerate(ids):
        if token in special:  # a message opens: its role's line ("user\n") is no question
            role = [j for j in range(i + 1, min(i + 9, len(ids))) if pieces[j].endswith("\n")]
            first = max(first, role[0] + 1 if role else i + 1)
    return len(ids) - first if 0 <= first < len(ids) else 0
