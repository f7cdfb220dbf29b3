"""The speed–accuracy picture: one curve per strategy over the calibration schedules.

Reads the JSON of `lazymlx calibrate --selections attention,static,random --output json` and
draws, for LazyLLM (attention), static and random selection, accuracy and agreement with the
baseline against the prefill compute fraction, with the measured TTFT speedup on each point.
Needs matplotlib (`pip install -e ".[plot]"`).

    .venv/bin/python benchmarks/plot_tradeoff.py results/calibrate.json results/tradeoff.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLES = {
    "attention": ("LazyLLM (attention, revived)", "tab:blue", "o"),
    "static": ("static (one-shot, never revived)", "tab:orange", "s"),
    "random": ("random drop", "tab:gray", "^"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calibration", type=Path)
    parser.add_argument("output", type=Path)
    args = parser.parse_args()
    data = json.loads(args.calibration.read_text())
    rows = data["rows"]
    baseline = next(r for r in rows if r["selection"] == "baseline")
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for axis, metric, label in (
        (axes[0], "accuracy", "accuracy (answer contains the gold value)"),
        (axes[1], "agreement", f"agreement with baseline (first {data['agree_tokens']} tokens)"),
    ):
        for selection, (name, color, marker) in STYLES.items():
            points = sorted(
                (r["compute_fraction"], r[metric], r["speedup"])
                for r in rows
                if r["selection"] == selection
            )
            if not points:
                continue
            xs, ys, speedups = zip(*points, strict=True)
            axis.plot(xs, ys, marker=marker, color=color, label=name)
            if selection == "attention":
                for x, y, s in points:
                    axis.annotate(f"{s:.1f}x", (x, y), textcoords="offset points", xytext=(4, 5))
        axis.plot([1.0], [baseline[metric]], marker="*", markersize=12, color="black", ls="none")
        axis.annotate(
            "stock mlx-lm", (1.0, baseline[metric]), xytext=(-70, -14), textcoords="offset points"
        )
        axis.set_xlabel("prefill compute (fraction of (token, layer) pairs)")
        axis.set_ylabel(label)
        axis.set_ylim(-0.05, 1.05)
        axis.grid(alpha=0.3)
    axes[0].legend(loc="lower right", fontsize=8)
    figure.suptitle(
        f"{data['model']}, {data['case_count']} calibration cases at {data['lengths']} tokens, "
        f"{data['device']} (labels: measured TTFT speedup)",
        fontsize=9,
    )
    figure.tight_layout()
    figure.savefig(args.output, dpi=120)


if __name__ == "__main__":
    main()
