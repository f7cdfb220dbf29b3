#!/usr/bin/env bash
# Every number in benchmarks/README.md and in round 3 of benchmarks/studies/STUDIES.md, in the order they
# were made (run from the repository root after `make setup openblas model`; one job at a time:
# two cores, and parallel timings lie). Round 2's numbers (benchmarks/results/v2/, in the tree up to b4ad181) come from
# this script at commit ed16c62.
set -euo pipefail
cd "$(dirname "$0")/.."
results=benchmarks/results
lazymlx=.venv/bin/lazymlx

# 1. Round 3's studies ran at commit 4470750, with benchmarks/study.py, diagnose.py,
#    denominator_oracle.py and head_ranks.py and the LazyConfig knobs they compared (budgets,
#    masses, floors, segments, head reductions, retrieval heads, shaped revival), which no
#    shipped preset uses and which left the tree after it. To rerun them:
#    `git worktree add ../round3 4470750` and run this section there, uncommented (there
#    doubt.py is still benchmarks/doubt.py). Its steps write $results/studies/, which left the
#    tree after commit 2b0e219 and is read there: `git show 2b0e219:benchmarks/results/studies/FILE`.
#
#    What it made: the calibration split's baselines (stock mlx-lm, cached in the committed
#    lazymlx/evals/baselines/smollm2-135m.json) and the studies that chose the default and `fast`
#    (calibration cases only; benchmarks/studies/STUDIES.md, round 3). The first study ran before the
#    baselines were cached, so without --right-only; it was stopped after 6 cases.
#    Beside them, round 2's default (prompt-step revival off, as it shipped), saved as v2-default.
# .venv/bin/python -c "from dataclasses import replace; from lazymlx.engine.presets import save_preset
# from lazymlx.engine.config import LazyConfig
# v2 = LazyConfig(schedule=((0.24, 0.4), (0.57, 0.4)), budgets=((0.24, 2048),), floors=((0.24, 0.25),),
#                 keep_first=4, window=8, pool=12, decode='revive', min_prompt=256, prompt_revive=0)
# save_preset('smollm2-135m', 'v2-default', v2, {'from': 'round 2 default, ed16c62'})"
# $lazymlx eval --split calibration --lengths 1k,2k,4k --lazy v2-default \
#   --baselines lazymlx/evals/baselines/smollm2-135m.json --journal $results/eval/calibration_v2_default.jsonl \
#   --output json > /dev/null
# .venv/bin/python benchmarks/diagnose.py --families needle-docs,needle-man,needle-pkgdoc --lengths 1k \
#   --seeds 2 --lazy v2-default --output $results/studies/diagnose_1k.json
# .venv/bin/python benchmarks/study.py --study first --lengths 1k --journal $results/studies/first_1k_partial.jsonl
# study --study second --lengths 1k --journal $results/studies/second_1k.jsonl
# study --study third --lengths 1k --journal $results/studies/third_1k_2k.jsonl  # stopped before chat
# study --study fourth --lengths 1k --families chat --journal $results/studies/fourth_1k_4k.jsonl
# study --study fourth --lengths 2k,4k --journal $results/studies/fourth_1k_4k.jsonl
# study --study fifth --lengths 1k --families chat,followup --journal $results/studies/fifth_1k.jsonl
# study --study sixth --lengths 1k --journal $results/studies/sixth_1k.jsonl
# study --study seventh --lengths 4k --families needle-man,needle-pkgdoc,passkey,code \
#   --journal $results/studies/seventh_4k.jsonl
# study --study eighth --lengths 1k,2k,4k --journal $results/studies/eighth_1k_4k.jsonl
# .venv/bin/python benchmarks/study.py --study ninth --lengths 1k,2k --families freeform-text,freeform-chat \
#   --journal $results/studies/ninth_1k_2k.jsonl
# .venv/bin/python benchmarks/diagnose.py --cases table:1k:2,table:2k:1,twohop:1k:1,needle-pkgdoc:1k:2 \
#   --lazy default --output $results/studies/diagnose_default.json
# study --study tenth --lengths 1k --journal $results/studies/tenth_1k.jsonl  # stopped after 1k
# study --study eleventh --lengths 1k,2k,4k --journal $results/studies/eleventh_1k_4k.jsonl
# .venv/bin/python benchmarks/study.py --study twelfth --lengths 1k,2k --families chat,freeform-chat \
#   --journal $results/studies/twelfth_1k_2k.jsonl
# (the twelfth scored 4 chat answers only, the sixteenth and the seventeenth's first run five families: no point on a frontier of every family)
# study --study thirteenth --lengths 1k,2k,4k --journal $results/studies/thirteenth_1k_4k.jsonl  # stopped in 2k
# study --study fourteenth --lengths 1k --journal $results/studies/fourteenth_1k_4k.jsonl
# study --study fourteenth --only "0.3@57%, sparse, past template (0.70)" --lengths 2k,4k \
#   --journal $results/studies/fourteenth_1k_4k.jsonl
# study --study fifteenth --lengths 1k --journal $results/studies/fifteenth_1k.jsonl  # stopped after 13 cases
# study --study sixteenth --lengths 1k --cases 12 --families lookalike,twohop,json,table,followup \
#   --journal $results/studies/sixteenth_1k.jsonl
# .venv/bin/python benchmarks/diagnose.py --cases twohop:1k:5,twohop:1k:7,twohop:1k:8,twohop:1k:1 \
#   --lazy sparse --output $results/studies/diagnose_twohop_1k.json
# study --study seventeenth --lengths 1k --cases 12 --families lookalike,twohop,json,table,followup \
#   --journal $results/studies/seventeenth_1k.jsonl
# then every family: the eight not widened at 1k, and all at 2k and 4k (the default since)
# study --study seventeenth --lengths 1k \
#   --families passkey,needle-docs,needle-man,needle-pkgdoc,vartrack,code,kept,chat \
#   --journal $results/studies/seventeenth_1k_4k.jsonl
# study --study seventeenth --lengths 2k,4k --journal $results/studies/seventeenth_1k_4k.jsonl
# the eighteenth: an oracle for the sixteenth's first lead (the dropped tokens' softmax share)
# .venv/bin/python benchmarks/denominator_oracle.py --cases twohop:1k:1,twohop:1k:5,twohop:1k:7,twohop:1k:8 \
#   --lazy sparse --output $results/studies/denominator_oracle_1k.json
# the nineteenth: retrieval heads (which heads rank the asked fact highest), then fast with the one found
# .venv/bin/python benchmarks/head_ranks.py --lengths 1k --seeds 0,1,2,3 --lazy default \
#   --output $results/studies/head_ranks_1k.json
# study --study nineteenth --lengths 1k --journal $results/studies/nineteenth_1k.jsonl
# study --study nineteenth --lengths 2k --journal $results/studies/nineteenth_2k.jsonl
# the twentieth: decode revival shaped as the prompt step's pick (pool), on the two-hop widened
# to 36 cases at 1k and 12 at 2k (the default beside it), then on every other calibration family
# study --study twentieth --lengths 1k --cases 36 --families twohop --journal $results/studies/twentieth_twohop.jsonl
# study --study twentieth --lengths 2k --cases 12 --families twohop --journal $results/studies/twentieth_twohop.jsonl
# shaped="0.3@57%, revive shaped, past template (0.70)"
# study --study twentieth --only "$shaped" --lengths 1k --cases 12 --families lookalike,json,table,followup \
#   --journal $results/studies/twentieth_1k_4k.jsonl
# study --study twentieth --only "$shaped" --lengths 1k \
#   --families passkey,needle-docs,needle-man,needle-pkgdoc,vartrack,code,kept,chat \
#   --journal $results/studies/twentieth_1k_4k.jsonl
# study --study twentieth --only "$shaped" --lengths 2k,4k --journal $results/studies/twentieth_1k_4k.jsonl
# the twenty-first: larger shares and later cuts on the widened two-hop, then the later cut on the rest
# study --study twenty-first --lengths 1k --cases 36 --families twohop --journal $results/studies/twentyfirst_twohop.jsonl
# study --study twenty-first --lengths 2k --cases 12 --families twohop --journal $results/studies/twentyfirst_twohop.jsonl
# later="0.2@67%, revive, past template (0.74)"
# study --study twenty-first --only "$later" --lengths 1k --cases 12 --families lookalike,json,table,followup \
#   --journal $results/studies/twentyfirst_1k_4k.jsonl
# study --study twenty-first --only "$later" --lengths 1k \
#   --families passkey,needle-docs,needle-man,needle-pkgdoc,vartrack,code,kept,chat \
#   --journal $results/studies/twentyfirst_1k_4k.jsonl
# study --study twenty-first --only "$later" --lengths 2k,4k --journal $results/studies/twentyfirst_1k_4k.jsonl
# study --study twenty-first --only "0.3@67%, revive, past template (0.77)" --lengths 1k,2k,4k --families chat \
#   --journal $results/studies/twentyfirst_chat.jsonl
# the twenty-second: the chat family widened (the later cut's one loss outside the two-hop)
# study --study twenty-second --lengths 1k --cases 36 --families chat --journal $results/studies/twentysecond_chat.jsonl
# study --study twenty-second --only "0.3@57%, revive, past template (0.70)" --only "$later" \
#   --lengths 2k --cases 12 --families chat --journal $results/studies/twentysecond_chat.jsonl --resume
# the default's calibration losses, diagnosed; then whole sentences (the twenty-third) on the two
# families below the bar, and #32 diagnosed at that config
# diagnose() { .venv/bin/python benchmarks/diagnose.py "$@"; }
# diagnose --cases twohop:1k:8,twohop:1k:32 --lazy default --output $results/studies/diagnose_twohop_067_1k.json
# diagnose --cases chat:1k:2,chat:1k:9 --lazy default --output $results/studies/diagnose_chat_1k.json
# segments="0.2@67%, revive, past template, segments 16 (0.74)"
# study --study twenty-third --only "$segments" --lengths 1k --cases 36 --families twohop \
#   --journal $results/studies/twentythird_segments.jsonl
# study --study twenty-third --only "$segments" --lengths 2k --cases 12 --families twohop \
#   --journal $results/studies/twentythird_segments.jsonl --resume
# study --study twenty-third --only "$segments" --lengths 1k --cases 36 --families chat \
#   --journal $results/studies/twentythird_segments.jsonl --resume
# diagnose --cases twohop:1k:32 --config "twenty-third/$segments" \
#   --output $results/studies/diagnose_twohop_segments_1k.json
# the twenty-fourth: every calibration family at 512 tokens (the threshold min_prompt), stock beside
# .venv/bin/python benchmarks/study.py --study twenty-fourth --lengths 512 --cases 4 \
#   --journal $results/studies/twentyfourth_512.jsonl
# the twenty-fifth: the free-form families at 512 and 1k, 24 cases each (min_prompt by agreement)
# .venv/bin/python benchmarks/study.py --study twenty-fifth --families freeform --lengths 512,1k \
#   --cases 24 --journal $results/studies/twentyfifth_freeform.jsonl
# .venv/bin/python benchmarks/tables.py freeform $results/studies/twentyfifth_freeform.jsonl
# the twenty-sixth: the default on the calibration passkey at 8k, a case at each depth
# .venv/bin/python benchmarks/study.py --study twenty-sixth --families passkey --lengths 8k --cases 5 \
#   --right-only --journal $results/studies/twentysixth_8k.jsonl
# stock's margin on the calibration two-hops it answers right (a diagnosis, no knob)
# diagnose --cases twohop:1k:1,twohop:1k:5,twohop:1k:7,twohop:1k:8,twohop:1k:18,twohop:1k:31,twohop:1k:32,twohop:2k:5,twohop:2k:8,twohop:2k:10,twohop:512:1 \
#   --lazy default --output $results/studies/diagnose_twohop_margins.json
# the preset's own lead where it parts from stock (decides whether a doubt gate is built: no)
# .venv/bin/python benchmarks/studies/doubt.py --lengths 1k --output $results/studies/doubt_1k.json \
#   --families twohop:36,freeform-text:24,lookalike:12,json:12,table:12,passkey,needle-docs,needle-man,needle-pkgdoc,vartrack,code
# .venv/bin/python benchmarks/studies/doubt.py --families twohop:12 --lengths 2k --output $results/studies/doubt_2k.json
# .venv/bin/python benchmarks/studies/doubt.py --summary $results/studies/doubt_1k.json $results/studies/doubt_2k.json
# stale keys for the dropped tokens, an oracle (decides whether it is built: no)
# cases=twohop:1k:1,twohop:1k:5,twohop:1k:7,twohop:1k:8,twohop:1k:18,twohop:1k:31,twohop:1k:32,twohop:2k:5,twohop:2k:8,twohop:2k:10
# for i in $(seq 0 23); do cases=$cases,freeform-text:1k:$i; done
# .venv/bin/python benchmarks/denominator_oracle.py --cases $cases --lazy default --modes stale \
#   --output $results/studies/stale_oracle.json
# .venv/bin/python benchmarks/denominator_oracle.py --summary $results/studies/stale_oracle.json \
#   --engine $results/studies/doubt_1k.json $results/studies/doubt_2k.json
# .venv/bin/python benchmarks/plot_frontier.py $(ls $results/studies/*.jsonl | grep -v 'twelfth\|sixteenth\|seventeenth_1k\.jsonl\|twohop\|_chat\|twentythird\|twentyfourth\|twentyfifth\|twentysixth') \
#   $results/eval/calibration_v2_default.jsonl --output $results/frontier.png
#
# 2. The shipped presets on the validation split (seeds and documents no study saw), the
#    baseline run beside them in the same run (the first time; later runs read it from the
#    committed cache and report no TTFT ratio). The default before the fourteenth study
#    (0.6@24% 0.3@57%) ran the same commands; its rows, with the baselines timed beside them,
#    moved to validation_superseded_default.jsonl when 0.3@57% replaced it, and the new
#    default ran over the cached baselines (so the TTFT ratios come from step 3). `fast`'s chat
#    rows were run again when past_template joined the presets (it changes chat turns only).
#    When decode revival joined the default (seventeenth study), the sparse default's rows (with
#    the baselines) moved to validation_round3_sparse_default.jsonl and the default ran again
#    over the cached baselines, each length with --resume.
validate() { $lazymlx eval --split validation --baselines lazymlx/evals/baselines/smollm2-135m.json \
  --journal $results/eval/validation.jsonl --output json "$@" > /dev/null; }
