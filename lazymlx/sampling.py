"""The one check of a request's sampling values, and the one set of limits it holds them to.

`lazymlx generate` and `chat` check their flags here, the chat's `/set` its settings, the server
its fields and `stream_generate` / `LLM.submit` their keyword arguments, so each refuses the
same values, in the same words, before any work: a value that got past one of them used to fail
inside the stream, after the request was queued. Each caller spells the names as its user
writes them (`--top-p`, `/set top_p`, `top_p`). No MLX here: the CLI checks its flags before it
loads a model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

from lazymlx.errors import LazymlxError


@dataclass(frozen=True)
class Limit:
    """The values one option takes: a whole number or any finite number, within `valid`;
    `takes` says which, in the words of every refusal."""

    whole: bool
    valid: Callable[[float], bool]
    takes: str


LIMITS: dict[str, Limit] = {
    "temp": Limit(False, lambda v: v >= 0, "a number >= 0 (0: greedy)"),
    "top_p": Limit(False, lambda v: 0 < v <= 1, "a number above 0, at most 1 (1: every token)"),
    "top_k": Limit(True, lambda v: v >= 0, "a whole number >= 0 (0: all)"),
    "min_p": Limit(False, lambda v: 0 <= v <= 1, "a number from 0 to 1 (0: none)"),
    "repetition_penalty": Limit(False, lambda v: v > 0, "a number above 0 (1: none), e.g. 1.1"),
    # OpenAI's ranges, which mlx-lm's logits processors take as they are
    "presence_penalty": Limit(False, lambda v: -2 <= v <= 2, "a number from -2 to 2 (0: none)"),
    "frequency_penalty": Limit(False, lambda v: -2 <= v <= 2, "a number from -2 to 2 (0: none)"),
    "max_tokens": Limit(True, lambda v: v >= 1, "a whole number >= 1"),
    # MLX seeds with an unsigned 64-bit number; OpenAI's clients send a signed one
    "seed": Limit(True, lambda v: 0 <= v < 2**63, "a whole number from 0 to 2^63 - 1"),
}
# each value of logit_bias ({token id: bias}); the ids are checked against the model's vocabulary
BIAS = Limit(False, lambda v: -100 <= v <= 100, "a number from -100 to 100")


def check_value(name: str, value: Any, spelled: str | None = None) -> None:
    """Refuse a value outside `name`'s limits, naming it as `spelled` (default: `name`)."""
    limit = BIAS if name == "logit_bias" else LIMITS[name]
    kind = Integral if limit.whole else Real
    number = isinstance(value, kind) and not isinstance(value, bool)
    finite = number and (isinstance(value, Integral) or math.isfinite(value))
    if not (finite and limit.valid(value)):
        raise LazymlxError(f"{spelled or name} takes {limit.takes}; got {value!r}")


def check_sampling(options: Mapping[str, Any], spell: Callable[[str], str] = str) -> None:
    """Refuse, before any work, a sampling value outside its limits (None: the option's
    default, always fine); options without limits here are left to their own checks."""
    for name, value in options.items():
        if value is None:
            continue
        if name == "logit_bias" and isinstance(value, Mapping):
            for token, bias in value.items():
                check_value(name, bias, f"{spell(name)}[{token}]")
        elif name in LIMITS:
            check_value(name, value, spell(name))


def parse_value(name: str, text: str, spelled: str) -> float | int:
    """A value typed as text (the chat's `/set NAME VALUE`), parsed and checked: one error
    naming the option and what it takes, whether the text is no number or out of bounds."""
    limit = LIMITS[name]
    try:
        value = int(text) if limit.whole else float(text)
        check_value(name, value)
    except (ValueError, LazymlxError):
        got = f"; got {text!r}" if text else ""
        raise LazymlxError(f"{spelled} takes {limit.takes}{got}") from None
    return value
