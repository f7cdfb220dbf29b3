"""`lazymlx evaluate` as a call: lm-evaluation-harness tasks on one model, stock mlx-lm and each
named preset on the same documents, one row per task, preset and metric.

The tasks are loaded once (RULER's generate their documents with the model's own tokenizer,
read from the model's directory) and each preset answers them through `LazyLM`
(lazymlx/evals/harness.py). Nothing is downloaded unless asked: the Hugging Face hub and
datasets run offline, and a task whose data must come from the network is one error naming it.
RULER's niah_single_1, niah_multikey_2, niah_multikey_3, ruler_vt, ruler_cwe and ruler_fwe
make theirs here; its essay haystacks (niah_single_2 ...) and QA tasks download theirs.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lazymlx.engine.presets import STOCK
from lazymlx.errors import LazymlxError
from lazymlx.evals.strategies import Strategy, strategy
from lazymlx.evals.suite import Loader
from lazymlx.models.loading import load as load_model

INSTALL = "pip install -e '.[eval]' (or pip install 'lm-eval[ruler]==0.4.13')"
OFFLINE_TASKS = (
    "niah_single_1",
    "niah_multikey_2",
    "niah_multikey_3",
    "ruler_vt",
    "ruler_cwe",
    "ruler_fwe",
)
OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
Tick = Callable[[str], None]


@dataclass(frozen=True)
class HarnessRun:
    """What to run: the harness's own settings, by its names where it has them."""

    tasks: list[str]
    presets: list[str]
    limit: int | None = None
    num_fewshot: int | None = None
    lengths: list[int] | None = None  # RULER's max_seq_lengths
    chat_template: bool | None = None  # None: where the model has one
    max_tokens: int | None = None  # overrides each task's max_gen_toks
    cache_dir: str | None = None
    include_path: str | None = None
    download: bool = False
    seed: int = 1234
    bootstrap_iters: int = 1000


def _lm_eval():
    try:
        import lm_eval
    except ImportError:
        raise LazymlxError(
            f"lazymlx evaluate runs lm-evaluation-harness; install it: {INSTALL}"
        ) from None
    return lm_eval


