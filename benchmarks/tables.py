"""The markdown tables of benchmarks/README.md, printed from the raw results, never typed by hand.

.venv/bin/python benchmarks/tables.py card benchmarks/results/models/*/card.json
.venv/bin/python benchmarks/tables.py bench benchmarks/results/models/*/bench_2k.json
.venv/bin/python benchmarks/tables.py workload benchmarks/results/models/*/bench_workload_*.json
.venv/bin/python benchmarks/tables.py eval benchmarks/results/models/smollm2-135m/validation.jsonl
.venv/bin/python benchmarks/tables.py families benchmarks/results/models/smollm2-135m/validation.jsonl
.venv/bin/python benchmarks/tables.py freeform benchmarks/results/studies/twentyfifth_freeform.jsonl  # at 2b0e219
.venv/bin/python benchmarks/tables.py open benchmarks/results/models/qwen2.5-coder-0.5b/calibration_open.jsonl
.venv/bin/python benchmarks/tables.py accuracy benchmarks/studies/2026-11-26-qwen-calibration/validation_presets.jsonl
.venv/bin/python benchmarks/tables.py kept benchmarks/results/kept/*.json
.venv/bin/python benchmarks/tables.py multiturn JOURNAL  # an eval journal of the multi-turn families
.venv/bin/python benchmarks/tables.py gpu benchmarks/results/gpu/llama_shapes_h200_pipelined_2026-11-27.json
.venv/bin/python benchmarks/tables.py gpukept benchmarks/results/gpu/kept_shapes_8b_h100_2026-11-27.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from lazymlx.evals.card import card_table, first_records, kept_cell
from lazymlx.evals.records import BASELINE, Record
from lazymlx.evals.reference import REFERENCE
from lazymlx.evals.scoring import bootstrap_interval
from lazymlx.evals.summary import ALL, agreement_strata, summarize, tally


def _yes_no(flag: bool | None) -> str:
    return "—" if flag is None else "yes" if flag else "no"


def bench_table(paths: list[Path]) -> str:
    lines = [
        "| model | prompt tokens | mode | TTFT (s), mean ± std | speedup | prefill computed "
        "| decode tok/s | peak GB | answer right | tokens = baseline's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        run = json.loads(path.read_text())
        for r in run["rows"]:
            lines.append(
                f"| {run.get('model', '')} | {r['prompt_tokens']} | {r['mode']} | {r['ttft_s']:.2f}"
                + ("" if r["ttft_std"] is None else f" ± {r['ttft_std']:.2f}")
                + " "
                f"| {r['speedup']:.2f}x "
                f"| {r['compute_fraction']:.0%} | {r['generation_tps']:.1f} "
                f"| {r['peak_memory_gb']:.2f} | {_yes_no(r['answer_correct'])} "
                f"| {'yes' if r['answer_matches_baseline'] else 'no'} |"
            )
    return "\n".join(lines)


def workload_table(paths: list[Path]) -> str:
    """`lazymlx bench --prompt workload` runs: per prompt each preset's work, TTFT, decode and
    peak memory against stock's on the same prompt, and its answer; then per preset the
    geometric mean of the TTFT ratios."""
    columns = ("model", "tokens", "prompt", "mode", "work done", "TTFT vs stock")
    columns += ("decode vs stock", "peak vs stock", "answer right", "stock's tokens")
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for run in map(json.loads, (path.read_text() for path in paths)):
        stock = {r["prompt"]: r for r in run["rows"] if r["mode"] == BASELINE}
        model = Path(run["model"]).name
        for r in run["rows"]:
            if r["mode"] == BASELINE:
                continue
            if r["prompt"].startswith("geometric mean"):
                lines.append(
                    f"| {model} | {r['length']} | **{r['prompt']}** | {r['mode']} "
                    f"| {r['compute_fraction']:.0%} | **{r['speedup']:.2f}x** | — | — "
                    f"| pruned {r['pruned']} | {r['answer_matches_baseline']} |"
                )
                continue
            base = stock[r["prompt"]]
            lines.append(
                f"| {model} | {r['prompt_tokens']} | {r['prompt']} | {r['mode']} "
                f"| {r['compute_fraction']:.0%} | {r['speedup']:.2f}x "
                f"| {r['generation_tps'] / base['generation_tps']:.2f}x "
                f"| {r['peak_memory_gb'] / base['peak_memory_gb']:.2f}x "
                f"| {_yes_no(r['answer_correct'])} (stock {_yes_no(base['answer_correct'])}) "
                f"| {'yes' if r['answer_matches_baseline'] else 'no'} |"
            )
    return "\n".join(lines)


def harness_table(paths: list[Path]) -> str:
    """`lazymlx evaluate -o json` runs: per model, task and length each preset's score with its
    standard error and n, its change on stock's score and its share of stock's work."""
    columns = ("model", "task", "tokens", "preset", "score ± stderr", "n", "vs stock", "work done")
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for run in map(json.loads, (path.read_text() for path in paths)):
        model = Path(run["model"]).name
        for r in run["rows"]:
            error = "" if r["stderr"] is None else f" ± {r['stderr']:.2f}"
            change = "—" if r["vs_stock"] is None else f"{r['vs_stock']:+.2f}"
            lines.append(
                f"| {model} | {r['task']} | {r['metric']} | {r['mode']} | {r['value']:.2f}{error} "
                f"| {r['n']} | {change} | {r['work_share']:.0%} |"
            )
    return "\n".join(lines)


def eval_table(paths: list[Path]) -> str:
    """Per mode and length: answers kept with the 95% interval, compute, and against stock in
    the same run: TTFT, decode rate and peak memory."""
    rows = [r for r in summarize(first_records(paths)) if r["family"] == ALL]
    lines = [
        "| mode | length | cases | baseline right | kept (share, 95% CI) | gained "
        "| prefill computed | TTFT speedup | decode vs stock | peak memory vs stock |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["mode"] == "baseline":
            continue
        ratios = [r[k] for k in ("speedup", "decode_ratio", "peak_ratio")]
        lines.append(
            f"| {r['mode']} | {r['length']} | {r['cases']} | {r['baseline_right']} | {kept_cell(r)} "
            f"| {r['gained']} | {r['compute_fraction']:.0%} | "
            + " | ".join("—" if v is None else f"{v:.2f}x" for v in ratios)
            + " |"
        )
    return "\n".join(lines)


def families_table(paths: list[Path]) -> str:
    """Per family (pooled over lengths) and mode: answers kept; free-form: tokens agreeing."""
    rows = summarize(first_records(paths))
    modes = [m for m in dict.fromkeys(r["mode"] for r in rows) if m != "baseline"]
    families = [f for f in dict.fromkeys(r["family"] for r in rows) if f != ALL]
    pooled = {(r["mode"], r["family"]): r for r in rows if r["length"] == ALL}
    for r in rows:  # a mode run at one length only has no pooled rows
        pooled.setdefault((r["mode"], r["family"]), r)
    lines = ["| family | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for family in families:
        cells = []
        for mode in modes:
            r = pooled.get((mode, family))
            if r is None:  # not run in this mode
                cells.append("—")
            elif r["scored"] and r["kept_share"] is None:
                cells.append(f"— (stock right in 0 of {r['scored']})")
            elif r["kept_share"] is None:
                low, high = r["agreed_interval"]
                cells.append(
                    f"{r['identical']:.0%} identical, {r['agreed_tokens']:.1f} tokens agree "
                    f"({low:.1f}-{high:.1f})"
                )
            else:
                cells.append(kept_cell(r))
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def open_table(paths: list[Path]) -> str:
    """Open-ended answers per length and mode, families pooled and each apart: mean similarity
    to stock's answer (95% CI), answers kept (similarity >= 0.5, no new loop), answers looping
    where stock's does not, and the prefill work counted."""
    rows = [
        r for r in summarize(first_records(paths)) if r["score"] is not None and r["length"] != ALL
    ]
    lines = [
        "| length | mode | family | similarity to stock (95% CI) | kept | new loops | work |",
        "|---|---|---|---|---|---|---|",
    ]
    order = sorted(rows, key=lambda r: (r["length"], r["mode"] != REFERENCE, r["family"] != ALL))
    for r in order:
        if r["mode"] == BASELINE:
            continue
        low, high = r["score_interval"]
        lines.append(
            f"| {r['length']} | {r['mode']} | {r['family']} | {r['score']:.2f} ({low:.2f}-{high:.2f}) "
            f"| {r['kept']}/{r['baseline_right']} | {r['new_loops']} | {r['compute_fraction']:.0%} |"
        )
    return "\n".join(lines)