validate --lengths 1k --lazy default,fast
validate --lengths 2k --cases 2 --lazy default,fast
validate --lengths 4k --cases 1 --lazy default,fast
# then the rest of the suite's 2k and 4k cases (4 and 2 a family), going on from the journal
validate --lengths 2k --lazy default,fast --resume
validate --lengths 4k --lazy default,fast --resume
# at 8k the superseded default ran 8 families chosen before any result (passkey, lookalike,
# needle-man, json, kept, followup, code, chat); stock answered only the passkey right, the one
# case that can count as kept, so the current default ran that one (an 8k case takes 3 minutes)
validate --lengths 8k --cases 1 --families passkey --lazy default
# then a second 8k passkey (key at 30% depth), with fast on both
validate --lengths 8k --cases 2 --families passkey --lazy default,fast --resume
# the five families with the fewest baseline-right answers (1-3 each) widened at 1k to 12 cases
# a family, as the sixteenth study widened them on calibration: the >= 90% per-family bar can't
# be judged on 1-3 answers (decided before any widened row was seen; no knob moved after)
validate --lengths 1k --cases 12 --families lookalike,twohop,json,table,followup --lazy default,fast --resume
# the suite's first 8k case of every family (the 7 with no cached baseline run stock beside the
# default; a stock 8k run takes 4-5 minutes here), decided to fill the 8k row the suite defines
validate --lengths 8k --cases 1 --lazy default --resume
# When 0.2@67% replaced 0.3@57% as the default (twenty-second study), the journal moved to
# validation_round3_057_default.jsonl and validation.jsonl kept its baseline and fast rows; the
# new default ran over the cached baselines on the cases stock answers right (the only ones it
# can keep; the same suite as above) and on the free-form ones
validate() { $lazymlx eval --split validation --baselines lazymlx/evals/baselines/smollm2-135m.json \
  --journal $results/eval/validation.jsonl --resume --output json "$@" > /dev/null; }
