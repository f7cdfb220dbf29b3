"""The untuned check: Git's own release notes summarized through the chat, as a user would.

Issue 53 found the short-prompt failure on these files (a summary that loops), and they are kept
out of the eval's sources so no knob is ever tuned on them. Each chosen file (the first ones, in
version order, whose chat prompt falls in each token band) goes through the chat template with
"Summarize these release notes in three short bullet points.", 64 greedy tokens, as a `summary`
case of the eval: stock, the 8-bit and 4-bit references (stock with round-tripped weights) and
each preset, every answer judged by stock (its mean NLL, lazymlx/evals/judge.py), checked for
loops and, as a diagnostic, compared with stock's words. Records go to a journal that
`benchmarks/tables.py open` tabulates.

    .venv/bin/python benchmarks/studies/2026-11-27-open-answers/relnotes_check.py --model qwen2.5-coder-0.5b --lazy default \\
        --journal benchmarks/studies/2026-11-27-open-answers/qwen_relnotes.jsonl
"""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
import argparse
import json
import tempfile
from pathlib import Path

from lazymlx.evals.baselines import BaselineCache
from lazymlx.evals.cases import Case, context_tokens
from lazymlx.evals.families import OPEN_TOKENS
from lazymlx.evals.judge import Judge
from lazymlx.evals.outcome import strategy
from lazymlx.evals.records import records_as_dicts
from lazymlx.evals.reference import REFERENCE_BITS, round_trip
from lazymlx.evals.runner import evaluate

RELNOTES = Path("/usr/share/doc/git/RelNotes")
ASK = "Summarize these release notes in three short bullet points."
# (low, high) chat prompt tokens: the everyday band issue 53 measured, then ~1.5k and ~2k
BANDS = ((260, 700), (1300, 1700), (1800, 2300))


def pick(tokenizer, per_band: int) -> list[Case]:
    """The first `per_band` release notes (version order) whose prompt falls in each band."""

    def version(path: Path) -> tuple:
        return tuple(int(p) if p.isdigit() else 0 for p in path.stem.split("."))

    chosen: list[Case] = []
    counts = [0] * len(BANDS)
    for path in sorted(RELNOTES.glob("*.txt"), key=version):
        text = path.read_text(errors="replace").strip()
        segments = (f"{text}\n\n{ASK}",)
        tokens = context_tokens(tokenizer, "chat", segments)
        for band, (low, high) in enumerate(BANDS):
            if low <= tokens <= high and counts[band] < per_band:
                counts[band] += 1
                chosen.append(
                    Case("relnotes", "check", tokens + OPEN_TOKENS, len(chosen), "chat",
                         segments, None, OPEN_TOKENS, 1.0, path.name, judge="text")
                )  # fmt: skip
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--lazy", default="default", help="presets, comma-separated")
    parser.add_argument("--per-band", type=int, default=2)
    parser.add_argument("--journal", required=True)
    args = parser.parse_args()
    model, tokenizer = lazymlx.load(args.model)
    cases = pick(tokenizer, args.per_band)
    strategies = [strategy(name, args.model) for name in args.lazy.split(",")]
    with tempfile.TemporaryDirectory() as folder:  # stock's answers: run here, beside the presets
        cache = Path(folder) / "baselines.json"
        references = {}
        for mode, bits in REFERENCE_BITS.items():
            other = round_trip(lazymlx.load(args.model)[0], bits)
            references[mode] = (other, BaselineCache(other, cache))
        records = evaluate(
            model, tokenizer, cases, strategies, BaselineCache(model, cache),
            on_run=lambda case, mode: print(f"{case.source} {case.length} {mode}", flush=True),
            references=references, judge=Judge(model, Path(folder) / "judge"),
        )  # fmt: skip
    with open(args.journal, "w") as out:
        for row in records_as_dicts(records):
            out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