def accuracy_table(paths: list[Path]) -> str:
    """Right answers per family and length for each mode (stock first): accuracy as the paper
    reports it, over every scored case that ran (free-form families have no gold)."""
    rows = summarize(first_records(paths))
    lengths = sorted({r["length"] for r in rows if r["length"] != ALL})
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    cells = {(r["mode"], r["family"], r["length"]): r for r in rows}
    families = [f for f in dict.fromkeys(r["family"] for r in rows) if f != ALL] + [ALL]
    header = "| family | mode | " + " | ".join(str(n) for n in lengths) + " | all |"
    lines = [header, "|---|---|" + "---|" * (len(lengths) + 1)]
    for family in families:
        for mode in modes:
            shown = []
            for length in [*lengths, ALL]:
                row = cells.get((mode, family, length))
                if row is None and len(lengths) == 1 and length == ALL:
                    row = cells.get((mode, family, lengths[0]))
                shown.append(
                    "—" if row is None or not row["scored"] else f"{row['right']}/{row['scored']}"
                )
            if any(cell != "—" for cell in shown):
                lines.append(f"| {family} | {mode} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def multiturn_table(paths: list[Path]) -> str:
    """Multi-turn families per mode, pooled over lengths: answers kept, the later question's TTFT
    against stock's over its whole cache, the first turn's, and the idle time completion took."""
    rows = [r for r in summarize(first_records(paths)) if r["mode"] != "baseline"]
    lines = [
        "| family | length | mode | kept | later step TTFT vs stock | first turn TTFT vs stock "
        "| idle s per 1k tokens |",
        "|---|---|---|---|---|---|---|",
    ]

    def times(value: float | None) -> str:
        return "—" if value is None else f"{value:.2f}x"

    order = {"followup": 0, "kept": 1, "chat": 2, ALL: 3}
    for row in sorted(rows, key=lambda r: (order.get(r["family"], 9), str(r["length"]), r["mode"])):
        lines.append(
            f"| {row['family']} | {row['length']} | {row['mode']} | {kept_cell(row)} "
            f"| {times(row['speedup'])} | {times(row['first_speedup'])} "
            f"| {row['idle_s_per_1k']:.1f} |"
        )
    return "\n".join(lines)


def kept_table(paths: list[Path]) -> str:
    """benchmarks/kept_context.py: a question over a kept document, per length and mode, the
    cases pooled (ratios are totals over stock's, within each case's run)."""
    lines = [
        "| model | length | mode | document TTFT vs stock | idle s per 1k tokens "
        "| longest unit (s) | question TTFT vs stock | decode tok/s | peak GB "
        "| answers right | = stock's |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        data = json.loads(path.read_text())
        groups: dict[tuple, list[dict]] = {}
        for row in data["rows"]:
            groups.setdefault((row["length"], row["mode"]), []).append(row)
        stock = {row["seed"]: row for row in data["rows"] if row["mode"] == "stock"}
        for (length, mode), rows in groups.items():
            base = [stock[r["seed"]] for r in rows]
            documents = sum(b["document_ttft_s"] for b in base) / sum(
                r["document_ttft_s"] for r in rows
            )
            questions = sum(b["question_ttft_s"] for b in base) / sum(
                r["question_ttft_s"] for r in rows
            )
            idle = 1000 * sum(r["idle_s"] for r in rows) / sum(r["document_tokens"] for r in rows)
            rates = [r["generation_tps"] for r in rows if r["generation_tps"]]
            lines.append(
                f"| {data['model']} | {length} | {mode} | {documents:.2f}x | {idle:.1f} "
                f"| {max(r['longest_unit_s'] for r in rows):.2f} | {questions:.2f}x "
                f"| {sum(rates) / len(rates):.1f} | {max(r['peak_memory_gb'] for r in rows):.2f} "
                f"| {sum(r['correct'] for r in rows)}/{len(rows)} "
                f"| {sum(r['same_answer'] for r in rows)}/{len(rows)} |"
            )
    return "\n".join(lines)


# The GPU runs of 2026-11-26 and 27 named their modes as they were then: `default` the built-in
# rule (0.2@67%, reviving decode), today's `gentle`, whose floor of 1,024 tokens keeps no more at
# 8k and beyond (20% of 8,192 is 1,638), and `qwen2.5-coder-0.5b:default` or `:fast` Qwen's
# fixed-ratio schedules, no preset now. The tables print today's names (named_now).
BUILT_IN_THEN = {"0.2@67%": "gentle"}


def fixed_rule(described: str) -> str:
    """A fixed-ratio rule's description (LazyConfig.describe) as `--lazy` spells it ("0.5@24%
    0.3@57% min1024 sparse"); "" for any other (a mass rule)."""
    found = re.findall(r"keep (\d+)% at (\d+)%", described)
    if not found:
        return ""
    floor = re.search(r"at least (\d+) tokens on past each prune", described)
    return " ".join(
        [f"{int(keep) / 100:g}@{depth}%" for keep, depth in found]
        + ([f"min{floor[1]}"] if floor else [])
        + (["sparse"] if "decode sparse" in described else [])
    )


def named_now(mode: str, presets: dict[str, str]) -> str:
    """A GPU run's mode in today's names: a `default` or a model's preset (`MODEL:NAME`) that
    kept fixed ratios is the built-in preset with that rule, else the rule spelled as `--lazy`
    and the scripts' --modes take it (a variant, "no idle", stays after it); others as named."""
    name, _, variant = mode.partition(" ")
    rule = fixed_rule(presets.get(mode, ""))
    if not rule or (name != "default" and ":" not in name):
        return mode
    return " ".join(filter(None, [BUILT_IN_THEN.get(rule, rule), variant]))


def _against_stock(paths: list[Path], stock: str):
    """Each row of benchmarks/gpu/*.py results, its mode in today's name, with the stock row of
    its shape and length."""
    for path in paths:
        run = json.loads(path.read_text())
        rows, presets = run["rows"], run.get("presets", {})
        base = {(r["shape"], r["prompt_tokens"]): r for r in rows if r["mode"] == stock}
        for row in rows:
            yield (
                {**row, "mode": named_now(row["mode"], presets)},
                base[row["shape"], row["prompt_tokens"]],
            )


def gpu_table(paths: list[Path]) -> str:
    """benchmarks/gpu/llama_shapes.py: one prompt per shape and length, stock beside each mode."""
    lines = [
        "| shape | prompt tokens | mode | TTFT (s) | speedup | decode tok/s (vs stock) "
        "| whole answer (s) | peak GB | prefill computed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r, b in _against_stock(paths, "baseline"):
        lines.append(
            f"| {r['shape']} | {r['prompt_tokens']} | {r['mode']} | {r['ttft_s']:.3f} "
            f"| {b['ttft_s'] / r['ttft_s']:.2f}x "
            f"| {r['decode_tps']:.0f} ({r['decode_tps'] / b['decode_tps']:.2f}x) "
            f"| {r['answer_s']:.2f} | {r['peak_gb']:.1f} | {r['compute_fraction']:.0%} |"
        )
    return "\n".join(lines)


def gpu_kept_table(paths: list[Path]) -> str:
    """benchmarks/gpu/kept_shapes.py: a question over a kept context, stock beside each mode."""
    lines = [
        "| shape | document tokens | mode | document TTFT vs stock | idle s | units "
        "| longest unit (ms) | question TTFT (ms) | vs stock | decode tok/s | peak GB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, b in _against_stock(paths, "stock"):
        lines.append(
            f"| {r['shape']} | {r['prompt_tokens']} | {r['mode']} "
            f"| {b['document_ttft_s'] / r['document_ttft_s']:.2f}x | {r['idle_s']:.2f} "
            f"| {r['units']} | {1000 * r['longest_unit_s']:.0f} "
            f"| {1000 * r['question_ttft_s']:.0f} "
            f"| {b['question_ttft_s'] / r['question_ttft_s']:.2f}x | {r['decode_tps']:.0f} "
            f"| {r['peak_gb']:.1f} |"
        )
    return "\n".join(lines)


def freeform_table(paths: list[Path]) -> str:
    """Free-form agreement per mode and length (the free-form families pooled), with a 95%
    bootstrap interval and the time pruning saved; then, between each two lengths a mode ran,
    the difference of the means with its interval (the twenty-fifth study's rule)."""
    rows = [r for r in first_records(paths) if r.baseline_correct is None and r.mode != "baseline"]
    groups: dict[tuple[str, int], list[Record]] = {}
    for r in rows:
        groups.setdefault((r.mode, r.length), []).append(r)
    lines = [
        "| mode | length | prompt tokens | cases | identical | tokens agree (95% CI) "
        "| TTFT speedup | saved a prompt (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    tallies = {key: tally(group) for key, group in groups.items()}
    for (mode, length), group in groups.items():
        t = tallies[mode, length]
        low, high = t["agreed_interval"]
        timed = [r for r in group if r.baseline_ttft_s is not None]
        speedup = saved = "—"
        if timed:
            speedup = f"{t['speedup']:.2f}x"
            saved = f"{sum(r.baseline_ttft_s - r.ttft_s for r in timed) / len(timed):.2f}"
        lines.append(
            f"| {mode} | {length} | {min(r.prompt_tokens for r in group)}-"
            f"{max(r.prompt_tokens for r in group)} | {len(group)} "
            f"| {sum(r.identical for r in group)}/{len(group)} "
            f"| {t['agreed_tokens']:.1f} ({low:.1f}-{high:.1f}) "
            f"| {speedup} | {saved} |"
        )
    for mode in dict.fromkeys(m for m, _ in groups):
        lengths = sorted(length for m, length in groups if m == mode)
        for shorter, longer in zip(lengths, lengths[1:], strict=False):
            a, b = groups[mode, longer], groups[mode, shorter]
            low, high = bootstrap_interval(agreement_strata(a), minus=agreement_strata(b))
            difference = (
                tallies[mode, longer]["agreed_tokens"] - tallies[mode, shorter]["agreed_tokens"]
            )
            lines.append(
                f"\n{mode}: agreement at {longer} minus at {shorter}: "
                f"{difference:+.1f} tokens (95% CI {low:+.1f} to {high:+.1f})"
            )
    return "\n".join(lines)


TABLES = {
    "card": card_table,
    "bench": bench_table,
    "workload": workload_table,
    "eval": eval_table,
    "families": families_table,
    "freeform": freeform_table,
    "open": open_table,
    "multiturn": multiturn_table,
    "accuracy": accuracy_table,
    "harness": harness_table,
    "kept": kept_table,
    "gpu": gpu_table,
    "gpukept": gpu_kept_table,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", choices=list(TABLES))
    parser.add_argument("paths", nargs="+", type=Path)
    args = parser.parse_args()
    print(TABLES[args.table](args.paths))


if __name__ == "__main__":
    main()
