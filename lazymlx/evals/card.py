"""A registry model's card: the table benchmarks/README.md shows per model, from raw results.

One table per model: per length, stock's accuracy, the 8-bit reference's and each shipped
preset's answers kept on the validation split, whether the bar `lazymlx calibrate` chose the
default by holds, and the bench's TTFT, decode and peak memory beside stock's. The card file
(benchmarks/results/models/MODEL/card.json) names the journals and bench runs it reads. The rules
the card applies (the 8-bit reference's relative bar, stock's rows where a preset runs prompts whole) decide what the
published tables say, so they live here, tested, and `benchmarks/tables.py card` only prints.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from lazymlx.evals.choice import Bar, default_checks, margin, new_loops, open_checks
from lazymlx.evals.records import BASELINE, NO_IDLE, Record, read_records
from lazymlx.evals.reference import REFERENCE, REFERENCE_4BIT
from lazymlx.evals.summary import ALL, summarize


def first_records(paths: list[Path]) -> list[Record]:
    """Each case's row for a mode once, the first: a run over cached baselines writes the
    baseline's row again, and the first is the one timed beside the presets it ran with."""
    rows: dict[tuple, Record] = {}
    for path in paths:
        for r in read_records(path)[1]:
            rows.setdefault((r.mode, r.split, r.family, r.length, r.seed), r)
    return list(rows.values())


def kept_cell(row: dict) -> str:
    if row["kept_share"] is None:
        return "—"
    return (
        f"{row['kept']}/{row['baseline_right']} ({row['kept_share']:.0%}, "
        f"{row['kept_low']:.0%}-{row['kept_high']:.0%})"
    )


CARD_MODES = [BASELINE, REFERENCE, REFERENCE_4BIT] + [
    f"lazy:{preset}{suffix}" for preset in ("default", "gentle", "fast") for suffix in ("", NO_IDLE)
]


def bench_rows(paths: list[Path]) -> dict[tuple[int, str], dict[str, dict]]:
    """Bench rows by length (prompt tokens to the nearest whole 1k) and mode, then by the
    prompt timed (passkey, code...), each with its own run's stock row (the first file wins)."""
    rows: dict[tuple[int, str], dict[str, dict]] = {}
    for path in paths:
        run = json.loads(path.read_text())
        prompt = run.get("prompt", "passkey")
        stock = {r["prompt_tokens"]: r for r in run["rows"] if r["mode"] == BASELINE}
        for r in run["rows"]:
            mode = r["mode"]
            if r["prompt_tokens"] in stock:
                length = 1024 * round(r["prompt_tokens"] / 1024)
                by_prompt = rows.setdefault((length, mode), {})
                by_prompt.setdefault(prompt, {**r, "stock": stock[r["prompt_tokens"]]})
    return rows


def card_table(paths: list[Path]) -> str:
    """A registry model's card: per length, stock's accuracy, the 8-bit reference's and each
    shipped preset's answers kept on the validation split (with or without idle completion),
    whether the bar holds, and the bench's TTFT (with the work its prompt computed), decode and
    peak memory beside stock's. A card file names the model, its eval journals and its bench
    results, and the presets that run short prompts whole
    ("runs_whole": {mode: the longest prompt, in tokens, that its floor or gate keeps whole}):
    there a preset computes what stock does, so its rows are stock's own (`whole`), and its bar
    cell says so ("runs whole: stock's answers") rather than "met", which it is by construction."""
    return "\n\n".join(_card(path) for path in paths)


def whole(runs: list[Record], mode: str, tokens: int) -> list[Record]:
    """`runs` with `mode`'s rows on prompts of at most `tokens` tokens replaced by stock's own:
    the preset runs them whole, stock's computation (the tests hold keep-all to stock's tokens),
    so a run of its own there measures nothing stock's did not. Every such case of stock's
    counts for the preset; a multi-turn twin (no-idle) keeps only the cases it ran."""
    short = lambda r: r.prompt_tokens <= tokens  # noqa: E731
    mine = {(r.family, r.length, r.seed) for r in runs if r.mode == mode}
    stock = [
        replace(r, mode=mode, baseline_ttft_s=r.ttft_s)
        for r in runs
        if r.mode == BASELINE
        and short(r)
        and (not mode.endswith(NO_IDLE) or (r.family, r.length, r.seed) in mine)
    ]
    return [r for r in runs if not (r.mode == mode and short(r))] + stock


