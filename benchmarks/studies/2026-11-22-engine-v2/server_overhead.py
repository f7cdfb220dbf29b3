"""What the HTTP server adds to the time to the first token, against the Python API, same prompt.

One LLM serves both: the API's `submit` directly, and `lazymlx serve`'s app over loopback driven
by the real `openai` client with streaming (the TTFT a client sees is the first content chunk).
Requests alternate, each with a prompt no kept context shares (a fresh prefix), repeated.

    .venv/bin/python benchmarks/studies/2026-11-22-engine-v2/server_overhead.py --repeats 5 \
        --output benchmarks/results/server_overhead.json
"""

from __future__ import annotations

# isort: split
import argparse
import json
import statistics
import threading
import time

import openai
import uvicorn

from lazymlx.evals.timing import header
from lazymlx.llm import LLM
from lazymlx.server.app import create_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--words", type=int, default=300, help="prompt length in words")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    llm = LLM(args.model, lazy="default")
    server = uvicorn.Server(
        uvicorn.Config(create_app(llm), host="127.0.0.1", port=0, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")

    def prompt(i: int) -> str:  # a different first word each time: no kept prefix to reuse
        return f"Note {i}: " + "the quick brown fox jumps over the lazy dog " * (args.words // 9)

    def api(i: int) -> float:
        start = time.perf_counter()
        stream = llm.submit(prompt(i), max_tokens=8)
        next(iter(stream))
        ttft = time.perf_counter() - start
        stream.result()
        return ttft

    def http(i: int) -> float:
        start = time.perf_counter()
        chunks = client.completions.create(model="m", prompt=prompt(i), max_tokens=8, stream=True)
        ttft = None
        for chunk in chunks:
            if ttft is None and chunk.choices and chunk.choices[0].text:
                ttft = time.perf_counter() - start
        return ttft

    api(-1), http(-2)  # warm up both paths
    rows = {"api": [], "http": []}
    for i in range(args.repeats):
        rows["api"].append(api(2 * i))
        rows["http"].append(http(2 * i + 1))
    summary = {
        path: {"mean_s": statistics.mean(v), "std_s": statistics.stdev(v) if len(v) > 1 else 0.0}
        for path, v in rows.items()
    }
    summary["overhead_s"] = summary["http"]["mean_s"] - summary["api"]["mean_s"]
    print(json.dumps(summary, indent=1))
    with open(args.output, "w") as f:
        json.dump({"header": header(args.model), "ttft": rows, "summary": summary}, f, indent=1)
    server.should_exit = True


if __name__ == "__main__":
    main()
