"""Prompt lengths as people write them: 512, 2k, 8k, or a comma-separated list of those."""

from __future__ import annotations

from lazymlx.errors import LazymlxError

# `lazymlx calibrate`'s lengths: from just above min_prompt, where a gate decides, to 8k.
CALIBRATION_LENGTHS = "512,1k,2k,4k,8k"


def parse_length(text: str) -> int:
    """'512' → 512, '2k' → 2048, '8K' → 8192; k means 1024 tokens, as in '8k context'."""
    word = text.strip().lower()
    scale = 1024 if word.endswith("k") else 1
    number = word.removesuffix("k")
    try:
        value = float(number) * scale
    except ValueError:
        value = 0.0
    if value < 1 or value != int(value):
        raise LazymlxError(
            f"bad prompt length {text.strip()!r}; write a token count such as 512, 2k or 8k"
        )
    return int(value)


def parse_lengths(text: str) -> list[int]:
    """A comma-separated list of lengths, in the order given, duplicates dropped."""
    lengths = [parse_length(part) for part in text.split(",") if part.strip()]
    if not lengths:
        raise LazymlxError("no prompt length given; write one or more such as 512,2k,8k")
    return list(dict.fromkeys(lengths))
