"""`lazymlx evaluate`: lm-evaluation-harness tasks through lazymlx, on the tiny random model.

The tasks are made here (a YAML file each over a few local JSON lines: a generation task and a
multiple-choice one, so both `generate_until` and `loglikelihood` run) and nothing is
downloaded. The harness model is checked against mlx-lm's own where they must agree (stock, and
the engine keeping every token), and under a pruning rule for what pruning changes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from lm_eval.api.instance import Instance
from typer.testing import CliRunner

from lazymlx import LazyConfig
from lazymlx.cli.app import app, main
from lazymlx.engine.config import PRESETS
from lazymlx.evals import harness
from lazymlx.evals.harness import LazyLM

runner = CliRunner()
PRUNING = LazyConfig(schedule=((0.25, 0.5), (0.5, 0.5)), decode="revive")
DOCS = [
    {"question": "the cat sat on the", "answer": "mat", "choices": [" mat", " dog", " sky"]},
    {"question": "one two three", "answer": "four", "choices": [" four", " ten", " red"]},
    {"question": "red green and", "answer": "blue", "choices": [" blue", " cat", " sun"]},
]
TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
doc_to_text: "{{{{question}}}}"
metadata:
  version: 1.0
"""
GENERATION = """output_type: generate_until
doc_to_target: "{{answer}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 4
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""
CHOICE = """output_type: multiple_choice
doc_to_choice: "{{choices}}"
doc_to_target: 0
target_delimiter: ""
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tasks")
    data = folder / "docs.jsonl"
    data.write_text("\n".join(json.dumps(doc) for doc in DOCS) + "\n")
    for name, body in (("tiny_gen", GENERATION), ("tiny_choice", CHOICE)):
        (folder / f"{name}.yaml").write_text(TASK.format(name=name, data=data) + body)
    return folder


def requests(kind: str, *args: tuple) -> list[Instance]:
    return [
        Instance(kind, {}, arguments, index, ("tiny_choice", index, 1))
        for index, arguments in enumerate(args)
    ]


SCORED = requests(
    "loglikelihood",
    ("the cat sat on the", " mat"),
    ("the cat sat on the", " dog and the cat"),
    ("one two three", " four"),
)


def test_keep_all_scores_and_answers_as_stock_does(tiny):
    """The engine keeping every token is stock's computation: the same log-likelihoods (mlx-lm's
    harness model scores stock) and the same greedy answers, each at 100% of the work."""
    stock, kept = LazyLM(*tiny, None), LazyLM(*tiny, PRESETS["keep-all"])
    for (ours, greedy), (theirs, their_greedy) in zip(
        kept.loglikelihood(SCORED), stock.loglikelihood(SCORED), strict=True
    ):
        assert ours == pytest.approx(theirs, abs=1e-3) and greedy == their_greedy
    asked = requests("generate_until", ("the cat sat", {"until": ["\n"], "max_gen_toks": 6}))
    assert kept.generate_until(asked) == stock.generate_until(asked)
    assert set(kept.shares["tiny_choice"]) == {1.0} and stock.shares == {}


def test_a_pruning_rule_scores_through_its_pruned_prompt_step(tiny):
    """Under pruning each context's prompt step is pruned (work share below 1) and shared by
    its continuations; each score is a finite log-probability, the continuations scored over
    their own copy of the context (the last one's equals a run of its own)."""
    lm = LazyLM(*tiny, PRUNING)
    long = "the cat sat on the mat and " * 8
    scored = lm.loglikelihood(requests("loglikelihood", (long, " mat"), (long, " dog sat")))
    assert all(math.isfinite(score) and score < 0 for score, _ in scored)
    assert all(share < 1 for share in lm.shares["tiny_choice"])
    alone = LazyLM(*tiny, PRUNING).loglikelihood(requests("loglikelihood", (long, " mat")))
    assert scored[0][0] == pytest.approx(alone[0][0], abs=1e-4)
    with pytest.raises(Exception, match="run them with --lazy off"):
        lm.loglikelihood_rolling(requests("loglikelihood_rolling", ("a text",)))


def test_a_cache_file_resumes_answers_and_work_shares(tiny, tmp_path, monkeypatch):
    cache = tmp_path / "answers.sqlite"
    first = LazyLM(*tiny, PRUNING, cache_file=cache)
    scored = first.loglikelihood(SCORED)
    asked = requests("generate_until", ("the cat sat", {"until": ["\n"], "max_gen_toks": 3}))
    answer = first.generate_until(asked)

    def nothing_runs(*args, **kwargs):
        raise AssertionError("a cached request ran again")

    monkeypatch.setattr(harness, "stream_generate", nothing_runs)
    monkeypatch.setattr(LazyLM, "_score", nothing_runs)
    again = LazyLM(*tiny, PRUNING, cache_file=cache)
    assert again.loglikelihood(SCORED) == scored and again.generate_until(asked) == answer
    assert again.shares == first.shares


def test_evaluate_runs_harness_tasks_beside_stock(tiny_model_dir, task_dir, tmp_path):
    args = [
        "evaluate", "-m", str(tiny_model_dir), "--tasks", "tiny_gen,tiny_choice",
        "--include-path", str(task_dir), "--lazy", "off,keep-all", "--limit", "3",
        "--use-cache", str(tmp_path / "cache"),
    ]  # fmt: skip
    result = runner.invoke(app, [*args, "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {(r["task"], r["mode"], r["metric"]): r for r in data["rows"]}
    assert set(rows) == {
        (task, mode, metric)
        for task, metric in (("tiny_gen", "exact_match"), ("tiny_choice", "acc"))
        for mode in ("off", "keep-all")
    }
    for (_, mode, _), row in rows.items():
        assert row["n"] == 3 and 0 <= row["value"] <= 1 and row["work_share"] == 1.0
        assert row["vs_stock"] == (None if mode == "off" else pytest.approx(0.0))
    assert data["harness"] == "lm-eval 0.4.13"
    assert data["presets"] == {"lazy:off": "stock mlx-lm", "lazy:keep-all": "keep all tokens"}
    assert len(list((tmp_path / "cache").glob("*.sqlite"))) == 2  # one file per preset
    table = runner.invoke(app, args)  # from the cache: nothing runs again
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].startswith("| task ") and "| tiny_choice | keep-all | acc " in table.stdout
    assert "None" not in table.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tasks", "no_such_task"], "unknown task: Spec 'no_such_task' is not a registered"),
        (["--tasks", "tiny_remote"], "a task needs data from the network, and evaluate runs"),
        (["--tasks", " , "], "name the tasks with --tasks"),
        (["--tasks", "tiny_gen", "--lazy", "turbo"], "unknown lazy preset 'turbo'"),
    ],
)
def test_evaluate_refuses_in_one_line(tiny_model_dir, task_dir, capsys, argv, message):
    """An unknown task, or one whose data must be downloaded while evaluate runs offline."""
    remote = task_dir / "tiny_remote.yaml"
    remote.write_text(
        "task: tiny_remote\ndataset_path: nobody/no-such-dataset\ntest_split: test\n"
        "output_type: generate_until\ndoc_to_text: q\ndoc_to_target: a\n"
    )
    model = ["evaluate", "-m", str(tiny_model_dir), "--include-path", str(task_dir)]
    with pytest.raises(SystemExit) as exit_info:
        main([*model, *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err.startswith("error: ") and message in err
    assert len(err.strip().splitlines()) == 1, err
