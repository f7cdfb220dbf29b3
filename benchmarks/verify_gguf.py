"""lazymlx's GGUF import checked against llama.cpp, the reference for what a GGUF file means.

For each registry model (or a .gguf file) this compares, on the same file:
- token ids: real text on this machine (Python's language reference, man pages, package
  documentation, standard-library source, each cut into pieces of a few hundred tokens) plus
  every chat template the model has rendered around real text, special tokens parsed; every
  piece must give identical ids (llama.cpp's tokenizer against the one lazymlx rebuilt from the
  metadata);
- next-token logits of a few prompts: llama.cpp's (its quantized kernels) against lazymlx's
  fp32 model, over llama.cpp's top 10 tokens (largest absolute difference, top-1 and top-5 agreement);
- greedy continuations of those prompts: how many of the first N tokens agree, and where they
  part, llama.cpp's lead of its token over ours (a near-tie explains a parting).

llama.cpp comes from `pip install llama-cpp-python==0.3.36` (built from source, ~5 minutes
here), so this is a benchmark, not a CI test. Usage:

    .venv/bin/python benchmarks/verify_gguf.py --model qwen2.5-coder-0.5b --output results.json
"""

from __future__ import annotations

import lazymlx  # binds OpenBLAS before mlx is used

# isort: split
import argparse
import json
import platform
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.generate import generate_step

from lazymlx.evals.sources import document_paragraphs, documents
from lazymlx.models.loading import resolve
from lazymlx.models.registry import REGISTRY

PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Paris is the capital of",
    "In Python, a list comprehension",
    "The manual page says that the -r option",
)
# Text written by hand for what real prose rarely holds: scripts, emoji, digit runs, whitespace.
TRICKY = (
    "Zürich, Kraków, São Paulo, Ærøskøbing; naïve café façade — “quoted” ‘text’…",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "Emoji: 🎉🐍🚀 👩‍💻 1️⃣ and flags 🇫🇷🇯🇵",
    "Numbers 3.14159 1234567890 0x1F 1e-9 -42 +7 100,000.00 2026-11-25T18:41:57Z",
    "tabs\there\tand\n\n\nnewlines   and    runs of     spaces\r\nwindows line",
    "Пример текста на русском языке. Ελληνικά κείμενα. עברית. العربية. हिन्दी।",
)


def text_pieces(count: int) -> list[tuple[str, str]]:
    """(where, text) pieces of real text from each source, the first documents of each."""
    pieces = []
    for source in ("python-docs", "man", "pkgdoc", "code"):
        names = documents(source)
        taken = 0
        for name in names[:: max(1, len(names) // 40)]:
            paragraphs = document_paragraphs(source, name)
            if not paragraphs:
                continue
            joiner = "\n" if source == "code" else "\n\n"
            text = joiner.join(paragraphs)[:1500]
            pieces.append((f"{source}:{name}", text))
            taken += 1
            if taken == count:
                break
    return pieces + [(f"tricky:{i}", text) for i, text in enumerate(TRICKY)]


def chat_pieces(tokenizer, texts: list[str]) -> list[tuple[str, str]]:
    """Conversations around real text rendered by the model's chat template, if it has one."""
    if not tokenizer.chat_template:
        return []
    pieces = []
    for i, text in enumerate(texts):
        messages = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"Summarize this:\n{text[:600]}"},
            {"role": "assistant", "content": "It describes a command and its options."},
            {"role": "user", "content": "Which option matters most?"},
        ]
        if i % 2:
            messages = messages[1:]  # without a system message too
        try:
            rendered = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        except Exception as error:  # a template that refuses a system role, say
            rendered = tokenizer.apply_chat_template(
                messages[1:], tokenize=False, add_generation_prompt=True
            )
            print(f"  chat template refused a system message ({error}); rendered without")
        pieces.append((f"chat:{i}", rendered))
    return pieces


def compare_tokens(llm, tokenizer, pieces, special_prefix: bool) -> dict:
    mismatches, total = [], 0
    for where, text in pieces:
        chat = where.startswith("chat:")
        ours = tokenizer.encode(text, add_special_tokens=not chat)
        theirs = llm.tokenize(text.encode("utf-8"), add_bos=not chat, special=True)
        total += len(theirs)
        if ours != theirs:
            first = next(
                (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                min(len(ours), len(theirs)),
            )
            mismatches.append(
                {
                    "where": where,
                    "at": first,
                    "ours": ours[first : first + 5],
                    "llama_cpp": theirs[first : first + 5],
                    "text": tokenizer.decode(theirs[max(0, first - 3) : first + 5]),
                }
            )
    return {"pieces": len(pieces), "tokens": total, "mismatches": mismatches}


def llama_cpp_logits(llm, ids: list[int]) -> np.ndarray:
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[len(ids) - 1], dtype=np.float32)


def llama_cpp_greedy(llm, ids: list[int], steps: int) -> tuple[list[int], list[np.ndarray]]:
    llm.reset()
    llm.eval(ids)
    tokens, logits = [], []
    for _ in range(steps):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        logits.append(row)
        tokens.append(int(row.argmax()))
        llm.eval([tokens[-1]])
    return tokens, logits