def _card(path: Path) -> str:
    card = json.loads(path.read_text())
    paths = {kind: [path.parent / s["path"] for s in card[kind]] for kind in ("eval", "bench")}
    runs = first_records(paths["eval"])
    whole_up_to = card.get("runs_whole", {})
    for mode, tokens in whole_up_to.items():
        runs = whole(runs, mode, tokens)
    summary = _pooled_everywhere(summarize(runs))
    bench = bench_rows(paths["bench"])
    evals = {(r["length"], r["mode"]): r for r in summary if r["family"] == ALL}
    lengths = sorted({n for n, _ in evals if n != ALL} | {n for n, _ in bench}) + [ALL]
    lines = [
        f"**{card['model']}**",
        "",
        "| length | mode | right of scored | kept of stock's right (95% CI) | gained | bar "
        "| open answers: worst vs bar | prefill computed | TTFT (bench) | decode | peak memory |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for length in lengths:
        stock_runs = bench.get((length, BASELINE), {})
        for mode in CARD_MODES:
            row, timed = evals.get((length, mode)), bench.get((length, mode))
            if row is None and timed is None:
                continue
            stock = mode == BASELINE
            cells = [
                str(length),
                mode,
                _accuracy(runs, row),
                "—" if row is None or stock else kept_cell(row),
                "—" if row is None or stock else str(row["gained"]),
                _bar(summary, row, whole_up_to.get(mode, 0)),
                _open(runs, mode, length),
                "—" if row is None else f"{row['compute_fraction']:.0%}",
                *_speeds(timed, stock_runs),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pooled_everywhere(summary: list[dict]) -> list[dict]:
    """summarize's rows, and a mode run at one length only (which summarize pools nowhere) its
    rows again as pooled over lengths, so every mode has an "all" row and family rows."""
    lengths: dict[str, set] = {}
    for r in summary:
        lengths.setdefault(r["mode"], set()).add(r["length"])
    single = {mode for mode, seen in lengths.items() if len(seen) == 1 and ALL not in seen}
    return summary + [{**r, "length": ALL} for r in summary if r["mode"] in single]


def _accuracy(runs: list[Record], row: dict | None) -> str:
    """Right answers of the scored cases the row ran. At a length where a run scored only cases
    stock got right (--right-only), it skipped stock's wrong answers, so there the count is out
    of all of stock's scored cases and the accuracy is a lower bound (≥)."""
    if row is None or not row["scored"]:
        return "—"
    mine = [r for r in runs if r.mode == row["mode"] and r.baseline_correct is not None]
    right = scored = 0
    bound = False
    for length in {r.length for r in mine if row["length"] in (ALL, r.length)}:
        here = [r for r in mine if r.length == length]
        stock = [r for r in runs if r.mode == BASELINE and r.length == length]
        stock_scored = sum(r.baseline_correct is not None for r in stock)
        skipped = all(r.baseline_correct for r in here) and len(here) < stock_scored
        skipped = skipped and not row["mode"].endswith(NO_IDLE)  # multi-turn families only
        right += sum(bool(r.correct) for r in here)
        scored += stock_scored if skipped else len(here)
        bound = bound or skipped
    if bound:
        return f"≥ {right}/{scored} (≥ {right / scored:.0%})"
    return f"{right}/{scored} ({right / scored:.0%})"


def _bar(summary: list[dict], row: dict | None, whole_up_to: int = 0) -> str:
    """The bar of lazymlx calibrate (`default_checks`), on these cases: the default after
    completion at its length, or, in its "all" row, at every length and in every family; `fast`
    keeps 90% overall. The worst group is named. Where the preset runs every prompt of the row
    whole (its lengths at most `whole_up_to` tokens), its rows are stock's: no bar to meet."""
    if row is None or row["kept_share"] is None or row["mode"].endswith(NO_IDLE):
        return "—"
    mode, length = row["mode"], row["length"]
    lengths_run = {r["length"] for r in summary if r["mode"] == mode and r["length"] != ALL}
    if max(lengths_run if length == ALL else {length}) <= whole_up_to:
        return "runs whole: stock's answers"
    lengths, families = default_checks(summary, mode)
    if mode == "lazy:default" and length != ALL:
        checks = [check for check in lengths if check[0] == length]
    elif mode == "lazy:default":
        checks = [(f"at {n}", group, needed) for n, group, needed in lengths] + families
    elif mode == "lazy:fast" and length == ALL:
        checks = [(ALL, row, Bar().fast_overall)]
    else:
        return "—"
    where, worst, needed = min(checks, key=margin)
    met = margin((where, worst, needed)) >= -1e-9
    group = "" if length != ALL or where == ALL else f"{where} "
    return (
        f"{'met' if met else 'not met'}: {group}{worst['kept']}/{worst['baseline_right']} "
        f"{'≥' if met else '<'} {needed:.0%}"
    )


def _open(runs: list[Record], mode: str, length: int | str) -> str:
    """The open answers' bar of lazymlx calibrate (`open_checks`, `new_loops`) at a length, or
    over all of them: the worst open group's mean (gold similarity, or stock's NLL of the
    answers) against the worse of stock's and the 4-bit reference's on the same cases."""
    if mode in (BASELINE, REFERENCE, REFERENCE_4BIT) or mode.endswith(NO_IDLE):
        return "—"
    here = [r for r in runs if length == ALL or r.length == length]
    checks = open_checks(here, mode, intervals=False)
    if not checks:
        return "—"
    worst = min(checks, key=lambda check: check.margin)
    loops = new_loops(here, mode)
    met = worst.margin >= -1e-9 and not loops
    return f"{'met' if met else 'not met'}: {worst.name} {worst.mine:.3f} vs {worst.needed:.3f}" + (
        f", {loops} new loop{'s' if loops > 1 else ''}" if loops else ""
    )


def _speeds(timed: dict[str, dict] | None, stock_runs: dict[str, dict]) -> list[str]:
    """`_speed` per prompt timed, the passkey's first, another prompt's named in its cell."""
    if not timed:
        return ["—"] * 3
    order = sorted(timed, key=lambda prompt: (prompt != "passkey", prompt))
    cells = [
        [
            (cell if prompt == "passkey" else f"{Path(prompt).name}: {cell}")
            for cell in _speed(timed[prompt], stock_runs.get(prompt))
        ]
        for prompt in order
    ]
    return ["; ".join(column) for column in zip(*cells, strict=True)]


def _speed(timed: dict, stock_run: dict | None) -> list[str]:
    """Stock's TTFT, decode rate and peak memory, or a preset's against its own run's stock
    (marked † where that run is not the one in the stock row above it). A speedup whose answer
    is not stock's says so: it was bought with the answer."""
    stock = timed["stock"]
    if timed["mode"] == BASELINE:
        return [
            f"{stock['ttft_s']:.1f} s",
            f"{stock['generation_tps']:.1f} tok/s",
            f"{stock['peak_memory_gb']:.2f} GB",
        ]
    other_run = "" if stock_run is not None and stock_run["stock"] is stock else " †"
    another = ", not stock's answer" if timed.get("answer_matches_baseline") is False else ""
    return [
        f"{timed['speedup']:.2f}x at {timed['compute_fraction']:.0%}{another}{other_run}",
        f"{timed['generation_tps'] / stock['generation_tps']:.2f}x{other_run}",
        f"{timed['peak_memory_gb'] / stock['peak_memory_gb']:.2f}x{other_run}",
    ]