@contextlib.contextmanager
def quiet_offline(download: bool) -> Iterator[None]:
    """The harness's run without its log lines and progress bars (lazymlx prints its own; tqdm
    was imported before, so its TQDM_DISABLE is read too late), and, unless `download`, with
    the hub and datasets offline: the environment variables for code that reads them late, and
    the flags the libraries already imported read them into. RULER's module asks nltk for a
    sentence splitter at import, which only its essay tasks use: that download is skipped too."""
    import tqdm

    saved = {name: os.environ.get(name) for name in OFFLINE_ENV}
    bar = tqdm.std.tqdm.__init__

    def no_bar(self, *args, **kwargs) -> None:
        bar(self, *args, **(kwargs | {"disable": True}))

    patched: list[tuple[Any, str, Any]] = [(tqdm.std.tqdm, "__init__", bar)]
    tqdm.std.tqdm.__init__ = no_bar
    if not download:
        os.environ.update(dict.fromkeys(OFFLINE_ENV, "1"))
        import datasets.config
        import huggingface_hub.constants
        import nltk

        for module, name, value in (
            (huggingface_hub.constants, "HF_HUB_OFFLINE", True),
            (datasets.config, "HF_HUB_OFFLINE", True),
            (datasets.config, "HF_DATASETS_OFFLINE", True),
            (nltk, "download", lambda *args, **kwargs: False),
        ):
            patched.append((module, name, getattr(module, name)))
            setattr(module, name, value)
    logger = logging.getLogger("lm_eval")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
        for module, name, value in patched:
            setattr(module, name, value)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def tokenizer_dir(model: str) -> Path:
    """The model's directory, whose tokenizer files RULER's tasks size their documents with."""
    from lazymlx.models.loading import resolve

    path = Path(resolve(model))
    if not any((path / name).exists() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise LazymlxError(f"{path} holds no tokenizer files, which RULER's tasks need")
    return path


def load_tasks(run: HarnessRun, tokenizer: Path) -> dict:
    """The harness's tasks, made once for every preset, each with its few-shot count set as
    lm_eval.simple_evaluate sets it; a task that is unknown or needs a download is one error."""
    from lm_eval.tasks import TaskManager

    metadata: dict[str, Any] = {"tokenizer": str(tokenizer), "pretrained": str(tokenizer)}
    if run.lengths:
        metadata["max_seq_lengths"] = run.lengths
    random.seed(run.seed)
    try:  # RULER prints "Downloaded punkt_tab" on stdout, the table's, whatever happened
        with contextlib.redirect_stdout(io.StringIO()):
            manager = TaskManager(include_path=run.include_path, metadata=metadata)
            loaded = manager.load(run.tasks)
    except KeyError as error:
        raise LazymlxError(
            f"unknown task: {error.args[0]}; RULER's offline ones: {', '.join(OFFLINE_TASKS)}"
        ) from None
    except Exception as error:  # the harness's and datasets' many kinds, a download among them
        raise LazymlxError(_load_failure(run, error)) from None
    for task in loaded["tasks"].values():
        if run.num_fewshot is not None and task.get_config("num_fewshot") != 0:
            task.set_config(key="num_fewshot", value=run.num_fewshot)
        elif task.get_config("num_fewshot") is None:
            task.set_config(key="num_fewshot", value=0)
        task.set_fewshot_seed(seed=run.seed)
    return loaded


def _load_failure(run: HarnessRun, error: Exception) -> str:
    """What a failed task load says: a download refused offline, or the harness's own words."""
    said = f"{type(error).__name__}: {error}".replace("\n", " ")
    offline = any(
        word in said.lower() for word in ("offline", "connection", "couldn't reach", "resolve")
    )
    if offline and not run.download:
        return (
            f"{', '.join(run.tasks)}: a task needs data from the network, and evaluate runs "
            f"offline; add --download to fetch it once (RULER's {', '.join(OFFLINE_TASKS)} "
            f"make theirs here). The harness said: {said[:300]}"
        )
    return f"cannot load the tasks {', '.join(run.tasks)}: {said[:500]}"


def run_tasks(
    model: str, run: HarnessRun, load: Loader = load_model, tick: Tick = lambda line: None
) -> tuple[dict, list[dict]]:
    """Every task under stock and each preset: the header and one row per task, preset and
    metric (lm-eval's value, stderr and n, the preset's mean work share, its change on
    stock's value where stock ran)."""
    lm_eval = _lm_eval()
    from lm_eval.evaluator import evaluate

    from lazymlx.evals.harness import LazyLM
    from lazymlx.evals.timing import run_header

    if not run.presets:
        raise LazymlxError("no preset to run: name off (stock) and the presets")
    strategies = [strategy(name, model) for name in run.presets]  # an unknown one: refused now
    with quiet_offline(run.download):
        loaded_model, tokenizer = load(model)
        tasks = load_tasks(run, tokenizer_dir(model))
        rows = []
        for name, chosen in zip(run.presets, strategies, strict=True):
            lm = LazyLM(
                loaded_model, tokenizer, chosen.config, run.chat_template, run.max_tokens,
                _cache_file(run.cache_dir, model, name, chosen),
                tick=lambda request, name=name: tick(f"{name}: {request}"),
            )  # fmt: skip
            random.seed(run.seed)
            results = evaluate(
                lm=lm, task_dict=tasks, limit=run.limit, bootstrap_iters=run.bootstrap_iters,
                log_samples=False, apply_chat_template=lm.use_chat_template,
                fewshot_as_multiturn=lm.use_chat_template, verbosity="ERROR",
            )  # fmt: skip
            rows += result_rows(results, name, lm.shares)
    head = run_header(
        model, strategies, harness=f"lm-eval {lm_eval.__version__}", tasks=", ".join(run.tasks),
        limit=run.limit, lengths=run.lengths, chat_template=lm.use_chat_template,
        cache=run.cache_dir,
    )  # fmt: skip
    return head, against_stock(rows)


def _cache_file(cache_dir: str | None, model: str, preset: str, chosen: Strategy) -> Path | None:
    """A preset's answers' file: named by the model, the preset and its rule (a preset saved
    again with another rule starts afresh)."""
    if cache_dir is None:
        return None
    import hashlib

    rule = repr(chosen.config)
    digest = hashlib.sha256(f"{model}|{rule}".encode()).hexdigest()[:10]
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in Path(model).name)
    return Path(cache_dir).expanduser() / f"{safe}-{preset}-{digest}.sqlite"


def result_rows(results: dict, preset: str, shares: dict[str, list[float]]) -> list[dict]:
    """lm-eval's results as rows: each task's (and group's) metrics with their stderr and n.
    RULER reports -1 at a length it made no documents for; those are left out."""
    rows = []
    for task, metrics in results["results"].items():
        n = results.get("n-samples", {}).get(task, {}).get("effective")
        share = shares.get(task)
        for key, value in metrics.items():
            if "," not in key or "_stderr," in key or not isinstance(value, int | float):
                continue
            metric, _, kind = key.partition(",")
            if metric.isdigit() and value == -1:
                continue
            stderr = metrics.get(f"{metric}_stderr,{kind}")
            rows.append(
                {
                    "task": task,
                    "mode": preset,
                    "metric": metric if kind == "none" else f"{metric} ({kind})",
                    "value": float(value),
                    "stderr": stderr if isinstance(stderr, int | float) else None,
                    "n": n,
                    "work_share": 1.0 if preset == STOCK else _mean(share),
                }
            )
    return rows


def _mean(values: list[float] | None) -> float | None:
    return sum(values) / len(values) if values else None


def against_stock(rows: list[dict]) -> list[dict]:
    """Each row with its change on stock's (`off`) value for the same task and metric."""
    stock = {(r["task"], r["metric"]): r["value"] for r in rows if r["mode"] == STOCK}
    for row in rows:
        base = stock.get((row["task"], row["metric"]))
        row["vs_stock"] = None if base is None or row["mode"] == STOCK else row["value"] - base
    return sorted(rows, key=lambda r: (r["task"], r["metric"]))
