"""The pointing records as a table: per family, each case's strongest pointing before the last
candidate layer, and where a first cut would fall for a threshold (or that it runs whole).

    .venv/bin/python benchmarks/studies/2026-12-02-real-prompts/pointing_table.py 0.5 \
        benchmarks/studies/2026-12-02-real-prompts/pointing_*_2k.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(threshold: float, files: list[str]) -> None:
    print(f"| model | family | stock right | strongest pointing | first cut at {threshold} |")
    print("|---|---|---|---|---|")
    for file in files:
        model = Path(file).stem.removeprefix("pointing_")
        rows: dict[str, list[dict]] = {}
        for record in map(json.loads, Path(file).read_text().splitlines()):
            rows.setdefault(record["family"], []).append(record)
        for family, records in rows.items():
            strongest, cuts, right = [], [], []
            for r in records:
                strongest.append(f"{max(r['strengths']):.2f}")
                at = next((i for i, s in enumerate(r["strengths"]) if s >= threshold), None)
                cuts.append("whole" if at is None else f"L{r['layers'][at]}")
                right.append({True: "y", False: "n", None: "-"}[r["correct"]])
            print(
                f"| {model} | {family} | {' '.join(right)} | {' '.join(strongest)} | "
                f"{' '.join(cuts)} |"
            )


if __name__ == "__main__":
    main(float(sys.argv[1]), sys.argv[2:])
