"""Kept contexts: a prompt's computed KV, reused by the next prompt that starts the same way.

A conversation resends its whole history each turn (an OpenAI-style client always does), so a
context is found by its tokens: the kept context sharing the longest prefix with the new prompt
gives that prefix and only the rest is computed. A prompt that goes on from a context's
conversation takes the context over; one that only starts alike (another conversation with the
same system prompt) gets a fork, a copy of the shared prefix, so neither conversation loses its
history to the other. `ContextPool` holds several (one per conversation, or per document a user
keeps asking about), least recently used first out, bounded by bytes.

Context files are mlx-lm prompt-cache files whose metadata names the model and the preset that
made them and the tokens they hold, so a context saved today continues tomorrow, and a file from
another model is refused instead of silently producing nonsense. `save_context` and
`load_context` are the one writer and reader. In a group of ranks
(lazymlx/parallel/collectives.py) rank 0 reads and writes the files, holding every rank's heads.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import (
    load_prompt_cache,
    make_prompt_cache,
    save_prompt_cache,
    trim_prompt_cache,
)
from mlx_lm.utils import common_prefix_len

from lazymlx.engine.atomic import write_atomic
from lazymlx.engine.cache import LazyState
from lazymlx.engine.complete import complete_all, pending
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.presets import STOCK
from lazymlx.errors import LazymlxError
from lazymlx.generation import cached_length
from lazymlx.parallel import collectives

Cache = LazyState | list[Any]


def new_cache(model: nn.Module, lazy: LazyConfig | None) -> Cache:
    """An empty context: a LazyState for the lazy engine, mlx-lm's own cache for stock."""
    return LazyState(model) if lazy is not None else make_prompt_cache(model)


def cache_bytes(cache: Cache) -> int:
    if isinstance(cache, LazyState):
        return cache.kv_bytes + cache.aux_bytes
    return sum(entry.nbytes for entry in cache)


@dataclass
class Context:
    """A cache and its tokens: those it holds between calls (`settle`), the prompt's during one
    (`reuse`); for a lazy one, the config its latest turn ran with, which completing it follows
    (None: it never ran here, and nothing completes it)."""

    cache: Cache
    tokens: list[int] = field(default_factory=list)
    prompt: int = 0  # how many of `tokens` the latest request's prompt gave (the rest it made)
    config: LazyConfig | None = None

    @property
    def lazy(self) -> bool:
        return isinstance(self.cache, LazyState)

    def asked(self) -> list[int]:
        """The latest request's prompt: every token before what it generated."""
        return self.tokens[: self.prompt]

    @property
    def complete(self) -> bool:
        """Whether completing it (lazymlx/engine/complete.py) has nothing left to do."""
        return not self.lazy or self.config is None or not pending(self.cache, self.config)

    def reuse(self, tokens: list[int], model: nn.Module) -> int:
        """Trim to the longest prefix shared with `tokens`, keeping at least one token to feed
        (the model must see the prompt's last token to answer); the tokens kept."""
        offset = cached_length(self.cache)
        keep = max(0, min(common_prefix_len(self.tokens[:offset], tokens), len(tokens) - 1))
        keep = self._trim_to(keep, model)
        self.tokens, self.prompt = list(tokens), len(tokens)
        return keep

    def settle(self, fed: list[int], model: nn.Module, config: LazyConfig | None) -> None:
        """After a call under `config` that fed `fed` (the prompt, then the tokens generated) to
        the cache, record what it holds: its tokens are then its rows, whatever stopped the
        call, and a lazy one the config completing it follows. An
        interrupted lazy prompt step rolls back, a stock one stops between chunks (or, rarely,
        between layers: the layers ahead are trimmed back), and a decode step may have fed a
        token never returned (trimmed off), so the counts a chat shows, a saved file's metadata
        and reuse all agree with the rows."""
        if not self.lazy:
            self.cache = _even_layers(self.cache, model)
        held = self._trim_to(min(cached_length(self.cache), len(fed)), model)
        self.tokens, self.prompt = list(fed[:held]), min(self.prompt, held)
        if self.lazy and config is not None:
            self.config = config

    def continued_by(self, tokens: list[int]) -> bool:
        """Whether `tokens` go on from this context's conversation: they hold its latest prompt
        whole (its answer may come back re-tokenized, or be asked for again)."""
        return common_prefix_len(self.tokens, tokens) >= self.prompt

    def fork(self, length: int, model: nn.Module) -> Context:
        """A context of its own holding this one's first `length` tokens, for a conversation
        that only starts the same way (the same system prompt): this one stays whole for its
        own conversation's next turn."""
        cache: Cache = [type(entry).from_state(_own_arrays(entry.state)) for entry in self.cache]
        if self.lazy:
            cache = LazyState(model, cache)
        copy = Context(cache, self.tokens, config=self.config)
        copy.tokens = self.tokens[: copy._trim_to(length, model)]
        return copy

    def _trim_to(self, keep: int, model: nn.Module) -> int:
        """Cut the cache back to its first `keep` tokens; the tokens it then holds. A cache that
        can't be trimmed that far (a window that forgot what is needed, a rotating cache)
        starts over."""
        offset = cached_length(self.cache)
        if keep == offset:  # nothing to cut (a trim would still read every layer's positions)
            return keep
        if self.lazy and not self.cache.trimmable_to(keep):
            self.cache, keep = LazyState(model), 0  # the config still says how to complete it
        elif trim_prompt_cache(self.cache, offset - keep) != offset - keep:
            self.cache, keep = make_prompt_cache(model), 0
        return keep


