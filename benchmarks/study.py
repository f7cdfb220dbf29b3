"""Calibration studies: named rules run on calibration cases next to the cached baseline.

Each study is a set of configs built from a base rule (the scoring, decode and revival every
study shares unless it varies them). The records go to a JSON-lines journal; tally them with
`lazymlx eval --records FILE` (per family and length, with intervals). Only calibration cases:
whatever is chosen from these is then validated on the other split.

    .venv/bin/python benchmarks/study.py --study schedules --lengths 1k,2k \\
        --journal benchmarks/results/studies/schedules_1k_2k.jsonl
"""

from __future__ import annotations

import lazymlx  # noqa: F401  (binds OpenBLAS before mlx is used)

# isort: split
import argparse
import json
from dataclasses import replace
from pathlib import Path

from lazymlx.cli.app import load_model
from lazymlx.config import LazyConfig
from lazymlx.evals.baselines import BaselineCache, packaged_file
from lazymlx.evals.families import make_cases, parse_families, suite_counts
from lazymlx.evals.runner import case_key, evaluate, read_records, records_as_dicts, right_cases
from lazymlx.lengths import parse_lengths
from lazymlx.measure import Strategy
from lazymlx.models.registry import REGISTRY

# The rule every study starts from: the v2 default's scoring (last 8 tokens, each chosen token's
# next 12 kept, the first 4 kept), its decode (revive 16 a layer for 8 steps), prompts under 256
# tokens whole, and revival in later prompt steps.
BASE = LazyConfig(
    keep_first=4, window=8, pool=12, decode="revive", min_prompt=256, prompt_revive=None
)


def schedule(*pairs: tuple[float, float], **changes) -> LazyConfig:
    return replace(BASE, schedule=pairs, **changes)


