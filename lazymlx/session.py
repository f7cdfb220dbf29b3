"""A multi-turn conversation that keeps the model's KV cache between turns.

Each turn renders the whole conversation with the chat template, keeps the longest cached prefix
of it and prefills only the rest, so a reply costs its own tokens, not the whole history, and a
turn cut short (Ctrl-C) or a re-tokenized answer only costs the tokens that differ. With a lazy
config the context is a LazyState, so tokens pruned in earlier turns can be revived in later ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache
from mlx_lm.tokenizer_utils import TokenizerWrapper
from mlx_lm.utils import common_prefix_len

from lazymlx.cache import LazyState
from lazymlx.config import LazyConfig
from lazymlx.errors import LazymlxError
from lazymlx.generation import Response, cached_length, stream_generate


class ChatSession:
    def __init__(
        self,
        model: nn.Module,
        tokenizer: TokenizerWrapper,
        system: str | None = None,
        lazy: LazyConfig | None = None,
        **generation: Any,
    ) -> None:
        if tokenizer.chat_template is None:
            raise LazymlxError(
                "this model's tokenizer has no chat template; use `lazymlx generate --raw`"
            )
        self.model, self.tokenizer, self.system, self.lazy = model, tokenizer, system, lazy
        self.generation = generation  # max_tokens, temp, ... for every turn
        self.clear()

    def clear(self) -> None:
        self.messages: list[dict[str, str]] = []
        if self.system:
            self.messages.append({"role": "system", "content": self.system})
        self.cache: LazyState | list[Any] = (
            LazyState(self.model) if self.lazy else make_prompt_cache(self.model)
        )
        self.cached_tokens: list[int] = []  # the tokens whose keys/values self.cache holds

    def _tokens_to_feed(self) -> list[int]:
        tokens = list(self.tokenizer.apply_chat_template(self.messages, add_generation_prompt=True))
        offset = cached_length(self.cache)
        # keep at least one token to feed: the model must see the last prompt token to answer
        keep = min(common_prefix_len(self.cached_tokens[:offset], tokens), len(tokens) - 1)
        trim_prompt_cache(self.cache, offset - keep)
        self.cached_tokens = tokens
        return tokens[keep:]

    def send(self, text: str) -> Iterator[Response]:
        """Stream the reply to `text`; the reply joins the history even when the caller stops early."""
        self.messages.append({"role": "user", "content": text})
        new_tokens = self._tokens_to_feed()
        reply: list[str] = []
        generated: list[int] = []
        try:
            for response in stream_generate(
                self.model,
                self.tokenizer,
                new_tokens,
                prompt_cache=self.cache,
                lazy=self.lazy,
                **self.generation,
            ):
                reply.append(response.text)
                generated.append(response.token)
                yield response
        finally:
            self.cached_tokens += generated
            self.messages.append({"role": "assistant", "content": "".join(reply)})
