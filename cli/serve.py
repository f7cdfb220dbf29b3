"""`lazymlx serve`: the model behind an OpenAI-compatible HTTP API (lazymlx/server/)."""

from __future__ import annotations

import contextlib
import signal
from typing import Annotated

import typer

from lazymlx.cli import options
from lazymlx.cli.console import err
from lazymlx.cli.loading import Parallel, join_parallel, load_model
from lazymlx.cli.notes import told
from lazymlx.errors import LazymlxError
from lazymlx.models.registry import DEFAULT_MODEL

API_KEY_ENV = "LAZYMLX_API_KEY"
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar=API_KEY_ENV,
        show_envvar=True,
        help="Answer only requests that send this key (Authorization: Bearer KEY, the "
        "openai client's api_key); the others get 401.",
        show_default=False,
    ),
]


def serve(
    model: options.ModelOption = DEFAULT_MODEL,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on; 0.0.0.0 exposes it to the network.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="0 picks a free one.")
    ] = 8080,
    lazy: options.Lazy = "default",
    max_tokens: Annotated[  # checked by the one request check, in the CLI's and server's words
        int, typer.Option("--max-tokens", help="The most tokens one request may generate.")
    ] = 4096,
    max_request_mb: Annotated[
        float, typer.Option("--max-request-mb", min=0.001, help="The largest request body.")
    ] = 4.0,
    context_gb: Annotated[
        float,
        typer.Option(
            "--context-gb", min=0.0, help="Memory kept for reusing conversations' context."
        ),
    ] = 2.0,
    api_key: ApiKey = None,
    parallel: Parallel = "tensor",
) -> None:
    """Serve the model over an OpenAI-compatible HTTP API (/v1/chat/completions, ...)."""
    from lazymlx.llm import LLM
    from lazymlx.parallel.collectives import on_leader
    from lazymlx.server.app import exposure_warning, listen
    from lazymlx.server.app import serve as run_server
    from lazymlx.server.endpoints import Limits

    _check(max_tokens, api_key)
    join_parallel(parallel, model)
    options.lazy_config(lazy, model)  # an unknown preset fails here, before the model loads
    sock = on_leader(listen, host, port)  # and so does a busy port; rank 0 of a group serves HTTP
    with sock or contextlib.nullcontext():
        llm = LLM(
            lambda: told(load_model(model), lazy, model),
            lazy=lazy,
            context_bytes=int(context_gb * 1e9),
        )
        if sock is None:  # another rank of a group: it runs the requests rank 0 hands on
            # Ctrl-C in a terminal reaches every rank; rank 0 stops serving and tells the others
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            llm.follow()
            return
        address = f"[{host}]" if ":" in host else host  # an IPv6 address in a URL
        where = f"http://{address}:{sock.getsockname()[1]}/v1"  # the port given, or the one picked
        err.print(f"serving {model} at {where} (OpenAI-compatible; Ctrl-C stops)", soft_wrap=True)
        if warning := exposure_warning(sock.getsockname()[0], api_key):
            err.print(f"[yellow]warning:[/] {warning}", soft_wrap=True)
        try:
            run_server(llm, sock, Limits(max_tokens, int(max_request_mb * 1e6)), api_key)
        finally:
            llm.close()


def _check(max_tokens: int, api_key: str | None) -> None:
    """Refuse before anything loads: --max-tokens outside the one request check's limits (in
    the words a request's max_tokens gets), an empty key."""
    from lazymlx.sampling import check_value

    check_value("max_tokens", max_tokens, "--max-tokens")
    if api_key is not None and not api_key.strip():
        raise LazymlxError(
            f"the API key is empty (--api-key or {API_KEY_ENV}); give one or leave it out"
        )
