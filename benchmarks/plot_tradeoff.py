"""The speed–accuracy picture: one curve per selection rule over the schedules of one study.

Reads the JSON of `strategies.py --study tradeoff` (every rule at several schedules, each run
right after stock mlx-lm on the same cases) and draws, for the default's rule, LazyLLM's rule,
static and random selection, the share of the baseline's right answers kept and the agreement
of the first generated tokens with the baseline's, against the prefill compute fraction, with
the measured TTFT speedup on the default rule's points. Needs matplotlib
(`pip install -e ".[plot]"`).

    .venv/bin/python benchmarks/plot_tradeoff.py benchmarks/results/tradeoff_1k.json \\
        benchmarks/results/tradeoff.png
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLES = {
    "default rule": ("default (last 8 tokens, span 12, revived)", "tab:blue", "o"),
    "paper rule": ("LazyLLM's rule (last token, revived)", "tab:green", "D"),
    "static": ("static (one-shot, never revived)", "tab:orange", "s"),
    "random": ("random drop", "tab:gray", "^"),
}


def points(records: list[dict]) -> dict[str, list[tuple[float, float, float, float]]]:
    """Per rule: (compute, share of baseline-right answers kept, agreement, speedup) per schedule."""
    right = {
        (r["task"], r["length"], r["seed"])
        for r in records
        if r["mode"] == "baseline" and r["correct"]
    }
    by_mode: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        if r["mode"] != "baseline":
            by_mode[r["mode"]].append(r)
    curves: dict[str, list] = defaultdict(list)
    for mode, runs in by_mode.items():
        kept = sum(r["correct"] for r in runs if (r["task"], r["length"], r["seed"]) in right)
        curves[mode.split(" @ ")[0]].append(
            (
                sum(r["compute_fraction"] for r in runs) / len(runs),
                kept / max(1, len(right)),
                sum(r["agrees"] for r in runs) / len(runs),
                sum(r["speedup"] for r in runs) / len(runs),
            )
        )
    return {rule: sorted(curve) for rule, curve in curves.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("output", type=Path)
    args = parser.parse_args()
    data = json.loads(args.study.read_text())
    records, header = data["records"], data["header"]
    curves = points(records)
    cases = len({(r["task"], r["length"], r["seed"]) for r in records})
    right = sum(r["correct"] for r in records if r["mode"] == "baseline")
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for axis, column, label in (
        (axes[0], 1, f"share of the baseline's {right} right answers kept"),
        (axes[1], 2, "first 8 tokens = the baseline's"),
    ):
        for rule, (name, color, marker) in STYLES.items():
            if rule not in curves:
                continue
            xs = [p[0] for p in curves[rule]]
            ys = [p[column] for p in curves[rule]]
            axis.plot(xs, ys, marker=marker, color=color, label=name)
            if rule == "default rule":
                for x, y, speedup in zip(xs, ys, (p[3] for p in curves[rule]), strict=True):
                    axis.annotate(
                        f"{speedup:.1f}x", (x, y), textcoords="offset points", xytext=(4, 5)
                    )
        axis.plot([1.0], [1.0], marker="*", markersize=12, color="black", ls="none")
        axis.annotate("stock mlx-lm", (1.0, 1.0), xytext=(-70, -14), textcoords="offset points")
        axis.set_xlabel("prefill compute (fraction of (token, layer) pairs)")
        axis.set_ylabel(label)
        axis.set_ylim(-0.05, 1.05)
        axis.grid(alpha=0.3)
    axes[0].legend(loc="lower right", fontsize=8)
    lengths = sorted({r["length"] for r in records})
    figure.suptitle(
        f"{header['model']}, {cases} held-out cases at {lengths} tokens, {header['device']} "
        "(labels: measured TTFT speedup)",
        fontsize=9,
    )
    figure.tight_layout()
    figure.savefig(args.output, dpi=120)


if __name__ == "__main__":
    main()
