"""A multi-turn conversation that keeps the model's KV cache between turns.

Each turn renders the whole conversation with the chat template, keeps the longest cached prefix
of it and prefills only the rest, so a reply costs its own tokens, not the whole history, and a
turn cut short (Ctrl-C) or a re-tokenized answer only costs the tokens that differ. With a lazy
config the context is a LazyState, so tokens pruned in earlier turns can be revived in later ones,
and between turns (while the user reads and types) `complete_step` completes it a unit at a time
(lazymlx/engine/complete.py), so the next question finds the whole conversation computed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import mlx.nn as nn
from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.contexts import Context, load_context, new_cache, save_context
from lazymlx.engine.complete import complete_all, step
from lazymlx.engine.config import LazyConfig
from lazymlx.errors import LazymlxError
from lazymlx.generation import Response, check_text, context_limit
from lazymlx.turn import render_chat, run_turn


class ChatSession:
    def __init__(
        self,
        model: nn.Module,
        tokenizer: TokenizerWrapper,
        system: str | None = None,
        lazy: LazyConfig | None = None,
        max_context: int | None = None,
        **generation: Any,
    ) -> None:
        """max_context: the most tokens the conversation may hold (default: the model's context
        length); when a turn and its answer would not fit, the oldest half of the turns is
        dropped (the system prompt stays), so a long chat goes on in bounded memory."""
        if tokenizer.chat_template is None:
            raise LazymlxError(
                "this model's tokenizer has no chat template; use `lazymlx generate --raw`"
            )
        self.model, self.tokenizer, self.system, self.lazy = model, tokenizer, system, lazy
        self.generation = generation  # max_tokens, temp, ... for every turn
        self.max_context = max_context or context_limit(model)
        self.dropped_turns = 0  # turns forgotten to stay within max_context
        self.clear()

    def clear(self) -> None:
        self.messages: list[dict[str, str]] = []
        if self.system:
            self.messages.append({"role": "system", "content": self.system})
        self.context = Context(new_cache(self.model, self.lazy))

    def save(self, path: str | Path, model_name: str, preset: str, complete: bool = True) -> None:
        """Save the conversation (its context and messages) to a context file, atomically,
        completing the context first unless `complete` is False."""
        save_context(
            path, self.context, model_name, preset, complete=complete, messages=self.messages
        )

    @property
    def incomplete(self) -> bool:
        """Whether pruning left part of the context to compute (in idle time)."""
        return not self.context.complete

    def complete_step(self) -> bool:
        """One unit of completing the context (one layer chunk, short enough to stop for a key
        press); whether more is left."""
        if not self.incomplete:
            return False
        return step(self.context.cache, self.context.config)

    def complete(self) -> None:
        """Complete the whole context now (the engine's units, with nothing waiting)."""
        if self.incomplete:
            complete_all(self.context.cache, self.context.config)

    def load(self, path: str | Path, model_name: str) -> None:
        """Continue a conversation saved by `save`; nothing changes if the file is refused."""
        context, extra = load_context(path, self.model, model_name, self.lazy)
        self.context, self.messages = context, extra.get("messages", [])

    def _fitted_prompt(self) -> list[int]:
        """The conversation's prompt tokens, the oldest turns dropped while it and the answer
        would overflow max_context (the newest message is always kept)."""
        room = self.generation.get("max_tokens", 256)
        while True:
            tokens = render_chat(self.tokenizer, self.messages, "use `lazymlx generate --raw`")
            first = 1 if self.system else 0
            turns = len(self.messages) - first - 1  # messages before the newest one
            if not self.max_context or len(tokens) + room <= self.max_context or turns < 2:
                return tokens
            drop = max(2, turns // 2 // 2 * 2)  # whole user/assistant pairs, half of them
            del self.messages[first : first + drop]
            self.dropped_turns += drop // 2

    def send(
        self, text: str, on_progress: Callable[[int, int], None] | None = None
    ) -> Iterator[Response]:
        """Stream the reply to `text`; the reply joins the history even when the caller stops
        early. A turn that fails or is stopped before its first token leaves no trace.
        on_progress(done, total) follows the turn's prefill (mlx-lm's prompt_progress_callback)."""
        check_text(text)
        before = list(self.messages), self.dropped_turns  # a refused turn drops nothing
        self.messages.append({"role": "user", "content": text})
        reply: list[str] = []
        try:
            turn = run_turn(
                self.model,
                self.tokenizer,
                self.context,
                self._fitted_prompt(),
                lazy=self.lazy,
                prompt_progress_callback=on_progress,
                **self.generation,
            )
            with closing(turn):
                for response in turn:
                    reply.append(response.text)
                    yield response
        finally:
            if reply:
                self.messages.append({"role": "assistant", "content": "".join(reply)})
            else:
                self.messages, self.dropped_turns = before