validate --families scored --right-only --lengths 1k --lazy default
validate --families lookalike,twohop,json,table,followup --cases 12 --right-only --lengths 1k --lazy default
validate --families scored --right-only --lengths 2k --lazy default
validate --families scored --right-only --lengths 4k --lazy default
validate --families passkey --cases 2 --right-only --lengths 8k --lazy default
for length in 1k 2k 4k; do validate --families freeform --lengths $length --lazy default; done
# then free-form at 8k (the suite's 2 cases a family; stock ran beside the second ones, which
# were not cached)
validate --families freeform --lengths 8k --lazy default
# two widenings set down before any of their rows: the 8k passkey to the suite's five depths,
# and the two-hop family at 1k to 60 cases (fast on every case, as before; the default on the
# ones stock answers right)
validate --families passkey --cases 5 --right-only --lengths 8k --lazy default
validate --families twohop --cases 60 --lengths 1k --lazy fast
validate --families twohop --cases 60 --right-only --lengths 1k --lazy default
# the suite's second 8k case of every scored family (set down before its rows: the 8k row to the
# suite's 2 cases a family, 33 cases)
validate --families scored --right-only --lengths 8k --lazy default
.venv/bin/python benchmarks/tables.py eval $results/eval/validation.jsonl
.venv/bin/python benchmarks/tables.py families $results/eval/validation.jsonl

