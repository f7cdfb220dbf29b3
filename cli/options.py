"""The options and checks the commands share: the model, sampling flags, the preset, the
output format of the measuring commands; each checked before anything loads."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from lazymlx.cli.loading import in_group
from lazymlx.engine.config import PRESETS, LazyConfig
from lazymlx.errors import LazymlxError
from lazymlx.models.registry import DEFAULT_MODEL

ModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="Registry name, mlx-lm model directory, .gguf file or hub id (owner/name).",
    ),
]
Lazy = Annotated[
    str,
    typer.Option(
        "--lazy",
        help=f"LazyLLM pruning preset: {', '.join(PRESETS)} or one `lazymlx calibrate` saved; "
        "off runs stock mlx-lm (keep-all: lazymlx's engine keeping every token).",
    ),
]
# the values' limits are the one request check's (lazymlx/sampling.py), checked in sampling_flags
MaxTokens = Annotated[int, typer.Option("--max-tokens", "-n", help="Most tokens to generate.")]
Temperature = Annotated[float, typer.Option("--temp", help="Sampling temperature; 0 is greedy.")]
TopP = Annotated[float, typer.Option("--top-p", help="Nucleus sampling mass.")]
TopK = Annotated[int, typer.Option("--top-k", help="Sample from the k likeliest; 0: all.")]
MinP = Annotated[float, typer.Option("--min-p", help="Drop tokens below min-p × the top one.")]
RepetitionPenalty = Annotated[
    float | None,
    typer.Option("--repetition-penalty", help="Penalize repeats (mlx-lm's; e.g. 1.1)."),
]
Seed = Annotated[int | None, typer.Option("--seed", help="Random seed, for repeatable sampling.")]
System = Annotated[
    str | None, typer.Option("--system", "--system-prompt", "-s", help="System prompt.")
]
PromptCacheFile = Annotated[
    str | None,
    typer.Option(
        "--prompt-cache-file",
        help="A context file: continue from it if it exists, save the context to it after.",
    ),
]
ModelArgument = Annotated[
    str | None,
    typer.Argument(
        metavar="MODEL",
        help="The model, as --model takes it (ollama's `run MODEL` habit).",
        show_default=False,
    ),
]
NoComplete = Annotated[
    bool,
    typer.Option(
        "--no-complete",
        help="Save a pruned context as it is, without computing what pruning skipped first.",
    ),
]
Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bar and no stats line on stderr.")
]
Verbose = Annotated[
    bool, typer.Option("--verbose", "-v", help="Every figure in the stats line, spelled out.")
]


def lazy_config(preset: str, model: str) -> LazyConfig | None:
    """The engine's config for a preset name; 'off' is stock mlx-lm (None), which runs in one
    process, so a context-parallel chain (which runs the engine's prompt step) refuses it."""
    from lazymlx.engine.presets import STOCK, lazy_config
    from lazymlx.parallel import context_parallel, distributed

    if preset == STOCK and context_parallel.chain() is not None:
        raise LazymlxError(
            "--lazy off is stock mlx-lm, which runs in one process; on a --parallel "
            "context chain run --lazy keep-all (lazymlx's engine keeping every token)"
        )
    # each rank reads its machine's saved presets: one that lacks this preset says so
    return distributed.everywhere(lambda: lazy_config(preset, model), "find the preset")


# what lands in the MODEL argument when a flag is given a value, as mlx-lm's `--verbose False`
FLAG_VALUES = ("true", "false", "yes", "no", "on", "off", "0", "1")


def one_model(name: str | None, model: str) -> str:
    """The model named first (`lazymlx chat MODEL`) or with -m; both must agree. A flag's value
    there (mlx-lm's habit `--verbose False`) is said as such, not as an unknown model."""
    if name is not None and name.lower() in FLAG_VALUES:
        raise LazymlxError(
            f"got {name!r} where the model goes: lazymlx's flags take no value (mlx-lm's "
            "`--verbose False` is the default here: the text on stdout, one stats line on "
            "stderr); -q / --quiet drops the stats line, -v / --verbose spells it out"
        )
    if name is not None and model not in (DEFAULT_MODEL, name):
        raise LazymlxError(f"two models named: {name} and -m {model}; give one")
    return name or model


def check_stdin() -> None:
    """Refuse input from stdin under mlx.launch, which never closes the ranks' stdin."""
    if in_group():
        raise LazymlxError(
            "under mlx.launch the prompt can't come from stdin or a terminal (mlx.launch never "
            "closes the ranks' stdin); pass it with -p TEXT"
        )


def prompt_from_stdin() -> str:
    check_stdin()
    return sys.stdin.read()


def sampling_flags(temp, top_p, top_k, min_p, repetition_penalty, seed, max_tokens) -> dict:
    """The sampling flags as stream_generate takes them, checked by the one request check
    (lazymlx/sampling.py) before anything loads, a bad one named as its flag; the seed is
    applied by apply_seed once the model is loaded (loading draws random numbers)."""
    from lazymlx.sampling import check_sampling

    sampling = {
        "temp": temp,
        "top_p": top_p,
        "top_k": top_k,
        "min_p": min_p,
        "repetition_penalty": repetition_penalty,
    }
    flags = sampling | {"seed": seed, "max_tokens": max_tokens}
    check_sampling(flags, spell=lambda name: "--" + name.replace("_", "-"))
    return sampling


def apply_seed(seed: int | None) -> None:
    """Seed MLX's sampling (none: leave it as it is)."""
    if seed is not None:
        import mlx.core as mx

        mx.random.seed(seed)


# the measuring commands' (bench, eval, calibrate)
Model = Annotated[
    str, typer.Option("--model", "-m", help="Registry name, model directory, .gguf or hub id.")
]
Output = Annotated[str, typer.Option("--output", "-o", help="md (a table), json or csv.")]
Journal = Annotated[
    str | None,
    typer.Option("--journal", help="Append every record to this JSON-lines file as it comes."),
]
Resume = Annotated[
    bool,
    typer.Option(
        "--resume", help="Keep the --journal's records and run only the cases not in it yet."
    ),
]
Baselines = Annotated[
    str | None,
    typer.Option("--baselines", help="Baseline cache file to read and add to (default: yours)."),
]


def preset_list(text: str) -> list[str]:
    """Preset names; 'none' runs stock alone (filling the baseline cache)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["none"]:
        return []
    if not names:
        raise LazymlxError(
            "no preset given to --lazy; name one or more (e.g. gentle,fast), or none"
        )
    return list(dict.fromkeys(names))