def _own_arrays(state: Any) -> Any:
    """A cache entry's state with its arrays copied: caches write into their arrays in place,
    so a fork must not share them."""
    return tuple(mx.array(part) if isinstance(part, mx.array) else part for part in state)


def _even_layers(cache: list[Any], model: nn.Module) -> list[Any]:
    """A stock cache whose layers all hold the same tokens: a forward pass stopped between
    layers leaves the first ones a chunk ahead, trimmed back here (a cache that can't be
    trimmed starts over)."""
    shortest = min(entry.offset for entry in cache)
    ahead = [entry for entry in cache if entry.offset > shortest]
    if not all(entry.is_trimmable() for entry in ahead):
        return make_prompt_cache(model)
    for entry in ahead:
        entry.trim(entry.offset - shortest)
    return cache


class ContextPool:
    """Kept contexts, least recently used evicted first once they hold more than `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.contexts: list[Context] = []  # least recently used first

    def take(self, model: nn.Module, tokens: list[int], lazy: LazyConfig | None) -> Context:
        """The context to run `tokens` over, from the kept one sharing most of them (the most
        recent, and one they continue, among equals): taken out of the pool while in use if
        they continue its conversation, else a fork of the prefix they share, so that the other
        conversation keeps its whole history (apps send one long system prompt in every
        conversation); a new one if none shares a token. A lazy prompt only continues a lazy
        context, a stock one a stock one."""
        same_kind = [c for c in reversed(self.contexts) if c.lazy == (lazy is not None)]
        best = max(
            same_kind,
            key=lambda c: (common_prefix_len(c.tokens, tokens), c.continued_by(tokens)),
            default=None,
        )
        shared = 0 if best is None else common_prefix_len(best.tokens, tokens)
        if not shared:
            return Context(new_cache(model, lazy))
        if best.continued_by(tokens):
            self.contexts.remove(best)
            return best
        return best.fork(shared, model)

    def put(self, context: Context) -> None:
        self.contexts.append(context)
        while self.contexts and self.bytes > self.max_bytes:
            self.contexts.pop(0)

    @property
    def bytes(self) -> int:
        return sum(cache_bytes(c.cache) for c in self.contexts)


def save_context(
    path: str | Path,
    context: Context,
    model_name: str,
    preset: str,
    complete: bool = True,
    **extra: Any,
) -> None:
    """Write a context file atomically: mlx-lm's format, with the model (its name as
    lazymlx.load was given it), lazymlx's version, the preset (by the name it was asked for),
    the tokens, `extra` (JSON) and, for a lazy context, whether it is complete. A lazy context is
    completed first (lazymlx/engine/complete.py), so later questions find the whole document,
    unless `complete` is False."""
    from lazymlx import __version__

    path = _checked_name(path)
    collectives.on_leader(check_save_path, path)  # refused before any work
    metadata = {
        "model": model_name,
        "lazymlx": __version__,
        "preset": preset,
        "tokens": json.dumps(context.tokens),
    } | {key: json.dumps(value) for key, value in extra.items()}
    if context.lazy:
        if complete and context.config is not None:
            complete_all(context.cache, context.config)
        metadata["complete"] = "true" if context.complete else "false"
    entries, metadata = collectives.whole_heads(list(context.cache), metadata)
    collectives.on_leader(save_prompt_cache_atomic, path, entries, metadata)


def save_prompt_cache_atomic(
    path: str | Path, entries: list[Any], metadata: dict[str, str] | None = None
) -> None:
    """mlx-lm's save_prompt_cache, written beside `path` and renamed over it: an interrupted save
    leaves the old file (or none), never half of one."""
    write_atomic(
        path,
        lambda staged: save_prompt_cache(str(staged), entries, metadata),
        suffix=".safetensors",
    )


def context_file_exists(path: str | Path) -> bool:
    """Whether a context file is there to continue from (rank 0's files, in a group)."""
    return collectives.on_leader(os.path.exists, path, shared=True)


def check_save_path(path: str | Path) -> Path:
    """A context file's path, refused before any work if it could not be written there."""
    path = _checked_name(path)
    if not path.parent.is_dir():
        raise LazymlxError(f"cannot save to {path}: the folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise LazymlxError(f"cannot save to {path}: the folder {path.parent} is not writable")
    return path


def load_context(
    path: str | Path, model: nn.Module, model_name: str, lazy: LazyConfig | None
) -> tuple[Context, dict[str, Any]]:
    """A context file's context and its extra metadata; refuses a file of another model or kind."""
    path = _checked_name(path)
    entries, metadata = collectives.read_context(lambda: _read(path), path)
    lacking = [key for key in ("model", "preset", "tokens") if key not in metadata]
    if lacking:
        raise LazymlxError(
            f"{path} lacks lazymlx's metadata ({', '.join(lacking)}): it was saved by mlx-lm's "
            "save_prompt_cache or by hand; save the context with lazymlx (--prompt-cache-file, "
            "/save or lazymlx.contexts.save_context) to continue it here"
        )
    saved_model = metadata["model"]
    if saved_model != model_name:
        raise LazymlxError(
            f"{path} holds a context of {saved_model}, not {model_name}; "
            f"load it with --model {saved_model}"
        )
    preset = metadata["preset"]
    if (preset != STOCK) != (lazy is not None):
        raise LazymlxError(f"{path} {_made_by(preset, model_name)}; load it with --lazy {preset}")
    cache = LazyState(model, entries) if lazy is not None else entries
    if lazy is None and len(entries) != len(make_prompt_cache(model)):
        raise LazymlxError(
            f"{path} does not fit this model's layers; load it with the model that saved it"
        )
    try:
        tokens = json.loads(metadata.get("tokens", "[]"))
        extra = {
            key: json.loads(value)
            for key, value in metadata.items()
            if key
            not in ("model", "lazymlx", "preset", "tokens", "complete", collectives.GROUP_SIZE)
        }
    except json.JSONDecodeError:
        raise LazymlxError(f"{path} was not saved by lazymlx (its metadata is not ours)") from None
    return Context(cache, tokens, config=lazy), extra  # completed as `lazy` says, from now


def _made_by(preset: str, model_name: str) -> str:
    """What made a context file, as a refusal to continue it the other way says it: stock
    mlx-lm ('off'), or the engine with a preset that prunes or (a default that runs whole) does
    not, so a file saved under such a default is never said to have been pruned."""
    from lazymlx.engine.presets import resolve_preset

    if preset == STOCK:
        return (
            "holds stock mlx-lm's context (saved with --lazy off), which the engine cannot continue"
        )
    try:
        prunes = resolve_preset(preset, model_name).prunes
    except LazymlxError:  # a preset this machine does not have (saved on another)
        what = ""
    else:
        what = ", which prunes" if prunes else ", which prunes nothing: it runs every prompt whole"
    return (
        f"holds lazymlx's engine's context (saved with --lazy {preset}{what}), which stock "
        "mlx-lm (--lazy off) cannot continue"
    )


def _read(path: Path) -> tuple[list[Any], dict[str, str]]:
    if not path.is_file():
        raise LazymlxError(f"no context file at {path}; save one first (or check the path)")
    try:
        return load_prompt_cache(str(path), return_metadata=True)
    except Exception as error:  # safetensors and mlx raise several kinds on a damaged file
        raise LazymlxError(f"{path} is not a prompt-cache file ({error})") from None


def _checked_name(path: str | Path) -> Path:
    """mlx picks a file's format by its extension, so context files must end in .safetensors."""
    path = Path(path).expanduser()
    if path.suffix != ".safetensors":
        raise LazymlxError(f"context files end in .safetensors; name it {path.name}.safetensors")
    return path