# prompts under 1k tokens: the validation split at 512 (stock beside the default), and
# everyday questions and documentation passages of 64-1,024 tokens, pruned with no threshold
$lazymlx eval --split validation --lengths 512 --cases 4 --lazy default \
  --baselines lazymlx/evals/baselines/smollm2-135m.json --journal $results/eval/validation_512.jsonl
.venv/bin/python benchmarks/tables.py eval $results/eval/validation_512.jsonl
.venv/bin/python benchmarks/short_prompts.py --output $results/short_prompts_067.json

# 3. Speed, memory and the answer at the shipped presets, against stock mlx-lm in one run.
$lazymlx bench --prompt-len 2k --lazy default,fast,sparse --gen-len 64 --repeats 2 --output json > $results/bench_2k.json
$lazymlx bench --prompt-len 8k --lazy default,fast --gen-len 64 --repeats 1 --output json > $results/bench_8k.json
# re-runs after the retrieval-heads change (2k twice, then 8k), the same commands
$lazymlx bench --prompt-len 2k --lazy default,fast,sparse --gen-len 64 --repeats 2 --output json > $results/bench_2k_rerun1.json
$lazymlx bench --prompt-len 2k --lazy default,fast,sparse --gen-len 64 --repeats 2 --output json > $results/bench_2k_rerun2.json
$lazymlx bench --prompt-len 8k --lazy default,fast --gen-len 64 --repeats 1 --output json > $results/bench_8k_rerun.json
# after revive_shaped (stop 31), twice
$lazymlx bench --prompt-len 2k --lazy default,fast --gen-len 64 --repeats 1 --output json > $results/bench_2k_rerun3.json
$lazymlx bench --prompt-len 2k --lazy default,fast --gen-len 64 --repeats 1 --output json > $results/bench_2k_rerun4.json
# at 0.2@67% (the default since the twenty-second study), then 8k again, the default alone
$lazymlx bench --prompt-len 2k --lazy default,fast --gen-len 64 --repeats 2 --output json > $results/bench_2k_067.json
$lazymlx bench --prompt-len 8k --lazy default,fast --gen-len 64 --repeats 1 --output json > $results/bench_8k_067.json
$lazymlx bench --prompt-len 8k --lazy default --gen-len 64 --repeats 1 --output json > $results/bench_8k_067_rerun.json
# later the same day, the engine unchanged: 2k again, then the default alone with three timed rounds
$lazymlx bench --prompt-len 2k --lazy default,fast --gen-len 64 --repeats 2 --output json > $results/bench_2k_067_rerun.json
$lazymlx bench --prompt-len 2k --lazy default --gen-len 64 --repeats 3 --output json > $results/bench_2k_067_rerun2.json
.venv/bin/python benchmarks/tables.py bench $results/bench_2k_067.json $results/bench_8k_067.json

# 4. Tensor parallelism over 3 local ranks (ring backend over loopback); the run at the
#    previous default (0.3@57%) is kept as $results/distributed_2k_057_default.json.
.venv/bin/python benchmarks/distributed.py --prompt-len 2k --groups 1,3 --gen-len 8 --short 4 --short-tokens 8 \
  --output $results/distributed_2k.json

# 5. OpenBLAS against MLX's bundled BLAS (stock mlx-lm only; measured once, engine-independent).
.venv/bin/python benchmarks/ttft_blas.py --prompt-len 1024 > $results/ttft_blas_1024.json

# 6. The registry's three models (2026-11-25): the GGUF import against llama.cpp (pip install -e
#    ".[verify]" first), stock's own accuracy per family and length (the committed baselines of
#    each model), and a kept document asked about with and without idle completion.
for m in smollm2-135m qwen2.5-coder-0.5b gemma3-270m; do
  .venv/bin/python benchmarks/verify_gguf.py --model $m --output $results/verify/$m.json
