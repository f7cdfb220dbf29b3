"""The built-in default, chosen to travel: calibrate's bar on each calibrating model's journal, and
the candidate meeting it on every one with the least work (mean over the models). The held-out
family is judged apart, on its validation split (`lazymlx eval --lazy "<rule>"`).

    .venv/bin/python benchmarks/studies/2026-12-02-real-prompts/choose_builtin.py \
        benchmarks/results/models/qwen2.5-coder-0.5b/calibration_point.jsonl \
        benchmarks/results/models/smollm2-135m/calibration_point.jsonl
"""

from __future__ import annotations

import sys

from lazymlx.evals.calibrate import choose
from lazymlx.evals.records import read_records


def main(journals: list[str]) -> None:
    rows: dict[str, list[dict]] = {}
    for journal in journals:
        for row in choose(read_records(journal)[1]).frontier:
            rows.setdefault(row["mode"], []).append(row | {"journal": journal})
    print("| candidate | " + " | ".join(journals) + " | mean work | meets everywhere |")
    print("|---|" + "---|" * (len(journals) + 2))
    passing = []
    for mode, mine in rows.items():
        if len(mine) < len(journals):
            continue  # not run on every model
        cells = [
            f"{r['compute_fraction']:.0%} work, {'meets' if r['meets_default'] else 'misses'}"
            f" (worst: {r['worst_family'] or '-'}, {r['worst_open'] or '-'})"
            for r in mine
        ]
        work = sum(r["compute_fraction"] for r in mine) / len(mine)
        everywhere = all(r["meets_default"] for r in mine)
        if everywhere and mode not in ("baseline", "reference", "reference-4bit"):
            passing.append((work, mode))
        print(f"| {mode} | " + " | ".join(cells) + f" | {work:.0%} | {everywhere} |")
    print()
    print("chosen:", min(passing)[1] if passing else None)


if __name__ == "__main__":
    main(sys.argv[1:])
