"""`lazymlx bench`: time to first token and more, stock mlx-lm beside presets, one prompt a
length (the harness is lazymlx/evals/timing.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from lazymlx.cli import options
from lazymlx.cli.loading import Parallel, in_group, join_parallel, load_model
from lazymlx.cli.report import (
    Column,
    check_format,
    emit,
    percent,
    ratio,
    run_progress,
    seconds,
    yes_no,
)
from lazymlx.errors import LazymlxError
from lazymlx.lengths import parse_lengths
from lazymlx.models.registry import DEFAULT_MODEL

BENCH_COLUMNS: list[Column] = [
    ("mode", "mode", str),
    ("prompt_tokens", "prompt tokens", str),
    ("ttft_s", "TTFT (s)", seconds),
    ("ttft_std", "± std", lambda v: "—" if v is None else seconds(v)),
    ("prompt_tps", "prompt tok/s", lambda v: f"{v:.1f}"),
    ("generation_tps", "gen tok/s", lambda v: f"{v:.1f}"),
    ("peak_memory_gb", "peak GB", seconds),
    ("compute_fraction", "work vs stock", percent),
    ("pruned", "pruned", lambda v: "—" if v is None else "yes" if v else "nothing"),
    ("speedup", "speedup", ratio),
    ("answer_matches_baseline", "= baseline", yes_no),
    ("answer_correct", "answer right", yes_no),
]
# several prompts (a list, or `workload`): which prompt a row is, and a geometric-mean row per
# preset (its counts written out, the cells only single runs fill empty)
WORKLOAD_COLUMNS: list[Column] = [
    ("prompt", "prompt", str),
    *(
        (
            key,
            heading,
            lambda v, show=show: "—" if v is None else v if isinstance(v, str) else show(v),
        )
        for key, heading, show in BENCH_COLUMNS
        if key not in ("ttft_std", "prompt_tps", "peak_memory_gb")
    ),
]
CHAIN_COLUMNS: list[Column] = [
    *BENCH_COLUMNS[:1],
    ("ranks", "ranks", str),
    *BENCH_COLUMNS[1:],
    ("vs_one_process", "TTFT vs 1 process", lambda v: "—" if v is None else ratio(v)),
    ("same_as_one_process", "= 1 process", yes_no),
]


BenchPresets = Annotated[
    str | None,
    typer.Option(
        "--lazy",
        help="Presets to time next to stock mlx-lm, comma-separated (default: every one of "
        "default, gentle, fast and the model's saved presets that prunes on it): any preset, "
        "keep-all (lazymlx's engine keeping every token), static, random, or off (stock again).",
        show_default=False,
    ),
]

BenchPrompt = Annotated[
    str,
    typer.Option(
        "--prompt",
        help="A one-prompt task of the eval (passkey, the default; real-option, "
        "real-function, summary, json, lookalike...), a comma list of them, workload (a "
        "question about a manual, over several documents, about source code, a summary, an "
        "open question, a passkey: per kind and their geometric mean), random, or a text FILE.",
    ),
]


def bench(
    prompt_len: Annotated[
        str, typer.Option("--prompt-len", "-l", help="Prompt tokens: 512, 2k, 8k or a list 1k,2k.")
    ] = "2k",
    model: options.Model = DEFAULT_MODEL,
    lazy: BenchPresets = None,
    gen_len: Annotated[
        int, typer.Option("--gen-len", "-n", min=1, help="Tokens to generate.")
    ] = 128,
    repeats: Annotated[
        int,
        typer.Option(
            "--repeats", "-r", min=1, help="Timed runs per row, after one warm-up (mean ± std)."
        ),
    ] = 3,
    prompt: BenchPrompt = "passkey",
    output: options.Output = "md",
    parallel: Parallel = "tensor",
) -> None:
    """Time to first token and more, stock mlx-lm next to LazyLLM presets, on one prompt per length.

    With no --lazy it times every preset that prunes on the model (a default that runs whole
    would time stock against itself), and the header says which and why.

    Under mlx.launch with --parallel context every preset runs twice, on rank 0 alone (one
    process) and on the chain of all ranks, side by side; rank 0 prints the table.
    """
    from lazymlx.evals.strategies import strategy
    from lazymlx.evals.timing import against_one_process, beside_the_chain, prompt_kinds, run_header
    from lazymlx.evals.timing import bench as run_bench

    check_format(output)
    lengths = parse_lengths(prompt_len)
    names, compares = _bench_presets(lazy, model)
    presets = [strategy(name, model) for name in names]
    ranks = _bench_group(parallel, model, presets, lengths)
    loaded, tokenizer = load_model(model)
    strategies, where = beside_the_chain(loaded, presets, ranks)
    runs = 1 + len(prompt_kinds(prompt)) * repeats  # a warm-up, then each prompt's repeats
    total = len(lengths) * (1 + len(strategies)) * runs
    with run_progress(total) as advance:
        rows = run_bench(
            loaded, tokenizer, lengths, strategies, prompt, gen_len, repeats, on_run=advance,
            where=where,
        )  # fmt: skip
    head = pruned_nothing(rows) | run_header(
        model, presets, compares=compares, prompt=prompt, gen_len=gen_len, repeats=repeats,
        warmup="1 per mode, at the timed length", **_parallel_note(parallel, ranks),
    )  # fmt: skip
    columns = CHAIN_COLUMNS if ranks else BENCH_COLUMNS
    if any("prompt" in row for row in rows):
        rows = [{key: row.get(key) for key, _, _ in WORKLOAD_COLUMNS} | row for row in rows]
        columns = WORKLOAD_COLUMNS
    emit(output, head, against_one_process(rows, ranks), columns)


def pruned_nothing(rows: list[dict]) -> dict:
    """The line under the table where a preset ran a length's prompt whole (its gate, its
    floor, a mass rule that found no few tokens holding the attention): its row is stock's
    work, so its speedup there is noise, and a reader should not have to find that out from
    the `pruned` column."""
    whole: dict[int, list[str]] = {}
    for row in rows:  # keep-all runs every prompt whole by design: the wrapper's cost
        if row.get("pruned") is False and row["mode"] != "lazy:keep-all":
            whole.setdefault(row["prompt_tokens"], []).append(row["mode"].removeprefix("lazy:"))
    if not whole:
        return {}
    said = "; ".join(
        f"at {tokens} tokens {', '.join(modes)} ran the prompt whole (stock's work: "
        f"{'its' if len(modes) == 1 else 'their'} speedup is noise)"
        for tokens, modes in whole.items()
    )
    return {"pruned nothing": said}


def _bench_presets(lazy: str | None, model: str) -> tuple[list[str], str]:
    """The presets a bench times, and the header's line on what it compares and why: those
    --lazy names, or with none every preset of the model's that prunes (default, gentle, fast
    and any it ships or `lazymlx calibrate` saved for it), since a preset that runs every
    prompt whole (a registry model's default today) would time stock against itself."""
    from lazymlx.evals.timing import pruning_presets

    if lazy is not None:
        return options.preset_list(lazy), "stock mlx-lm beside the presets --lazy names"
    pruning, whole = pruning_presets(model)
    compares = (
        f"stock mlx-lm beside every preset that prunes on {model} ({', '.join(pruning)}), "
        "to show what each saves"
    )  # at some lengths: under its gate or floor a preset runs whole (`pruned nothing`)
    if whole:
        them = "it runs" if len(whole) == 1 else "they run"
        compares += f"; left out: {', '.join(whole)} ({them} every prompt whole: stock's work)"
    return pruning, compares


def _bench_group(parallel: str, model: str, presets, lengths: list[int]) -> int:
    """With --parallel context under mlx.launch: the chain's size, once joined (the other ranks
    follow rank 0's prompt steps and end here), after refusing in one line what a chain can't
    time; else 0 (one process, or a tensor-parallel group, which bench runs as it is)."""
    ranks = 0
    if parallel == "context":
        if not in_group():
            raise LazymlxError(
                "bench --parallel context times a chain of ranks beside one process: run it "
                "under mlx.launch with 2 or more ranks (docs/distributed.md)"
            )
        if not presets:
            raise LazymlxError(
                "bench --parallel context times presets on the chain; --lazy none leaves none "
                "(stock mlx-lm runs on rank 0 alone)"
            )
        if any(s.config is None for s in presets):
            raise LazymlxError(
                "--lazy off is stock mlx-lm, which runs on rank 0 alone (the baseline row); "
                "--lazy keep-all times lazymlx's engine keeping every token on the chain"
            )
        from lazymlx.parallel import collectives
        from lazymlx.parallel.context_parallel import MIN_SLICE

        ranks = collectives.group().size()
        if min(lengths) < MIN_SLICE * ranks:
            raise LazymlxError(
                f"a {min(lengths)}-token prompt is too short for a chain of {ranks} ranks, which "
                f"runs prompts of at least {MIN_SLICE * ranks} tokens ({MIN_SLICE} a rank); "
                "pass a longer --prompt-len"
            )
    join_parallel(parallel, model)
    return ranks


def _parallel_note(parallel: str, ranks: int) -> dict:
    """The header's line on where the rows ran (none: one process)."""
    if ranks:
        return {
            "parallel": f"context: each preset on rank 0 alone and on a chain of {ranks} ranks "
            "(every rank the whole model); stock on rank 0 alone"
        }
    if in_group():
        from lazymlx.parallel import collectives

        size = collectives.group().size()
        return {"parallel": f"tensor: the model split over {size} ranks, every row"}
    return {}