done
.venv/bin/python benchmarks/verify_gguf.py --table $results/verify/*.json
m=qwen2.5-coder-0.5b
for l in 1k 2k 4k; do
  $lazymlx eval --model $m --split validation --families all --lengths $l --lazy none \
    --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/validation_stock.jsonl \
    --resume --output json > /dev/null
done
$lazymlx eval --model $m --split validation --families all --lengths 8k --cases 1 --lazy none \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/validation_stock.jsonl \
  --resume --output json > /dev/null
.venv/bin/python benchmarks/tables.py accuracy $results/models/$m/validation_stock.jsonl
.venv/bin/python benchmarks/kept_context.py --model $m --lengths 2k --cases 2 --lazy default --output $results/kept/${m}_2k.json
.venv/bin/python benchmarks/kept_context.py --model $m --lengths 8k --cases 1 --output $results/kept/${m}_8k.json
.venv/bin/python benchmarks/kept_context.py --model smollm2-135m --lengths 2k --cases 2 --output $results/kept/smollm2-135m_2k.json
.venv/bin/python benchmarks/kept_context.py --model smollm2-135m --lengths 8k --cases 1 --output $results/kept/smollm2-135m_8k.json
.venv/bin/python benchmarks/tables.py kept $results/kept/*.json
# the multi-turn families after idle completion and without, stock beside (a fresh baseline file)
$lazymlx eval --model $m --split validation --families followup,kept,chat --lengths 1k,2k --cases 2 \
  --lazy default,fast --baselines $results/models/$m/multiturn_baselines.json \
  --journal $results/models/$m/multiturn_validation.jsonl --resume --output json > /dev/null
.venv/bin/python benchmarks/tables.py multiturn $results/models/$m/multiturn_validation.jsonl

# 7. Each registry model's calibration (2026-11-25 and 26): Qwen at 1k, then its look-alikes at
#    4k widened with the candidates still in contention; Gemma at 1k, three cases a family, once
#    its pruning layers were its global ones; the frontier plot per model.
m=qwen2.5-coder-0.5b
$lazymlx calibrate -m $m --lengths 1k --families scored --cases 1 --baselines lazymlx/evals/baselines/$m.json \
  --journal $results/models/$m/calibration.jsonl --no-save
$lazymlx calibrate -m $m --lengths 4k --families lookalike --cases 4 --no-reference --no-save \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration.jsonl --resume
$lazymlx calibrate -m $m --lengths 4k --families lookalike --cases 7 --no-reference --no-save \
  --candidates "0.4@24% 0.4@57%,0.5@24% 0.3@57%,0.2@50%,0.3@57%,0.2@67%" \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration.jsonl --resume
$lazymlx calibrate -m $m --records $results/models/$m/calibration.jsonl --ship
m=gemma3-270m  # after pruning moved to global layers (2026-11-26); before: *_local_layers.jsonl
# Gemma's calibration split (three cases a scored family at 1k, one at 2k, three table cases at
# 2k) for the candidates in $1; section 9 runs it again for the sparse-decode twins.
gemma_calibration() {
  local cases
  for cases in "1k scored 3" "2k scored 1" "2k table 3"; do
    set -- "$1" $cases
    $lazymlx calibrate -m gemma3-270m --lengths $2 --families $3 --cases $4 --no-save --candidates "$1" \
      --baselines lazymlx/evals/baselines/gemma3-270m.json \
      --journal $results/models/gemma3-270m/calibration.jsonl --resume
  done
}
gemma_calibration "0.2@67%,0.3@57%,0.6@24% 0.3@57%,0.5@24% 0.3@57%,0.4@24% 0.4@57%,0.6@24% 0.2@50%"
$lazymlx calibrate -m $m --records $results/models/$m/calibration.jsonl --ship
$lazymlx eval -m $m --split validation --families scored --lengths 1k,2k --cases 2 --lazy default,fast \
  --reference --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/validation.jsonl --resume
$lazymlx bench -m $m -l 2k --lazy default,fast -n 16 -r 1 -o json > $results/models/$m/bench_2k.json
for m in qwen2.5-coder-0.5b gemma3-270m; do
  .venv/bin/python benchmarks/plot_frontier.py $results/models/$m/calibration.jsonl --skip default,reference \
    --title "$m, calibration" --output $results/models/$m/frontier.png
done

# 8. Decode revival on Qwen2.5-Coder (2026-11-26): its chosen schedule with sparse decode on the
#    same 22 calibration cases, shipped when it kept them (equal prefill work, no decode revival),
#    then validated at 1k-8k (stock's answers from the committed cache) and benched beside stock.
#    Before commit 1c7f1be a bare schedule took the default's decode (sparse after this ship):
#    run these at or after it. Sections 6-7, run today, would use the shipped preset, which
#    now decodes sparse; they were measured with the reviving one.
m=qwen2.5-coder-0.5b
$lazymlx calibrate -m $m --lengths 1k --families scored --cases 1 --candidates "0.4@24% 0.4@57% sparse" \
  --no-save --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration.jsonl --resume
$lazymlx calibrate -m $m --lengths 1k --families passkey,lookalike --cases 2 --candidates "0.4@24% 0.4@57% sparse" \
  --no-save --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration.jsonl --resume
$lazymlx calibrate -m $m --lengths 4k --families lookalike --cases 7 --candidates "0.4@24% 0.4@57% sparse" \
  --no-reference --no-save --baselines lazymlx/evals/baselines/$m.json \
  --journal $results/models/$m/calibration.jsonl --resume
$lazymlx calibrate -m $m --records $results/models/$m/calibration.jsonl --ship
v=$results/models/$m/validation_default_sparse.jsonl
$lazymlx eval -m $m --split validation --families scored --lengths 1k,2k --cases 1 --lazy default \
  --baselines lazymlx/evals/baselines/$m.json --journal $v --resume
# the 2k follow-up lost on validation: calibration widened there, both decode policies
$lazymlx calibrate -m $m --lengths 2k --families followup,chat --cases 3 --no-reference --no-save \
  --candidates "0.4@24% 0.4@57%,0.4@24% 0.4@57% sparse" \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration.jsonl --resume
$lazymlx calibrate -m $m --records $results/models/$m/calibration.jsonl --no-save
$lazymlx eval -m $m --split validation --families scored --lengths 4k --cases 1 --lazy default \
  --baselines lazymlx/evals/baselines/$m.json --journal $v --resume
$lazymlx eval -m $m --split validation --families lookalike --lengths 4k --cases 2 --lazy default \
  --baselines lazymlx/evals/baselines/$m.json --journal $v --resume
$lazymlx eval -m $m --split validation --lengths 8k --cases 1 --lazy default \
  --families passkey,lookalike,twohop,needle-docs,needle-man,needle-pkgdoc,json,table,vartrack,code \
  --baselines lazymlx/evals/baselines/$m.json --journal $v --resume
$lazymlx bench -m $m -l 2k --lazy default -n 16 -r 2 -o json > $results/models/$m/bench_2k.json
# the speedup with the prompt's length: 8k and 16k in one run, stock beside each (0.4@24% 0.4@57%
#    sparse, the default then, `fast` since section 10)
$lazymlx bench -m $m -l 8k,16k --lazy fast -n 16 -r 1 -o json > $results/models/$m/bench_8k_16k.json

# 9. Gemma 3's decode without revival (2026-11-26): its two schedules with sparse decode on the
#    same calibration cases, shipped when each kept what its reviving twin kept; validation and
#    the 2k bench (section 7's commands, run again with the presets as shipped now).
m=gemma3-270m
gemma_calibration "0.5@24% 0.3@57% sparse,0.4@24% 0.4@57% sparse"
$lazymlx calibrate -m $m --records $results/models/$m/calibration.jsonl --ship
$lazymlx eval -m $m --split validation --families scored --lengths 1k,2k --cases 2 --lazy default,fast \
  --reference --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/validation_sparse.jsonl --resume
$lazymlx bench -m $m -l 2k --lazy default,fast -n 16 -r 1 -o json > $results/models/$m/bench_2k.json

# 10. Qwen2.5-Coder's look-alikes at 4k widened to 15 cases and its follow-ups at 2k to 8
#     (2026-11-26): 0.4@24% 0.4@57% sparse lost one look-alike, so the default moved to the
#     next schedule, 0.5@24% 0.3@57%, run on every calibration case with and without revival.
m=qwen2.5-coder-0.5b
B="--baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration.jsonl --resume --no-save"
$lazymlx calibrate -m $m --lengths 4k --families lookalike --cases 15 --no-reference \
  --candidates "0.4@24% 0.4@57% sparse,0.5@24% 0.3@57%,0.2@67%,0.5@24% 0.3@57% sparse" $B
$lazymlx calibrate -m $m --lengths 2k --families followup --cases 8 --no-reference \
  --candidates "0.4@24% 0.4@57%,0.4@24% 0.4@57% sparse,0.5@24% 0.3@57%,0.5@24% 0.3@57% sparse" $B
$lazymlx calibrate -m $m --lengths 2k --families chat --cases 3 --no-reference \
  --candidates "0.5@24% 0.3@57%,0.5@24% 0.3@57% sparse" $B
$lazymlx calibrate -m $m --lengths 1k --families scored --cases 1 --candidates "0.5@24% 0.3@57% sparse" $B
$lazymlx calibrate -m $m --lengths 1k --families passkey,lookalike --cases 2 --candidates "0.5@24% 0.3@57% sparse" $B
$lazymlx calibrate -m $m --records $results/models/$m/calibration.jsonl --ship
$lazymlx bench -m $m -l 2k --lazy default,fast -n 16 -r 1 -o json > $results/models/$m/bench_2k.json
v=$results/models/$m/validation_default_053_sparse.jsonl
$lazymlx eval -m $m --split validation --families lookalike --lengths 4k --cases 2 --lazy default \
  --baselines lazymlx/evals/baselines/$m.json --journal $v --resume
$lazymlx eval -m $m --split validation --families scored --lengths 1k,2k --cases 1 --lazy default \
  --baselines lazymlx/evals/baselines/$m.json --journal $v --resume
$lazymlx eval -m $m --split validation --families scored --lengths 4k --cases 1 --lazy default \
  --baselines lazymlx/evals/baselines/$m.json --journal $v --resume
$lazymlx bench -m $m -l 8k --lazy default -n 16 -r 1 -o json > $results/models/$m/bench_8k_default.json

# 11. The cards (2026-11-27): the validation cases each shipped default had not run yet, and the
#     8-bit reference where a default's loss needed a floor to be judged against; then one
#     table per model (benchmarks/README.md opens with them). GPU runs: benchmarks/README.md, "GPU".
m=qwen2.5-coder-0.5b
v=$results/models/$m/validation_default_053_sparse.jsonl
$lazymlx eval -m $m --split validation --families scored --lengths 8k --cases 1 --lazy default --right-only \
  --baselines lazymlx/evals/baselines/$m.json --journal $v --resume
$lazymlx eval -m $m --split validation --families lookalike --lengths 4k --cases 2 --lazy default --reference \
  --baselines lazymlx/evals/baselines/$m.json --journal $v --resume
$lazymlx eval -m $m --split validation --families scored --lengths 4k --cases 1 --lazy default --reference \
  --baselines lazymlx/evals/baselines/$m.json --journal $v --resume
m=gemma3-270m
$lazymlx eval -m $m --split validation --families scored --lengths 4k --cases 1 --lazy default,fast --reference \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/validation_sparse.jsonl --resume
$lazymlx eval -m $m --split validation --families scored --lengths 8k --cases 1 --lazy default --reference \
  --right-only --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/validation_sparse.jsonl --resume
s() { $lazymlx eval -m smollm2-135m --split validation --baselines lazymlx/evals/baselines/smollm2-135m.json \
    --journal $results/eval/validation.jsonl --resume --lazy none --reference --right-only "$@"; }
s --families scored --lengths 2k
s --families twohop --cases 60 --lengths 1k
.venv/bin/python benchmarks/tables.py card $results/models/*/card.json

