"""Does a wider neighbourhood around the place the question points at keep real-pick's answers?

Runs Qwen2.5-Coder's default on the calibration split's real-pick and real-option cases at 2k
(2 cases each) with policy.AROUND set, against a copy of the shelf's stock answers:

    cp benchmarks/baselines/qwen2.5-coder-0.5b.json /tmp/baselines.json
    python benchmarks/studies/2026-12-02-real-prompts/around.py 32 calibration 2 around_32_qwen_2k.jsonl
    python benchmarks/studies/2026-12-02-real-prompts/around.py 96 calibration 2 around_96_qwen_2k.jsonl
"""

import sys
from contextlib import suppress

import lazymlx  # noqa: F401  (binds OpenBLAS before MLX loads)
from lazymlx.cli.app import main
from lazymlx.engine import policy

around, split, cases, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
policy.AROUND = around
with suppress(SystemExit):  # the CLI's exit
    main(
        ["eval", "-m", "qwen2.5-coder-0.5b", "--split", split, "--families", "real-pick,real-option",
         "--lengths", "2k", "--cases", cases, "--lazy", "default", "--baselines", "/tmp/baselines.json",
         "--journal", out, "-o", "json"]
    )  # fmt: skip
