#!/usr/bin/env bash
# Every number in benchmarks/README.md, in the order they were made (run from the repository root
# after `make setup openblas model`; one job at a time: two cores, and parallel timings lie).
# Takes about 3.5 hours on a 2-core Xeon with MLX's CPU backend; minutes on an M-series Mac.
# Steps 2-5 are engine v2's; step 1 (the schedule) was calibrated with engine v1, whose
# prompt step prunes exactly as v2's does (with LazyLLM's last-token rule, then the default).
set -euo pipefail
cd "$(dirname "$0")/.."
results=benchmarks/results
lazymlx=.venv/bin/lazymlx

# 1. Calibration (seeds disjoint from the eval suite's): the schedule frontier for LazyLLM,
#    static and random selection; its fastest schedule meeting 97% agreement ships as `default`.
$lazymlx calibrate --lengths 1k,2k --cases 1 --selections attention,static,random \
  --output json > $results/calibrate.json
# the decision, re-made; saved under its own name, so the built-in default runs every later step
$lazymlx calibrate --records $results/calibrate.json --name calibrated-v1

# 2. Selection rules at equal compute (the default schedule, held-out calibration seeds), and
#    length-aware token budgets against ratios at 4k and 8k (the winning rule).
.venv/bin/python benchmarks/strategies.py --study selection \
  --tasks passkey,needle,multikey,docneedle,docfact --lengths 1k,2k --cases 2 \
  --output $results/selection_1k_2k.json  # stopped after the 1k cases and one 2k case
.venv/bin/python benchmarks/strategies.py --study schedule \
  --tasks passkey,needle,multikey,docneedle,docfact --lengths 4k --cases 1 \
  --output $results/schedules_4k.json
.venv/bin/python benchmarks/strategies.py --study schedule --tasks passkey,docneedle \
  --lengths 8k --cases 1 --output $results/schedules_8k.json
.venv/bin/python benchmarks/strategies.py --study schedule \
  --tasks passkey,needle,docneedle,docfact --lengths 4k --cases 1 \
  --only "late: 0.5@50% 0.5@80%" --output $results/schedules_4k_late.json
.venv/bin/python benchmarks/strategies.py --study schedule \
  --tasks passkey,needle,docneedle,docfact --lengths 4k --cases 1 \
  --only "mid: 0.5@40% 0.5@80%,mid: 0.7@34% 0.5@54% 0.5@80%" \
  --output $results/schedules_4k_mid.json

# 2b. Where each layer's ranking puts the answer (keep-all runs, held-out seeds), the schedules
#     that prune at the best layers, and the span at the then shipped schedule (layer 17
#     keeping a quarter, as strategies.RATIOS pins).
.venv/bin/python benchmarks/answer_rank.py --lengths 1k,2k,4k --cases 2 \
  --output $results/answer_rank_1k_4k.json
.venv/bin/python benchmarks/answer_rank.py --lengths 8k --cases 2 --tasks needle,docneedle,docfact \
  --output $results/answer_rank_8k.json
.venv/bin/python benchmarks/answer_rank.py --lengths 1k,2k,4k --cases 2 \
  --tasks needle,docneedle,docfact --output $results/answer_rank_1k_2k_text.json  # stopped after 2k
.venv/bin/python benchmarks/strategies.py --study layers --lengths 1k,2k --cases 2 \
  --output $results/layers_1k_2k.json
.venv/bin/python benchmarks/strategies.py --study layers \
  --tasks passkey,needle,docneedle,docfact,multikey --lengths 4k --cases 1 \
  --only "7:50% 17:20%,7:40% 17:25%" --output $results/layers_4k.json

.venv/bin/python benchmarks/strategies.py --study spans --tasks needle,docneedle \
  --lengths 1k,2k --cases 2 --output $results/spans_1k_2k.json
# every rule (default, LazyLLM's, static, random) at four schedules: the speed-accuracy plot
.venv/bin/python benchmarks/strategies.py --study tradeoff --lengths 1k --cases 1 \
  --output $results/tradeoff_1k.json
.venv/bin/python benchmarks/plot_tradeoff.py $results/tradeoff_1k.json $results/tradeoff.png

# 3. TTFT, decode speed, memory: stock mlx-lm next to the default, LazyLLM's rule and the budget
#    preset, passkey; then the accuracy suite (eval seeds): the default at 1k-2k, 4k and 8k
#    (the tasks whose baseline answer is a number or a count; it misses the real-text ones there).
$lazymlx eval --task all --lengths 1k,2k --cases 2 --lazy default --output json \
  > $results/eval_1k_2k.json
$lazymlx eval --task all --lengths 4k --cases 1 --lazy default --output json > $results/eval_4k.json
$lazymlx eval --task passkey,needle --lengths 8k --cases 2 --lazy default --output json \
  > $results/eval_8k.json
#    These ran at earlier defaults, so they reproduce only at those commits (git checkout):
#    every strategy at 1k-2k and `long` at 8k at cbb6aad (layer 17 keeping a quarter, no
#    budget); the 8k eval with the 25% floor and layer 17 keeping a quarter at 40c9eab; the
#    8k evals before the sinks (first 4 tokens kept) at d62fc60.
#      $lazymlx eval --task all --lengths 1k,2k --cases 2 --lazy default,paper,static,random \
#        --output json > $results/eval_1k_2k_strategies.json
#      $lazymlx eval --task passkey,needle --lengths 8k --cases 1 --lazy long \
#        --output json > $results/eval_8k_long.json
#      $lazymlx eval --task passkey,needle,multikey,vartrack --lengths 8k --cases 1 \
#        --lazy default --output json > $results/eval_8k_layer17_quarter.json
#      $lazymlx eval --task passkey,needle,multikey,vartrack --lengths 8k --cases 1 \
#        --lazy default --output json > $results/eval_8k_no_sinks.json
#      $lazymlx eval --task passkey,needle --lengths 8k --cases 1 --seed 1 --lazy default \
#        --output json > $results/eval_8k_seed1_no_sinks.json
$lazymlx bench --prompt-len 2k --lazy default,paper,long --gen-len 64 --repeats 3 \
  --output json > $results/bench_2k.json
$lazymlx bench --prompt-len 8k --lazy default,long --gen-len 64 \
  --output json > $results/bench_8k.json
$lazymlx bench --prompt-len 8k --lazy default --gen-len 64 \
  --output json > $results/bench_8k_repeat.json
#    (bench_2k, bench_8k and bench_8k_repeat ran before the sinks, at d62fc60)
$lazymlx bench --prompt-len 8k --lazy default --gen-len 64 \
  --output json > $results/bench_8k_sinks.json

# 3b. Apps: a 200-turn chat on the real model (memory every 50 turns), and what the HTTP server
#     adds to the first token over the Python API.
.venv/bin/python benchmarks/soak.py --turns 200 --output $results/soak.json
.venv/bin/python benchmarks/server_overhead.py --repeats 5 --output $results/server_overhead.json

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