def our_greedy(model, ids: list[int], steps: int) -> list[int]:
    tokens = []
    for token, _ in generate_step(mx.array(ids), model, max_tokens=steps):
        tokens.append(int(token))
    return tokens


def compare_prompts(llm, model, tokenizer, steps: int) -> list[dict]:
    rows = []
    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt)
        theirs = llama_cpp_logits(llm, ids)
        ours = np.array(model(mx.array([ids]))[0, -1].astype(mx.float32))
        top = np.argsort(-theirs)[:10]
        their_greedy, their_rows = llama_cpp_greedy(llm, ids, steps)
        our_tokens = our_greedy(model, ids, steps)
        agree = next(
            (i for i, (a, b) in enumerate(zip(our_tokens, their_greedy, strict=True)) if a != b),
            steps,
        )
        parting = None
        if agree < steps:
            row = their_rows[agree]
            lead = float(row[their_greedy[agree]] - row[our_tokens[agree]])
            parting = {
                "step": agree,
                "llama_cpp": tokenizer.decode([their_greedy[agree]]),
                "ours": tokenizer.decode([our_tokens[agree]]),
                "llama_cpp_lead": round(lead, 4),
            }
        rows.append(
            {
                "prompt": prompt,
                "tokens": len(ids),
                "top1_same": int(theirs.argmax()) == int(ours.argmax()),
                "top5_same": set(np.argsort(-theirs)[:5]) == set(np.argsort(-ours)[:5]),
                "max_abs_diff_top10": float(np.abs(theirs[top] - ours[top]).max()),
                "greedy_agree": agree,
                "greedy_steps": steps,
                "parting": parting,
                "llama_cpp_text": tokenizer.decode(their_greedy),
                "our_text": tokenizer.decode(our_tokens),
            }
        )
    return rows


def table(paths: list[str]) -> str:
    """The README's table from result files."""
    lines = [
        "| model | tokens (pieces) | pieces with other ids | max abs logit diff, top 10 | "
        "top-1 same | top-5 same | greedy tokens agreeing | partings (llama.cpp's lead) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        r = json.loads(Path(path).read_text())
        prompts, tokens = r["prompts"], r["tokens"]
        agree = sum(p["greedy_agree"] for p in prompts)
        steps = sum(p["greedy_steps"] for p in prompts)
        leads = [p["parting"]["llama_cpp_lead"] for p in prompts if p["parting"]]
        lines.append(
            f"| {r['model']} | {tokens['tokens']:,} ({tokens['pieces']}) "
            f"| {len(tokens['mismatches'])} "
            f"| {max(p['max_abs_diff_top10'] for p in prompts):.2f} "
            f"| {sum(p['top1_same'] for p in prompts)}/{len(prompts)} "
            f"| {sum(p['top5_same'] for p in prompts)}/{len(prompts)} "
            f"| {agree}/{steps} on {len(prompts)} prompts "
            f"| {len(leads)}"
            + (f" ({', '.join(f'{lead:.2f}' for lead in leads)})" if leads else "")
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="registry name or .gguf")
    parser.add_argument("--table", nargs="+", help="print the table of these result files")
    parser.add_argument("--pieces", type=int, default=12, help="text pieces per source")
    parser.add_argument("--steps", type=int, default=32, help="greedy tokens per prompt")
    parser.add_argument("--output", help="write the result as JSON here")
    args = parser.parse_args()
    if args.table:
        print(table(args.table))
        return

    from llama_cpp import Llama, __version__

    gguf = REGISTRY[args.model].gguf_path() if args.model in REGISTRY else Path(args.model)
    if gguf is None:
        resolve(args.model)
        gguf = REGISTRY[args.model].gguf_path()
    started = time.perf_counter()
    model, tokenizer = lazymlx.load(args.model)
    llm = Llama(str(gguf), n_ctx=4096, logits_all=True, n_threads=2, verbose=False)
    pieces = text_pieces(args.pieces)
    pieces += chat_pieces(tokenizer, [text for where, text in pieces[:6]])
    tokens = compare_tokens(llm, tokenizer, pieces, special_prefix=True)
    prompts = compare_prompts(llm, model, tokenizer, args.steps)
    result = {
        "model": args.model,
        "gguf": str(gguf),
        "llama_cpp_python": __version__,
        "mlx": mx.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.perf_counter() - started, 1),
        "tokens": tokens,
        "prompts": prompts,
    }
    print(
        f"{args.model}: {tokens['tokens']} tokens in {tokens['pieces']} pieces, "
        f"{len(tokens['mismatches'])} pieces differ"
    )
    for row in prompts:
        print(
            f"  {row['prompt']!r}: top-1 {'same' if row['top1_same'] else 'DIFFERS'}, "
            f"top-5 {'same' if row['top5_same'] else 'differ'}, "
            f"max |Δ| over top 10 {row['max_abs_diff_top10']:.3f}, "
            f"greedy {row['greedy_agree']}/{row['greedy_steps']} agree"
            + (f", parting {row['parting']}" if row["parting"] else "")
        )
    for miss in tokens["mismatches"]:
        print(f"  token mismatch: {miss}")
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