# 12. The speed targets' missing measurements (2026-11-27): a real-text prompt beside the
#     passkey (the eval's code family: a constant asked of real standard-library source), the
#     shipped default at 16k, Gemma 3 at 8k; harder schedules for Gemma 3's `fast`; where the
#     answer ranks at the pruning layers as the prompt grows (a ratio or a budget).
$lazymlx bench -m qwen2.5-coder-0.5b -l 2k,8k --lazy default,fast --prompt code -n 16 -r 1 -o json \
  > $results/models/qwen2.5-coder-0.5b/bench_code_2k_8k.json
$lazymlx bench -m qwen2.5-coder-0.5b -l 16k --lazy default -n 16 -r 1 -o json \
  > $results/models/qwen2.5-coder-0.5b/bench_16k_default.json
$lazymlx bench -m gemma3-270m -l 8k --lazy default,fast -n 16 -r 1 -o json \
  > $results/models/gemma3-270m/bench_8k.json
m=gemma3-270m
C="0.2@24% 0.5@57% sparse,0.1@24% 0.5@57% sparse"
$lazymlx calibrate -m $m --lengths 1k --families scored --cases 3 --candidates "$C" --no-save \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration_harder_fast.jsonl --resume
for fc in "scored 1" "table 3"; do set -- $fc
  $lazymlx calibrate -m $m --lengths 2k --families $1 --cases $2 --candidates "$C" --no-save \
    --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration_harder_fast.jsonl --resume; done
