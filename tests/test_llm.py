"""The app API: requests from any thread, in order, none lost; cancellation; progress; reuse."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

import lazymlx
from lazymlx import LazyConfig
from lazymlx.engine.presets import save_preset
from lazymlx.errors import LazymlxError
from lazymlx.llm import GENERATION_THREAD, LLM
from lazymlx.session import ChatSession

# answers compared across requests: no idle completion between them (its own tests below)
PRUNING = LazyConfig(schedule=((0.25, 0.5), (0.5, 0.5)), decode="revive", complete="never")
FILLING = LazyConfig(schedule=PRUNING.schedule, decode="revive", complete="fill")
CHAT = [{"role": "user", "content": "the cat sat on the mat"}]


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(str(tiny_model_dir), lazy=PRUNING)


def direct(tiny, prompt, max_tokens, lazy=PRUNING) -> list[int]:
    model, tokenizer = tiny
    return [
        r.token for r in lazymlx.stream_generate(model, tokenizer, prompt, max_tokens, lazy=lazy)
    ]


def tokens_of(stream) -> list[int]:
    return [r.token for r in stream]


def test_requests_from_many_threads_all_complete_with_the_direct_answers(tiny, tiny_model_dir):
    llm = LLM(str(tiny_model_dir), lazy=PRUNING, context_bytes=0)  # every request from scratch
    prompts = [f"prompt number {i} " * (i + 1) for i in range(6)]
    results: dict[int, list[int]] = {}

    def ask(i: int) -> None:
        lazy = PRUNING if i % 2 else None
        results[i] = tokens_of(llm.submit(prompts[i], max_tokens=6, lazy=lazy))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(results) == list(range(6))  # none lost
    for i, tokens in results.items():
        assert tokens == direct(tiny, prompts[i], 6, PRUNING if i % 2 else None)


@pytest.mark.parametrize("lazy", [PRUNING, None])
def test_a_conversation_reuses_its_context_and_answers_as_a_chat_session(
    tiny, tiny_model_dir, lazy
):
    """Stock: exactly a fresh prefill's answer. Lazy: a chat session's, whose earlier turns keep
    what their own prompt step pruned (later turns prune only their own tokens)."""
    llm = LLM(str(tiny_model_dir), lazy=lazy)
    first = llm.submit(messages=CHAT, max_tokens=5)
    reply = first.result()
    assert first.cached_tokens == 0 and first.last.ttft_s > 0
    follow = [*CHAT, {"role": "assistant", "content": reply}, {"role": "user", "content": "why"}]
    second = llm.submit(messages=follow, max_tokens=5)
    second.result()
    assert second.cached_tokens > first.prompt_tokens  # the first turn was not computed again
    session = ChatSession(*tiny, lazy=lazy, max_tokens=5)
    assert "".join(r.text for r in session.send(CHAT[0]["content"])) == reply
    assert [r.token for r in session.send("why")] == [r.token for r in second._responses]
    if lazy is None:
        fresh = LLM(str(tiny_model_dir), lazy=None, context_bytes=0)  # keeps nothing
        assert tokens_of(fresh.submit(messages=follow, max_tokens=5)) == [
            r.token for r in second._responses
        ]


@pytest.mark.parametrize("lazy", [PRUNING, None])
def test_cancel_mid_decode_leaves_a_context_the_next_request_can_trust(tiny_model_dir, lazy):
    prompt, follow = "a long story about a dog " * 8, "a long story about a dog " * 9
    cancelled, finished = LLM(str(tiny_model_dir), lazy=lazy), LLM(str(tiny_model_dir), lazy=lazy)
    stream = cancelled.submit(prompt, max_tokens=200)
    received = []
    for response in stream:
        received.append(response.token)
        if len(received) == 3:
            stream.cancel()
    assert 3 <= len(received) < 200
    assert stream.last.finish_reason == "cancelled"  # not None: the answer did not just stop
    assert tokens_of(finished.submit(prompt, max_tokens=3)) == received[:3]
    # the next request reuses the prompt's context either way, and answers the same
    again, reference = cancelled.submit(follow, max_tokens=6), finished.submit(follow, max_tokens=6)
    assert tokens_of(again) == tokens_of(reference)
    assert again.cached_tokens == reference.cached_tokens > 0


@pytest.mark.parametrize("lazy", [PRUNING, None])
def test_cancel_mid_prefill_stops_it_and_the_next_request_is_right(llm, tiny, lazy):
    prompt = "words to prefill for a while " * 30
    seen, streams = [], []  # the generation thread may report before submit has returned

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        if streams:
            streams[0].cancel()

    stream = llm.submit(prompt, max_tokens=5, lazy=lazy, on_progress=progress, prefill_step_size=32)
    streams.append(stream)
    assert tokens_of(stream) == []
    assert seen and seen[0][0] < seen[0][1]  # cancelled before the prefill was done
    assert tokens_of(llm.submit(prompt, max_tokens=5, lazy=lazy)) == direct(tiny, prompt, 5, lazy)


def test_ttft_counts_the_time_queued_behind_another_request(tiny_model_dir):
    """Two threads: the second submits while the first holds the model; its ttft_s counts from
    its submit, as its reader waited (the server's meaning), with that wait in queued_s."""
    llm = LLM(str(tiny_model_dir), lazy=None, idle=False)
    holding, results = threading.Event(), {}

    def hold(done: int, total: int) -> None:
        if not holding.is_set():
            holding.set()
            time.sleep(0.3)  # the first request keeps the model a while

    def ask(name: str, on_progress=None) -> None:
        submitted = time.perf_counter()
        stream = llm.submit(f"{name} asks about cats", max_tokens=3, on_progress=on_progress)
        first = next(iter(stream))
        results[name] = (time.perf_counter() - submitted, first)
        stream.result()

    threads = [threading.Thread(target=ask, args=("first", hold))]
    threads[0].start()
    assert holding.wait(60)
    threads.append(threading.Thread(target=ask, args=("second",)))
    threads[1].start()
    for thread in threads:
        thread.join(timeout=60)
    seen, response = results["second"]
    assert response.queued_s > 0.2  # it waited for the first request
    assert seen - 0.1 <= response.ttft_s <= seen  # what its reader waited, less the hand-over
    assert response.ttft_s > response.queued_s
    assert results["first"][1].queued_s < 0.1


def test_prefill_progress_climbs_to_the_whole_prompt(llm):
    seen = []
    stream = llm.submit(
        "count these tokens " * 20, max_tokens=2, on_progress=lambda d, t: seen.append((d, t))
    )
    stream.result()
    total = seen[-1][1]
    assert seen[-1] == (total, total) and total > 50
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_bad_requests_are_clear_errors_and_the_thread_lives_on(llm):
    with pytest.raises(LazymlxError, match="either prompt= .* or messages="):
        llm.submit()
    with pytest.raises(LazymlxError, match="not valid UTF-8"):
        llm.submit("bad \udcff bytes")
    with pytest.raises(LazymlxError, match="unknown lazy preset 'turbo'"):
        llm.submit("hi", lazy="turbo")
    with pytest.raises(LazymlxError, match="unknown option not_an_option; submit takes"):
        llm.submit("hi", max_tokens=2, not_an_option=1)
    with pytest.raises(LazymlxError, match="token id 1000000 is not in the model's vocabulary"):
        llm.submit([10**6], max_tokens=2)
    with pytest.raises(LazymlxError, match="needs 5000 tokens of context"):
        llm.submit([5] * 5000, max_tokens=2)
    failing = llm.submit("hi", max_tokens=2, kv_bits=4)  # found on the generation thread
    with pytest.raises(LazymlxError, match="not supported with lazy=: kv_bits"):
        failing.result()
    with pytest.raises(LazymlxError, match="prefill_step_size must be at least 1"):
        llm.generate("hi", max_tokens=2, prefill_step_size=0)
    with pytest.raises(LazymlxError, match="logprobs is how many alternatives"):
        llm.submit("hi", logprobs=-1)
    with pytest.raises(LazymlxError, match="token id 999 is not in the model's vocabulary"):
        llm.submit("hi", logit_bias={999: 5.0})
    assert llm.generate("still here", max_tokens=2)


def test_logprobs_and_penalties_per_request(llm, tiny):
    """logprobs=k: each response carries its token's log-prob and the k likeliest, as numbers
    any thread can read; penalties and logit bias are mlx-lm's, as stream_generate takes them."""
    stream = llm.submit("the cat sat", max_tokens=4, logprobs=3, lazy=None)
    for response in stream:
        ids = [t for t, _ in response.top_logprobs]
        assert len(ids) == 3 and ids[0] == response.token  # greedy: the likeliest
        assert response.token_logprob == pytest.approx(response.logprobs[response.token].item())
        assert [lp for _, lp in response.top_logprobs] == sorted(
            (lp for _, lp in response.top_logprobs), reverse=True
        )
    options = {"frequency_penalty": 2.0, "presence_penalty": 0.5, "logit_bias": {7: 3.0}}
    served = tokens_of(llm.submit("the cat sat", max_tokens=8, lazy=None, **options))
    model, tokenizer = tiny
    assert served == [
        r.token for r in lazymlx.stream_generate(model, tokenizer, "the cat sat", 8, **options)
    ]


def test_mlx_lm_habits_work_or_fail_clearly(tiny, capsys):
    model, tokenizer = tiny
    text = lazymlx.generate(model, tokenizer, "hello", max_tokens=3, verbose=True, lazy="default")
    printed = capsys.readouterr().out
    assert text in printed
    assert "Prompt: " in printed and "tokens-per-sec" in printed and "Peak memory" in printed
    with pytest.raises(LazymlxError, match="unknown keyword argument bogus"):
        lazymlx.generate(model, tokenizer, "hello", bogus=1)
    with pytest.raises(LazymlxError, match="not valid UTF-8"):
        lazymlx.generate(model, tokenizer, "\udcff\udcfe bad")


THREADS = """
import threading, sys, lazymlx
model, tokenizer = lazymlx.load(sys.argv[1])
answers = []
def ask(i):
    answers.append(lazymlx.generate(model, tokenizer, f"thread {i}", max_tokens=4, lazy=None))
threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
assert len(answers) == 4
"""


@pytest.mark.slow
def test_module_level_generate_from_threads_never_aborts_the_process(tiny_model_dir):
    for _ in range(4):
        run = subprocess.run(
            [sys.executable, "-c", THREADS, str(tiny_model_dir)], capture_output=True, timeout=120
        )
        assert run.returncode == 0, run.stderr.decode()[-500:]


EXITS = """
import sys, lazymlx
model, how = sys.argv[1:]
prompt = "a document to keep and ask about later " * 20  # pruned: idle completion has work
if how == "with":
    with lazymlx.LLM(model) as llm:
        print(llm.generate(prompt, max_tokens=3))
else:
    llm = lazymlx.LLM(model)
    print(llm.generate(messages=[{"role": "user", "content": prompt}], max_tokens=3))
    if how == "close":
        llm.close()
"""


@pytest.mark.parametrize("how", ["end", "close", "with"])
def test_a_script_using_llm_exits_cleanly_while_idle_completion_runs(tiny_model_dir, how):
    """The script ends while the generation thread is completing its context: the thread is
    parked at exit, not torn down inside MLX (that aborted with rc 134 in most runs)."""
    for _ in range(3):
        run = subprocess.run(
            [sys.executable, "-c", EXITS, str(tiny_model_dir), how],
            capture_output=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr.decode()[-500:]


def test_exiting_stops_a_request_at_its_next_token(tiny_model_dir):
    """A request still running at exit stops at its next token, so parking the thread does not
    wait for the whole answer (the handler registered first runs after the park)."""
    script = EXITS.split("if how")[0] + (
        "import atexit\n"
        "streams = []\n"
        "atexit.register(lambda: print('made', streams[0].generated, flush=True))\n"
        "streams.append(lazymlx.LLM(model).submit(prompt, max_tokens=1500))\n"
        "next(iter(streams[0]))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(tiny_model_dir), "end"], capture_output=True, timeout=60
    )
    assert run.returncode == 0, run.stderr.decode()[-500:]
    assert int(run.stdout.split()[-1]) < 1500


def wait_for(condition, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def test_idle_time_completes_the_kept_context(tiny_model_dir):
    llm = LLM(str(tiny_model_dir), lazy=FILLING)
    llm.generate("a document to keep and ask about later " * 12, max_tokens=3)
    (context,) = llm.contexts.contexts
    assert wait_for(lambda: context.complete)  # nobody asked: the idle thread did it
    assert all(cache.rows == context.cache.offset for cache in context.cache.layers)


def test_a_request_during_completion_waits_for_one_unit_at_most(tiny_model_dir, monkeypatch):
    from lazymlx.engine import complete

    units: list[tuple[float, float]] = []
    real_step = complete.step

    def slow_step(*args, **kwargs):
        start = time.monotonic()
        time.sleep(0.05)
        more = real_step(*args, chunk=4)  # many small units
        units.append((start, time.monotonic()))
        return more

    monkeypatch.setattr(complete, "step", slow_step)
    llm = LLM(str(tiny_model_dir), lazy=FILLING)
    llm.generate("a document to keep and ask about later " * 12, max_tokens=3)
    assert wait_for(lambda: len(units) >= 3)
    first_progress: list[float] = []
    queued = time.monotonic()
    stream = llm.submit(
        "another question", max_tokens=2, lazy=None,
        on_progress=lambda d, t: first_progress or first_progress.append(time.monotonic()),
    )  # fmt: skip
    stream.result()
    started_after = [start for start, _ in units if queued < start < first_progress[0]]
    assert started_after == []  # only the unit in progress, if any, ran before the request
    assert first_progress[0] - queued < 1.0


def test_a_group_runs_rank_0s_paced_units_alike_on_every_rank(tiny_model_dir, monkeypatch):
    """Rank 0 paces idle units by its own clock and hands each unit's tokens on; the other ranks
    run exactly those (a unit of other tokens would split a layer's collectives)."""
    from lazymlx.parallel import collectives

    document = "a document to keep and ask about later " * 12
    leader, follower = (LLM(str(tiny_model_dir), lazy=FILLING, idle=False) for _ in range(2))
    for llm in (leader, follower):
        llm.generate(document, max_tokens=3)
        (context,) = llm.contexts.contexts
        context.cache.record = []
    shared: list[dict] = []
    monkeypatch.setattr(collectives, "share", lambda message=None: shared.append(message))
    leader.leads = True

    def lockstep() -> None:  # on the generation thread, where the contexts' arrays live
        while leader._complete_unit():
            follower._complete_unit(shared[-1]["chunk"])

    GENERATION_THREAD.call(lockstep)
    ours, theirs = (llm.contexts.contexts[0] for llm in (leader, follower))
    assert len(shared) > 1 and all(message["complete"] for message in shared)
    assert len(ours.cache.record[0][1]) == shared[0]["chunk"]  # the first unit's positions
    assert ours.cache.record == theirs.cache.record and ours.complete and theirs.complete
    assert theirs.cache.completion_chunk is None  # a follower never paces


def test_requests_during_completion_are_neither_lost_nor_reordered(tiny, tiny_model_dir):
    llm = LLM(str(tiny_model_dir), lazy=FILLING)
    llm.generate("a document to keep and ask about later " * 12, max_tokens=3)
    order: list[int] = []
    streams = [
        llm.submit(
            f"question {i}",
            max_tokens=3,
            lazy=None,
            on_progress=lambda d, t, i=i: order.append(i) if i not in order else None,
        )  # fmt: skip
        for i in range(5)
    ]
    answers = [tokens_of(stream) for stream in streams]
    assert order == list(range(5))
    assert answers == [direct(tiny, f"question {i}", 3, None) for i in range(5)]
    llm.complete()
    assert all(context.complete for context in llm.contexts.contexts)


def test_a_loaded_models_own_presets_apply_by_name_in_every_entry_point(tiny_model_dir):
    """A preset calibrated for a model resolves from its name in LLM (given a name or a loader,
    as `serve` gives one) and in generate(lazy=NAME), through the one resolver."""
    mine = LazyConfig(schedule=((0.5, 0.4),), complete="never")
    save_preset(str(tiny_model_dir), "mine", mine, {"for": "this test"})
    for model in (str(tiny_model_dir), lambda: lazymlx.load(str(tiny_model_dir))):
        llm = LLM(model, lazy="mine", idle=False)
        try:
            assert llm.lazy == mine and llm.name == str(tiny_model_dir)
        finally:
            llm.close()
    model, tokenizer = lazymlx.load(str(tiny_model_dir))
    prompt = "the cat " * 100
    named = lazymlx.generate(model, tokenizer, prompt, max_tokens=4, lazy="mine")
    assert named == lazymlx.generate(model, tokenizer, prompt, max_tokens=4, lazy=mine)
