"""`lazymlx evaluate`: lm-evaluation-harness tasks on a model, stock mlx-lm beside each preset
(the run is lazymlx/evals/harness_run.py, the harness's model lazymlx/evals/harness.py).

Named as mlx-lm's `mlx_lm.evaluate`, which runs the same harness on stock; `lazymlx eval` is
lazymlx's own suite (cli/evaluate.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from lazymlx.cli import options
from lazymlx.cli.console import err
from lazymlx.cli.loading import load_model
from lazymlx.cli.report import Column, check_format, emit, percent
from lazymlx.errors import LazymlxError
from lazymlx.lengths import parse_lengths
from lazymlx.models.registry import DEFAULT_MODEL

HARNESS_COLUMNS: list[Column] = [
    ("task", "task", str),
    ("mode", "preset", str),
    ("metric", "metric", str),
    ("value", "value", lambda v: f"{v:.3f}"),
    ("stderr", "± stderr", lambda v: f"{v:.3f}"),
    ("n", "n", str),
    ("vs_stock", "vs stock", lambda v: f"{v:+.3f}"),
    ("work_share", "work vs stock", percent),
]

Tasks = Annotated[
    str,
    typer.Option(
        "--tasks",
        "-t",
        help="lm-eval task names, comma-separated, e.g. niah_single_1,ruler_vt (RULER's "
        "offline ones: niah_single_1, niah_multikey_2, niah_multikey_3, ruler_vt, ruler_cwe, "
        "ruler_fwe).",
        show_default=False,
    ),
]
HarnessPresets = Annotated[
    str,
    typer.Option(
        "--lazy", help="Presets, comma-separated, each on the same documents; off: stock mlx-lm."
    ),
]
Limit = Annotated[
    int | None, typer.Option("--limit", min=1, help="At most this many documents per task.")
]
Fewshot = Annotated[
    int | None, typer.Option("--num-fewshot", min=0, help="Few-shot examples (the task's own).")
]
Lengths = Annotated[
    str | None,
    typer.Option(
        "--lengths",
        "-l",
        help="RULER's max_seq_lengths: the prompt lengths its tasks make, e.g. 2k or 2k,4k "
        "(RULER's own: 4k).",
    ),
]
ChatTemplate = Annotated[
    bool | None,
    typer.Option(
        "--apply-chat-template/--no-apply-chat-template",
        help="Render prompts with the model's chat template (default: where it has one).",
        show_default=False,
    ),
]
MaxTokens = Annotated[
    int | None,
    typer.Option("--max-tokens", "-n", min=1, help="Cap every task's max_gen_toks at this."),
]
UseCache = Annotated[
    str | None,
    typer.Option(
        "--use-cache",
        help="A folder to keep every answer in, one file per preset: a run stopped midway "
        "resumes there.",
    ),
]
IncludePath = Annotated[
    str | None,
    typer.Option("--include-path", help="A folder of your own task YAML files (lm-eval's)."),
]
Download = Annotated[
    bool,
    typer.Option(
        "--download",
        help="Let tasks download their data sets (by default nothing is downloaded: RULER's "
        "offline tasks make theirs with the model's tokenizer).",
    ),
]
HarnessSeed = Annotated[int, typer.Option("--seed", help="The harness's random seed.")]


def evaluate(
    tasks: Tasks,
    model: options.Model = DEFAULT_MODEL,
    lazy: HarnessPresets = "off,default",
    limit: Limit = None,
    num_fewshot: Fewshot = None,
    lengths: Lengths = None,
    apply_chat_template: ChatTemplate = None,
    max_tokens: MaxTokens = None,
    use_cache: UseCache = None,
    include_path: IncludePath = None,
    download: Download = False,
    seed: HarnessSeed = 1234,
    output: options.Output = "md",
) -> None:
    """lm-evaluation-harness tasks on a model, stock mlx-lm beside each preset (as
    mlx_lm.evaluate runs them on stock): one row per task, preset and metric with its stderr,
    n, change on stock's value and the preset's share of stock's work.

    Generation goes through lazymlx's generate, log-likelihoods through the pruned prompt step
    and decode steps. Needs lm-eval (lazymlx's `eval` extra, docs/usage.md); nothing is
    downloaded unless --download.
    """
    from lazymlx.evals.harness_run import HarnessRun, run_tasks

    check_format(output)
    names = [name.strip() for name in tasks.split(",") if name.strip()]
    if not names:
        raise LazymlxError("name the tasks with --tasks, e.g. --tasks niah_single_1")
    run = HarnessRun(
        tasks=names, presets=options.preset_list(lazy), limit=limit, num_fewshot=num_fewshot,
        lengths=parse_lengths(lengths) if lengths else None, chat_template=apply_chat_template,
        max_tokens=max_tokens, cache_dir=use_cache, include_path=include_path,
        download=download, seed=seed,
    )  # fmt: skip
    if not run.presets:
        raise LazymlxError("--lazy none leaves nothing to run; name off and the presets")
    with _ticking() as tick:
        head, rows = run_tasks(model, run, load=load_model, tick=tick)
    emit(output, head, rows, HARNESS_COLUMNS)


@contextmanager
def _ticking() -> Iterator[Callable[[str], None]]:
    """Where the run is (`default: generate 2/3`): a spinner line on a terminal, a plain line
    a request off one (a log's)."""
    if not err.is_terminal:
        yield lambda line: err.print(line, soft_wrap=True, highlight=False, markup=False)
        return
    with err.status("loading the model and the tasks") as status:
        yield status.update