V2_SCHEDULE = dict(
    schedule=((0.24, 0.4), (0.57, 0.4)), budgets=((0.24, 2048),), floors=((0.24, 0.25),)
)
STUDIES: dict[str, dict[str, LazyConfig]] = {
    # where the first prune sits and what the scoring observes; prefill share at 1k in brackets
    # (a first run, stopped after 6 cases: the 34-40% first prunes lost the passkey there)
    "first": {
        "v2 (0.46)": replace(BASE, **V2_SCHEDULE),
        "v2, window 32 (0.46)": replace(BASE, **V2_SCHEDULE, window=32),
        "v2, window 32, max heads (0.46)": replace(BASE, **V2_SCHEDULE, window=32, heads="max"),
        "0.4@40% 0.4@70% (0.57)": schedule((0.4, 0.4), (0.7, 0.4)),
        "0.4@40% 0.4@70%, window 32 (0.57)": schedule((0.4, 0.4), (0.7, 0.4), window=32),
        "0.25@40% 0.5@70%, window 32 (0.51)": schedule((0.4, 0.25), (0.7, 0.5), window=32),
        "0.3@34% 0.5@60%, window 32 (0.50)": schedule((0.34, 0.3), (0.6, 0.5), window=32),
        "0.2@50%, window 32 (0.60)": schedule((0.5, 0.2), window=32),
    },
    # a generous prune where SmolLM2 ranks answers fairly (layer 7), a hard one where it ranks
    # them best (layer 15, top 5% in the diagnosis), and the windows
    "second": {
        "v2 (0.46)": replace(BASE, **V2_SCHEDULE),
        "v2, window 16 (0.46)": replace(BASE, **V2_SCHEDULE, window=16),
        "0.6@24% 0.2@50%, window 16 (0.45)": schedule((0.24, 0.6), (0.5, 0.2), window=16),
        "0.6@24% 0.2@50% (0.45)": schedule((0.24, 0.6), (0.5, 0.2)),
        "0.6@24% 0.2@50%, window 32 (0.45)": schedule((0.24, 0.6), (0.5, 0.2), window=32),
        "0.5@24% 0.3@50%, window 16 (0.43)": schedule((0.24, 0.5), (0.5, 0.3), window=16),
        "0.2@50%, window 16 (0.60)": schedule((0.5, 0.2), window=16),
    },
    # decode revival lost follow-up answers the prompt step had kept (the revived tokens pulled
    # the answer to the other fact): sparse decode next to it, and the keep ratios around it
    "third": {
        "v2, sparse (0.46)": replace(BASE, **V2_SCHEDULE, decode="sparse"),
        "0.6@24% 0.2@50% (0.45)": schedule((0.24, 0.6), (0.5, 0.2)),
        "0.6@24% 0.2@50%, sparse (0.45)": schedule((0.24, 0.6), (0.5, 0.2), decode="sparse"),
        "0.7@24% 0.2@50%, sparse (0.49)": schedule((0.24, 0.7), (0.5, 0.2), decode="sparse"),
        "0.6@24% 0.15@50%, sparse (0.44)": schedule((0.24, 0.6), (0.5, 0.15), decode="sparse"),
        "0.5@24% 0.2@50%, sparse (0.42)": schedule((0.24, 0.5), (0.5, 0.2), decode="sparse"),
        "0.2@50%, sparse (0.60)": schedule((0.5, 0.2), decode="sparse"),
    },
    # the two that held at 1k, at every length: the default's candidate and the fast one's
    "fourth": {
        "0.6@24% 0.2@50%, sparse (0.45)": schedule((0.24, 0.6), (0.5, 0.2), decode="sparse"),
        "0.5@24% 0.2@50%, sparse (0.42)": schedule((0.24, 0.5), (0.5, 0.2), decode="sparse"),
    },
    # both lost chat follow-ups at 1k (the second turn's answer, from another part of the
    # document): what the second turn's step revives, and how
    "fifth": {
        "0.6@24% 0.2@50% (0.45)": schedule((0.24, 0.6), (0.5, 0.2)),
        "0.6@24% 0.2@50%, sparse, window 16 (0.45)": schedule(
            (0.24, 0.6), (0.5, 0.2), decode="sparse", window=16
        ),
        "0.6@24% 0.2@50%, sparse, window 32 (0.45)": schedule(
            (0.24, 0.6), (0.5, 0.2), decode="sparse", window=32
        ),
        "0.6@24% 0.3@50%, sparse (0.47)": schedule((0.24, 0.6), (0.5, 0.3), decode="sparse"),
    },
    # window 16 kept a chat follow-up window 8 lost (a chat turn's last 8 tokens are mostly its
    # template's): the same on every family
    "sixth": {
        "0.6@24% 0.2@50%, sparse, window 16 (0.45)": schedule(
            (0.24, 0.6), (0.5, 0.2), decode="sparse", window=16
        ),
    },
    # at 4k both of the fourth's lost two real-text needles the round 2 schedule (a quarter
    # kept after 57% of depth, 16% of the prompt) had kept: the second prune's share and depth
    "seventh": {
        "0.6@24% 0.3@50%, sparse (0.47)": schedule((0.24, 0.6), (0.5, 0.3), decode="sparse"),
        "0.6@24% 0.3@57%, sparse (0.51)": schedule((0.24, 0.6), (0.57, 0.3), decode="sparse"),
        "0.4@24% 0.4@57%, sparse (0.45)": schedule((0.24, 0.4), (0.57, 0.4), decode="sparse"),
    },
    # the second prune at 57% (where the 4k needles survived), at every length
    "eighth": {
        "0.6@24% 0.3@57%, sparse (0.51)": schedule((0.24, 0.6), (0.57, 0.3), decode="sparse"),
        "0.5@24% 0.3@57%, sparse (0.48)": schedule((0.24, 0.5), (0.57, 0.3), decode="sparse"),
    },
    # validation found free-form text diverging from keep-all's within ~8 tokens, which no
    # study had scored: the shipped default against its decode-revival twin, on free-form cases
    "ninth": {
        "0.6@24% 0.3@57%, sparse (0.51)": schedule((0.24, 0.6), (0.57, 0.3), decode="sparse"),
        "0.6@24% 0.3@57%, revive (0.51)": schedule((0.24, 0.6), (0.57, 0.3)),
    },
    # the 1k and 2k losses (diagnose.py): a look-up key's first token, or a whole table row,
    # dropped while the value went on (pool only takes the tokens after a chosen one along), and
    # a two-hop fact dropped whole at 57%: keeping sentences and lines whole, both directions
    "tenth": {
        "0.6@24% 0.3@57%, sparse, segments 16 (0.51)": schedule(
            (0.24, 0.6), (0.57, 0.3), decode="sparse", segments=16
        ),
        "0.6@24% 0.3@57%, sparse, segments 32 (0.51)": schedule(
            (0.24, 0.6), (0.57, 0.3), decode="sparse", segments=32
        ),
    },
    # no shaping of the prompt step fixed them: the two-hop fact is one no question token points
    # at (only the answer's first words do, in decoding), and the ninth found decode revival
    # closer to keep-all on free text; the decode-revival trade at the shipped schedule
    "eleventh": {
        "0.6@24% 0.3@57%, revive (0.51)": schedule((0.24, 0.6), (0.57, 0.3)),
    },
    # chat answers diverge from keep-all's within 2-4 tokens (ninth): a chat turn's last 8
    # tokens are 6 of its template's closing tokens and 2 of the question; the window observing
    # 8 tokens of the user's text in a chat turn as in a raw prompt (raw prompts unchanged)
    "twelfth": {
        "0.6@24% 0.3@57%, sparse, past template (0.51)": schedule(
            (0.24, 0.6), (0.57, 0.3), decode="sparse", past_template=True
        ),
    },
    # the shipped default's losses are facts it cut at 57% (the rows around an asked table row,
    # the two-hop's second fact, needing 19% of the prompt where 18% is kept): more compute there,
    # as a larger share after 57% or the same share deeper (stopped in 2k: each lost 2 of 28 at
    # 1k, which the default's bar does not allow)
    "thirteenth": {
        "0.6@24% 0.4@57%, sparse, past template (0.54)": schedule(
            (0.24, 0.6), (0.57, 0.4), decode="sparse", past_template=True
        ),
        "0.6@24% 0.5@57%, sparse, past template (0.57)": schedule(
            (0.24, 0.6), (0.57, 0.5), decode="sparse", past_template=True
        ),
        "0.6@24% 0.3@67%, sparse, past template (0.55)": schedule(
            (0.24, 0.6), (0.67, 0.3), decode="sparse", past_template=True
        ),
    },
    # the thirteenth's configs lost the same table and package-docs needle at 1k, which no
    # share after 57% saved; without a prune at 24% both are kept: late selection (FastKV,
    # GemFilter: every token to mid-depth, then a hard cut) and a first prune that drops little
    "fourteenth": {
        "0.3@57%, sparse, past template (0.70)": schedule(
            (0.57, 0.3), decode="sparse", past_template=True
        ),
        "0.2@57%, sparse, past template (0.65)": schedule(
            (0.57, 0.2), decode="sparse", past_template=True
        ),
        "0.9@24% 0.3@57%, sparse, past template (0.66)": schedule(
            (0.24, 0.9), (0.57, 0.3), decode="sparse", past_template=True
        ),
    },
    # keep counts that follow how concentrated the attention is (`masses`): the fewest tokens
    # holding a share of it, between a floor and the ratio, at the default's depths and late
    # (stopped at 1k after 13 cases: both had lost the two-hop)
    "fifteenth": {
        "≤0.8@24% ≤0.3@57% by 98%/95% of the attention, sparse, past template": schedule(
            (0.24, 0.8),
            (0.57, 0.3),
            masses=((0.24, 0.98), (0.57, 0.95)),
            floors=((0.24, 0.5), (0.57, 0.2)),
            decode="sparse",
            past_template=True,
        ),
        "≤0.4@57% by 95% of the attention, sparse, past template": schedule(
            (0.57, 0.4),
            masses=((0.57, 0.95),),
            floors=((0.57, 0.2),),
            decode="sparse",
            past_template=True,
        ),
    },
    # the calibration families with the fewest right answers (two or fewer each, 1k-4k:
    # look-alike, two-hop, JSON, table, follow-up) widened to 12 cases at 1k: the default
    # beside a harder and a softer cut at the same depth
    "sixteenth": {
        "0.3@57%, sparse, past template (0.70)": schedule(
            (0.57, 0.3), decode="sparse", past_template=True
        ),
        "0.2@57%, sparse, past template (0.65)": schedule(
            (0.57, 0.2), decode="sparse", past_template=True
        ),
        "0.4@57%, sparse, past template (0.75)": schedule(
            (0.57, 0.4), decode="sparse", past_template=True
        ),
    },
    # the sixteenth's lost two-hops kept every fact whole and moved anyway after the cut: the
    # default with decode revival (the first answer tokens bring back what they attend to)
    "seventeenth": {
        "0.3@57%, revive, past template (0.70)": schedule((0.57, 0.3), past_template=True),
    },
    # head_ranks.py: at layer 7 one head (7 of 9) ranks the asked fact far above the mean over
    # heads on the seeds it was not chosen on (a retrieval head); the fast schedule scored there
    # by that head alone, beside the fast preset as it ships
    "nineteenth": {
        "fast (0.49)": schedule((0.24, 0.5), (0.57, 0.3), decode="sparse", past_template=True),
        "fast, head 7 at layer 7 (0.49)": schedule(
            (0.24, 0.5),
            (0.57, 0.3),
            decode="sparse",
            past_template=True,
            retrieval_heads=((7, (7,)),),
        ),
    },
    # decode revival picks the tokens the new token attends to most, one by one, where a prompt
    # step's pick and its revival take each chosen token's next 12 along (pool): the same
    # shaping in decode revival, at the same count (so the same cost), on every calibration
    # family and on the two-hop widened (the one family below the bar on both splits)
    "twentieth": {
        "0.3@57%, revive, past template (0.70)": schedule((0.57, 0.3), past_template=True),
        "0.3@57%, revive shaped, past template (0.70)": schedule(
            (0.57, 0.3), past_template=True, revive_shaped=True
        ),
    },
    # the two-hop widened (twentieth) kept 5 of 10 at the default: how much thinning after 57% it
    # tolerates (a larger share), and the work spent on a later cut instead; then the later cut
    # that kept as many at the least work on every calibration family
    "twenty-first": {
        "0.4@57%, revive, past template (0.74)": schedule((0.57, 0.4), past_template=True),
        "0.5@57%, revive, past template (0.79)": schedule((0.57, 0.5), past_template=True),
        "0.7@57%, revive, past template (0.87)": schedule((0.57, 0.7), past_template=True),
        "0.3@67%, revive, past template (0.77)": schedule((0.67, 0.3), past_template=True),
        "0.2@67%, revive, past template (0.74)": schedule((0.67, 0.2), past_template=True),
        "0.3@77%, revive, past template (0.84)": schedule((0.77, 0.3), past_template=True),
    },
    # the later cut's one loss on calibration was a chat (1 of 4, a thin family): the chat
    # widened, the default beside the two later cuts that kept 8 of 10 two-hops
    "twenty-second": {
        "0.3@57%, revive, past template (0.70)": schedule((0.57, 0.3), past_template=True),
        "0.2@67%, revive, past template (0.74)": schedule((0.67, 0.2), past_template=True),
        "0.3@67%, revive, past template (0.77)": schedule((0.67, 0.3), past_template=True),
    },
    # the default's lost two-hop #32 (diagnose_twohop_067_1k.json) kept every fact but the first
    # token of each name ("D" of "Dmitri's garage number is 8287"), and answered a look-alike's
    # number: whole sentences (a token scores its sentence's best, up to 16 tokens), beside the
    # default, on the two families below the bar
    "twenty-third": {
        "0.2@67%, revive, past template (0.74)": schedule((0.67, 0.2), past_template=True),
        "0.2@67%, revive, past template, segments 16 (0.74)": schedule(
            (0.67, 0.2), past_template=True, segments=16
        ),
    },
    # the default prunes prompts from 256 tokens (min_prompt) but was chosen at 1k-8k: the
    # calibration split at 512 tokens, for the choice of that threshold
    "twenty-fourth": {
        "0.2@67%, revive, past template (0.74)": schedule((0.67, 0.2), past_template=True),
    },
    # the twenty-fourth's free-form agreement at 512 was low on 4 cases a family: the free-form
    # families widened at 512 and at 1k, for the choice of min_prompt by agreement (STUDIES.md)
    "twenty-fifth": {
        "0.2@67%, revive, past template (0.74)": schedule((0.67, 0.2), past_template=True),
    },
    # no calibration study had run at 8k (stock answers little there but the passkey): the
    # default on the passkey at 8k, a case at each of the five depths
    "twenty-sixth": {
        "0.2@67%, revive, past template (0.74)": schedule((0.67, 0.2), past_template=True),
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", choices=list(STUDIES), required=True)
    parser.add_argument(
        "--only", action="append", help="a config of the study to run (repeat for more)"
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--families", default="all")
    parser.add_argument("--lengths", default="1k,2k")
    parser.add_argument("--cases", type=int, help="cases per family and length (default: suite's)")
    parser.add_argument(
        "--right-only",
        action="store_true",
        help="only cases the baseline answers right (the only ones that count as kept); "
        "a case's baseline runs first where it is not cached",
    )
    parser.add_argument("--journal", required=True)
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the journal's records and run only the (case, config) pairs it lacks",
    )
    args = parser.parse_args()
    configs = STUDIES[args.study]
    if args.only:
        configs = {name: configs[name] for name in args.only}
    model, tokenizer = load_model(args.model)

    def announce(case, mode: str) -> None:
        print(f"{case.family} {case.length} #{case.seed} {mode}", flush=True)

    counts = suite_counts("calibration", parse_lengths(args.lengths), args.cases)
    cases = make_cases(tokenizer, parse_families(args.families), "calibration", counts)
    cache = BaselineCache(model, packaged_file(args.model) if args.model in REGISTRY else None)
    if args.right_only:
        cases = right_cases(model, tokenizer, cases, cache, on_run=announce)
    journal = Path(args.journal)
    journal.parent.mkdir(parents=True, exist_ok=True)
    earlier = read_records(journal)[1] if args.resume and journal.exists() else []

    def write(record) -> None:
        with journal.open("a") as file:
            file.write(json.dumps(records_as_dicts([record])[0]) + "\n")

    evaluate(
        model,
        tokenizer,
        cases,
        [Strategy(name, config) for name, config in configs.items()],
        cache,
        on_run=announce,
        on_record=write,
        recorded={case_key(r, r.mode): r for r in earlier},
    )


if __name__ == "__main__":
    main()
