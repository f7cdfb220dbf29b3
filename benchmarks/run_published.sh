#!/usr/bin/env bash
# Every number in benchmarks/README.md, in the order they were made (run from the repository root
# after `make setup openblas model`; one job at a time: two cores, and parallel timings lie).
# Takes about 1.5 hours on a 2-core Xeon with MLX's CPU backend; minutes on an M-series Mac.
# Steps 2-5 are engine v2's; step 1 (the schedule) was calibrated with engine v1, whose
# prompt step prunes exactly as v2's does.
set -euo pipefail
cd "$(dirname "$0")/.."
results=benchmarks/results
lazymlx=.venv/bin/lazymlx

# 1. Calibration (seeds disjoint from the eval suite's): the schedule frontier for LazyLLM,
#    static and random selection; its fastest schedule meeting 97% agreement ships as `default`.
$lazymlx calibrate --lengths 1k,2k --cases 1 --selections attention,static,random \
  --output json > $results/calibrate.json
$lazymlx calibrate --records $results/calibrate.json --name default  # the decision, re-made
.venv/bin/python benchmarks/plot_tradeoff.py $results/calibrate.json $results/tradeoff.png

# 2. Accuracy per task and decode policy (engine v2): baseline, default (revive in the first 8
#    decode steps), revival at every step (a preset saved for the comparison), sparse, static,
#    random.
.venv/bin/python - <<'PY'
from dataclasses import replace
from lazymlx.config import PRESETS
from lazymlx.presets import save_preset
save_preset("smollm2-135m", "revive-every-step", replace(PRESETS["default"], revive_steps=None),
            {"experiment": "engine v2 decode policy: revival at every decode step"})
PY
$lazymlx eval --task all --lengths 1k,2k --cases 2 \
  --lazy default,revive-every-step,sparse,static,random --output json > $results/eval_1k_2k.json

# 3. TTFT, decode speed, memory: stock mlx-lm next to each decode policy and keep-all, passkey.
$lazymlx bench --prompt-len 2k --lazy default,sparse,off --gen-len 64 --repeats 3 \
  --output json > $results/bench_2k.json
$lazymlx bench --prompt-len 8k --lazy default,sparse,off --gen-len 64 \
  --output json > $results/bench_8k.json

# 4. What reviving costs per decode step, and what pruning short prompts saves and changes
#    (the evidence behind `default`'s revive_steps and min_prompt).
.venv/bin/python benchmarks/decode_policies.py --prompt-len 1024 --steps 40 --rounds 2 \
  --output $results/decode_policies_1024.json
.venv/bin/python benchmarks/short_prompts.py --output $results/short_prompts.json

# 5. On an NVIDIA GPU machine (MLX's CUDA backend; no weights there, so random-weight shapes):
#    stage the wheels here with ../shared/tools/gpu/prepare.sh, run .gpu1/setup.sh and
#    .gpu2/setup.sh there, then
#    PYTHONPATH=/tmp/site python3 benchmarks/gpu/llama_shapes.py --output $OUT/gpu_llama_shapes.json
#    and copy the JSON to $results/.
