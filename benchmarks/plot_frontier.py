"""The speed-fidelity frontier: compute against answers kept, per length, one point per rule.

Reads eval or study records (JSON lines, or an eval's --output json) and draws, for each context
length, every rule's prefill compute fraction (x: the share of stock's (token, layer) work) and
the share of the baseline's right answers it kept (y), with the 95% interval. Needs matplotlib
(`pip install -e ".[plot]"`). Multi-turn runs with no idle time (` no-idle`) are never chosen and
are left out; `--skip` leaves out other modes. The round 3 study records, results/studies/, are
at commit 2b0e219.

    .venv/bin/python benchmarks/plot_frontier.py \\
        benchmarks/results/models/qwen2.5-coder-0.5b/calibration.jsonl --skip default \\
        --title "Qwen2.5-Coder-0.5B, calibration cases" \\
        --output benchmarks/results/models/qwen2.5-coder-0.5b/frontier.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lazymlx.evals.records import NO_IDLE, read_records
from lazymlx.evals.summary import ALL, summarize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", type=Path)
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--title", default="SmolLM2-135M, calibration cases")
    parser.add_argument("--skip", default="", help="modes to leave out, comma-separated")
    args = parser.parse_args()
    import matplotlib  # the plot extra's: imported once the options are read, so --help needs none

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    skip = {"baseline", *filter(None, args.skip.split(","))}
    records = [
        r
        for path in args.records
        for r in read_records(path)[1]
        if r.mode not in skip and not r.mode.endswith(NO_IDLE)
    ]
    rows = [r for r in summarize(records) if r["family"] == ALL and r["kept_share"] is not None]
    lengths = sorted({r["length"] for r in rows}, key=lambda v: (v == ALL, v))
    figure, axes = plt.subplots(
        1, len(lengths), figsize=(5 * len(lengths), 4.5), sharey=True, squeeze=False
    )
    for axis, length in zip(axes[0], lengths, strict=True):
        for index, row in enumerate(r for r in rows if r["length"] == length):
            y, low, high = row["kept_share"], row["kept_low"], row["kept_high"]
            axis.errorbar(
                row["compute_fraction"], y, yerr=[[y - low], [high - y]], fmt="o", capsize=3
            )
            axis.annotate(  # staggered, so rules that keep the same share stay legible
                row["mode"], (row["compute_fraction"], y), fontsize=7,
                xytext=(4, 2 - 9 * (index % 4)), textcoords="offset points",
            )  # fmt: skip
        axis.axhline(0.97, color="grey", linestyle="--", linewidth=0.8)
        axis.set_title(f"{length} tokens" if length != ALL else "all lengths")
        axis.set_xlabel("prefill compute (share of stock's)")
        axis.set_xlim(0.3, 1.0)
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("baseline's right answers kept (95% CI)")
    figure.suptitle(args.title)
    figure.tight_layout()
    figure.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