$lazymlx calibrate -m $m --records $results/models/$m/calibration_harder_fast.jsonl --no-save
#    The choice, 0.1@24% 0.5@57% sparse, shipped as Gemma's fast at commit 25c26d4 (--ship); run there:
# $lazymlx eval -m $m --split validation --families scored --lengths 1k,2k --cases 2 --lazy fast \
#   --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/validation_fast_0105.jsonl --resume
# $lazymlx bench -m $m -l 2k,8k --lazy fast -n 16 -r 1 -o json > $results/models/$m/bench_fast_0105_2k_8k.json
#    (81% kept on validation: reverted at 8f09b97.)
.venv/bin/python benchmarks/answer_rank.py --model qwen2.5-coder-0.5b --lengths 1k,2k,4k,8k --cases 2,2,2,1 \
  --output $results/models/qwen2.5-coder-0.5b/answer_rank.json
#    A token budget on Qwen's first prune, at commit 069e1d9 (LazyConfig.budget, reverted at be1dfa5):
# m=qwen2.5-coder-0.5b
# $lazymlx calibrate -m $m --lengths 4k --families lookalike --cases 15 \
#   --candidates "0.5@24% 0.3@57% budget=1024 sparse" --no-reference --no-save \
#   --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration_budget.jsonl --resume
$lazymlx eval -m gemma3-270m --split validation --families scored --lengths 8k --cases 1 --lazy fast --right-only \
  --baselines lazymlx/evals/baselines/gemma3-270m.json --journal $results/models/gemma3-270m/validation_sparse.jsonl --resume
.venv/bin/python benchmarks/answer_rank.py --model qwen2.5-coder-0.5b --lengths 4k --families lookalike --cases 15 \
  --output $results/models/qwen2.5-coder-0.5b/answer_rank_lookalike_4k.json
