#!/usr/bin/env bash
# The commands behind every current number: the cards in benchmarks/README.md, and the figures
# README.md and docs/ quote (benchmarks/README.md has a table: figure -> step -> result file).
# Finished studies keep their own commands (benchmarks/studies/*/record.md).
#
#   bash benchmarks/run_published.sh            # every CPU step, in order (days on 2 cores)
#   bash benchmarks/run_published.sh cards kept # only those steps
#   bash benchmarks/run_published.sh --help     # this, and the steps
#
# Run from a checkout after `make setup openblas model`, one job at a time (parallel timings
# lie). A step re-makes its files: a journal is continued (--resume) only under the preset
# definitions it was made with, so move an old file aside before re-making it. Each file holds
# today's presets' rows and stock's: the rows of a rule no preset names now stay in its study.
set -euo pipefail
cd "$(dirname "$0")/.."
self=benchmarks/run_published.sh
R=benchmarks/results/models
B=benchmarks/baselines
lazymlx=.venv/bin/lazymlx
python=.venv/bin/python
gpu_python=${PYTHON:-python3} # on the GPU machine: PYTHONPATH=/tmp/site python3
q=qwen2.5-coder-0.5b s=smollm2-135m g=gemma3-270m

# Each line of a table on stdin is one command: `table FUNCTION [OPTION]` calls FUNCTION with the
# line's words, then OPTION and the text after the line's `|` (one argument, trimmed) if it has
# one. Blank lines and # comments are skipped; no word holds a space or a glob character.
table() {
  local line
  while IFS= read -r line; do
    if [[ $line =~ ^[[:space:]]*(#|$) ]]; then
      continue
    elif [[ $line =~ \|[[:space:]]*(.*[^[:space:]]) ]]; then
      "$1" ${line%%|*} "$2" "${BASH_REMATCH[1]}"
    else
      "$1" $line
    fi
  done
}

# ---- cards: each registry model's validation journals and bench runs (card.json names them) --

# The model a result file is of (R/MODEL/FILE)
model_of() {
  local folder=${1%/*}
  echo "${folder##*/}"
}

# JOURNAL EVAL-OPTIONS...: its model's validation split into JOURNAL, continued
validate() {
  local m
  m="$(model_of $1)"
  $lazymlx eval -m $m --split validation --baselines $B/$m.json --journal $1 --resume -o json \
    "${@:2}" > /dev/null
}

# FILE BENCH-OPTIONS...: one bench run of its model (one timed round) into FILE
bench() {
  $lazymlx bench -m "$(model_of $1)" -r 1 -o json "${@:2}" > $1
}

cards() {
  table validate <<EOF
  # the presets (mass rules since 2026-11-28) beside stock and both references, one case a
  # scored family (Qwen at 4k: its open ones, whose exact ones' stock rows are below)
  $R/$s/validation_mass_2k.jsonl      --families scored --lengths 2k --cases 1 --lazy default --reference
  $R/$s/validation_mass_lengths.jsonl --families scored --lengths 512,1k --cases 1 --lazy default --reference
  $R/$q/validation_mass_2k.jsonl      --families scored --lengths 2k --cases 1 --lazy default,gentle,fast --reference
  $R/$q/validation_mass_lengths.jsonl --families scored --lengths 1k --cases 1 --lazy default --reference
  $R/$q/validation_mass_lengths.jsonl --families summary,question,docstring,completion --lengths 4k --cases 1 --lazy default --reference
  $R/$g/validation_mass_2k.jsonl      --families scored --lengths 2k --cases 1 --lazy default,gentle,fast --reference
  $R/$g/validation_mass_2k.jsonl      --families scored --lengths 2k --cases 2 --lazy default --reference
  $R/$g/validation_mass_lengths.jsonl --families scored --lengths 1k,4k --cases 1 --lazy default --reference
  # SmolLM2's fast at 1k-8k, and stock there
  $R/$s/validation.jsonl --lengths 1k --lazy fast
  $R/$s/validation.jsonl --lengths 2k --lazy fast
  $R/$s/validation.jsonl --lengths 4k --lazy fast
  $R/$s/validation.jsonl --lengths 8k --cases 2 --families passkey --lazy fast
  $R/$s/validation.jsonl --lengths 1k --cases 12 --families lookalike,twohop,json,table,followup --lazy fast
  $R/$s/validation.jsonl --lengths 1k --cases 60 --families twohop --lazy fast
  $R/$s/validation.jsonl --lengths 8k --cases 1 --lazy none
  $R/$s/validation.jsonl --lengths 8k --cases 5 --families passkey --lazy none
  $R/$s/validation.jsonl --lengths 8k --families scored --lazy none
  $R/$s/validation.jsonl --lengths 2k --families scored --lazy none --reference --right-only
  $R/$s/validation.jsonl --lengths 1k --cases 60 --families twohop --lazy none --reference --right-only
  $R/$s/validation_512.jsonl --lengths 512 --cases 4 --lazy none
  # stock and the 8-bit reference at 1k-8k (Qwen) and 1k-2k (Gemma 3)
  $R/$q/validation_stock_1k_8k.jsonl --families scored --lengths 1k --cases 1 --lazy none --reference
  $R/$q/validation_stock_1k_8k.jsonl --families scored --lengths 2k --cases 1 --lazy none
  $R/$q/validation_stock_1k_8k.jsonl --families scored --lengths 1k,2k,4k --cases 1 --lazy none --reference
  $R/$q/validation_stock_1k_8k.jsonl --families lookalike --lengths 4k --cases 2 --lazy none --reference
  $R/$q/validation_stock_1k_8k.jsonl --families scored --lengths 8k --cases 1 --lazy none
  $R/$g/validation.jsonl --families scored --lengths 1k,2k --cases 2 --lazy none --reference
EOF
  table bench <<EOF
  # stock beside the presets (no --lazy: every preset that prunes on the model)
  $R/$s/bench_2k_8k_mass.json -l 2k,8k --lazy default,gentle -n 16
  $R/$s/bench_2k.json         -l 2k --lazy fast -n 16
  $R/$s/bench_8k.json         -l 8k --lazy fast --gen-len 64
  $R/$q/bench_2k_8k_mass.json -l 2k,8k -n 16
  $R/$g/bench_2k_8k_mass.json -l 2k,8k -n 16
EOF
  $python benchmarks/tables.py card $R/*/card.json
}

# ---- calibration: the records each shipped preset's `how` cites (lazymlx/engine/calibrated/) --

# JOURNAL LENGTHS FAMILIES CASES [OPTIONS...]: its model's calibration cases into JOURNAL,
# continued, beside stock and the references (without --candidates: calibrate's own list,
# today's); the choice is printed, not saved
calibrate() {
  local m
  m="$(model_of $1)"
  $lazymlx calibrate -m $m --baselines $B/$m.json --no-save --journal $1 --resume --lengths $2 \
    --families $3 --cases $4 "${@:5}"
}

# JOURNAL --no-save|--ship: the choice re-decided from the journal, printed or shipped
decide() {
  $lazymlx calibrate -m "$(model_of $1)" --records $1 $2
}

calibration() {
  local S4="0.4@24% 0.4@57%" S5="0.5@24% 0.3@57%" M8="mass0.8 1@24% 1@57% least0.25"
  local F95="mass0.95 1@24% 1@57% least0.02 sparse" # Qwen's and Gemma 3's fast
  local QM="mass0.9 1@24% 1@57% least0.02 sparse,$F95,mass0.98 1@24% 1@57% least0.02 sparse"
  QM="$QM,mass0.99 1@24% 1@57% least0.02 sparse,mass0.95 1@40% 1@67% sparse"
  QM="$QM,mass0.98 1@40% 1@67% sparse,$S4 sparse,$M8 dense0.04 sparse"
  local GS="0.2@67%,0.3@57%,0.6@24% 0.3@57%,$S5,$S4,0.6@24% 0.2@50%,$S5 sparse,$S4 sparse"
  table calibrate --candidates <<EOF
  # Qwen2.5-Coder's planted-fact families, in the order the cases were added (2026-11-25 and 26)
  $R/$q/calibration.jsonl 1k scored 1
  $R/$q/calibration.jsonl 4k lookalike 4 --no-reference
  $R/$q/calibration.jsonl 4k lookalike 7 --no-reference | $S4,$S5,0.2@50%,0.3@57%,0.2@67%
  $R/$q/calibration.jsonl 1k scored 1                   | $S4 sparse
  $R/$q/calibration.jsonl 1k passkey,lookalike 2        | $S4 sparse
  $R/$q/calibration.jsonl 4k lookalike 7 --no-reference | $S4 sparse
  $R/$q/calibration.jsonl 2k followup,chat 3 --no-reference  | $S4,$S4 sparse
  $R/$q/calibration.jsonl 4k lookalike 15 --no-reference     | $S4 sparse,$S5,0.2@67%,$S5 sparse
  $R/$q/calibration.jsonl 2k followup 8 --no-reference       | $S4,$S4 sparse,$S5,$S5 sparse
  $R/$q/calibration.jsonl 2k chat 3 --no-reference           | $S5,$S5 sparse
  $R/$q/calibration.jsonl 1k scored 1                   | $S5 sparse
  $R/$q/calibration.jsonl 1k passkey,lookalike 2        | $S5 sparse
EOF
  decide $R/$q/calibration.jsonl --no-save # fast: 0.4@24% 0.4@57% sparse
  table calibrate --candidates <<EOF
  # Qwen's open-ended families at 512-8k (issue 53): no schedule keeps them
  $R/$q/calibration_open.jsonl 512,1k,2k summary,question,second-turn,completion 2 | $S5 sparse,$S5 min512 sparse,$S5 min1024 sparse
  $R/$q/calibration_open.jsonl 2k summary,question,second-turn,completion 2 | $S5 min1024 sparse,$S5 min1024,0.7@24% 0.3@57% min1024 sparse
  $R/$q/calibration_open.jsonl 2k summary,question 2             | 0.3@57% min1024 sparse,0.2@67% min1024 sparse
  $R/$q/calibration_open.jsonl 4k summary,question 1             | $S5 min1024 sparse
  $R/$q/calibration_open.jsonl 8k summary,question,completion 1  | $S5 min1024 sparse
  $R/$q/calibration_open.jsonl 8k summary,question,completion 1  | 0.3@57% min1024 sparse,0.2@67% min1024 sparse,0.5@57% min1024 sparse
EOF
  decide $R/$q/calibration_open.jsonl --no-save # no candidate, behind no gate
  table calibrate --candidates <<EOF
  # keeping by attention mass, judged on gold answers and stock's NLL beside the 4-bit reference
  # (2026-11-28), one case a scored family at 2k, then at 1k and 2k (2026-11-29): the shipped
  # default, gentle and fast (their how cites these journals). The search stops at the first
  # candidate that meets the bar, so SmolLM2's are named in turn; a default that fell below the
  # bar at 1k goes on behind the gate that runs 1k prompts whole (Qwen from1536, Gemma from1792)
  $R/$q/calibration_mass.jsonl 2k    scored 1 | $QM
  $R/$q/calibration_mass.jsonl 1k,2k scored 1 | $F95,$M8 dense0.04 sparse
  $R/$s/calibration_mass.jsonl 2k    scored 1 | $M8 dense0.02 sparse,$M8 dense0.04 sparse,mass0.8 1@24% 1@57% least0.625 dense0.04 sparse,$F95,$S5 sparse
  $R/$s/calibration_mass.jsonl 2k    scored 1 | $M8 dense0.04 sparse,$M8 dense0.03 sparse
  $R/$s/calibration_mass.jsonl 2k    scored 1 | $S5 sparse
  $R/$s/calibration_mass.jsonl 1k,2k scored 1 | $S5 sparse,$M8 dense0.04 sparse
  $R/$s/calibration_mass.jsonl 1k,2k scored 1 | $S5 sparse
  $R/$g/calibration_mass.jsonl 2k    scored 1 | $F95,$M8 dense0.04 sparse,$M8 dense0.03 sparse,$M8 dense0.02 sparse,$S5 sparse
  $R/$g/calibration_mass.jsonl 2k    scored 1 | $S4 sparse,$S5 sparse
  $R/$g/calibration_mass.jsonl 1k,2k scored 1 | $F95,$M8 dense0.03 sparse
EOF
  local m
  for m in qwen2.5-coder-0.5b smollm2-135m gemma3-270m; do
    decide $R/$m/calibration_mass.jsonl --ship
  done
  table calibrate --candidates <<EOF
  # the built-in gentle rule (0.2@67%), SmolLM2's default until 2026-11-28, on the open families
  # (at 4k and in second turns at 2k: benchmarks/studies/2026-11-28-smollm2-runs-whole/)
  $R/$s/calibration_open.jsonl 512,1k,2k summary,question,second-turn,completion 2 | 0.2@67%,0.2@67% min512,0.2@67% min1024
  # Gemma 3's schedules on planted facts at 1k-2k (2026-11-26; the frontier step plots them);
  # the rule they chose, its default until 2026-11-28: benchmarks/studies/2026-11-28-gemma-runs-whole/
  $R/$g/calibration.jsonl 1k scored 3 | $GS
  $R/$g/calibration.jsonl 2k scored 1 | $GS
  $R/$g/calibration.jsonl 2k table 3  | $GS
EOF
}

# ---- frontier: the calibration frontier per model (needs pip install -e ".[plot]") ------------

frontier() {
  $python benchmarks/plot_frontier.py $R/qwen2.5-coder-0.5b/calibration.jsonl \
    --skip default,reference --title "Qwen2.5-Coder-0.5B, calibration" \
    --output $R/qwen2.5-coder-0.5b/frontier.png
  $python benchmarks/plot_frontier.py $R/gemma3-270m/calibration.jsonl --skip reference \
    --title "Gemma 3 270M, calibration, 1k-2k (global-layer pruning)" --output $R/gemma3-270m/frontier.png
}

# ---- cost: what calibrating costs (issue 55) ------------------------------------------------

cost() {
  $python benchmarks/calibration_cost.py > $R/qwen2.5-coder-0.5b/calibration_cost.json
  # a 10-minute budget from scratch; the scratch models folder links the converted model, so the
  # presets it saves land there, not in the user's; stderr has the progress and the frontier
  mkdir -p /tmp/calib/models
  ln -sf ~/.cache/lazymlx/models/qwen2.5-coder-0.5b* /tmp/calib/models/
  LAZYMLX_MODELS_DIR=/tmp/calib/models $lazymlx calibrate -m qwen2.5-coder-0.5b --minutes 10 \
    --journal /tmp/calib/journal.jsonl -o json > $R/qwen2.5-coder-0.5b/calibrate_minutes10.json \
    2> $R/qwen2.5-coder-0.5b/calibrate_minutes10.txt
}

# ---- kept: a question over a kept document, with and without idle completion ----------------

kept() {
  local k=benchmarks/results/kept
  $python benchmarks/kept_context.py --model qwen2.5-coder-0.5b --lengths 2k --cases 2 --lazy fast \
    --output $k/qwen2.5-coder-0.5b_2k.json
  $python benchmarks/kept_context.py --model qwen2.5-coder-0.5b --lengths 8k --cases 1 --lazy fast \
    --output $k/qwen2.5-coder-0.5b_8k.json
  $python benchmarks/kept_context.py --model smollm2-135m --lengths 2k --cases 2 --lazy gentle,fast \
    --output $k/smollm2-135m_2k.json
  $python benchmarks/kept_context.py --model smollm2-135m --lengths 8k --cases 1 --lazy gentle,fast \
    --output $k/smollm2-135m_8k.json
  $python benchmarks/kept_context.py --model smollm2-135m --lengths 8k --cases 1 --lazy gentle,fast \
    --policies fill --question-repeats 3 --output $k/smollm2-135m_8k_repeats.json
  $python benchmarks/tables.py kept $k/*.json
}

# ---- ranks: tensor parallelism over 3 local ranks (ring backend over loopback) --------------

ranks() {
  $python benchmarks/distributed.py --prompt-len 2k --groups 1,3 --gen-len 8 --short 4 --short-tokens 8 \
    --output benchmarks/results/distributed_2k.json
}

# ---- context: context parallelism, real chains on this machine and the modelled TTFT --------

context() {
  local c=benchmarks/results
  local old="0.5@24% 0.3@57% min1024 sparse" # Qwen's default until it ran whole
  $python benchmarks/context_parallel.py chain -m smollm2-135m -l 1k --lazy gentle --ranks 2,3 \
    --output $c/cp_chain_smollm2_1k_overlap.json
  $python benchmarks/context_parallel.py chain -m smollm2-135m -l 4k --lazy gentle --ranks 2,3 \
    --runs 1 --output $c/cp_chain_smollm2_4k_default.json
  $python benchmarks/context_parallel.py chain -m smollm2-135m -l 2k --lazy gentle --ranks 2 \
    --output $c/cp_chain_smollm2_2k_default.json
  $python benchmarks/context_parallel.py chain -m smollm2-135m -l 2k --lazy keep-all --ranks 2 \
    --runs 1 --output $c/cp_chain_smollm2_2k_keep-all.json
  $python benchmarks/context_parallel.py chain -m qwen2.5-coder-0.5b -l 2k --lazy "$old" --ranks 2 \
    --runs 1 --output $c/cp_chain_qwen_2k_default.json
  $python benchmarks/context_parallel.py chain -m qwen2.5-coder-0.5b -l 2k --lazy keep-all --ranks 2 \
    --runs 1 --output $c/cp_chain_qwen_2k_keep-all.json
  $python benchmarks/context_parallel.py masks -m qwen2.5-coder-0.5b -l 8k --lazy "$old" \
    --output $c/cp_masks_qwen_8k.json
  $python benchmarks/context_parallel.py masks -m qwen2.5-coder-0.5b -l 8k --lazy fast \
    --output $c/cp_masks_qwen_8k_fast.json
  # both replay the block's fit timed here on 2026-11-27 (cp_fit_qwen.json); without --fit the
  # script times the block again and writes its fit into the output
  $python benchmarks/context_parallel.py model -m qwen2.5-coder-0.5b --lazy fast \
    --masks $c/cp_masks_qwen_8k_fast.json --lengths 8k,32k --ranks 2,3,4 --fit $c/cp_fit_qwen.json \
    --output $c/cp_model_qwen_fast.json
  $python benchmarks/context_parallel.py model -m qwen2.5-coder-0.5b --lazy "$old" \
    --masks $c/cp_masks_qwen_8k.json --lengths 8k,32k --ranks 2,3,4 --fit $c/cp_fit_qwen.json \
    --output $c/cp_model_qwen.json
  $python benchmarks/context_parallel.py masks -m smollm2-135m -l 4k --lazy gentle \
    --output $c/cp_masks_smollm2_4k.json
  $python benchmarks/context_parallel.py imbalance -m smollm2-135m --masks $c/cp_masks_smollm2_4k.json \
    --ranks 2,3,4 --output $c/cp_imbalance_smollm2_4k.json
}

# ---- context_cores_stage: .cpurun/, what context_cores needs on the GPU machine's CPU ---------

context_cores_stage() {
  bash benchmarks/gpu/prepare_cpu_ranks.sh
}

# ---- context_cores: the chain's wall clock on 16 cores of their own (the GPU machine's CPU) -
# There, with .cpurun carried (context_cores_stage); rename its $OUT/cp_cpu_ranks_2k_keep-all.json
# to cp_cpu_ranks_2k_keep-all_gpu_host.json.

context_cores() {
  bash benchmarks/gpu/cpu_ranks.sh 2k,4k,8k
}

# ---- blas: OpenBLAS against MLX's bundled reference BLAS (stock mlx-lm only) ----------------

blas() {
  $python benchmarks/ttft_blas.py --prompt-len 1024 # it writes benchmarks/results/ttft_blas_1024.json
}

# ---- gguf: the GGUF import against llama.cpp (pip install -e ".[verify]" first) -------------

gguf() {
  local m
  for m in smollm2-135m qwen2.5-coder-0.5b gemma3-270m; do
    $python benchmarks/verify_gguf.py --model $m --output benchmarks/results/verify/$m.json
  done
  $python benchmarks/verify_gguf.py --table benchmarks/results/verify/*.json
}

# ---- gpu: random-weight Llama shapes on an NVIDIA GPU (MLX's CUDA backend), results in $OUT ---
# Stage with ../shared/tools/gpu/prepare.sh, then on the device `bash .gpu1/setup.sh; bash
# .gpu2/setup.sh`. The files of 2026-11-26 and 27 call `gentle` default, and Qwen's schedules
# then (0.5@24% 0.3@57% min1024 sparse or 0.5@24% 0.3@57% sparse, and 0.4@24% 0.4@57% sparse)
# qwen2.5-coder-0.5b:default and :fast; the modes below are those rules in today's names, as
# tables.py prints them.

gpu() {
  local out=${OUT:?set OUT to the folder the results go to} S5="0.5@24% 0.3@57%"
  $gpu_python benchmarks/gpu/llama_shapes.py --shapes 1b,8b --lengths 8k,32k \
    --modes "baseline,gentle,fast,$S5 min1024 sparse" --gen-len 128 --repeats 2 \
    --output $out/llama_shapes_h200_pipelined_2026-11-27.json
  $gpu_python benchmarks/gpu/llama_shapes.py --bits 4 --shapes 8b,1b --lengths 8k,32k \
    --modes "baseline,gentle,$S5 min1024 sparse" --gen-len 128 --repeats 2 \
    --output $out/llama_shapes_4bit_h200_2026-11-27.json
}

# ---- gpu_mass: the mass rule's ranking against top-k's at the same count, H200 (2026-11-28) ---
# Its sort, cumulative sum and one host sync per prune, and Qwen's `fast` mass rule.

gpu_mass() {
  local out=${OUT:?set OUT to the folder the results go to}
  local modes="baseline,0.5@24% 0.3@57% sparse,mass0.999 0.5@24% 0.3@57% sparse"
  $gpu_python benchmarks/gpu/llama_shapes.py --shapes 8b,1b --lengths 8k,32k \
    --modes "$modes,qwen2.5-coder-0.5b:fast" --gen-len 8 --repeats 3 \
    --output $out/llama_shapes_mass_h200_2026-11-28.json
  $gpu_python benchmarks/gpu/llama_shapes.py --shapes 8b --lengths 8k,32k --modes "$modes" \
    --gen-len 8 --repeats 5 --output $out/llama_shapes_mass_8b_r5_h200_2026-11-28.json
}

# ---- gpu_h100: decode, and a question over a kept context, on an H100 (2026-11-26 and 27) ----
# Before the prompt step kept a chunk in flight (dc1d201); the kept context on 2026-11-26 after
# masked attention was written out (Qwen's default then, 0.4@24% 0.4@57%), and on 2026-11-27 at
# dc1d201.

gpu_h100() {
  local out=${OUT:?set OUT to the folder the results go to} S4="0.4@24% 0.4@57%" S5="0.5@24% 0.3@57%"
  $gpu_python benchmarks/gpu/llama_shapes.py --shapes 8b,1b --lengths 8k,32k \
    --modes "baseline,gentle,fast,$S5 sparse,$S4 sparse" --gen-len 128 --repeats 2 \
    --output $out/llama_shapes_h100_2026-11-27.json
  $gpu_python benchmarks/gpu/llama_shapes.py --shapes 8b --lengths 8k,32k \
    --modes "baseline,gentle,$S5 sparse,$S4 sparse" --gen-len 128 --repeats 3 \
    --output $out/llama_shapes_8b_h100_r3_2026-11-27.json
  $gpu_python benchmarks/gpu/kept_shapes.py --shapes 8b --lengths 8k,32k --lazy "$S4" --repeats 1 \
    --output $out/kept_shapes_8b_h100.json
  $gpu_python benchmarks/gpu/kept_shapes.py --shapes 8b --lengths 8k,32k --lazy "$S5 sparse" \
    --repeats 1 --output $out/kept_shapes_8b_h100_2026-11-27.json
}

# ---- real_prompts: the built-in default and the workload (2026-12-02, issue 74) -------------
# The point rules on the real-document families (and Qwen's scored ones at 1k and 2k) beside
# stock and both references; each calibration_point.jsonl began as its model's
# calibration_mass.jsonl stock and reference rows (so only the new rules ran).
POINT="mass0.8 1@24% 1@67% least0.25 point0.5 sparse from256"
real_prompts() {
  for m in qwen2.5-coder-0.5b smollm2-135m; do
    $lazymlx calibrate -m $m --baselines $B/$m.json --no-save --lengths 2k --families real --cases 2 \
      --journal $R/$m/calibration_point.jsonl --resume -o json > /dev/null \
      --candidates "mass0.8 1@24% 1@57% least0.25 point0.5 sparse from256,mass0.8 1@24% 1@57% least0.15 point0.5 sparse from256,mass0.9 1@24% 1@57% least0.3 point0.5 sparse from256,$POINT"
  done
  local m=qwen2.5-coder-0.5b
  $lazymlx calibrate -m $m --baselines $B/$m.json --no-save --lengths 1k,2k --families scored --cases 1 \
    --journal $R/$m/calibration_point.jsonl --resume --candidates "$POINT" -o json > /dev/null
  # the default and gentle; the fast the calibration step shipped stays (it prunes every
  # prompt): this journal never ran it, so --ship keeps it
  $lazymlx calibrate -m $m --records $R/$m/calibration_point.jsonl --ship
  # the held-out family on its validation split, and Qwen's shipped default on its own
  $lazymlx eval -m gemma3-270m --split validation --lengths 2k --cases 1 --lazy "$POINT" --reference \
    --families real,passkey,needle-docs,json,summary,question,docstring,completion \
    --journal $R/gemma3-270m/validation_point.jsonl --resume -o json > /dev/null
  for families in real scored; do  # validation_point.jsonl began as validation_mass_2k's stock rows
    $lazymlx eval -m $m --split validation --baselines $B/$m.json --families $families --lengths 2k \
      --cases 1 --lazy default --reference --journal $R/$m/validation_point.jsonl --resume -o json > /dev/null
  done
  # the workload: registry Qwen, and Qwen quantized to 4 bits in a folder of its own (no
  # shipped presets: the built-in default)
  $lazymlx bench -m $m -l 2k --prompt workload --lazy default -n 16 -r 1 -o json > $R/$m/bench_workload_2k.json
  $lazymlx bench -m $m -l 8k --prompt real-option,real-function,summary,passkey --lazy default -n 8 -r 1 \
    -o json > $R/$m/bench_workload_8k.json
  local q4=/tmp/qwen2.5-coder-0.5b-4bit
  [ -d $q4 ] || $python -m mlx_lm convert --hf-path ~/.cache/lazymlx/models/$m-fp32 --mlx-path $q4 -q \
    --q-bits 4 --q-group-size 64
  $lazymlx bench -m $q4 -l 2k --prompt workload --lazy default -n 16 -r 1 -o json > $R/$m/bench_workload_4bit_2k.json
}

# ---- harness: RULER's offline tasks through lm-evaluation-harness (issue 75) ----------------

harness() {
  mkdir -p benchmarks/results/harness
  $lazymlx evaluate -m smollm2-135m --tasks niah_single_1 --limit 3 --lazy off,default \
    > benchmarks/results/harness/smollm2_niah_single_1_4k.md
  $lazymlx evaluate -m smollm2-135m --tasks niah_single_1,niah_multikey_2,ruler_vt --lengths 2k --limit 5 \
    --lazy off,default -o json > benchmarks/results/harness/smollm2_ruler_2k.json
  # Qwen2.5-Coder: stock and its default at 2k, the 4-bit reference beside (its stock and its
  # default: a folder of its own, the built-in rule), 4k, and every preset on variable tracking
  local q=qwen2.5-coder-0.5b h=benchmarks/results/harness q4=/tmp/qwen2.5-coder-0.5b-4bit
  $lazymlx evaluate -m $q --tasks niah_single_1,niah_multikey_2,ruler_vt --lengths 2k --limit 5 \
    --lazy off,default --use-cache /tmp/h_qwen2k -o json > $h/qwen_ruler_2k.json
  $lazymlx evaluate -m $q --tasks ruler_vt --lengths 2k --limit 5 --lazy off,default,gentle,fast \
    --use-cache /tmp/h_qwen2k -o json > $h/qwen_ruler_vt_presets_2k.json
  [ -d $q4 ] || $python -m mlx_lm convert --hf-path ~/.cache/lazymlx/models/$q-fp32 --mlx-path $q4 -q \
    --q-bits 4 --q-group-size 64
  $lazymlx evaluate -m $q4 --tasks niah_single_1,niah_multikey_2,ruler_vt --lengths 2k --limit 5 \
    --lazy off,default --use-cache /tmp/h_qwen4b2k \
    -o json > $h/qwen_4bit_ruler_2k.json
  $lazymlx evaluate -m $q --tasks niah_single_1,niah_multikey_2 --lengths 4k --limit 5 --lazy off,default \
    --use-cache /tmp/h_qwen4k -o json > $h/qwen_ruler_4k.json
  $lazymlx evaluate -m $q --tasks ruler_vt --lengths 4k --limit 5 --lazy off,default \
    --use-cache /tmp/h_qwen4kvt -o json > $h/qwen_ruler_vt_4k.json
  # SmolLM2's 4-bit reference (a folder of its own: its default there is the built-in rule)
  local s4=/tmp/smollm2-135m-4bit
  [ -d $s4 ] || $python -m mlx_lm convert --hf-path ~/.cache/lazymlx/models/smollm2-135m-fp32 \
    --mlx-path $s4 -q --q-bits 4 --q-group-size 64
  $lazymlx evaluate -m $s4 --tasks niah_single_1,niah_multikey_2,ruler_vt --lengths 2k --limit 5 \
    --lazy off,default --use-cache /tmp/h_smol4b2k -o json > $h/smollm2_4bit_ruler_2k.json
}

# ---- tables: benchmarks/README.md's tables again, from the files above -------------------------

tables() {
  $python benchmarks/tables.py card $R/*/card.json
  $python benchmarks/tables.py gpu benchmarks/results/gpu/llama_shapes_h200_pipelined_2026-11-27.json \
    benchmarks/results/gpu/llama_shapes_4bit_h200_2026-11-27.json
  $python benchmarks/tables.py gpukept benchmarks/results/gpu/kept_shapes_8b_h100_2026-11-27.json
  local h=benchmarks/results/harness
  $python benchmarks/tables.py harness $h/smollm2_ruler_2k.json $h/smollm2_4bit_ruler_2k.json \
    $h/qwen_ruler_2k.json $h/qwen_ruler_vt_presets_2k.json $h/qwen_4bit_ruler_2k.json \
    $h/qwen_ruler_4k.json $h/qwen_ruler_vt_4k.json
}

CPU_STEPS="cards calibration real_prompts harness frontier cost kept ranks context blas gguf tables"
OTHER_STEPS="context_cores_stage context_cores gpu gpu_mass gpu_h100"
if [[ ${1-} == -h || ${1-} == --help ]]; then
  sed -n '2,/^set -e/{/^#/s/^# \{0,1\}//p;}' $self
  for steps in "CPU steps, in order (no step named: all of them)|$CPU_STEPS" \
    "on other machines|$OTHER_STEPS"; do
    echo && echo "${steps%%|*}:"
    for step in ${steps#*|}; do
      sed -n "s/^# ---- $step: \(.*[^ -]\)[ -]*$/  $step: \1/p" $self
    done
  done
  exit 0
fi
[ $# -gt 0 ] || set -- $CPU_STEPS
for step in "$@"; do
  case " $CPU_STEPS $OTHER_STEPS " in
    *" $step "*) "$step" ;;
    *) echo "error: no step '$step'; steps: $CPU_STEPS $OTHER_STEPS" >&2 && exit 2 ;;
  esac
done
