"""The markdown tables of benchmarks/README.md, printed from the raw JSON in results/.

So every number in the README is read from a measurement file, never typed in by hand.

    .venv/bin/python benchmarks/tables.py
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def bench_table(*names: str) -> str:
    lines = [
        "| prompt tokens | mode | TTFT (s) | speedup | prefill computed | prompt tok/s "
        "| decode tok/s | peak GB | passkey right | tokens = baseline's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        for r in load(name)["rows"]:
            lines.append(
                f"| {r['prompt_tokens']} | {r['mode']} | {r['ttft_s']:.2f} | {r['speedup']:.2f}x "
                f"| {r['compute_fraction']:.0%} | {r['prompt_tps']:.0f} "
                f"| {r['generation_tps']:.1f} | {r['peak_memory_gb']:.2f} "
                f"| {'yes' if r['answer_correct'] else 'no'} "
                f"| {'yes' if r['answer_matches_baseline'] else 'no'} |"
            )
    return "\n".join(lines)


def eval_table(name: str) -> str:
    data = load(name)
    modes = list(dict.fromkeys(r["mode"] for r in data["rows"]))
    cells: dict[tuple, dict] = {}
    for r in data["rows"]:
        cells.setdefault((r["task"], r["length"]), {})[r["mode"]] = r
    lines = [
        "| task | length | " + " | ".join(modes) + " |",
        "|---|---|" + "---|" * len(modes),
    ]
    for (task, length), by_mode in cells.items():
        shown = []
        for mode in modes:
            r = by_mode[mode]
            text = f"{r['correct']}/{r['cases']}"
            if mode != "baseline":
                text += f" ({r['answer_agreement']:.0%} same, {r['agreement']:.0%} tokens)"
            shown.append(text)
        lines.append(f"| {task} | {length} | " + " | ".join(shown) + " |")
    totals = []
    for mode in modes:
        rows = [r for r in data["rows"] if r["mode"] == mode]
        right, cases = sum(r["correct"] for r in rows), sum(r["cases"] for r in rows)
        speedup = sum(r["speedup"] * r["cases"] for r in rows) / cases
        totals.append(f"**{right}/{cases}**, {speedup:.2f}x")
    lines.append("| all | | " + " | ".join(totals) + " |")
    return "\n".join(lines)


def calibration_table(name: str) -> str:
    lines = [
        "| strategy: keep ratio @ depth | prefill computed | speedup | accuracy "
        "| same answers as baseline | first 8 tokens = baseline's | meets 97% |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in load(name)["rows"]:
        lines.append(
            f"| {r['mode']} | {r['compute_fraction']:.0%} | {r['speedup']:.2f}x "
            f"| {r['accuracy']:.0%} | {r['answer_agreement']:.0%} | {r['agreement']:.0%} "
            f"| {'**yes**' if r['meets_target'] else 'no'} |"
        )
    return "\n".join(lines)


def gpu_table(name: str) -> str:
    """benchmarks/gpu/llama_shapes.py's rows, each against the baseline of its shape and length."""
    lines = [
        "| shape | prompt tokens | mode | TTFT (s) | TTFT speedup | decode tok/s | decode vs stock "
        "| whole answer (s) | peak GB | prefill computed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = load(name)["rows"]
    base = {(r["shape"], r["prompt_tokens"]): r for r in rows if r["mode"] == "baseline"}
    for r in rows:
        b = base[(r["shape"], r["prompt_tokens"])]
        lines.append(
            f"| {r['shape']} | {r['prompt_tokens']} | {r['mode']} | {r['ttft_s']:.3f} "
            f"| {b['ttft_s'] / r['ttft_s']:.2f}x | {r['decode_tps']:.1f} "
            f"| {r['decode_tps'] / b['decode_tps']:.2f}x | {r['answer_s']:.2f} "
            f"| {r['peak_gb']:.1f} | {r['compute_fraction']:.0%} |"
        )
    return "\n".join(lines)


def policy_table(name: str) -> str:
    """decode_policies.py: decode tok/s per policy, one column per round."""
    rows = load(name)["rows"]
    rounds = len(rows[0]["decode_tps"])
    lines = [
        "| decode policy | " + " | ".join(f"tok/s, round {i + 1}" for i in range(rounds)) + " |",
        "|---|" + "---|" * rounds,
    ]
    for r in rows:
        lines.append(f"| {r['policy']} | " + " | ".join(f"{t:.1f}" for t in r["decode_tps"]) + " |")
    return "\n".join(lines)


def short_prompts_table(name: str) -> str:
    """short_prompts.py: what pruning a short prompt saves and changes, by prompt length."""
    data = load(name)
    lines = [
        f"| prompt tokens | prompts | first {data['generated_tokens']} tokens identical "
        "| TTFT keep-all (s) "
        "| TTFT pruned (s) | saved (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        lines.append(
            f"| {r['prompt_tokens']} | {r['prompts']} | {r['identical']}/{r['prompts']} "
            f"| {r['ttft_off_s']:.2f} | {r['ttft_pruned_s']:.2f} "
            f"| {r['ttft_off_s'] - r['ttft_pruned_s']:.2f} |"
        )
    return "\n".join(lines)


def strategies_table(*names: str) -> str:
    """Per strategy and length: baseline-right answers kept, compute, speedup (strategies.py)."""
    lines = [
        "| strategy | length | baseline right | kept | also right where baseline wrong "
        "| prefill computed | TTFT speedup |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in names:
        for r in load(name)["summary"]:
            lines.append(
                f"| {r['mode']} | {r['length']} | {r['baseline_right']}/{r['cases']} "
                f"| {r['kept']}/{r['baseline_right']} | {r['wrong_to_right']} "
                f"| {r['compute_fraction']:.0%} | {r['speedup']:.2f}x |"
            )
    return "\n".join(lines)


def answer_rank_table(name: str) -> str:
    """answer_rank.py: per layer and rule, the share a prune there must keep to keep every answer
    (worst case over all cases, and the mean); the rows a good schedule prunes at stand out."""
    cases = load(name)["cases"]
    rules = list(cases[0]["needed"])
    lines = [
        "| layer | " + " | ".join(f"{rule}: worst | mean" for rule in rules) + " |",
        "|---|" + "---|---|" * len(rules),
    ]
    for layer in range(len(cases[0]["needed"][rules[0]])):
        cells = []
        for rule in rules:
            shares = [case["needed"][rule][layer] for case in cases]
            cells.append(f"{max(shares):.0%} | {sum(shares) / len(shares):.1%}")
        lines.append(f"| {layer} | " + " | ".join(cells) + " |")
    lengths = sorted({case["length"] for case in cases})
    return "\n".join(lines) + f"\n\n{len(cases)} cases, lengths {lengths}."


def soak_table(name: str) -> str:
    data = load(name)
    lines = [
        "| turns | peak GB (last 50) | active GB | context tokens | turns dropped | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        lines.append(
            f"| {r['turn']} | {r['peak_memory_gb']:.3f} | {r['active_memory_gb']:.3f} "
            f"| {r['context_tokens']} | {r['dropped_turns']} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines) + f"\n\nEmpty replies: {data['empty_replies']}."


def server_overhead_table(name: str) -> str:
    s = load(name)["summary"]
    return (
        "| path | TTFT mean (s) | ± std |\n|---|---|---|\n"
        f"| Python API (`LLM.submit`) | {s['api']['mean_s']:.3f} | {s['api']['std_s']:.3f} |\n"
        f"| HTTP (`openai` client, streaming) | {s['http']['mean_s']:.3f} "
        f"| {s['http']['std_s']:.3f} |\n\nServer overhead: {s['overhead_s'] * 1000:.0f} ms."
    )


def main() -> None:
    sections = {
        "TTFT, decode, memory (bench)": lambda: bench_table(
            "bench_2k.json", "bench_8k.json", "bench_8k_repeat.json", "bench_8k_sinks.json"
        ),
        "accuracy at 1k-2k (eval)": lambda: eval_table("eval_1k_2k.json"),
        "accuracy per strategy, previous default (eval)": lambda: eval_table(
            "eval_1k_2k_strategies.json"
        ),
        "accuracy at 4k (eval)": lambda: eval_table("eval_4k.json"),
        "accuracy at 8k (eval)": lambda: eval_table("eval_8k.json"),
        "accuracy at 8k before the sinks (eval)": lambda: eval_table("eval_8k_no_sinks.json"),
        "accuracy at 8k before the sinks, seed 1 (eval)": lambda: eval_table(
            "eval_8k_seed1_no_sinks.json"
        ),
        "accuracy at 8k, layer 17 keeping a quarter (eval)": lambda: eval_table(
            "eval_8k_layer17_quarter.json"
        ),
        "accuracy at 8k, the long preset (eval)": lambda: eval_table("eval_8k_long.json"),
        "decode cost of reviving": lambda: policy_table("decode_policies_1024.json"),
        "short prompts": lambda: short_prompts_table("short_prompts.json"),
        "selection rules at equal compute": lambda: strategies_table("selection_1k_2k.json"),
        "length-aware budgets and later schedules": lambda: strategies_table(
            "schedules_4k.json",
            "schedules_8k.json",
            "schedules_4k_late.json",
            "schedules_4k_mid.json",
        ),
        "schedules at the layers that rank answers best": lambda: strategies_table(
            "layers_1k_2k.json", "layers_4k.json"
        ),
        "span at the previous default's schedule": lambda: strategies_table("spans_1k_2k.json"),
        "every rule at four schedules (the plot's points)": lambda: strategies_table(
            "tradeoff_1k.json"
        ),
        "where the answer ranks, per layer": lambda: answer_rank_table("answer_rank_1k_4k.json"),
        "where the answer ranks at 8k": lambda: answer_rank_table("answer_rank_8k.json"),
        "where the answer ranks at 1k-2k, needle and real-text tasks": lambda: answer_rank_table(
            "answer_rank_1k_2k_text.json"
        ),
        "chat soak": lambda: soak_table("soak.json"),
        "server TTFT overhead": lambda: server_overhead_table("server_overhead.json"),
        "GPU (llama_shapes.py)": lambda: gpu_table("gpu_llama_shapes.json"),
        "calibration frontier": lambda: calibration_table("calibrate.json"),
    }
    for title, table in sections.items():
        try:
            print(f"### {title}\n\n{table()}\n")
        except FileNotFoundError as missing:
            print(f"### {title}\n\n(not run yet: {missing.filename})\n")


if __name__ == "__main__":
    main()