.venv/bin/python benchmarks/tables.py card $results/models/*/card.json
#    Issue 53: open-ended answers at everyday lengths, and Qwen's floor (2026-11-27)
m=qwen2.5-coder-0.5b
C="0.5@24% 0.3@57% sparse,0.5@24% 0.3@57% min512 sparse,0.5@24% 0.3@57% min1024 sparse"
$lazymlx calibrate -m $m --families summary,question,second-turn,completion --lengths 512,1k,2k --cases 2 \
  --candidates "$C" --no-save --baselines lazymlx/evals/baselines/$m.json \
  --journal $results/models/$m/calibration_open.jsonl --resume
#    (the journal also holds min256 at 512, a first look, and 256-token cases, which run whole; second-turn
#    at 2k did not run.) The choice, min1024, shipped as Qwen's default (lazymlx/engine/calibrated/).
.venv/bin/python benchmarks/tables.py open $results/models/$m/calibration_open.jsonl
$lazymlx bench -m $m -l 2k --lazy default -n 16 -r 1 -o json > $results/models/$m/bench_2k_floor.json
.venv/bin/python benchmarks/relnotes_check.py --model $m --lazy default --per-band 1 \
  --journal $results/models/$m/relnotes.jsonl
$lazymlx eval -m $m --split validation --families open --lengths 512,1k --cases 1 --lazy default --reference \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/validation_open.jsonl --resume
.venv/bin/python benchmarks/tables.py open $results/models/$m/relnotes.jsonl $results/models/$m/validation_open.jsonl
#    SmolLM2's floor (issue 53, 2026-11-27); the choice, min1024, shipped as SmolLM2's default
m=smollm2-135m
$lazymlx calibrate -m $m --families summary,question,second-turn,completion --lengths 512,1k,2k --cases 2 \
  --candidates "0.2@67%,0.2@67% min512,0.2@67% min1024" --no-save --baselines lazymlx/evals/baselines/$m.json \
  --journal $results/models/$m/calibration_open.jsonl --resume
$lazymlx eval -m $m --split validation --families open --lengths 512,1k,2k --cases 1 --lazy default --reference \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/validation_open.jsonl --resume
$lazymlx bench -m $m -l 2k --lazy default -n 16 -r 1 -o json > $results/models/$m/bench_2k_floor.json
#    Open-ended answers at 2k and 4k on Qwen; Gemma 3's floor (issue 53, 2026-11-27, later)
m=qwen2.5-coder-0.5b
$lazymlx calibrate -m $m --families summary,question,second-turn,completion --lengths 2k --cases 2 \
  --candidates "0.5@24% 0.3@57% min1024 sparse,0.5@24% 0.3@57% min1024,0.7@24% 0.3@57% min1024 sparse" \
  --no-save --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration_open.jsonl --resume
$lazymlx calibrate -m $m --families summary,question --lengths 2k --cases 2 \
  --candidates "0.3@57% min1024 sparse,0.2@67% min1024 sparse" --no-save \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration_open.jsonl --resume
$lazymlx calibrate -m $m --families summary,question --lengths 4k --cases 1 \
  --candidates "0.5@24% 0.3@57% min1024 sparse" --no-save \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration_open.jsonl --resume
#    (the choice: prompts under 4,096 tokens run whole, min_prompt 4096 in Qwen's shipped default)
$lazymlx bench -m $m -l 2k --lazy default,fast -n 16 -r 1 -o json > $results/models/$m/bench_2k_gate.json
m=gemma3-270m
C="0.5@24% 0.3@57% sparse,0.5@24% 0.3@57% min512 sparse,0.5@24% 0.3@57% min1024 sparse"
$lazymlx calibrate -m $m --families completion --lengths 512,1k,2k --cases 2 --candidates "$C" --no-save \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration_open.jsonl --resume
$lazymlx calibrate -m $m --families scored --lengths 512 --cases 2 --candidates "$C" --no-save \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration_open.jsonl --resume
#    (the choice, min1024, shipped as Gemma's default)
$lazymlx eval -m $m --split validation --families completion --lengths 512,1k,2k --cases 2 --lazy default --reference \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/validation_open.jsonl --resume
$lazymlx bench -m $m -l 2k --lazy default -n 16 -r 1 -o json > $results/models/$m/bench_2k_floor.json
#    Open-ended answers at 8k on Qwen, and calibrate's gates (issue 53, 2026-11-27, evening)
m=qwen2.5-coder-0.5b
$lazymlx calibrate -m $m --families summary,question,completion --lengths 8k --cases 1 \
  --candidates "0.5@24% 0.3@57% min1024 sparse" --no-save \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration_open.jsonl --resume
$lazymlx calibrate -m $m --families summary,question,completion --lengths 8k --cases 1 \
  --candidates "0.3@57% min1024 sparse,0.2@67% min1024 sparse,0.5@57% min1024 sparse" --no-save \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/calibration_open.jsonl --resume
#    (stopped after 0.3@57%'s summary and question, both below the margin)
$lazymlx calibrate -m $m --records $results/models/$m/calibration_open.jsonl --no-save
#    (no candidate, behind no gate: Qwen's default runs every prompt whole)
#    The cards' rows where the floors bind (2k; SmolLM2's and Gemma's 4k were not re-run)
$lazymlx eval -m smollm2-135m --split validation --families scored --right-only --lengths 2k --lazy default \
  --baselines lazymlx/evals/baselines/smollm2-135m.json --journal $results/models/smollm2-135m/validation_floor.jsonl --resume
m=gemma3-270m
$lazymlx eval -m $m --split validation --families scored --lengths 2k --cases 2 --lazy default --right-only \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/validation_floor.jsonl --resume
$lazymlx eval -m $m --split validation --families scored --lengths 4k --cases 1 --lazy default --right-only \
  --baselines lazymlx/evals/baselines/$m.json --journal $results/models/$m/validation_floor.jsonl --resume
.venv/bin/python benchmarks/tables.py card $results/models/*/card.json
