#!/usr/bin/env bash
# Every number in benchmarks/README.md, in the order they were made (run from the repository root
# after `make setup openblas model`; one job at a time: two cores, and parallel timings lie).
# Takes about 1.5 hours on a 2-core Xeon with MLX's CPU backend; minutes on an M-series Mac.
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

# 2. Accuracy per task and length: baseline, default, static, random.
$lazymlx eval --task all --lengths 1k,2k --cases 2 --lazy default,static,random \
  --output json > $results/eval_1k_2k.json

# 3. TTFT, decode speed, memory: stock mlx-lm next to each strategy, passkey prompt.
$lazymlx bench --prompt-len 1k,2k,4k --lazy default,off,static,random --gen-len 32 \
  --output json > $results/bench_1k_2k_4k.json
$lazymlx bench --prompt-len 8k --lazy default,static,random --gen-len 16 \
  --output json > $results/bench_8k.json
